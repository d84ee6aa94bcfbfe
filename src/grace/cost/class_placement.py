"""The seeds' workload-class table, filled in for one history: which class runs where, at what cost.

Each job gets a class, in order of what the history holds:

1. the class it recorded (Grace's own store, a trace that declares one);
2. :func:`grace.sim.traces._common.classify` on its GPUs, name and recorded limit;
3. the same rule with its **run time** standing in for the limit.

Step 3 reads a true duration, which the twin and the scheduler never may: they
decide before a job ends. ``grace assess`` decides nothing for a job; it looks
back at what the jobs were, so what they really took is fair evidence here.

Per class (and, for classes the default routes let onto spot, split at
``max_spot_runtime_s``), each way to run it is priced per *useful* GPU-hour:

- ``owned``: ``tco.owned_usd_per_gpu_hour`` at the fleet's N GPUs, over the
  fleet's utilization U (owned GPUs idle the rest of the time and cost the same);
- ``reserved-1y`` / ``reserved-3y``: the reserved rate over U (a reservation sized
  like the fleet is paid whether busy or not);
- ``on-demand``: the on-demand rate (only busy hours are rented);
- ``spot``: the spot rate times ``tco.spot_billed_hours(1, preemptions, restart)``
  (the hours lost to preemption are billed too).

``usd_per_month`` is the class's GPU-hours per 730-hour month of the history
times each rate. ``runs_on`` is the cheapest the default bursting routes
(:class:`grace.spec.bursting.BurstingSpec`) allow: full runs never on spot, no
job whose limit (else run time) passes ``max_spot_runtime_s`` on spot, and owned
capacity only when the verdict says own.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from grace.cost.history import History, HistoryJob
from grace.cost.pricebook import PriceBook
from grace.cost.tco import HOURS_PER_MONTH, cloud_terms, owned_usd_per_gpu_hour, spot_billed_hours
from grace.sim.traces._common import classify
from grace.spec.bursting import BurstingSpec, OfferKind
from grace.spec.job import WorkloadClass

#: Bill lines carry no job, so no class: they get a row of their own.
UNCLASSIFIED = "unclassified"


class ClassBasis(StrEnum):
    """Where a job's class came from (counted per row, so the table says how it knows)."""

    RECORDED = "recorded"
    LIMIT = "limit"
    NAME = "name"
    RUN_TIME = "run-time"


class RunOn(StrEnum):
    """The ways to run a class that the table prices."""

    OWNED = "owned"
    ON_DEMAND = "on-demand"
    RESERVED_1Y = "reserved-1y"
    RESERVED_3Y = "reserved-3y"
    SPOT = "spot"


_OFFER_OF = {RunOn.ON_DEMAND: OfferKind.ON_DEMAND, RunOn.RESERVED_1Y: OfferKind.RESERVED_1Y,
             RunOn.RESERVED_3Y: OfferKind.RESERVED_3Y, RunOn.SPOT: OfferKind.SPOT}


def declared_class(job: HistoryJob) -> tuple[WorkloadClass, ClassBasis] | None:
    """The class from what was declared (recorded class, or name/limit through ``classify``);
    None when only the run time could tell."""
    if job.workload_class is not None:
        return job.workload_class, ClassBasis.RECORDED
    gpus = max(1, math.ceil(job.gpus))
    if job.limit_s is not None:
        return classify(gpus, job.limit_s, job.name), ClassBasis.LIMIT
    # without a name that says it, classify's no-limit rule differs at 1 and 8 GPUs
    if job.name and classify(1, None, job.name) is classify(8, None, job.name):
        return classify(gpus, None, job.name), ClassBasis.NAME
    return None


def lookback_class(job: HistoryJob) -> tuple[WorkloadClass, ClassBasis]:
    """The class for the table: declared, else ``classify`` with the run time as the limit."""
    got = declared_class(job)
    if got is not None:
        return got
    return classify(max(1, math.ceil(job.gpus)), job.run_s, job.name), ClassBasis.RUN_TIME


def spot_length_s(job: HistoryJob) -> float:
    """The length the spot rule reads: the recorded limit (what a live router sees), else the
    run time."""
    return job.limit_s if job.limit_s is not None else job.run_s


@dataclass(frozen=True)
class Rates:
    """$ per useful GPU-hour of each way to run, with what each came from (echoed)."""

    usd_per_useful_gpu_hour: dict[RunOn, float]
    fleet_gpus: float
    fleet_utilization: float
    sources: dict[str, float]


def rates(book: PriceBook, gpu: str, cloud: str, fleet_gpus: float,
          fleet_utilization: float) -> Rates:
    """Each option's $/useful GPU-hour as the module docstring defines it."""
    u = min(1.0, max(fleet_utilization, 1e-9))
    offers = book.offers(gpu, cloud)
    terms = cloud_terms(book, cloud)
    owned_rate = owned_usd_per_gpu_hour(book, gpu, "on-prem", fleet_gpus)
    out = {RunOn.OWNED: owned_rate / u, RunOn.ON_DEMAND: offers.on_demand_usd_per_gpu_hour.value}
    sources = {"owned_usd_per_gpu_hour": owned_rate,
               "on_demand_usd_per_gpu_hour": offers.on_demand_usd_per_gpu_hour.value}
    for run_on, fig in ((RunOn.RESERVED_1Y, offers.reserved_1y_usd_per_gpu_hour),
                        (RunOn.RESERVED_3Y, offers.reserved_3y_usd_per_gpu_hour)):
        if fig is not None:
            out[run_on] = fig.value / u
            sources[f"{run_on}_usd_per_gpu_hour"] = fig.value
    if offers.spot_usd_per_gpu_hour is not None:
        billed = spot_billed_hours(1.0, terms.spot_preemptions_per_node_hour.value,
                                   terms.restart_overhead_hours.value)
        out[RunOn.SPOT] = offers.spot_usd_per_gpu_hour.value * billed
        sources["spot_usd_per_gpu_hour"] = offers.spot_usd_per_gpu_hour.value
        sources["spot_billed_hours_per_useful_hour"] = billed
    return Rates(out, fleet_gpus, u, sources)


def _allowed(wclass: WorkloadClass | None, long_jobs: bool, own: bool,
             spec: BurstingSpec) -> tuple[list[RunOn], list[tuple[str, str]]]:
    """Options the default routes allow for a row, and why the others are out: each reason
    as (a few words for the 80-column table, the sentence for the JSON and the report)."""
    out: list[tuple[str, str]] = []
    if wclass is None:  # a bill line: no class, no run length
        offers = [OfferKind.ON_DEMAND, OfferKind.RESERVED_1Y, OfferKind.RESERVED_3Y]
        out.append(("no spot: run lengths unknown",
                    "spot is out: a bill line says nothing about run lengths, so nothing shows "
                    "its work would survive preemption"))
    else:
        offers = list(spec.routes[wclass].offers)
        if OfferKind.SPOT not in offers:
            out.append((f"no spot: {wclass} route",
                        f"spot is out: the default route for {wclass} never uses spot"))
        elif long_jobs:
            offers.remove(OfferKind.SPOT)
            out.append((f"no spot: over {spec.max_spot_runtime_s / 3600:g} h",
                        f"spot is out: these jobs run over {spec.max_spot_runtime_s / 3600:g} h "
                        "(bursting's max_spot_runtime_s)"))
        if OfferKind.ON_DEMAND not in offers:
            out.append(("no on-demand: reservations only",
                        f"on-demand is out: the default route for {wclass} allows only "
                        "reservations"))
    allowed = [r for r, k in _OFFER_OF.items() if k in offers]
    if own:
        allowed.insert(0, RunOn.OWNED)
    else:
        out.append(("no owned: verdict",
                    "owned is out: the verdict does not say own"))
    return allowed, out


@dataclass
class _Row:
    label: str
    wclass: WorkloadClass | None
    runtime: str
    long_jobs: bool
    jobs: int = 0
    gpu_hours: float = 0.0
    multinode_gpu_hours: float = 0.0
    run_hours: list[float] | None = None
    basis: dict[str, int] | None = None


def _rows(history: History, spec: BurstingSpec) -> list[_Row]:
    limit = spec.max_spot_runtime_s
    rows: dict[tuple[str, str], _Row] = {}
    for job in history.jobs:
        wclass, basis = lookback_class(job)
        spot_route = OfferKind.SPOT in spec.routes[wclass].offers
        long_job = spot_length_s(job) > limit
        runtime = ("any" if not spot_route else
                   f"> {limit / 3600:g} h" if long_job else f"<= {limit / 3600:g} h")
        key = (str(wclass), runtime)
        row = rows.setdefault(key, _Row(str(wclass), wclass, runtime,
                                        long_job or not spot_route, run_hours=[], basis={}))
        row.jobs += 1
        row.gpu_hours += job.gpu_hours
        if history.nodes_of(job) > 1:
            row.multinode_gpu_hours += job.gpu_hours
        assert row.run_hours is not None and row.basis is not None
        row.run_hours.append(job.run_s / 3600.0)
        row.basis[str(basis)] = row.basis.get(str(basis), 0) + 1
    if history.usage:
        bill = _Row(UNCLASSIFIED, None, "unknown", True, run_hours=[], basis={})
        bill.gpu_hours = sum(u.gpu_hours for u in history.usage)
        rows[(UNCLASSIFIED, "unknown")] = bill
    order = {c: i for i, c in enumerate([*WorkloadClass, UNCLASSIFIED])}
    return sorted(rows.values(), key=lambda r: (order[r.label], r.runtime))


def _why(row: _Row, best: RunOn, priced: dict[RunOn, float], allowed: list[RunOn],
         excluded: Iterable[tuple[str, str]]) -> tuple[str, str]:
    """(a short reason for the table, the whole reason)."""
    others = sorted((priced[r], r) for r in allowed if r is not best)
    first = (f"{best} is the cheapest the default routes allow for "
             f"{row.label} ({row.runtime}) at ${priced[best]:.2f} per useful GPU-hour")
    short = f"${priced[best]:.2f}/GPU-h"
    if others:
        first += f", against {others[0][1]} at ${others[0][0]:.2f}"
        short += f" < {others[0][1]} ${others[0][0]:.2f}"
    excluded = list(excluded)
    return ("; ".join([short, *(s for s, _ in excluded)]),
            "; ".join([first, *(w for _, w in excluded)]) + ".")


def placement_by_class(history: History, book: PriceBook, gpu: str, cloud: str,
                       fleet_gpus: float, fleet_utilization: float, own: bool,
                       spec: BurstingSpec | None = None) -> tuple[list[dict[str, Any]], Rates]:
    """The class table's rows (see the module docstring) and the rates they used."""
    spec = spec or BurstingSpec()
    r = rates(book, gpu, cloud, fleet_gpus, fleet_utilization)
    total = history.gpu_hours
    months = max(history.span_s / 3600.0 / HOURS_PER_MONTH, 1e-9)
    out = []
    for row in _rows(history, spec):
        allowed, excluded = _allowed(row.wclass, row.long_jobs and row.wclass is not None,
                                     own, spec)
        allowed = [a for a in allowed if a in r.usd_per_useful_gpu_hour]
        per_month = row.gpu_hours / months
        priced = {k: v for k, v in r.usd_per_useful_gpu_hour.items()}
        best = min(allowed, key=lambda a: priced[a])
        short, why = _why(row, best, priced, allowed, excluded)
        out.append({
            "class": row.label, "runtime": row.runtime, "jobs": row.jobs,
            "gpu_hours": row.gpu_hours, "share": row.gpu_hours / total if total > 0 else 0.0,
            "multinode_share": (row.multinode_gpu_hours / row.gpu_hours
                                if row.gpu_hours > 0 and row.wclass is not None else None),
            "median_run_hours": statistics.median(row.run_hours) if row.run_hours else None,
            "class_basis": row.basis or {},
            "gpu_hours_per_month": per_month,
            "usd_per_month": {str(k): per_month * v for k, v in priced.items()},
            "allowed": [str(a) for a in allowed],
            "runs_on": str(best),
            "why": why,
            "why_short": short,
        })
    return out, r

