"""Goodput runtime model: how fast a deep-learning job progresses on the GPUs it holds.

Pollux (Qiao et al., OSDI'21) measured six training jobs on a testbed of
16 nodes x 4 GPUs: step and gradient-sync time for each placement and per-GPU
batch size, and the gradient statistics of every epoch at several batch sizes.
``profiles`` reads those measurements; ``progress`` turns a placement and a
batch size into progress per second and plays a job's epochs forward. Only the
runtime model reads them: the scheduler sees GPU counts and estimates.
"""

from grace.sim.goodput.profiles import AppProfile, ProfileError, load_profiles
from grace.sim.goodput.progress import BatchPlan, GoodputClock, JobProgress, plan_batch

__all__ = [
    "AppProfile",
    "BatchPlan",
    "GoodputClock",
    "JobProgress",
    "ProfileError",
    "load_profiles",
    "plan_batch",
]
