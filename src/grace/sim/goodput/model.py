"""The twin's seam to the goodput model: one ``GoodputRun`` per job the profiles play.

The engine asks three things of it, as of the duration model: how long an
attempt on this placement runs if nothing stops it (``start``), what a stopped
attempt banked (``bank``), and nothing else: the scheduler never sees progress,
epochs or step times, only the GPUs and the estimate a submitter gives.

A preemption is a planned stop: the job checkpoints and keeps every step it
made (as AdaptDL's jobs do when rescaled). A failure loses the epoch in flight:
the job resumes from its last epoch boundary, where it checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from grace.core.capacity import Placement
from grace.core.topology import Topology
from grace.sim.goodput.profiles import AppProfile
from grace.sim.goodput.progress import BatchPlan, GoodputClock, JobProgress, plan_batch
from grace.sim.traces.model import TraceJob


class _Banked(Protocol):
    """The engine's per-job record, the parts the model updates."""

    remaining_base_s: float
    lost_gpu_s: float


@dataclass
class GoodputRun:
    """One job's progress across its attempts, and the current attempt's shape."""

    profile: AppProfile
    batch_size: int
    progress: JobProgress = field(default_factory=JobProgress)
    plan: BatchPlan | None = None
    per_node: tuple[int, ...] = ()
    attempts: int = 0

    @property
    def done_share(self) -> float:
        """How much of the job is done, by progress (0..1)."""
        end = self.profile.epoch_start(self.profile.epochs)
        return min(1.0, self.progress.progress / end) if end > 0 else 1.0


@dataclass(frozen=True)
class GoodputModel:
    """Profiles by application name, and the clock that plays them."""

    profiles: dict[str, AppProfile]
    clock: GoodputClock = field(default_factory=GoodputClock)

    def job(self, tj: TraceJob) -> GoodputRun:
        assert tj.application is not None and tj.batch_size is not None
        profile = self.profiles.get(tj.application)
        if profile is None:
            raise ValueError(f"job {tj.job_id}: no profile for application {tj.application!r}; "
                             f"the profiles hold {sorted(self.profiles)}")
        return GoodputRun(profile, tj.batch_size)

    def start(self, run: GoodputRun, topo: Topology, placement: Placement) -> float:
        """Allocate ``placement`` to the job; seconds until it completes if left alone."""
        by_node: dict[int, int] = {}
        for g in placement.gpus:
            node = topo.gpu_node[g]
            by_node[node] = by_node.get(node, 0) + 1
        run.per_node = tuple(by_node.values()) or (1,)
        run.plan = plan_batch(run.profile, run.batch_size, sum(run.per_node))
        run.attempts += 1
        self.clock.allocate(run.progress)
        return self.clock.time_to_finish(run.progress, run.profile, run.plan, run.per_node)

    def bank(self, run: GoodputRun, tj: TraceJob, job: _Banked, elapsed_s: float,
             complete: bool, failed: bool) -> float:
        """Play the attempt forward ``elapsed_s`` and keep what it made; GPU-seconds lost."""
        assert run.plan is not None
        gpus = sum(run.per_node)
        restart_before = run.progress.restart_left_s
        if complete:
            run.progress.done = True
            job.remaining_base_s = 0.0
            return 0.0
        self.clock.run_for(run.progress, run.profile, run.plan, run.per_node, max(0.0, elapsed_s))
        lost = min(restart_before, elapsed_s) * gpus
        if failed:
            epoch_start = run.profile.epoch_start(run.progress.epoch)
            rate = self.clock.rate(run.profile, run.plan, run.per_node,
                                   min(run.progress.epoch, run.profile.epochs - 1))
            lost += (run.progress.progress - epoch_start) / rate * gpus
            run.progress.progress = epoch_start
        run.progress.restart_left_s = 0.0
        job.remaining_base_s = tj.duration_s * (1.0 - run.done_share)
        return lost
