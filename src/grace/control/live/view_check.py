"""Does the snapshot kept across cycles equal one built from scratch? (tests turn it on)

The incremental view (``live.view``) is only correct if, after any sequence of
writes, the ``SchedulerState`` it kept is the one a fresh read of the store
would build, and ``decide`` answers the same on both. ``differences`` lists what
differs, in words; ``ViewBuilder.verify`` calls it after every build, so every
test that runs the reconciler also checks the incremental cycle against the
full one (tests/conftest.py turns it on for the whole suite).
"""

from __future__ import annotations

from typing import Any

from grace.core.scheduler import decide
from grace.core.state import SchedulerState


def facts(state: SchedulerState) -> dict[str, Any]:
    """What ``decide`` reads from a state, as comparable values."""
    return {
        "pending": sorted((int(j), state._static_key(p), p.tenant, p.shape, p.restarts,
                           tuple(sorted(p.exclude_nodes)), p.attained_gpu_s)
                          for j, p in state.pending.items()),
        "queues": {k: list(v) for k, v in sorted(state.queues.items(), key=repr)},
        "running": sorted((int(j), r.placement.gpus, r.placement.slices, r.start_s, r.borrowing,
                           r.attained_gpu_s) for j, r in state.running.items()),
        "free": list(state.capacity.free_mask),
        "usable": list(state.capacity.usable),
        "slices": sorted(state.capacity.slice_free.items()),
        "usage": {t: round(u.gpus, 6) for t, u in sorted(state.usage.items()) if u.gpus},
        "preemptions": {t: list(u.preemption_times) for t, u in sorted(state.usage.items())
                        if u.preemption_times},
        "ends": list(state.ends),
        "deadlines": list(state.deadlines),
        "victims": list(state.victim_order),
        "quotas": dict(sorted(state.quotas.items())),
    }


def differences(kept: SchedulerState, fresh: SchedulerState, now: float) -> list[str]:
    """Each part of the two states that differs, then ``decide``'s answers if they do."""
    a, b = facts(kept), facts(fresh)
    out = [f"{key}: kept {a[key]!r:.400} but fresh {b[key]!r:.400}"
           for key in a if a[key] != b[key]]
    if not out:
        da, db = decide(kept, now), decide(fresh, now)
        for part in ("starts", "stops", "preemptions"):
            if getattr(da, part) != getattr(db, part):
                out.append(f"decide's {part}: kept {getattr(da, part)!r:.400} but fresh "
                           f"{getattr(db, part)!r:.400}")
    return out


__all__ = ["differences", "facts"]
