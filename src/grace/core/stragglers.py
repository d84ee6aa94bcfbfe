"""Stragglers: one node holding back a synchronous gang, told apart from a slow job.

In a synchronous job every step waits for the slowest rank, so one slow node
slows the whole gang (MegaScale: ~0.5% of machines substantially slower;
removing them gained +0.7% MFU). But most slowness is not a bad node:
ByteDance's "What-if" study found 42.5% of jobs at least 10% slower than ideal,
mostly from pipeline imbalance, sequence lengths or garbage collection. So the
rule is deliberately narrow:

- Compare each node with its own gang's median in the same window, never with
  an absolute or historical number: a job that gets slower everywhere (new
  data, bigger sequences, a busy filesystem) moves the median with it and
  blames no node.
- A node is a straggler only after ``windows`` consecutive windows at least
  ``threshold`` above the median; one normal window resets its count, so a
  garbage-collection pause or a checkpoint write does not move a job.
- When more than a quarter of the gang (and more than one node) is slow in
  the same window, the cause is shared (a pipeline stage, a switch, the
  input pipeline): nobody is blamed and every count resets.
- Gangs of fewer than three nodes are not judged. With two nodes there is no
  majority to say which one is slow, and with one there is nothing to compare;
  such small jobs lose little to a slow node, and hard faults still reach
  ``grace.core.health`` as signals.

The answer is cheap on purpose: move the job off the node at its next
checkpoint (``MoveJobOff``), not kill it now.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class MoveJobOff:
    """Decision for the driver: at the job's next checkpoint, restart it without ``node``."""

    job_id: Hashable
    node: str
    reason: str
    at_checkpoint: bool = True  # never preempt mid-step for a straggler


@dataclass(frozen=True, slots=True)
class Straggler:
    """One straggling episode; reported once, when it reaches ``windows`` windows."""

    job_id: Hashable
    node: str
    slowdown: float  # mean fraction above the gang median over those windows (0.15 = 15% slower)
    windows: int

    def decision(self) -> MoveJobOff:
        return MoveJobOff(self.job_id, self.node, (
            f"node {self.node} was {self.slowdown:.0%} slower than the gang median for "
            f"{self.windows} consecutive windows; move job {self.job_id} off it at its next checkpoint"))


@dataclass
class _Track:
    last_window: int | None = None
    slowdowns: dict[str, deque[float]] = field(default_factory=dict)  # the current streak per node
    reported: set[str] = field(default_factory=set)  # nodes whose current episode was reported


class StragglerDetector:
    """Per-job streaks of "slower than the gang median"; pure, fed one window at a time."""

    def __init__(self, threshold: float = 0.10, windows: int = 3, min_gang: int = 3,
                 max_slow_share: float = 0.25) -> None:
        if threshold <= 0 or windows < 1 or min_gang < 3 or not 0 < max_slow_share < 1:
            raise ValueError("need threshold > 0, windows >= 1, min_gang >= 3, 0 < max_slow_share < 1")
        self.threshold = threshold
        self.windows = windows
        self.min_gang = min_gang
        self.max_slow_share = max_slow_share
        self._jobs: dict[Hashable, _Track] = {}

    def observe(self, job_id: Hashable, window_index: int,
                step_time_by_node: Mapping[str, float]) -> list[Straggler]:
        """One window of a job's mean step time per node; returns stragglers newly confirmed.

        Windows must increase; a gap in ``window_index`` (a restart, a missing
        report) breaks every streak, since the windows were not consecutive.
        """
        for node, t in step_time_by_node.items():
            if not (isinstance(t, int | float) and math.isfinite(t) and t > 0):
                raise ValueError(f"job {job_id}: step time of {node} must be a positive number, got {t!r}")
        track = self._jobs.setdefault(job_id, _Track())
        if track.last_window is not None:
            if window_index <= track.last_window:
                raise ValueError(f"job {job_id}: window {window_index} after window "
                                 f"{track.last_window}; windows must increase")
            if window_index != track.last_window + 1:
                track.slowdowns.clear()
                track.reported.clear()
        track.last_window = window_index
        slow = self.slow_nodes(step_time_by_node)
        for node in [n for n in track.slowdowns if n not in slow]:
            del track.slowdowns[node]  # recovered (or left the gang): the episode is over
            track.reported.discard(node)
        out: list[Straggler] = []
        for node, slowdown in sorted(slow.items()):
            streak = track.slowdowns.setdefault(node, deque(maxlen=self.windows))
            streak.append(slowdown)
            if len(streak) == self.windows and node not in track.reported:
                track.reported.add(node)
                out.append(Straggler(job_id, node, sum(streak) / len(streak), self.windows))
        return out

    def slow_nodes(self, step_time_by_node: Mapping[str, float]) -> dict[str, float]:
        """Nodes at least ``threshold`` above the gang median in one window, with their slowdown.

        Empty for gangs under ``min_gang`` and when the slowness is shared by
        more than ``max_slow_share`` of the gang (and more than one node).
        """
        n = len(step_time_by_node)
        if n < self.min_gang:
            return {}
        median = statistics.median(step_time_by_node.values())
        ratios = {node: t / median - 1 for node, t in step_time_by_node.items()}
        slow = {node: r for node, r in ratios.items() if r >= self.threshold - 1e-9}
        if len(slow) > max(1, math.floor(self.max_slow_share * n)):
            return {}
        return slow

    def forget(self, job_id: Hashable) -> None:
        """The job ended; drop its streaks."""
        self._jobs.pop(job_id, None)
