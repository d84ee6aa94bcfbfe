"""GPU demand over time from a :class:`~grace.cost.history.History`: fleet size and windows.

Demand is what :meth:`History.gpu_hours_by_period` counts: a job from when it
began (its recorded start, else its submission) for its run time on its GPUs, a
bill line spread evenly over its period, each split between periods by overlap,
from the history's time 0 (its first submission or bill period).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from grace.cost.history import DAY_S, History

HOUR_S = 3600.0

FLEET_PERCENTILE = 90.0
"""The percentile of hourly concurrent demand a fleet is sized to when ``--gpus`` is not
given. ASSUMPTION: a fleet sized to the busiest hour idles most of the time, one sized to
the median queues half of it; the 90th percentile covers all but the peaks, which the
plan rents on demand (see ``grace.cost.assess``)."""


def end_s(history: History) -> float:
    """When the last job or bill period ended, from time 0."""
    ends = [j.began_s + j.run_s for j in history.jobs] + [u.end_s for u in history.usage]
    return max(ends, default=0.0)


@dataclass(frozen=True)
class FleetSize:
    """The fleet the history is judged against, and how it was chosen."""

    gpus: float
    basis: str
    p90_concurrent_gpus: float
    node_gpus: int

    def to_json(self) -> dict[str, float | str | int]:
        return {"gpus": self.gpus, "basis": self.basis,
                "p90_hourly_concurrent_gpus": self.p90_concurrent_gpus,
                "percentile": FLEET_PERCENTILE, "node_gpus": self.node_gpus}


def fleet_size(history: History, given: float | None, node_gpus: int) -> FleetSize:
    """``given`` when the user said; else the fewest whole nodes of ``node_gpus`` covering the
    ``FLEET_PERCENTILE``th percentile of hourly concurrent demand (an hour's GPU-hours are its
    mean concurrent GPUs), at least one node."""
    if given is not None and given <= 0:
        raise ValueError(f"gpus must be more than 0, got {given:g}; give --gpus 8 or more, or "
                         "leave it out to size the fleet from the history")
    hourly = history.gpu_hours_by_period(HOUR_S)
    p90 = float(np.percentile(hourly, FLEET_PERCENTILE)) if hourly else 0.0
    if given is not None:
        return FleetSize(given, "given (--gpus)", p90, node_gpus)
    nodes = max(1, math.ceil(p90 / node_gpus - 1e-9))
    return FleetSize(float(nodes * node_gpus),
                     f"the fewest whole {node_gpus}-GPU nodes covering the history's "
                     f"{FLEET_PERCENTILE:.0f}th-percentile hourly concurrent demand "
                     f"({p90:,.1f} GPUs)", p90, node_gpus)


def daily_gpu_hours(history: History) -> np.ndarray:
    """GPU-hours of each complete day from time 0 (a trailing part day is left out)."""
    days = int(end_s(history) // DAY_S)
    return np.asarray(history.gpu_hours_by_period(DAY_S)[:days], float)
