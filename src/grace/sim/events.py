"""The event queue: one ordering key, (time, kind rank, sequence), so runs repeat exactly.

Kinds are ranked so that at one instant, GPUs are freed before anything is
placed: completions first, then node failures and returns, then wake-ups
(runtime limits), then arrivals. The sequence number breaks the remaining ties in the order events
were scheduled, which is itself deterministic.
"""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import Any


class EventKind(IntEnum):
    COMPLETE = 0
    NODE_FAIL = 1
    NODE_RETURN = 2
    WAKE = 3
    ARRIVE = 4


class EventQueue:
    """A heap of (time, kind, seq, payload)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0

    def push(self, time: float, kind: EventKind, payload: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, int(kind), self._seq, payload))

    def pop(self) -> tuple[float, int, Any]:
        t, kind, _, payload = heapq.heappop(self._heap)
        return t, kind, payload

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def peek(self) -> tuple[float, int, Any] | None:
        """The next event (time, kind, payload) without removing it."""
        if not self._heap:
            return None
        t, kind, _, payload = self._heap[0]
        return t, kind, payload

    def __len__(self) -> int:
        return len(self._heap)
