"""``grace lifecycle``'s demand side: a history's monthly GPU-hours, a trend fitted to them,
and the projection forward in GPUs needed.

Every step is a formula on numbers the plan echoes, so a reader (and the tests) can
recompute each month's demand by hand:

- months are 730-hour blocks from the history's first submission; a job counts from
  when it began for its run time on its GPUs, a cloud bill line spreads its GPU-hours
  evenly over its period, both split across months by overlap;
- only *complete* months are used: the history is observed up to the last job start
  (or bill period end), and the month holding that instant is partial (jobs that would
  have started after the export are missing from it);
- the trend is ``ln h_m = intercept + slope * m`` over the complete months with GPU-hours
  (``m`` = 1..k), least squares; ``growth_per_month = exp(slope) - 1``. A growth the user
  gives fixes the slope to ``ln(1 + growth)`` and the intercept is the least-squares one
  for that slope, ``mean(ln h_m - slope * m)``;
- plan month ``t`` (1..N, month 0 = the end of the history) needs
  ``gpu_hours_t = exp(intercept + slope * (k + t))`` and
  ``gpus_needed_t = gpu_hours_t / (730 * target_utilization)``.

Demand is *uncertain* (the seed's case for committed cloud use) when the history has fewer
than ``MIN_HISTORY_MONTHS`` complete months or the fit's residual standard deviation (in
log units, about the relative error of a month around the trend) is above
``MAX_RESIDUAL_SD``. R^2 is echoed too but not tested: a flat, steady history has an R^2
near 0 and is not uncertain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from grace.cost.history import History
from grace.cost.tco import HOURS_PER_MONTH

MONTH_S = HOURS_PER_MONTH * 3600.0
#: fewer complete months than this and no trend is trusted (half a year of history)
MIN_HISTORY_MONTHS = 6
#: residual standard deviation of ln(monthly GPU-hours) above which demand is uncertain:
#: months typically 20% off the trend
MAX_RESIDUAL_SD = 0.20


def _spread(out: list[float], start: float, end: float, gpu_hours: float) -> None:
    """Add ``gpu_hours`` spent evenly over [start, end) to the months it overlaps."""
    if end <= start:
        if 0 <= int(start // MONTH_S) < len(out):
            out[int(start // MONTH_S)] += gpu_hours
        return
    rate = gpu_hours / (end - start)
    first, last = int(start // MONTH_S), min(len(out) - 1, int(end // MONTH_S))
    for m in range(max(0, first), last + 1):
        overlap = min(end, (m + 1) * MONTH_S) - max(start, m * MONTH_S)
        if overlap > 0:
            out[m] += overlap * rate


def observed_end_s(history: History) -> float:
    """How far the history is observed: its last job start or its last bill period's end."""
    ends = [j.began_s for j in history.jobs] + [u.end_s for u in history.usage]
    return max(ends) if ends else 0.0


def monthly_gpu_hours(history: History) -> tuple[tuple[float, ...], float]:
    """GPU-hours of each complete 730-hour month, and of the partial month after them."""
    complete = int(observed_end_s(history) // MONTH_S)
    out = [0.0] * (complete + 1)
    for j in history.jobs:
        if j.gpus > 0 and j.run_s > 0:
            _spread(out, j.began_s, j.began_s + j.run_s, j.gpu_hours)
    for u in history.usage:
        if u.gpu_hours > 0:
            _spread(out, u.start_s, u.end_s, u.gpu_hours)
    return tuple(out[:complete]), out[complete]


@dataclass(frozen=True)
class Trend:
    """``ln gpu_hours = intercept + slope * month``, fitted (or slope given) over ``months``."""

    method: str  # "fitted" or "given"
    intercept: float
    slope: float
    months: tuple[int, ...]
    r2: float | None
    residual_sd: float | None

    @property
    def growth_per_month(self) -> float:
        return math.exp(self.slope) - 1.0

    def gpu_hours_at(self, month: float) -> float:
        return math.exp(self.intercept + self.slope * month)

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "intercept": self.intercept, "slope": self.slope,
                "growth_per_month": self.growth_per_month, "months": list(self.months),
                "r2": self.r2, "residual_sd": self.residual_sd}


def fit_trend(hours: tuple[float, ...], growth: float | None = None) -> Trend:
    """Least squares on ``ln h_m`` over the months with GPU-hours (see the module docstring).

    With one such month (or a given growth) the slope cannot be fitted from the data: it is
    the given growth's, else 0 (a flat projection). R^2 is None where the log-hours do not
    vary; the residual SD is None with two points or fewer (no degrees of freedom left).
    """
    pts = [(m, math.log(h)) for m, h in enumerate(hours, start=1) if h > 0]
    if not pts:
        raise ValueError("the history has no GPU-hours in any complete 730-hour month; "
                         "give a longer history")
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    n = len(pts)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if growth is not None:
        slope, method = math.log1p(growth), "given"
    elif sxx > 0:
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        method = "fitted"
    else:
        slope, method = 0.0, "fitted"
    intercept = my - slope * mx
    sse = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    sst = sum((y - my) ** 2 for y in ys)
    r2 = 1.0 - sse / sst if sst > 0 else None
    sd = math.sqrt(sse / (n - 2)) if n > 2 else None
    return Trend(method, intercept, slope, tuple(xs), r2, sd)


def uncertainty(hours: tuple[float, ...], trend: Trend) -> tuple[bool, str]:
    """Is demand too uncertain to buy or lease for (the module docstring's test), and why."""
    if len(hours) < MIN_HISTORY_MONTHS:
        return True, (f"{len(hours)} complete months of history, fewer than "
                      f"{MIN_HISTORY_MONTHS}")
    if trend.residual_sd is None or trend.residual_sd > MAX_RESIDUAL_SD:
        sd = "unknown" if trend.residual_sd is None else f"{trend.residual_sd:.3f}"
        return True, (f"months scatter around the trend by {sd} (log residual SD), "
                      f"more than {MAX_RESIDUAL_SD}")
    return False, (f"{len(hours)} complete months, residual SD {trend.residual_sd:.3f} "
                   f"<= {MAX_RESIDUAL_SD}")


@dataclass(frozen=True)
class Demand:
    """The projection, plan months 1..N."""

    history_months: int
    trend: Trend  # the one projected: fitted, or with the given growth
    fitted: Trend  # always the least-squares fit: the uncertainty test reads its scatter
    target_utilization: float
    gpu_hours: tuple[float, ...]
    uncertain: bool
    uncertain_reason: str

    @property
    def gpus_needed(self) -> tuple[float, ...]:
        return tuple(h / (HOURS_PER_MONTH * self.target_utilization) for h in self.gpu_hours)


def project(hours: tuple[float, ...], months: int, target_utilization: float,
            growth: float | None = None) -> Demand:
    """Demand for plan months 1..``months`` after the ``len(hours)`` complete months seen."""
    fitted = fit_trend(hours)
    trend = fitted if growth is None else fit_trend(hours, growth)
    k = len(hours)
    # the history's scatter is tested even when the user fixes the growth
    uncertain, why = uncertainty(hours, fitted)
    projected = tuple(trend.gpu_hours_at(k + t) for t in range(1, months + 1))
    return Demand(k, trend, fitted, target_utilization, projected, uncertain, why)
