"""``grace assess``: has this team reached the point where owning GPUs pays?

One history (jobs and/or cloud bill lines) is judged on the seed's six
indicators (:mod:`grace.cost.indicators`), against a fleet of N GPUs (given, or
sized from the history's demand, :func:`grace.cost.demand.fleet_size`). The
verdict is in the seed's terms: several indicators met (``SEVERAL_MET``) is
"past the point", one or two "on the edge", none "stay on shared capacity";
unknown indicators are counted and named, never read as "no".

The dollar figure behind it is ``grace plan`` run on the history's own monthly
demand (``_dollars``): 730-hour months from the first submission, the complete
ones repeated over the hardware's amortization life when the history is
shorter (a plan over a few months credits most of the capex back at resale and
flatters owning), each month capped at N x 730 GPU-hours (the fleet) with the
excess rented on demand in *every* option, so owning and renting serve the
same demand. The class table is :func:`grace.cost.class_placement.placement_by_class`.

Every figure recomputes from ``inputs`` in the JSON (tests do so).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from grace.cost.class_placement import placement_by_class
from grace.cost.demand import daily_gpu_hours, end_s, fleet_size
from grace.cost.history import DAY_S, MONTH_S, History
from grace.cost.indicators import (
    IndicatorResult,
    Threshold,
    all_thresholds,
    capacity_difficulty,
    data_governance,
    long_multinode_runs,
    predictability,
    scaling_efficiency,
    sustained_utilization,
)
from grace.cost.plan import owned_option, owning_threshold, plan
from grace.cost.pricebook import PriceBook, figure_sources
from grace.cost.tco import HOURS_PER_MONTH
from grace.cost.trace_workload import tile
from grace.cost.workload import Workload
from grace.spec.bursting import BurstingSpec


class DataClassification(StrEnum):
    """The most sensitive data the team's training touches, as the team declares it."""

    PUBLIC = "public"
    INTERNAL = "internal"
    CONFIDENTIAL = "confidential"
    REGULATED = "regulated"


class VerdictLevel(StrEnum):
    """The seed's three answers."""

    PAST_THE_POINT = "past-the-point"
    ON_THE_EDGE = "on-the-edge"
    STAY_SHARED = "stay-shared"


SEVERAL_MET = Threshold(
    3, "indicators met",
    "the seed: 'organizations meeting several of these are usually past the point'; ASSUMPTION: "
    "several = 3 or more of the 6 (one or two is 'some': on the edge)")

#: The options of ``grace plan`` that rent rather than own.
CLOUD_OPTIONS = ("cloud-on-demand", "cloud-1y", "cloud-3y")


@dataclass(frozen=True)
class AssessInputs:
    """What the user tells ``grace assess`` besides the history.

    ``gpus``: the fleet to judge against (None: sized from the history's demand);
    ``scaling``: the parsed JSON ``grace bench scaling`` writes.
    """

    gpu: str = "H100-SXM"
    cloud: str = "hyperscaler"
    gpus: float | None = None
    scaling: dict[str, Any] | None = None
    data_classification: DataClassification | None = None


def breakeven(book: PriceBook, gpu: str, cloud: str, gpus: float) -> dict[str, Any]:
    """``grace plan``'s owning-beats-renting utilization for ``gpus`` over one amortization life:
    ``onprem_total / (gpus * 730 * life_months * on_demand)`` (no egress)."""
    months = max(1, round(book.owned.amortization_years.value * 12))
    w = Workload(gpus, gpu, 1.0, months, cloud)  # owning costs the same at any utilization
    onprem = owned_option(w, book, "on-prem")
    assert onprem.total_usd is not None
    return {"utilization": owning_threshold(w, onprem.total_usd, book), "gpus": gpus,
            "months": months, "onprem_total_usd": onprem.total_usd,
            "on_demand_usd_per_gpu_hour": book.offers(gpu, cloud).on_demand_usd_per_gpu_hour.value,
            "formula": "onprem_total_usd / (gpus * 730 * months * on_demand_usd_per_gpu_hour)"}


def verdict(results: list[IndicatorResult]) -> tuple[VerdictLevel, str]:
    """The seed's answer from how many indicators are met, naming the unknown ones."""
    met = [str(r.name) for r in results if r.met]
    unknown = [str(r.name) for r in results if r.met is None]
    n = len(met)
    if n >= SEVERAL_MET.value:
        level, words = VerdictLevel.PAST_THE_POINT, (
            "several indicators met: past the point where a private cluster usually pays")
    elif n > 0:
        level, words = VerdictLevel.ON_THE_EDGE, (
            "some indicators met: on the edge; watch the unmet ones")
    else:
        level, words = VerdictLevel.STAY_SHARED, (
            "no indicator met: stay on shared capacity")
    text = f"{n} of {len(results)} met"
    if met:
        text += f" ({', '.join(met)})"
    text += f", {len(unknown)} unknown"
    if unknown:
        text += f" ({', '.join(unknown)})"
    return level, f"{text}: {words}"


def _demand_profile(history: History, months: int) -> tuple[tuple[float, ...], str]:
    """Monthly GPU-hours for the plan, and how they were made (see the module docstring)."""
    raw = history.gpu_hours_by_period(MONTH_S)
    end = end_s(history)
    complete = int(end // MONTH_S)
    if complete >= 1:
        base = tuple(raw[:complete])
        how = (f"{complete} complete 730-hour month(s) of the history"
               + ("" if len(raw) == complete else ", the part month after them left out"))
    else:
        base = (history.gpu_hours * MONTH_S / end,)
        how = (f"the history's {end / DAY_S:.1f} days scaled to one 730-hour month "
               f"({history.gpu_hours:,.0f} GPU-hours x 730 h / {end / 3600:,.1f} h)")
    if len(base) < months:
        return tile(base, months), how + f", repeated over {months} months (one amortization life)"
    return base, how


def _dollars(history: History, inputs: AssessInputs, gpus: float,
             book: PriceBook) -> dict[str, Any]:
    life = max(1, round(book.owned.amortization_years.value * 12))
    if history.gpu_hours <= 0 or end_s(history) <= 0:
        return {"note": "the history holds no GPU-hours: nothing to price"}
    demand, how = _demand_profile(history, life)
    cap = gpus * HOURS_PER_MONTH
    useful = tuple(min(x, cap) for x in demand)
    overflow = tuple(x - u for x, u in zip(demand, useful, strict=True))
    rate = book.offers(inputs.gpu, inputs.cloud).on_demand_usd_per_gpu_hour.value
    over_usd = sum(overflow) * rate
    w = Workload.from_profile(gpus, inputs.gpu, useful, inputs.cloud)
    p = plan(w, book)
    opts = []
    for o in p["options"]:
        total = None if o["total_usd"] is None else o["total_usd"] + over_usd
        opts.append({"name": o["name"], "plan_total_usd": o["total_usd"], "total_usd": total,
                     "breakeven_month": o["breakeven_month"], "note": o["note"]})
    by_name = {o["name"]: o for o in opts}
    owning = by_name["on-prem"]
    clouds = [by_name[n] for n in CLOUD_OPTIONS if by_name[n]["total_usd"] is not None]
    cheapest = min(clouds, key=lambda o: o["total_usd"])
    saves = cheapest["total_usd"] - owning["total_usd"]
    months = len(demand)
    sentence = (f"owning {gpus:g} {inputs.gpu} on-prem for {months} months "
                + (f"saves ${saves:,.0f}" if saves >= 0 else f"costs ${-saves:,.0f} more")
                + f" against {cheapest['name']}, the cheapest cloud option "
                f"(${owning['total_usd']:,.0f} vs ${cheapest['total_usd']:,.0f})")
    if over_usd > 0:
        sentence += (f"; {sum(overflow):,.0f} GPU-hours above {gpus:g} GPUs rented on demand "
                     f"in every option (${over_usd:,.0f})")
    models: dict[str, float] = {}
    for gpu_model, gh in ([(j.gpu_model, j.gpu_hours) for j in history.jobs]
                          + [(u.gpu_model, u.gpu_hours) for u in history.usage]):
        key = gpu_model or "unrecorded"
        models[key] = models.get(key, 0.0) + gh
    others = sorted(k for k in models if k != inputs.gpu)
    return {
        "gpus": gpus, "gpu": inputs.gpu, "cloud": inputs.cloud, "months": months,
        "profile_basis": how,
        "gpu_hours_by_recorded_model": models,
        "gpu_model_note": (f"GPU-hours recorded on {', '.join(others)} are priced as "
                           f"{inputs.gpu} GPU-hours (the cluster that would replace them)"
                           if others else ""),
        "demand_gpu_hours_by_month": list(demand),
        "useful_gpu_hours_by_month": list(useful),
        "overflow_gpu_hours_by_month": list(overflow),
        "overflow_usd_per_gpu_hour": rate, "overflow_usd": over_usd,
        "overflow_rule": "months above gpus x 730 GPU-hours: the excess rented on demand in "
                         "every option, added to each plan total",
        "utilization": w.utilization,
        "options": opts,
        "owning": {"option": "on-prem", "total_usd": owning["total_usd"],
                   "breakeven_month": owning["breakeven_month"]},
        "cheapest_cloud": {"option": cheapest["name"], "total_usd": cheapest["total_usd"]},
        "owning_saves_usd": saves,
        "owning_saves_usd_per_month": saves / months,
        "owning_beats_renting_above_utilization": p["owning_beats_renting_above_utilization"],
        "owning_beats_renting_above_utilization_unclamped":
            p["owning_beats_renting_above_utilization_unclamped"]["on-prem"],
        "sentence": sentence,
    }


def _history_echo(history: History) -> dict[str, Any]:
    return {"source": history.source, "format": str(history.format), "jobs": len(history.jobs),
            "bill_lines": len(history.usage), "rows": history.rows,
            "skipped": dict(history.skipped), "gpus_per_node": history.gpus_per_node,
            "span_days": history.span_s / DAY_S, "gpu_hours": history.gpu_hours}


def _scaling_echo(scaling: dict[str, Any] | None) -> dict[str, Any] | None:
    if scaling is None:
        return None
    keep = ("efficiency", "ranks", "base_ranks", "batch_size", "backend", "host", "cpus")
    return {k: scaling[k] for k in keep if k in scaling}


def _prices_used(book: PriceBook, gpu: str, cloud: str) -> dict[str, Any]:
    return {path: fig for path, fig in figure_sources(book).items()
            if path.startswith(("owned.", f"clouds.{cloud}.", f"gpus.{gpu}.server_capex",
                                f"gpus.{gpu}.offers.{cloud}."))}


def assess(history: History, inputs: AssessInputs, book: PriceBook) -> dict[str, Any]:
    """The whole assessment as JSON-able data (keys in the module docstring and docs/cost.md).

    Raises ValueError naming the input and the fix for a GPU or cloud the price book
    lacks, a fleet of no GPUs or a scaling JSON of the wrong shape.
    """
    book.offers(inputs.gpu, inputs.cloud)  # a clear error for a GPU or cloud not priced
    node_gpus = book.gpu(inputs.gpu).node_gpus
    fleet = fleet_size(history, inputs.gpus, node_gpus)
    n = fleet.gpus
    be = breakeven(book, inputs.gpu, inputs.cloud, n)
    be_basis = (f"grace plan's owning-beats-renting utilization for {n:g} {inputs.gpu} over "
                f"{be['months']} months")
    classification = (None if inputs.data_classification is None
                      else str(inputs.data_classification))
    results = [
        long_multinode_runs(history),
        scaling_efficiency(history, inputs.scaling),
        capacity_difficulty(history),
        sustained_utilization(daily_gpu_hours(history), history.span_s, history.gpu_hours, n,
                              be["utilization"], be_basis),
        predictability(history),
        data_governance(history, classification),
    ]
    level, text = verdict(results)
    dollars = _dollars(history, inputs, n, book)
    warnings = history_warnings(history)
    if "sentence" in dollars:
        if history.span_s < MIN_PRICED_SPAN_S:
            dollars["caveat"] = (f"from {history.span_s / DAY_S:.1f} days of history, repeated "
                                 "to a whole amortization life: too short to size a purchase")
            text += f"; {dollars['sentence']} ({dollars['caveat']})"
        else:
            text += f"; {dollars['sentence']}"
    span_h = history.span_s / 3600.0
    utilization = min(1.0, history.gpu_hours / (n * span_h)) if span_h > 0 else 0.0
    spec = BurstingSpec()
    rows, rates = placement_by_class(history, book, inputs.gpu, inputs.cloud, n, utilization,
                                     level is VerdictLevel.PAST_THE_POINT, spec)
    thresholds = all_thresholds()
    thresholds["several_met"] = SEVERAL_MET.to_json()
    return {
        "inputs": {
            "gpu": inputs.gpu, "cloud": inputs.cloud, "gpus": inputs.gpus,
            "fleet": fleet.to_json(),
            "data_classification": classification,
            "scaling": _scaling_echo(inputs.scaling),
            "history": _history_echo(history),
            "hours_per_month": HOURS_PER_MONTH,
            "breakeven": be,
            "thresholds": thresholds,
            "bursting": {"max_spot_runtime_s": spec.max_spot_runtime_s,
                         "routes": {str(c): [str(o) for o in r.offers]
                                    for c, r in spec.routes.items()},
                         "source": "grace.spec.bursting defaults"},
            "placement": {"fleet_utilization": rates.fleet_utilization,
                          "fleet_utilization_formula": "history gpu_hours / (gpus x span hours)",
                          "owned_included": level is VerdictLevel.PAST_THE_POINT,
                          "rates": rates.sources,
                          "usd_per_useful_gpu_hour": {str(k): v for k, v in
                                                      rates.usd_per_useful_gpu_hour.items()}},
            "prices": _prices_used(book, inputs.gpu, inputs.cloud),
        },
        "indicators": [r.to_json() for r in results],
        "met_count": sum(1 for r in results if r.met),
        "unknown_count": sum(1 for r in results if r.met is None),
        "verdict": text,
        "verdict_level": str(level),
        "dollars": dollars,
        "placement_by_class": rows,
        "warnings": warnings,
    }


#: A history shorter than the shortest utilization window (30 days) prices a purchase
#: from too little: its dollar figure carries a caveat.
MIN_PRICED_SPAN_S = 30 * DAY_S


def history_warnings(history: History, now: float | None = None) -> list[str]:
    """What a reader should know before trusting the figures: jobs or bill lines dated after
    ``now`` (a history with calendar dates), which only a clock or unit mistake makes."""
    import time

    out: list[str] = []
    origin = history.origin_epoch_s
    if origin is None:
        return out
    at = time.time() if now is None else now
    latest = max([j.submit_s for j in history.jobs] + [u.start_s for u in history.usage],
                 default=0.0)
    if origin + latest > at + DAY_S:
        out.append(f"the history runs to {(origin + latest - at) / DAY_S:,.0f} days after "
                   "today: check the dates (a clock or time zone mistake?)")
    return out

