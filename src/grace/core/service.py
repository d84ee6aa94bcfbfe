"""Attained service from a job's attempt history: what least-attained-service orders by.

The twin keeps a job's service incrementally (``SchedulerState.finish``); the
live control plane rebuilds its state every cycle from the store, so it replays
the job's ended attempts through this function instead. Both give a requeued
job the same GPU-seconds and the same instant it entered its level, which is
what keeps a preempted job from starting again as if new (and being preempted
again) live when the twin would not.
"""

from __future__ import annotations

from collections.abc import Iterable

from grace.core.policies import QueuePolicy


def attained_from_attempts(policy: QueuePolicy,
                           attempts: Iterable[tuple[float, float, float]]) -> tuple[float, float]:
    """(attained GPU-seconds, when the job entered its current level) after ``attempts``
    of (started at, ended at, GPUs), oldest first."""
    attained = 0.0
    since = 0.0
    for start, end, gpus in attempts:
        gained = gpus * max(0.0, end - start)
        before = policy.level(attained)
        after = policy.level(attained + gained)
        if after != before and gpus > 0:
            since = start + (policy.level_floor(after) - attained) / gpus
        attained += gained
    return attained, since
