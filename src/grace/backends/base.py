"""The one interface every backend implements, and the values that cross it.

A backend launches an attempt of a job on the nodes and GPUs ``core`` chose,
reports what its attempts are doing, cancels them, and re-attaches to attempts
that were running when the control plane restarted. Anything a backend cannot
do it declares in ``capabilities`` so the control plane can check the wiring
at start-up instead of failing mid-run.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from grace.backends.local_agent import read_json
from grace.spec.cluster import ClusterSpec

log = logging.getLogger(__name__)


class AttemptStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # exited non-zero or was killed by a signal it did not ask for
    CANCELLED = "cancelled"  # ended because cancel() asked it to
    LOST = "lost"  # the backend no longer knows it (processes gone, no exit status)


@dataclass(frozen=True)
class NodeAssignment:
    """One node of a gang: its name and the local GPU indexes (slots) it gets."""

    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one attempt of one job."""

    job_id: int
    attempt: int
    name: str
    command: tuple[str, ...]  # the training script and its arguments, run by torchrun
    nodes: tuple[NodeAssignment, ...]
    workdir: Path  # per-job directory: logs, checkpoints, exit status
    env: dict[str, str] = field(default_factory=dict)
    time_limit_s: float | None = None

    def check(self) -> None:
        """Refuse a spec no backend can start, before anything is written or submitted."""
        if not self.nodes:
            raise ValueError(f"job {self.job_id} attempt {self.attempt}: no nodes assigned")
        names = [n.node for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"job {self.job_id}: a node appears twice in {names}")
        if not self.command:
            raise ValueError(f"job {self.job_id}: no command to run")


@dataclass(frozen=True)
class Observation:
    """What a backend knows about one attempt right now."""

    job_id: int
    attempt: int
    status: AttemptStatus
    exit_code: int | None = None
    detail: str = ""
    failed_node: str | None = None  # the node whose rank failed first, when known


@runtime_checkable
class Backend(Protocol):
    name: str
    capabilities: frozenset[str]  # e.g. {"launch", "cancel", "adopt", "drain", "nvml"}

    def inventory(self) -> ClusterSpec:
        """The cluster this backend runs on."""
        ...

    def launch(self, spec: LaunchSpec) -> str:
        """Start the attempt; returns a handle the store keeps to re-attach later."""
        ...

    def poll(self) -> list[Observation]:
        """Status of every attempt this backend started or adopted and has not yet reported ended."""
        ...

    def cancel(self, job_id: int, attempt: int, grace_s: float = 10.0) -> None:
        """End the attempt's whole process group: SIGTERM, then SIGKILL after ``grace_s``."""
        ...

    def adopt(self, job_id: int, attempt: int, handle: str) -> bool:
        """Re-attach to an attempt after a control-plane restart; False if it is gone."""
        ...

    def drain(self, node: str, reason: str) -> None:
        """Tell the executing system a node is out (no-op for the local backend)."""
        ...


def adopt_recorded(backend: Backend, spec: LaunchSpec, attempt_dir: Path) -> str | None:
    """The handle of this attempt if an earlier launch recorded it (``launch.json``) and it
    is still there to adopt: launching it again must not start a second gang."""
    previous = read_json(attempt_dir / "launch.json")
    if previous is None:
        return None
    old = json.dumps(previous, sort_keys=True)
    if not backend.adopt(spec.job_id, spec.attempt, old):
        return None
    log.warning("job %s attempt %s was launched already; adopted it", spec.job_id, spec.attempt)
    return old
