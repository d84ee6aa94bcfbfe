"""Queue policies, chosen by name in config or on the command line.

A policy is a small value, not a class hierarchy: an ordering of waiting jobs
plus switches for backfill, quotas, fair share and preemption. ``decide``
reads it; nothing else does.

- ``fifo``: submit order; the first job that cannot start blocks all behind it.
- ``easy-backfill``: submit order; the first blocked job gets a reservation at
  the earliest time enough GPUs free up (its "shadow time"), and later jobs
  may start now if they end before it or use only GPUs it will not need.
  This is Slurm's default behaviour (sched/backfill) and the baseline to beat.
- ``priority``: job priority, then submit order; tenant quotas (guaranteed and
  borrowable share), fair share between tenants by current usage over weight,
  EASY backfill, and preemption of preemptible jobs to reclaim quota or make
  room for higher priority, within each tenant's preemption budget.
- ``las``: least attained service (Tiresias, NSDI'19): jobs that have used
  fewer GPU-seconds go first, in discretized levels; work-conserving; a
  waiting job may preempt a preemptible job of a higher level.
- ``tiresias``: Tiresias' discretized two-queue LAS as the Pollux artifact's
  simulator runs it (Gu et al., NSDI'19; Qiao et al., OSDI'21): a job enters
  queue 0 and moves to queue 1 once it has attained 16 GPU-hours; every cycle
  all active jobs, running or waiting, are taken in queue order (queue 0 by
  submission, queue 1 by when each job entered it) and admitted greedily while
  GPUs remain, skipping any that do not fit; running jobs outside the admitted
  set are preempted, admitted waiting jobs start spread over the nodes with the
  most free GPUs (``core.replan``). Meant to run in scheduling rounds.
- ``grace``: the default; priority, then least attained service level (one
  threshold, Tiresias' 16 GPU-hours: below it a job is new, above it a long
  runner), then smaller gangs first, with quotas, fair share, EASY backfill and
  preemption: for priority, to reclaim quota, and of a preemptible long runner
  for a new job (preemptive LAS, which is what keeps short jobs' completion
  times low when long ones hold the cluster; the victim checkpoints first, and
  an attempt younger than ten minutes is left alone, since its restart would
  cost more than the turn is worth);
  a gang that one leaf switch could hold waits for one rather than spanning two
  (the other policies take whatever GPUs are free, as Slurm does without
  ``--switches``); a job that fits one node goes where it loses the least
  capacity usable by the requests seen so far, GPU slivers and host CPU and
  memory included (``core.fragmentation``), where the others take best fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grace.core.placement import PlacementMode

#: Tiresias-style service levels, in GPU-seconds: <1 GPU-h, <8 GPU-h, <64 GPU-h, more.
LAS_THRESHOLDS_GPU_S = (3600.0, 8 * 3600.0, 64 * 3600.0)
#: Tiresias' one queue threshold in the Pollux artifact: 16 GPU-hours of attained service.
TIRESIAS_THRESHOLDS_GPU_S = (16 * 3600.0,)
#: Grace's default does not displace an attempt younger than this for attained service:
#: a preemption costs the victim a checkpoint and a restart (~30-60 s on every GPU in
#: the twin's failure model and Pollux's), so ten minutes bounds that loss to about 10%
#: of the attempt, and a job just restarted is not displaced again at once.
GRACE_LAS_MIN_RUN_S = 600.0


def las_level(attained_gpu_s: float,
              thresholds: tuple[float, ...] = LAS_THRESHOLDS_GPU_S) -> int:
    for level, bound in enumerate(thresholds):
        if attained_gpu_s < bound:
            return level
    return len(thresholds)


@dataclass(frozen=True)
class QueuePolicy:
    """One named scheduling policy; see the module docstring for each."""

    name: str
    order: tuple[str, ...]  # sort fields: "priority", "las", "size", "submit"
    strict_head: bool = False
    backfill: bool = False
    quotas: bool = False
    fair_share: bool = False
    preempt_for_priority: bool = False
    preempt_for_quota: bool = False
    preempt_for_las: bool = False
    # never span two leaves when one could hold the gang, unless (``placement`` headroom)
    # every uplink it would cross stays within capacity
    leaf_locality: bool = False
    # a gang that must cross leaves: weigh the uplinks' load (core.spine_load) or not
    placement: PlacementMode = PlacementMode.HEADROOM
    # one-node jobs: "best-fit" (fullest node that holds them) or "fragmentation" (the node
    # and GPU losing the least capacity usable by the requests seen, core.fragmentation)
    packing: str = "best-fit"
    backfill_depth: int = 500  # like Slurm's bf_max_job_test
    max_victims: int = 16
    # attained-service levels ("las" in ``order``), in GPU-seconds
    las_thresholds: tuple[float, ...] = LAS_THRESHOLDS_GPU_S
    # an attempt younger than this is not displaced for attained service (scheduler's
    # _las_preemptible): its restart would cost more than its turn is worth
    las_min_run_s: float = 0.0
    # re-plan every cycle from all active jobs (core.replan) instead of placing waiting
    # jobs around running ones
    replan: bool = False

    def level(self, attained_gpu_s: float) -> int:
        """The attained-service level a job is in under this policy."""
        return las_level(attained_gpu_s, self.las_thresholds)

    def level_floor(self, level: int) -> float:
        """Attained GPU-seconds at which ``level`` begins."""
        return self.las_thresholds[level - 1] if level > 0 else 0.0

    def static_key(self, priority: int, attained_gpu_s: float, gpus: float,
                   submit_s: float, job_id: int) -> tuple:
        """The part of a job's order that does not change while it waits."""
        parts: list[float] = []
        for f in self.order:
            if f == "priority":
                parts.append(-priority)
            elif f == "las":
                parts.append(self.level(attained_gpu_s))
            elif f == "size":
                parts.append(math.ceil(gpus))
            elif f == "submit":
                parts.append(submit_s)
        parts.append(job_id)
        return tuple(parts)

    @property
    def las_ordered(self) -> bool:
        """Does attained service change what this policy decides?"""
        return "las" in self.order or self.preempt_for_las or self.replan

    @property
    def preempts(self) -> bool:
        return (self.preempt_for_priority or self.preempt_for_quota or self.preempt_for_las
                or self.replan)


POLICIES: dict[str, QueuePolicy] = {
    p.name: p
    for p in [
        QueuePolicy("fifo", ("submit",), strict_head=True),
        QueuePolicy("easy-backfill", ("submit",), backfill=True),
        QueuePolicy("priority", ("priority", "submit"), backfill=True, quotas=True,
                    fair_share=True, preempt_for_priority=True, preempt_for_quota=True),
        QueuePolicy("las", ("las", "submit"), preempt_for_las=True),
        QueuePolicy("tiresias", ("las", "submit"), las_thresholds=TIRESIAS_THRESHOLDS_GPU_S,
                    replan=True),
        QueuePolicy("grace", ("priority", "las", "size", "submit"), backfill=True,
                    quotas=True, fair_share=True, preempt_for_priority=True,
                    preempt_for_quota=True, preempt_for_las=True,
                    las_thresholds=TIRESIAS_THRESHOLDS_GPU_S, las_min_run_s=GRACE_LAS_MIN_RUN_S,
                    leaf_locality=True, packing="fragmentation"),
    ]
}

DEFAULT_POLICY = "grace"


def get_policy(name: str) -> QueuePolicy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(
            f"unknown policy {name!r}; choose one of {', '.join(sorted(POLICIES))}"
        ) from None
