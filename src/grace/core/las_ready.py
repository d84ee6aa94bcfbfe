"""When each running job first stands above an attained-service level.

Least-attained-service preemption (``scheduler._las_victims``) may displace a
running job only once it has run ``las_min_run_s`` and its attained service has
crossed the waiting job's level. Both only become true as time passes, never
false again while the job runs, so each running job has one instant per level
from which it qualifies. Keeping the earliest of those instants per level lets a
cycle learn "nobody above this level yet" without walking every running job; in
a busy replay that is almost every trial preemption (on the Philly list 98% found
no victim, and the walk that said so was the largest single cost of ``decide``).

The instants are only a filter: a level whose earliest instant is close to or
before ``now`` is walked exactly as before, so decisions cannot change.
"""

from __future__ import annotations

import heapq
import math

from grace.core.jobs import RunningJob
from grace.core.policies import QueuePolicy

#: seconds of slack between the computed instant and ``now``: the exact test adds and
#: multiplies floats in another order, so an instant this close is walked, not trusted
SLACK_S = 1e-3


def ready_at(policy: QueuePolicy, run: RunningJob, level: int) -> float:
    """From when ``run`` is displaceable by a job of ``level`` (inf: never, as it runs)."""
    bound = policy.las_thresholds[level]
    aged = run.start_s + policy.las_min_run_s
    if run.attained_gpu_s >= bound:
        return aged
    if run.gpu_equivalents <= 0:
        return math.inf
    return max(aged, run.start_s + (bound - run.attained_gpu_s) / run.gpu_equivalents)


class LevelReadiness:
    """Per level, a heap of (instant, running job); ended jobs are dropped when seen."""

    def __init__(self, policy: QueuePolicy, running: dict) -> None:
        self.policy = policy
        self.running = running
        self._heaps: dict[int, list[tuple[float, int, RunningJob]]] = {}

    def started(self, run: RunningJob) -> None:
        for level, heap in self._heaps.items():
            heapq.heappush(heap, (ready_at(self.policy, run, level), id(run), run))
            if len(heap) > 2 * len(self.running) + 64:  # ended jobs deep in the heap:
                self._heaps[level] = self._built(level)  # a long-lived state stays bounded

    def _built(self, level: int) -> list[tuple[float, int, RunningJob]]:
        heap = [(ready_at(self.policy, run, level), id(run), run)
                for run in self.running.values() if run.preemptible]
        heapq.heapify(heap)
        return heap

    def none_above(self, level: int, now: float) -> bool:
        """True only if no running preemptible job can stand above ``level`` at ``now``."""
        if level >= len(self.policy.las_thresholds):
            return True  # the top level: nothing is above it
        heap = self._heaps.get(level)
        if heap is None:
            heap = self._heaps[level] = self._built(level)
        running = self.running
        while heap and running.get(heap[0][2].id) is not heap[0][2]:
            heapq.heappop(heap)  # ended (or ended and restarted: a new entry)
        return not heap or heap[0][0] > now + SLACK_S


__all__ = ["SLACK_S", "LevelReadiness", "ready_at"]
