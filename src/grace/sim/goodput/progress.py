"""Progress per second from a placement and a batch size, and a job's epochs played forward.

Goodput = statistical efficiency x throughput (Pollux, OSDI'21, section 3):

- the job's total batch ``B`` is split over its ``R`` GPUs; a per-GPU share above
  the largest batch one GPU holds is run as ``accum_steps`` extra gradient-
  accumulation steps, each costing the step time less the sync;
- step time comes from the profile (``AppProfile.step_time``);
- statistical efficiency at ``B`` relative to the smallest measured batch ``B0``,
  from the gradient noise scale of the epoch: with ``s = B / B0``,
  ``gain = (var + sqr) / (var / s + sqr)``; progress is counted in ``B0`` steps,
  so progress per second is ``gain / (step + accum_steps * (step - sync))``;
- every allocation (first start, restart, resize) costs ``restart_s`` before the
  first step, progress is kept across allocations (checkpointed at the stop);
- a job is done when it has finished as many epochs as its profile has.

``GoodputClock`` plays time forward. With scheduling rounds (``round_s``) it
advances in whole rounds from the allocation, and an epoch that ends inside a
round ends at a whole second, as the published simulator does; that is what
makes Grace's per-job completion times comparable with its results to the
second. Without rounds it is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grace.sim.goodput.profiles import AppProfile

_EPS = 1e-8


@dataclass(frozen=True)
class BatchPlan:
    """How a job runs a total batch on ``replicas`` GPUs."""

    replicas: int
    atomic_bsz: int  # per GPU, per step
    accum_steps: int  # extra accumulation steps per optimizer step

    @property
    def batch_size(self) -> int:
        return self.replicas * self.atomic_bsz * (self.accum_steps + 1)


def plan_batch(profile: AppProfile, target_batch: int, replicas: int) -> BatchPlan:
    """Split ``target_batch`` over ``replicas`` GPUs: accumulate where one GPU cannot hold
    its share; a single GPU asked for more than the smallest batch always accumulates
    once (the simulator's rule, which keeps its single-GPU step at the measured sizes);
    never more than the largest measured total batch."""
    local = math.ceil(target_batch / replicas - _EPS)
    accum = math.ceil(local / profile.max_local_bsz - _EPS) - 1
    if replicas == 1 and target_batch > profile.init_batch_size:
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - _EPS)
    atomic = min(atomic, int(profile.max_batch_size / (replicas * (accum + 1))))
    return BatchPlan(replicas, atomic, accum)


@dataclass
class JobProgress:
    """Where a job is: finished epochs, progress within them, restart time still owed."""

    epoch: int = 0
    progress: float = 0.0
    restart_left_s: float = 0.0
    done: bool = False

    def copy(self) -> JobProgress:
        return JobProgress(self.epoch, self.progress, self.restart_left_s, self.done)


@dataclass(frozen=True)
class GoodputClock:
    """Plays jobs' progress forward; ``round_s`` None: continuous time."""

    round_s: float | None = None
    restart_s: float = 30.0  # Pollux's simulator charges 30 s on every allocation

    def rate(self, profile: AppProfile, plan: BatchPlan, per_node: tuple[int, ...],
             epoch: int) -> float:
        """Progress per second in ``epoch`` on this placement and plan."""
        step, sync = profile.step_time(per_node, plan.atomic_bsz)
        batch = plan.batch_size
        sqr, var = profile.grad_stats(batch, epoch)
        scale = batch / profile.init_batch_size
        gain = (var + sqr) / (var / scale + sqr)
        return gain / (step + (step - sync) * plan.accum_steps)

    def allocate(self, state: JobProgress) -> None:
        state.restart_left_s = self.restart_s

    def advance(self, state: JobProgress, profile: AppProfile, plan: BatchPlan,
                per_node: tuple[int, ...], seconds: float) -> float:
        """Run ``state`` for up to ``seconds``; returns the seconds it ran (less when it
        finished). Rounds: call once per round with the round's length."""
        used = min(state.restart_left_s, seconds)
        state.restart_left_s -= used
        seconds -= used
        rounding = self.round_s is not None
        while seconds > 0 and not state.done:
            rate = self.rate(profile, plan, per_node, state.epoch)
            target = profile.epoch_start(state.epoch + 1)
            if state.progress + rate * seconds < target:
                state.progress += rate * seconds
                used += seconds
                return used
            need = (target - state.progress) / rate
            took = float(round(need)) if rounding else need
            state.epoch += 1
            state.progress = target
            used += took
            seconds -= took
            if state.epoch >= profile.epochs:
                state.done = True
        return used

    def run_for(self, state: JobProgress, profile: AppProfile, plan: BatchPlan,
                per_node: tuple[int, ...], seconds: float) -> float:
        """Advance ``state`` over ``seconds`` from an allocation (whole rounds in round
        mode); returns the seconds until it finished, or ``seconds``."""
        if self.round_s is None:
            return self.advance(state, profile, plan, per_node, seconds)
        ran = 0.0
        while ran < seconds - 1e-9 and not state.done:
            chunk = min(self.round_s, seconds - ran)
            took = self.advance(state, profile, plan, per_node, chunk)
            ran += took if state.done else chunk
        return ran

    def time_to_finish(self, state: JobProgress, profile: AppProfile, plan: BatchPlan,
                       per_node: tuple[int, ...]) -> float:
        """Seconds from now (an allocation, or a point reached by ``run_for``) until the
        job is done if nothing stops it; ``state`` is left untouched."""
        probe = state.copy()
        return self.run_for(probe, profile, plan, per_node, math.inf)
