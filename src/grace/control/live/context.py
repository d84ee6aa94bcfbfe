"""What every role of the live reconciler shares, built once per control plane."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grace.backends.base import Backend
from grace.control.admission import Admission
from grace.control.kms import KeyEncryptionService
from grace.control.live.mirror import StoreMirror
from grace.control.snapshot import JobCompiler
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.core.policies import QueuePolicy
from grace.core.restart import RestartPolicy
from grace.core.topology import Topology

#: Launches the backend may refuse before the job fails with cause ``launch-error``.
LAUNCH_BUDGET = 3


@dataclass(frozen=True)
class LiveSettings:
    """Timings and budgets of the live driver (``grace up`` flags set some)."""

    checkpoint_s: float = 30.0  # what a checkpoint costs, for the Young/Daly interval
    restart_s: float = 60.0  # what a restart costs, likewise
    heartbeat_timeout_s: float = 30.0
    move_grace_s: float = 60.0  # a moved job's time to checkpoint and exit
    fail_grace_s: float = 5.0  # a failing attempt's SIGTERM-to-SIGKILL
    cancel_grace_s: float = 10.0  # a user's cancel, a stop or a preemption
    launch_budget: int = LAUNCH_BUDGET
    restart_policy: RestartPolicy = field(default_factory=RestartPolicy)
    api_url: str | None = None  # GRACE_URL of each attempt: where the runtime sends heartbeats
    # the shared file system's write bandwidth, GB/s: checkpoint phases are staggered against
    # it (core.checkpoint_stagger); None: the cluster spec's storage.write_gbps, else no phases
    fs_write_gbps: float | None = None


@dataclass(frozen=True)
class JobDirs:
    """Where a job's files live: ``<state_dir>/jobs/<store id>-<job id>/``.

    A job id is unique only within one store; a directory keyed by it alone let a
    fresh store's job 1 "resume" from an old store's job 1. The store id (a UUID
    made with the store) makes the directory, and ``uid`` the identity checkpoints
    record, this job's own.
    """

    root: Path
    store_id: str

    def job(self, job_id: int) -> Path:
        return self.root / "jobs" / f"{self.store_id[:12]}-{job_id}"

    def attempt(self, job_id: int, number: int) -> Path:
        return self.job(job_id) / f"attempt-{number}"

    def uid(self, job_id: int) -> str:
        """``GRACE_JOB_UID``: written into every checkpoint's manifest by the runtime."""
        return f"{self.store_id}:{job_id}"


def job_dirs(store: Store, state_dir: Path) -> JobDirs:
    with store.read() as s:
        return JobDirs(Path(state_dir), repo.store_id(s))


@dataclass
class LiveContext:
    store: Store
    backend: Backend
    topo: Topology
    policy: QueuePolicy
    dirs: JobDirs
    settings: LiveSettings = field(default_factory=LiveSettings)
    clock: Callable[[], float] = time.time
    admission: Admission | None = None  # vetted code (grace up --admission); None: any command
    kms: KeyEncryptionService | None = None  # wraps each job's checkpoint data key; None: plaintext
    compiler: JobCompiler = field(init=False)
    # the live jobs as last read (the change feed keeps it current): what the view, the
    # watches and the health intake read instead of loading every live job each cycle
    mirror: StoreMirror = field(default_factory=StoreMirror)
    # attempts whose processes survived reap(): held, retried each cycle (a cache: recovery
    # after a restart finds them again as live attempts nothing can adopt)
    unreaped: set[tuple[int, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.compiler = JobCompiler(self.topo)


__all__ = ["LAUNCH_BUDGET", "JobDirs", "LiveContext", "LiveSettings", "job_dirs"]
