"""The six indicators of "Deciding Whether You Have Reached This Point", read from a history.

Each one evaluates to met (True), not met (False) or unknown (None): unknown is
not "no", and its evidence says what is missing and how to get it. Every
threshold is a :class:`Threshold` constant below whose ``source`` says where it
comes from (a seed's figure, another part of Grace, or an ASSUMPTION and why);
``grace assess`` echoes them all in its JSON.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from grace.cost.class_placement import declared_class
from grace.cost.history import DAY_S, History, HistoryJob
from grace.sim.traces._common import classify
from grace.spec.bursting import BurstingSpec

HOUR_S = 3600.0


class Indicator(StrEnum):
    """The seed's six indicators, in its order."""

    LONG_MULTINODE_RUNS = "long-multinode-runs"
    SCALING_EFFICIENCY = "scaling-efficiency"
    CAPACITY_DIFFICULTY = "capacity-difficulty"
    SUSTAINED_UTILIZATION = "sustained-utilization"
    PREDICTABILITY = "predictability"
    DATA_GOVERNANCE = "data-governance"


@dataclass(frozen=True)
class Threshold:
    """A number an indicator is judged against; ``source`` is its docstring: where it comes from."""

    value: float
    unit: str
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "source": self.source}


LONG_RUN_S = Threshold(
    DAY_S, "seconds",
    "seed rules of thumb: runs under 24 h favour cloud; a run over a day is a long one")
VERY_LONG_RUN_S = Threshold(
    7 * DAY_S, "seconds", "seed rules of thumb: runs over 7 days favour a cluster")
LONG_MULTINODE_DAY_SHARE = Threshold(
    0.25, "share of GPU-hours",
    "ASSUMPTION: the seed's 'training jobs that span many nodes for days' made a number: a "
    "quarter of all GPU-hours in multi-node runs over a day is a workload shaped by them")
LONG_MULTINODE_WEEK_SHARE = Threshold(
    0.10, "share of GPU-hours",
    "ASSUMPTION: '... or weeks': runs over 7 days weigh more (seed: they favour a cluster), so a "
    "tenth of all GPU-hours in multi-node runs over 7 days is enough")
SCALING_EFFICIENCY_FLOOR = Threshold(
    0.80, "efficiency at the largest count",
    "ASSUMPTION: data-parallel training on a well-built InfiniBand cluster keeps about 90% weak-"
    "scaling efficiency (MLPerf Training results at scale); under 80% at the largest count the "
    "interconnect, which a private cluster chooses and shared capacity does not, costs a fifth "
    "of every GPU-hour")
CAPACITY_WAIT_S = Threshold(
    BurstingSpec().queue_wait_threshold_s, "seconds",
    "Grace's own bursting default (spec.bursting queue_wait_threshold_s): a wait over this is "
    "long enough that Grace rents cloud capacity rather than wait")
CAPACITY_WAIT_PERCENTILE = Threshold(
    90.0, "percentile",
    "ASSUMPTION: one multi-GPU job in ten waiting past the threshold is a capacity problem a "
    "team feels every week, not a rare peak")
CAPACITY_WAITED_SHARE = Threshold(
    0.10, "share of GPU-hours",
    "ASSUMPTION: the same one-in-ten, weighted by GPU-hours (big jobs wait longest for a gang)")
CAPACITY_ERROR_RATE = Threshold(
    0.05, "refused launches per request",
    "ASSUMPTION: one launch in twenty refused for want of capacity "
    "(InsufficientInstanceCapacity, ZONE_RESOURCE_POOL_EXHAUSTED) means capacity cannot be had "
    "at once")
UTILIZATION_WINDOWS_DAYS = (30, 90, 365)
"""Rolling windows of sustained utilization (the issue: 30/90/365 days; the seed's breakeven is
'over a 12-month period')."""
PREDICTABILITY_CV = Threshold(
    0.25, "coefficient of variation",
    "ASSUMPTION: the same training job on the same GPUs finishes within a few percent on "
    "dedicated nodes; a spread of a quarter of the mean is far past hardware noise, so its "
    "finish time cannot be planned on where it runs now")
PREDICTABILITY_MIN_GROUP = Threshold(
    5, "jobs", "ASSUMPTION: fewer than 5 runs give no usable spread")


def all_thresholds() -> dict[str, dict[str, Any]]:
    """Every threshold by name, for the JSON's echo."""
    named = {k: v for k, v in globals().items() if isinstance(v, Threshold)}
    out = {k.lower(): v.to_json() for k, v in named.items()}
    out["utilization_windows_days"] = {"value": list(UTILIZATION_WINDOWS_DAYS), "unit": "days",
                                       "source": "the issue: rolling 30/90/365-day windows"}
    return out


@dataclass(frozen=True)
class IndicatorResult:
    """One indicator's verdict with its evidence, its threshold in words and the figures used."""

    name: Indicator
    met: bool | None
    evidence: str
    threshold: str
    figures: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": str(self.name), "met": self.met, "evidence": self.evidence,
                "threshold": self.threshold, "figures": self.figures}


def _pct(x: float) -> str:
    return f"{x:.1%}"


# ----------------------------------------------------------------- 1. long multi-node runs
def long_multinode_runs(history: History) -> IndicatorResult:
    """Share of GPU-hours in multi-node jobs running over a day, and over 7 days."""
    threshold = (f"met when multi-node runs over 1 day hold >= "
                 f"{_pct(LONG_MULTINODE_DAY_SHARE.value)} of GPU-hours, or runs over 7 days >= "
                 f"{_pct(LONG_MULTINODE_WEEK_SHARE.value)}")
    name = Indicator.LONG_MULTINODE_RUNS
    total = sum(j.gpu_hours for j in history.jobs)
    if total <= 0:
        return IndicatorResult(name, None, "unknown: the history has no jobs (a cloud bill has "
                               "GPU-hours by period, not runs); load a job log (sacct, csv, "
                               "grace) to see run lengths and node counts", threshold)
    multi = [j for j in history.jobs if history.nodes_of(j) > 1]
    day = sum(j.gpu_hours for j in multi if j.run_s > LONG_RUN_S.value)
    week = sum(j.gpu_hours for j in multi if j.run_s > VERY_LONG_RUN_S.value)
    recorded = sum(1 for j in history.jobs if j.nodes is not None)
    figures = {"gpu_hours": total, "multinode_gpu_hours": sum(j.gpu_hours for j in multi),
               "multinode_over_1_day_gpu_hours": day, "multinode_over_7_days_gpu_hours": week,
               "share_over_1_day": day / total, "share_over_7_days": week / total,
               "multinode_jobs": len(multi), "jobs_with_recorded_nodes": recorded,
               "gpus_per_node": history.gpus_per_node}
    met = (day / total >= LONG_MULTINODE_DAY_SHARE.value
           or week / total >= LONG_MULTINODE_WEEK_SHARE.value)
    how = ("" if recorded == len(history.jobs) else
           f" (nodes inferred as GPUs / {history.gpus_per_node} for "
           f"{len(history.jobs) - recorded:,} jobs that do not record them)")
    evidence = (f"{_pct(day / total)} of {total:,.0f} GPU-hours ran in multi-node jobs over a "
                f"day, {_pct(week / total)} over 7 days; {len(multi):,} multi-node jobs{how}")
    return IndicatorResult(name, met, evidence, threshold, figures)


# ----------------------------------------------------------------- 2. scaling efficiency
def _scaling_from_bench(scaling: Mapping[str, Any]) -> dict[int, float]:
    eff = scaling.get("efficiency")
    if not isinstance(eff, Mapping) or not eff:
        raise ValueError("scaling: no 'efficiency' mapping of rank count to efficiency; pass the "
                         "JSON `grace bench scaling --json FILE` writes")
    try:
        out = {int(k): float(v) for k, v in eff.items()}
    except (TypeError, ValueError):
        raise ValueError("scaling.efficiency: keys must be rank counts and values numbers, as "
                         "`grace bench scaling --json` writes them") from None
    for ranks, e in sorted(out.items()):
        if ranks < 1:
            raise ValueError(f"scaling.efficiency: {ranks} is not a rank count; counts are 1 "
                             "or more")
        if not (math.isfinite(e) and 0.0 < e <= MAX_EFFICIENCY):
            raise ValueError(f"scaling.efficiency: efficiency at {ranks} ranks is {e:g}; it "
                             f"must be a number in (0, {MAX_EFFICIENCY:g}] (1.0 is linear); "
                             "rerun grace bench scaling")
    return out


#: Above this a scaling efficiency is a measurement error: superlinear scaling from caches
#: fitting at scale exists, but not by half again.
MAX_EFFICIENCY = 1.5


def _scaling_from_history(history: History) -> dict[str, dict[int, float]]:
    """Per job name, efficiency by node count from median step times (see ``scaling_efficiency``)."""
    steps: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for j in history.jobs:
        if j.name and j.step_time_s is not None and j.step_time_s > 0:
            steps[j.name][history.nodes_of(j)].append(j.step_time_s)
    out = {}
    for name, by_nodes in steps.items():
        if len(by_nodes) < 2:
            continue
        med = {n: statistics.median(v) for n, v in by_nodes.items()}
        base = min(med)
        out[name] = {n: med[base] / med[n] for n in sorted(med)}
    return out


def scaling_efficiency(history: History, scaling: Mapping[str, Any] | None) -> IndicatorResult:
    """Scaling efficiency by rank (or node) count, in order of preference:

    1. ``grace bench scaling``'s JSON: its ``efficiency`` at the largest rank count;
    2. the history's step times: for each job name run at two or more node counts,
       ``median_step(smallest) / median_step(n)`` (weak scaling, a fixed batch per GPU,
       as data-parallel training grows and as ``grace bench scaling`` measures), taken
       at each name's largest count; the median over names is judged;
    3. unknown.

    Met when the efficiency at the largest count is below ``SCALING_EFFICIENCY_FLOOR``.
    """
    name = Indicator.SCALING_EFFICIENCY
    floor = SCALING_EFFICIENCY_FLOOR.value
    threshold = f"met when efficiency at the largest count is below {_pct(floor)}"
    if scaling is not None:
        eff = _scaling_from_bench(scaling)
        if len(eff) >= 2:
            top = max(eff)
            base = min(eff)
            curve = ", ".join(f"{n}: {_pct(e)}" for n, e in sorted(eff.items()))
            return IndicatorResult(
                name, eff[top] < floor,
                f"grace bench scaling: efficiency {_pct(eff[top])} at {top} ranks against "
                f"{base} (by rank count: {curve})", threshold,
                {"source": "grace bench scaling", "efficiency_by_ranks": eff,
                 "largest_ranks": top, "efficiency_at_largest": eff[top]})
    by_name = _scaling_from_history(history)
    if by_name:
        at_top = {n: e[max(e)] for n, e in by_name.items()}
        med = statistics.median(at_top.values())
        worst = min(at_top, key=lambda n: at_top[n])
        return IndicatorResult(
            name, med < floor,
            f"history step times: median efficiency {_pct(med)} at each of {len(at_top)} job "
            f"name(s)' largest node count (weak scaling, step time at the fewest nodes over "
            f"step time at more); lowest {worst!r} {_pct(at_top[worst])} at "
            f"{max(by_name[worst])} nodes", threshold,
            {"source": "history step_time_s", "efficiency_by_name_and_nodes":
                {n: {str(k): v for k, v in e.items()} for n, e in by_name.items()},
             "median_efficiency_at_largest": med})
    why = ("the scaling JSON has one rank count; " if scaling is not None else "")
    return IndicatorResult(
        name, None, f"unknown: run grace bench scaling (--ranks 1,2,4,8 --json FILE, then "
        f"--scaling FILE); {why}the history records no step times of one job name at two node "
        "counts", threshold)


# ----------------------------------------------------------------- 3. capacity difficulty
def capacity_difficulty(history: History) -> IndicatorResult:
    """Queue waits where starts are recorded, and a bill's capacity errors per launch request.

    Waits are judged on multi-GPU jobs (they wait for a gang; a one-GPU job fits anywhere),
    on all jobs when there are none. Met when either recorded part passes its threshold.
    """
    name = Indicator.CAPACITY_DIFFICULTY
    wait_s = CAPACITY_WAIT_S.value
    threshold = (f"met when the p{CAPACITY_WAIT_PERCENTILE.value:.0f} queue wait of multi-GPU "
                 f"jobs is >= {wait_s / 3600:g} h, or >= {_pct(CAPACITY_WAITED_SHARE.value)} of "
                 f"GPU-hours waited over {wait_s / 3600:g} h, or >= "
                 f"{_pct(CAPACITY_ERROR_RATE.value)} of cloud launch requests were refused for "
                 "capacity")
    figures: dict[str, Any] = {}
    parts: list[str] = []
    verdicts: list[bool] = []
    started = [j for j in history.jobs if j.wait_s is not None]
    if started:
        multi = [j for j in started if j.gpus > 1]
        judged = multi or started
        waits = np.array([j.wait_s for j in judged], float)
        p = float(np.percentile(waits, CAPACITY_WAIT_PERCENTILE.value))
        gh = sum(j.gpu_hours for j in judged)
        waited = sum(j.gpu_hours for j in judged if (j.wait_s or 0.0) > wait_s)
        share = waited / gh if gh > 0 else 0.0
        who = "multi-GPU jobs" if multi else "jobs (none used more than one GPU)"
        figures.update({"jobs_with_starts": len(started), "judged": who,
                        "judged_jobs": len(judged), "p90_wait_s": p,
                        "median_wait_s": float(np.median(waits)),
                        "share_gpu_hours_waited_over_threshold": share})
        verdicts.append(p >= wait_s or share >= CAPACITY_WAITED_SHARE.value)
        parts.append(f"p{CAPACITY_WAIT_PERCENTILE.value:.0f} wait of {len(judged):,} {who} "
                     f"{p / 3600:.2f} h; {_pct(share)} of their GPU-hours waited over "
                     f"{wait_s / 3600:g} h")
    errors = [u for u in history.usage
              if u.capacity_errors is not None and u.launch_requests]
    if errors:
        refused = sum(u.capacity_errors or 0 for u in errors)
        asked = sum(u.launch_requests or 0 for u in errors)
        rate = refused / asked
        figures.update({"capacity_errors": refused, "launch_requests": asked,
                        "capacity_error_rate": rate})
        verdicts.append(rate >= CAPACITY_ERROR_RATE.value)
        parts.append(f"{refused:,} of {asked:,} cloud launch requests refused for capacity "
                     f"({_pct(rate)})")
    if not verdicts:
        missing = []
        if history.jobs:
            missing.append(f"the {history.format} history records no job start times, so queue "
                           "waits are unknown (not zero)")
        if history.usage:
            missing.append("the bill has no capacity-error and launch-request columns")
        if not missing:
            missing.append("the history is empty")
        return IndicatorResult(name, None, "unknown: " + "; ".join(missing) + "; load a log "
                               "with start times (sacct Start, a csv start column, grace) or a "
                               "bill with capacity errors", threshold)
    return IndicatorResult(name, any(verdicts), "; ".join(parts), threshold, figures)


# ----------------------------------------------------------------- 4. sustained utilization
def _window_stats(daily: np.ndarray, days: int, gpus: float) -> dict[str, float]:
    sums = np.convolve(daily, np.ones(days), mode="valid")
    util = sums / (gpus * days * 24.0)
    return {"windows": float(util.size), "min": float(util.min()),
            "median": float(np.median(util)), "max": float(util.max())}


def sustained_utilization(daily_gpu_hours: np.ndarray, span_s: float, total_gpu_hours: float,
                          gpus: float, breakeven: float,
                          breakeven_basis: str) -> IndicatorResult:
    """Utilization of ``gpus`` GPUs in every rolling 30/90/365-day window of complete days.

    A window's utilization is its GPU-hours over ``gpus * 24 * days``; each length
    reports min, median and max over its windows. The longest length the history
    covers is judged: met when its **median** window is at or above ``breakeven``
    (``grace plan``'s owning-beats-renting utilization). A history shorter than the
    shortest window (30 days) is unknown: a day or a week of busy GPUs says nothing of a
    sustained load. Demand above the fleet (``gpus`` smaller than what ran) is a fleet
    always full: judged at 100%, with the demand's own figure beside it.
    """
    name = Indicator.SUSTAINED_UTILIZATION
    threshold = (f"met when the median of the longest rolling window available is at or above "
                 f"the breakeven {_pct(breakeven)} ({breakeven_basis})")
    if total_gpu_hours <= 0 or span_s <= 0:
        return IndicatorResult(name, None, "unknown: the history holds no GPU-hours", threshold)
    windows = {str(d): _window_stats(daily_gpu_hours, d, gpus)
               for d in UTILIZATION_WINDOWS_DAYS if daily_gpu_hours.size >= d}
    figures: dict[str, Any] = {"fleet_gpus": gpus, "breakeven_utilization": breakeven,
                               "windows": windows, "complete_days": int(daily_gpu_hours.size)}
    if not windows:
        shortest = min(UTILIZATION_WINDOWS_DAYS)
        return IndicatorResult(
            name, None, f"unknown: the history holds {daily_gpu_hours.size} complete day(s) "
            f"({span_s / DAY_S:.1f} days in all); a sustained load needs at least a "
            f"{shortest}-day window: load a longer history", threshold, figures)
    longest = max(windows, key=int)
    demand = windows[longest]["median"]
    judged = min(1.0, demand)
    over = ""
    if demand > 1.0:
        over = (f"; demand exceeds the {gpus:g} GPUs given: the median window asks for "
                f"{demand * gpus:,.0f} GPUs, {demand:.1f}x as many, so the fleet is always "
                "full (--gpus larger, or leave it out to size it from the history)")
    spread = (f"; {longest}-day windows range {_pct(windows[longest]['min'])} to "
              f"{_pct(windows[longest]['max'])}" if not over else "")
    figures.update({"judged_window": longest, "judged_utilization": judged,
                    "demand_over_fleet": demand})
    evidence = (f"median {longest}-day window keeps {gpus:g} GPUs {_pct(judged)} busy against "
                f"a breakeven of {_pct(breakeven)}{spread}{over}")
    return IndicatorResult(name, judged >= breakeven, evidence, threshold, figures)


# ----------------------------------------------------------------- 5. predictability
_DONE_STATES = ("completed", "pass", "succeeded", "success", "done", "finished")


def _finished(job: HistoryJob) -> bool:
    """Runs that ended on their own: a failed or killed run's time says nothing of the job's."""
    return job.state is None or job.state.strip().lower().startswith(_DONE_STATES)


def _comparable_key(job: HistoryJob) -> tuple[str, ...]:
    """Same name and GPU count; without a name, same tenant, GPU count and declared class."""
    if job.name:
        return ("name", job.name, f"{job.gpus:g}")
    got = declared_class(job)
    wclass = got[0] if got else classify(max(1, math.ceil(job.gpus)), None, None)
    return ("tenant", job.tenant, f"{job.gpus:g}", str(wclass))


def predictability(history: History) -> IndicatorResult:
    """Spread of comparable finished jobs' run times (coefficient of variation: std / mean).

    The seed's "predictability requirements" are unmet needs when the same job's run time
    cannot be planned on. Classes here are declared ones only (recorded, or the name/limit
    rule): a class from the run time would group jobs by the very thing measured.
    Met when the GPU-hour-weighted mean CV of groups of at least
    ``PREDICTABILITY_MIN_GROUP`` is at or above ``PREDICTABILITY_CV``. Only groups that
    share a job name decide it: a group of unnamed jobs (same tenant, GPUs and class)
    mixes different work, so its spread is shown for reference and the indicator stays
    unknown when no named group exists (Philly: every job is unnamed).
    """
    name = Indicator.PREDICTABILITY
    min_group = int(PREDICTABILITY_MIN_GROUP.value)
    threshold = (f"met when comparable jobs' run times spread (CV, GPU-hour weighted) by >= "
                 f"{PREDICTABILITY_CV.value:.2f}, groups of >= {min_group} finished jobs")
    groups: dict[tuple[str, ...], list[HistoryJob]] = defaultdict(list)
    for j in history.jobs:
        if j.run_s > 0 and _finished(j):
            groups[_comparable_key(j)].append(j)
    kept = {k: v for k, v in groups.items() if len(v) >= min_group}
    if not kept:
        what = ("a cloud bill has no jobs" if not history.jobs else
                f"no {min_group} finished jobs share a name and GPU count, or a tenant, GPU "
                "count and class")
        return IndicatorResult(name, None, f"unknown: {what}; load a job log with job names "
                               "(sacct JobName, a csv name column)", threshold)
    named = {k: v for k, v in kept.items() if k[0] == "name"}
    deciding = named or kept
    cvs, weights = [], []
    for jobs in deciding.values():
        runs = [j.run_s for j in jobs]
        cvs.append(statistics.pstdev(runs) / statistics.fmean(runs))
        weights.append(sum(j.gpu_hours for j in jobs))
    weighted = float(np.average(cvs, weights=weights)) if sum(weights) > 0 else float(
        statistics.fmean(cvs))
    figures = {"groups": len(kept), "groups_by_name": len(named),
               "jobs_in_groups": sum(len(v) for v in deciding.values()),
               "weighted_cv": weighted, "median_cv": statistics.median(cvs)}
    spread = (f"{figures['jobs_in_groups']:,} finished jobs: run-time CV {weighted:.2f} "
              f"GPU-hour weighted, median {figures['median_cv']:.2f}")
    if not named:
        return IndicatorResult(
            name, None, f"unknown: no job names, so no comparable jobs; {len(kept):,} groups "
            f"by tenant x GPUs x class (different work mixed) show {spread}, for reference "
            "only; load a job log with job names (sacct JobName, a csv name column)",
            threshold, figures)
    unnamed = len(kept) - len(named)
    left_out = f"; {unnamed} unnamed group(s) left out" if unnamed else ""
    evidence = f"{len(named):,} groups of jobs sharing a name and GPU count, {spread}{left_out}"
    return IndicatorResult(name, weighted >= PREDICTABILITY_CV.value, evidence, threshold,
                           figures)


# ----------------------------------------------------------------- 6. data governance
_SENSITIVE_CLASSES = ("confidential", "regulated")


def data_governance(history: History, classification: str | None) -> IndicatorResult:
    """A declared data classification, or jobs the store flags ``sensitive_data``.

    Confidential or regulated data (or any job flagged sensitive) is met: Grace's own
    routes keep such jobs on-prem. Public or internal, with nothing flagged, is not.
    """
    name = Indicator.DATA_GOVERNANCE
    threshold = ("met when the data is declared confidential or regulated, or a job in the "
                 "history is flagged sensitive_data")
    flagged = sum(1 for j in history.jobs if j.sensitive_data)
    figures = {"data_classification": classification, "sensitive_jobs": flagged}
    if classification in _SENSITIVE_CLASSES or flagged:
        said = [f"data declared {classification}"] if classification in _SENSITIVE_CLASSES else []
        if flagged:
            said.append(f"{flagged:,} jobs flagged sensitive_data (kept on-prem by Grace's routes)")
        return IndicatorResult(name, True, "; ".join(said), threshold, figures)
    if classification is not None:
        return IndicatorResult(name, False, f"data declared {classification}; no job flagged "
                               "sensitive_data", threshold, figures)
    return IndicatorResult(name, None, "unknown: no data classification declared and no job "
                           "flagged sensitive; declare it with --data-classification "
                           "public|internal|confidential|regulated", threshold, figures)
