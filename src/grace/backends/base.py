"""The one interface every backend implements, and the values that cross it.

A backend launches an attempt of a job on the nodes and GPUs ``core`` chose,
reports what its attempts are doing, cancels them, re-attaches to attempts
that were running when the control plane restarted, and reaps attempts it has
no handle for (a control plane that died mid-launch leaves processes no store
row points to). Anything a backend cannot do it declares in ``capabilities``
so the control plane can check the wiring at start-up instead of failing
mid-run.

Two attempts of one job never run at once: ``launch`` of attempt n first reaps
whatever survives of attempts 1..n-1 in the job's workdir, whatever the caller
believes about them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from grace.backends.local_agent import read_json
from grace.spec import launch_limits
from grace.spec.cluster import ClusterSpec

log = logging.getLogger(__name__)

SECRET_ENV: frozenset[str] = frozenset({"GRACE_TOKEN", "GRACE_CHECKPOINT_KEY"})
"""Variables of ``LaunchSpec.env`` that are secrets: the attempt's job-scoped API token
(``gjob_...``) and the base64 of the job's checkpoint data key.

A backend hands them to the attempt's processes through their environment only:
never into a file (a script, a launch record, a log), a handle, an observation's
detail or a command line (``ps`` shows argv to every user). The data key in a
file beside the encrypted checkpoints would undo the encryption for whoever can
read the job's directory; the token in one would let them post as the attempt.
The names are the ones the runtime reads (``grace.runtime.config.CHECKPOINT_KEY_ENV``,
``grace.runtime.heartbeat``).
"""


def split_secret_env(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(plain, secret)``: ``env`` without the SECRET_ENV variables, and those alone."""
    plain = {k: v for k, v in env.items() if k not in SECRET_ENV}
    return plain, {k: v for k, v in env.items() if k in SECRET_ENV}


class LaunchSpecError(ValueError):
    """The spec can never be launched (no nodes, a bad command or env): retrying cannot help,
    unlike a launch that failed because the machine or Slurm was unwell."""


class ReapError(RuntimeError):
    """Processes of an attempt survived ``reap``'s bounded wait: its GPUs are not free yet."""


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
    tenant: str = "default"  # whose job: the local backend runs it as that tenant's user
    memory_gb: float | None = None  # per node (cgroup limit); None: the node's share per GPU

    def check(self) -> None:
        """Refuse a spec no backend can start, before anything is written or submitted.

        Raises LaunchSpecError (a ValueError). The command and env limits are the
        ones JobSpec enforces at submit (``spec.launch_limits``); checked again here
        for specs stored before those checks existed or built without a JobSpec.
        """
        if not self.nodes:
            raise LaunchSpecError(f"job {self.job_id} attempt {self.attempt}: no nodes assigned")
        names = [n.node for n in self.nodes]
        if len(set(names)) != len(names):
            raise LaunchSpecError(f"job {self.job_id}: a node appears twice in {names}")
        if not self.command:
            raise LaunchSpecError(f"job {self.job_id}: no command to run")
        problems = launch_limits.launch_problems(self.command, self.env)
        if problems:
            raise LaunchSpecError(f"job {self.job_id} attempt {self.attempt} cannot be launched: "
                                  + "; ".join(str(p) for p in problems))


@dataclass(frozen=True)
class Observation:
    """What a backend knows about one attempt right now."""

    job_id: int
    attempt: int
    status: AttemptStatus
    exit_code: int | None = None
    detail: str = ""
    failed_node: str | None = None  # the node whose rank failed first, when known
    oom: bool = False  # the kernel killed a process of it for its memory limit (cgroup)


@runtime_checkable
class Backend(Protocol):
    name: str
    capabilities: frozenset[str]  # e.g. {"launch", "cancel", "adopt", "reap", "drain", "nvml"}

    def inventory(self) -> ClusterSpec:
        """The cluster this backend runs on."""
        ...

    def launch(self, spec: LaunchSpec) -> str:
        """Start the attempt; returns a handle the store keeps to re-attach later.

        First reaps every surviving process of the job's earlier attempts in the
        same workdir (raising ReapError, and starting nothing, if some survive), so
        two attempts of one job never hold GPUs at once. Raises LaunchSpecError for
        a spec that can never start.
        """
        ...

    def poll(self) -> list[Observation]:
        """Status of every attempt this backend started or adopted and has not yet reported ended."""
        ...

    def cancel(self, job_id: int, attempt: int, grace_s: float = 10.0) -> None:
        """Ask the attempt to end; returns at once, without waiting for its processes.

        Writes a cancel marker, sends SIGTERM (the runtime checkpoints and exits), and
        leaves a background worker to SIGKILL whatever remains after ``grace_s``; a
        later ``poll`` reports CANCELLED, once, when every process is gone. Cancelling
        twice is harmless; an unknown or already-ended attempt is left alone.
        """
        ...

    def adopt(self, job_id: int, attempt: int, handle: str) -> bool:
        """Re-attach to an attempt after a control-plane restart; False if it is gone."""
        ...

    def reap(self, job_id: int, attempt: int, workdir: Path) -> int:
        """SIGKILL every process of the attempt this backend can find, recorded handle or
        not, and wait (bounded) until none is left; returns how many it ended.

        For attempts the store has no live handle for, e.g. one whose control plane
        died between writing the launch record and saving the handle. Raises
        ReapError if processes survive the wait. An attempt this backend was
        watching is still reported ended by ``poll``, once.
        """
        ...

    def drain(self, node: str, reason: str) -> None:
        """Tell the executing system a node is out (no-op for the local backend)."""
        ...


class Deadlines:
    """Runs ``fn()`` when a deadline passes, on one daemon thread that exits when idle.

    How a backend's ``cancel`` returns at once and still SIGKILLs after the
    grace period: the escalation is a deadline here, not a sleep in the caller.
    One deadline per key; asking again for a key keeps the earlier of the two.
    ``fn`` may return a monotonic time to be called again then (a retry or a
    later check), or None when it is done. A failing ``fn`` is logged, never
    fatal to the thread.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._due: dict[Hashable, tuple[float, Callable[[], float | None]]] = {}
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None

    def at(self, key: Hashable, when: float, fn: Callable[[], float | None]) -> None:
        """Call ``fn`` at monotonic time ``when``, unless ``key`` is already due sooner."""
        with self._cv:
            due = self._due.get(key)
            if due is None or when < due[0]:
                self._due[key] = (when, fn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify()

    def drop(self, key: Hashable) -> None:
        """Forget ``key``'s deadline (its attempt ended and was reported)."""
        with self._cv:
            self._due.pop(key, None)

    def due(self) -> dict[Hashable, float]:
        """Pending deadlines, ``{key: monotonic time}``."""
        with self._cv:
            return {k: when for k, (when, _) in self._due.items()}

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if not self._due:
                        self._thread = None
                        return
                    key, (when, fn) = min(self._due.items(), key=lambda kv: kv[1][0])
                    delay = when - time.monotonic()
                    if delay <= 0:
                        del self._due[key]
                        break
                    self._cv.wait(delay)
            try:
                again = fn()
            except Exception:
                log.exception("%s: deadline of %s failed", self._name, key)
                continue
            if again is not None:
                self.at(key, again, fn)


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
