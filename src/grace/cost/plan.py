"""``grace plan``: own, colocate, rent (each commitment level) or mix, for one workload.

Every option delivers the same useful GPU-hours (``Workload.useful_gpu_hours``)
and is costed as cash spent month by month, so the cumulative curves, the
totals and the breakeven months all come from one series per option:

- ``on-prem`` / ``colo``: N GPUs bought at month 0 (again at the end of each
  life), running costs every month (``tco.owned_cash_series``), and the hardware
  sold at book value after the last month (``resale_usd``, ``tco.owned_resale_usd``):
  the total is the cash spent less the resale;
- ``cloud-on-demand``: only the useful GPU-hours rented, plus egress;
- ``cloud-1y`` / ``cloud-3y``: N GPUs reserved for whole terms, plus egress;
  the remaining term is billed in the last month of the workload;
- ``hybrid``: :func:`grace.cost.hybrid.hybrid_option`.

``owning_beats_renting_above_utilization`` is closed form. On-prem costs the
same whatever the utilization, renting on demand scales with it, so they are
equal at ``U* = (onprem_total - egress_total) / (gpus * 730 * months * on_demand)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from grace.cost.hybrid import hybrid_option
from grace.cost.pricebook import PriceBook, figure_sources, with_value
from grace.cost.tco import (
    HOURS_PER_MONTH,
    cloud_terms,
    commitment_billed_months,
    owned_cash_series,
    owned_rates,
    owned_resale_usd,
    owned_staff_usd_per_month,
    owned_usd_per_gpu_hour,
)
from grace.cost.workload import PlanOption, Workload

OPTION_NAMES = ("on-prem", "colo", "cloud-on-demand", "cloud-1y", "cloud-3y", "hybrid")
_TERMS = {"cloud-1y": ("reserved_1y_usd_per_gpu_hour", 12),
          "cloud-3y": ("reserved_3y_usd_per_gpu_hour", 36)}


def owned_option(w: Workload, book: PriceBook, site: str) -> PlanOption:
    rates = owned_rates(book, w.gpu, site)
    staff = owned_staff_usd_per_month(book, w.gpus)
    cumulative = owned_cash_series(w.months, w.gpus, rates, staff)
    resale = owned_resale_usd(w.months, w.gpus, rates)
    detail = {"capex_per_gpu_usd": rates.capex_per_gpu_usd,
              "opex_per_gpu_month_usd": rates.opex_per_gpu_month_usd,
              "node_kw": rates.node_kw, "life_months": rates.life_months,
              "staff_usd_per_month": staff,
              "steady_state_usd_per_gpu_hour": owned_usd_per_gpu_hour(book, w.gpu, site, w.gpus)}
    return PlanOption(site, cumulative[-1] - resale, w.useful_gpu_hours, cumulative,
                      detail=detail, resale_usd=resale)


def _egress_per_month(w: Workload, book: PriceBook) -> float:
    return w.egress_gb_per_month * cloud_terms(book, w.cloud).egress_usd_per_gb.value


def on_demand_option(w: Workload, book: PriceBook) -> PlanOption:
    """Month m adds ``useful_m * on_demand + egress_per_month`` (``useful_m`` the same each
    month for a summary workload, month m of the trace's profile otherwise)."""
    rate = book.offers(w.gpu, w.cloud).on_demand_usd_per_gpu_hour.value
    egress = _egress_per_month(w, book)
    cumulative, spent = [], 0.0
    for useful in w.useful_by_month:
        spent += useful * rate + egress
        cumulative.append(spent)
    return PlanOption("cloud-on-demand", cumulative[-1], w.useful_gpu_hours, tuple(cumulative),
                      detail={"usd_per_gpu_hour": rate,
                              "usd_per_month": cumulative[-1] / w.months})


def commitment_option(w: Workload, book: PriceBook, name: str) -> PlanOption:
    """``gpus * 730 * rate`` a month, for ``commitment_billed_months`` (the rest paid at the end)."""
    field, term = _TERMS[name]
    fig = getattr(book.offers(w.gpu, w.cloud), field)
    if fig is None:
        return PlanOption(name, None, w.useful_gpu_hours,
                          note=f"{w.cloud} offers no {term // 12}-year commitment for {w.gpu}")
    reserve = w.gpus * HOURS_PER_MONTH * fig.value
    egress = _egress_per_month(w, book)
    billed = commitment_billed_months(w.months, term)
    cumulative = [m * (reserve + egress) for m in range(1, w.months + 1)]
    cumulative[-1] = billed * reserve + w.months * egress
    note = (f"commitment billed for {billed} months" if billed > w.months else "")
    return PlanOption(name, cumulative[-1], w.useful_gpu_hours, tuple(cumulative), note=note,
                      detail={"usd_per_gpu_hour": fig.value, "billed_months": billed,
                              "reserve_usd_per_month": reserve})


def breakeven_month(option: PlanOption, reference: PlanOption) -> int | None:
    """First month whose cumulative cash is at or below renting on demand; None if never."""
    if option.name == reference.name or option.total_usd is None:
        return None
    for m, (mine, theirs) in enumerate(zip(option.cumulative_usd, reference.cumulative_usd,
                                           strict=True), start=1):
        if mine <= theirs:
            return m
    return None


def owning_threshold(w: Workload, owned_total: float, book: PriceBook) -> float:
    """Utilization at which owning costs what renting the same useful hours on demand does:
    ``(owned_total - egress_total) / (gpus * 730 * months * on_demand)``. May exceed 1."""
    rate = book.offers(w.gpu, w.cloud).on_demand_usd_per_gpu_hour.value
    egress_total = _egress_per_month(w, book) * w.months
    return (owned_total - egress_total) / (w.gpus * HOURS_PER_MONTH * w.months * rate)


def options(w: Workload, book: PriceBook) -> list[PlanOption]:
    """All six options, breakeven months filled in, in ``OPTION_NAMES`` order."""
    reference = on_demand_option(w, book)
    raw = [owned_option(w, book, "on-prem"), owned_option(w, book, "colo"), reference,
           commitment_option(w, book, "cloud-1y"), commitment_option(w, book, "cloud-3y"),
           hybrid_option(w, book)]
    return [replace(o, breakeven_month=breakeven_month(o, reference)) for o in raw]


@dataclass(frozen=True)
class SensitivityRow:
    """One input moved to its low and its high, everything else at its value."""

    input: str
    value: float
    low: float
    high: float
    threshold_at_value: float
    threshold_at_low: float
    threshold_at_high: float
    onprem_usd_per_useful_gpu_hour_at_low: float
    onprem_usd_per_useful_gpu_hour_at_high: float

    @property
    def effect(self) -> float:
        """How far the owning-beats-renting utilization moves: the larger of the two swings."""
        return max(abs(self.threshold_at_low - self.threshold_at_value),
                   abs(self.threshold_at_high - self.threshold_at_value))

    def to_json(self) -> dict[str, float | str]:
        return {"input": self.input, "value": self.value, "low": self.low, "high": self.high,
                "owning_beats_renting_above_utilization_at_low": self.threshold_at_low,
                "owning_beats_renting_above_utilization_at_high": self.threshold_at_high,
                "onprem_usd_per_useful_gpu_hour_at_low": self.onprem_usd_per_useful_gpu_hour_at_low,
                "onprem_usd_per_useful_gpu_hour_at_high":
                    self.onprem_usd_per_useful_gpu_hour_at_high,
                "effect": self.effect}


def _relevant(path: str, w: Workload) -> bool:
    """Inputs that can move on-prem versus on-demand for this GPU and cloud."""
    return (path.startswith("owned.") and "colo_rent" not in path) or path in (
        f"gpus.{w.gpu}.server_capex_per_node_usd",
        f"gpus.{w.gpu}.offers.{w.cloud}.on_demand_usd_per_gpu_hour",
        f"clouds.{w.cloud}.egress_usd_per_gb")


def _onprem_answer(w: Workload, book: PriceBook) -> tuple[float, float]:
    onprem = owned_option(w, book, "on-prem")
    assert onprem.total_usd is not None
    return owning_threshold(w, onprem.total_usd, book), onprem.total_usd / w.useful_gpu_hours


def sensitivity(w: Workload, book: PriceBook) -> list[SensitivityRow]:
    """Each relevant input moved to its low and high; rows that move nothing are left out,
    the rest sorted by effect, largest first."""
    base, _ = _onprem_answer(w, book)
    rows = []
    for path, fig in figure_sources(book).items():
        if not _relevant(path, w) or fig["low"] == fig["high"]:
            continue
        t_lo, c_lo = _onprem_answer(w, with_value(book, path, fig["low"]))
        t_hi, c_hi = _onprem_answer(w, with_value(book, path, fig["high"]))
        row = SensitivityRow(path, fig["value"], fig["low"], fig["high"], base, t_lo, t_hi,
                             c_lo, c_hi)
        if row.effect > 1e-12:
            rows.append(row)
    return sorted(rows, key=lambda r: (-r.effect, r.input))


def plan(w: Workload, book: PriceBook) -> dict[str, Any]:
    """The planner's whole answer as JSON-able data, inputs echoed for recomputation by hand."""
    opts = options(w, book)
    by_name = {o.name: o for o in opts}
    thresholds = {site: owning_threshold(w, by_name[site].total_usd or 0.0, book)
                  for site in ("on-prem", "colo")}
    used = {path: fig for path, fig in figure_sources(book).items()
            if path.startswith(("owned.", "hybrid.", f"clouds.{w.cloud}.",
                                f"gpus.{w.gpu}.server_capex", f"gpus.{w.gpu}.offers.{w.cloud}."))}
    cheapest = min((o for o in opts if o.total_usd is not None), key=lambda o: o.total_usd or 0.0)
    return {
        "inputs": {"workload": {"gpus": w.gpus, "gpu": w.gpu, "utilization": w.utilization,
                                "months": w.months, "cloud": w.cloud,
                                "egress_gb_per_month": w.egress_gb_per_month,
                                "hours_per_month": HOURS_PER_MONTH,
                                "useful_gpu_hours": w.useful_gpu_hours,
                                "useful_gpu_hours_by_month": list(w.useful_by_month)},
                   "node_gpus": book.gpu(w.gpu).node_gpus,
                   "prices": used},
        "options": [o.to_json() for o in opts],
        "cheapest": cheapest.name,
        "owning_beats_renting_above_utilization":
            thresholds["on-prem"] if thresholds["on-prem"] <= 1.0 else None,
        "owning_beats_renting_above_utilization_unclamped": thresholds,
        "sensitivity": [r.to_json() for r in sensitivity(w, book)],
    }
