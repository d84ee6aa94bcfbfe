"""A planner workload from a job trace: the useful GPU-hours each month asks for.

Each job is counted as running from its submission for its recorded duration,
on ``gpus`` GPUs (a GPU-sharing pod on ``gpu_milli / 1000`` of one): the work
it asked for, in the month it asked for it, before any queueing. Months are
730-hour blocks from the trace's first submission; a job that crosses a month
boundary is split by overlap. The last month may be partial; it is kept as it
is, since it is what the trace recorded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from grace.cost.tco import HOURS_PER_MONTH
from grace.sim.traces.model import TraceJob

MONTH_S = HOURS_PER_MONTH * 3600.0


def monthly_gpu_hours(jobs: Iterable[TraceJob]) -> tuple[float, ...]:
    """GPU-hours per 730-hour month, job by job as described in the module docstring."""
    spans = []
    for j in jobs:
        gpus = j.gpus if j.gpu_milli is None else j.gpu_milli / 1000.0
        if gpus > 0 and j.duration_s > 0:
            spans.append((j.submit_s, j.submit_s + j.duration_s, gpus))
    if not spans:
        return ()
    months = max(1, math.ceil(max(end for _, end, _ in spans) / MONTH_S))
    out = [0.0] * months
    for start, end, gpus in spans:
        first, last = int(start // MONTH_S), min(months - 1, int(end // MONTH_S))
        for m in range(first, last + 1):
            overlap = min(end, (m + 1) * MONTH_S) - max(start, m * MONTH_S)
            if overlap > 0:
                out[m] += overlap * gpus / 3600.0
    return tuple(out)


def tile(profile: tuple[float, ...], months: int) -> tuple[float, ...]:
    """The profile repeated (or cut) to ``months`` months: a trace's pattern kept up."""
    if not profile:
        return ()
    return tuple(profile[i % len(profile)] for i in range(months))


def trace_profile(path: Path, fmt: str, columns: str | None = None,
                  months: int | None = None) -> tuple[float, ...]:
    """Load a trace and return its monthly GPU-hours, tiled to ``months`` when given."""
    from grace.sim.traces import load_trace

    profile = monthly_gpu_hours(load_trace(path, fmt, columns).jobs)
    return tile(profile, months) if months is not None else profile
