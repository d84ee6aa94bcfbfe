"""Showback from the twin: a replay's jobs as :class:`JobUsage` records.

What the twin knows per job (``grace.sim.engine.SimJob``): the work banked
(``duration_s - remaining_base_s`` of reference run time), the last attempt's
stretch factor (``plan[1]``: GPU model speed times placement slowdown),
GPU-seconds lost to failures (restarts and recomputed work) and spent writing
checkpoints. From those:

- ``work_s = (duration_s - remaining_base_s) * stretch``;
- allocated = ``gpus * work_s + lost_gpu_s + checkpoint_gpu_s``;
- waiting on synchronization: a tightly placed step spends ``s`` of its time in
  gradient exchange (the runtime model's communication share: 0 for one GPU,
  ``comm_share_node`` inside a node, ``comm_share_multi`` across nodes); a
  placement that stretches the step by ``k`` only stretches that part, so the
  synchronization share of the job's time is ``1 - (1 - s) / k``;
- waiting on data: 0 (the twin has no data-loading model);
- queueing: time from submission to the end not spent holding GPUs.

Approximations: the stretch factor is the last attempt's; on a mixed cluster a
slower GPU model's extra time counts as synchronization (``k`` is clamped at 1
for faster ones); a job stopped at its runtime limit has its unbanked work
missing from allocated. Jobs that never started are left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from grace.cost.showback import JobUsage
from grace.sim.runtime_model import RuntimeModel

if TYPE_CHECKING:
    from grace.sim.engine import SimJob


def comm_share(gpus: float, nodes: int) -> float:
    """The runtime model's share of a tightly placed step spent communicating."""
    if gpus <= 1:
        return 0.0
    return RuntimeModel.comm_share_node if nodes <= 1 else RuntimeModel.comm_share_multi


def twin_usage(jobs: Iterable[SimJob], usd_per_gpu_hour: float) -> list[JobUsage]:
    """One :class:`JobUsage` per job that ran, priced at the cluster's ``usd_per_gpu_hour``."""
    out = []
    for j in jobs:
        if math.isnan(j.first_start_s):
            continue
        gpus = j.pending.gpu_equivalents
        stretch = j.plan[1]
        work_s = max(0.0, j.trace.duration_s - j.remaining_base_s) * stretch
        allocated_s = gpus * work_s + j.lost_gpu_s + j.checkpoint_gpu_s
        sync_share = 1.0 - (1.0 - comm_share(gpus, j.nodes)) / max(1.0, stretch)
        end = j.end_s if not math.isnan(j.end_s) else j.first_start_s + allocated_s / max(gpus, 1e-9)
        held_wall = allocated_s / gpus if gpus > 0 else 0.0
        queue_s = max(0.0, (end - j.trace.submit_s) - held_wall)
        out.append(JobUsage(
            job=j.trace.job_id, tenant=j.trace.tenant, gpus=gpus,
            usd_per_gpu_hour=usd_per_gpu_hour, queue_hours=queue_s / 3600.0,
            allocated_gpu_hours=allocated_s / 3600.0,
            failure_gpu_hours=j.lost_gpu_s / 3600.0,
            data_sync_gpu_hours=gpus * work_s * sync_share / 3600.0,
            checkpoint_gpu_hours=j.checkpoint_gpu_s / 3600.0,
            intervals=((j.first_start_s, end),)))
    return out
