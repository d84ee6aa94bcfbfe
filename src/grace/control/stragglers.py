"""Live straggler detection: the runtime's heartbeat files, cut into windows, fed to core.

``core.stragglers`` judges one window at a time from a time per node; this module
produces those windows from what running jobs already write: every rank
appends a heartbeat record about once a second to
``<workdir>/attempt-<n>/heartbeats-rank<r>.jsonl`` (``grace.runtime.heartbeat``),
with the mean seconds per step of each phase and the rank's node.

Which time to compare. In a synchronous gang every rank's *step* time is the
same: the fast ranks wait for the slow one inside the collectives. So the
figure is the time a rank spends on its own work: the phases that never wait
on peers, ``data``, ``h2d``, ``forward`` and ``optimizer`` (and any phase a job
names itself). Left out: ``backward`` (DDP all-reduces gradients inside it, so
the fast ranks' wait hides there), ``allreduce`` (the same span, as the comm
hook reports it), ``sync`` (the runtime's per-step agreement) and
``checkpoint`` (a collective write). A job that all-reduces outside backward
loses a little signal this way, never blames the wrong rank. A model with
buffers must not broadcast them in forward (DDP ``broadcast_buffers=False``
where they are constant, as in ``examples/train_ddp.py``), or forward waits
too. A node's figure is its slowest rank's: one slow GPU holds the gang back.

Windows are wall-clock slices of ``window_s`` counted from the attempt's start.
A window is judged only once it is ``lag_s`` old (heartbeats reach the file in
batches, every few seconds) and only when every node of the gang reported in
it; a window with a node missing is skipped, which breaks every streak, as a
restart or a checkpoint pause should.
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grace.backends.isolation import open_job_file
from grace.core.stragglers import Straggler, StragglerDetector

#: Phases that never count as a rank's own work: they include waiting for peers.
WAITING_PHASES = frozenset({"backward", "allreduce", "sync", "checkpoint"})


def own_work_s(phases: dict[str, Any]) -> float | None:
    """Seconds per step a rank spent on its own work, from a heartbeat's phase means.

    None when the record has no phases (a script that does not time them) or
    nothing but waiting phases: such a job cannot be judged.
    """
    own = [float(v) for k, v in phases.items() if k not in WAITING_PHASES
           and isinstance(v, int | float) and math.isfinite(v)]
    total = sum(own)
    return total if own and total > 0 else None


@dataclass
class _AttemptWindows:
    """One attempt's unread file offsets and its per-window, per-(node, rank) sums."""

    started_at: float
    offsets: dict[Path, int] = field(default_factory=dict)
    # window -> (node, rank) -> [own-work seconds summed over steps, steps]
    sums: dict[int, dict[tuple[str, int], list[float]]] = field(
        default_factory=lambda: defaultdict(dict))
    next_window: int = 0


class StragglerWatch:
    """Reads new heartbeat lines each call and hands finished windows to the detector."""

    def __init__(self, detector: StragglerDetector | None = None, window_s: float = 30.0,
                 lag_s: float = 12.0) -> None:
        if window_s <= 0 or lag_s < 0:
            raise ValueError("straggler window_s must be > 0 and lag_s >= 0")
        self.detector = detector or StragglerDetector()
        self.window_s = window_s
        self.lag_s = lag_s
        self._attempts: dict[Hashable, _AttemptWindows] = {}

    def observe(self, key: Hashable, attempt_dir: Path, nodes: Iterable[str],
                started_at: float, now: float) -> list[Straggler]:
        """New stragglers of one running attempt (``key``), from its heartbeat files."""
        gang = sorted(set(nodes))
        if len(gang) < self.detector.min_gang:
            return []  # core would not judge it anyway; do not even read its files
        track = self._attempts.setdefault(key, _AttemptWindows(started_at))
        self._read(track, attempt_dir)
        closed = math.floor((now - self.lag_s - track.started_at) / self.window_s)
        found: list[Straggler] = []
        while track.next_window < closed:
            w = track.next_window
            track.next_window += 1
            by_node = self._window_by_node(track.sums.pop(w, {}))
            if set(by_node) >= set(gang):
                found += self.detector.observe(key, w, {n: by_node[n] for n in gang})
        return found

    def forget(self, key: Hashable) -> None:
        """The attempt ended: drop its files' offsets and its streaks."""
        self._attempts.pop(key, None)
        self.detector.forget(key)

    def tracked(self) -> set[Hashable]:
        return set(self._attempts)

    def _read(self, track: _AttemptWindows, attempt_dir: Path) -> None:
        for path in sorted(attempt_dir.glob("heartbeats-rank*.jsonl")):
            try:
                rank = int(path.stem.removeprefix("heartbeats-rank"))
                # the job's own file: a FIFO or a link it planted must not block or mislead
                f = open_job_file(path, os.lstat(attempt_dir).st_uid)
                if f is None:
                    continue
                with f:
                    f.seek(track.offsets.get(path, 0))
                    data = f.read()
            except (OSError, ValueError):
                continue
            # only whole lines: the runtime may be half-way through appending one
            end = data.rfind(b"\n") + 1
            track.offsets[path] = track.offsets.get(path, 0) + end
            for line in data[:end].splitlines():
                self._add(track, rank, line)

    def _add(self, track: _AttemptWindows, rank: int, line: bytes) -> None:
        try:
            rec = json.loads(line)
            at, steps, node = float(rec["at"]), int(rec.get("steps") or 0), str(rec["node"])
            own = own_work_s(rec.get("phases") or {})
        except (ValueError, KeyError, TypeError):
            return  # a line from an older runtime or a torn write: skip it, do not guess
        if own is None or steps <= 0:
            return
        w = math.floor((at - track.started_at) / self.window_s)
        if w < track.next_window:
            return  # that window was judged already
        acc = track.sums[w].setdefault((node, rank), [0.0, 0])
        acc[0] += own * steps
        acc[1] += steps

    @staticmethod
    def _window_by_node(sums: dict[tuple[str, int], list[float]]) -> dict[str, float]:
        by_node: dict[str, float] = {}
        for (node, _rank), (total, steps) in sums.items():
            by_node[node] = max(by_node.get(node, 0.0), total / steps)
        return by_node
