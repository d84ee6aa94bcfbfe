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

With a site (``grace plan --site-kw``, :mod:`grace.cost.site`) an option whose owned
GPUs the building cannot host (``on-prem``; ``hybrid`` when its owned part does not fit)
is refused: ``total_usd`` None and the reason in its note. ``staffing`` and
``rules_of_thumb`` (:mod:`grace.cost.rules_of_thumb`) set the price book's staffing and
the plan's answer beside the seeds' rules.

``owning_beats_renting_above_utilization`` is closed form. On-prem costs the
same whatever the utilization, renting on demand scales with it, so they are
equal at ``U* = (onprem_total - egress_total) / (gpus * 730 * months * on_demand)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from grace.cost.hybrid import hybrid_option
from grace.cost.hybrid_twin import owned_gpus_for
from grace.cost.pricebook import PriceBook, figure_sources, with_value
from grace.cost.rules_of_thumb import PlanFacts, cost_basis, rules_of_thumb
from grace.cost.site import SiteFit, SiteSpec, site_figures, site_fit
from grace.cost.tco import (
    HOURS_PER_MONTH,
    book_value_fraction,
    cloud_terms,
    commitment_billed_months,
    owned_cash_series,
    owned_rates,
    owned_resale_usd,
    owned_staff_usd_per_month,
    owned_usd_per_gpu_hour,
    staff_fte,
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


def refused(option: PlanOption, fit: SiteFit, what: str) -> PlanOption:
    """``option`` as a site that cannot host ``what`` leaves it: no total, no cash curve,
    the reason and how many nodes fit in its note; what it would cost in ``detail``."""
    return replace(option, total_usd=None, cumulative_usd=(), resale_usd=0.0,
                   note=f"the site cannot host {what}: {fit.reason}",
                   detail={**option.detail, "total_usd_if_hosted": option.total_usd or 0.0,
                           "site_nodes_fit": float(fit.nodes_fit),
                           "site_nodes_needed": float(fit.nodes_needed)})


def hybrid_site_fit(w: Workload, book: PriceBook, site: SiteSpec) -> SiteFit:
    """The site check for the hybrid's owned part (``owned_gpus_for``: whole servers)."""
    return site_fit(book, w.gpu, owned_gpus_for(w, book), site)


def options(w: Workload, book: PriceBook, site: SiteSpec | None = None) -> list[PlanOption]:
    """All six options, breakeven months filled in, in ``OPTION_NAMES`` order.

    With a ``site``, ``on-prem`` and ``hybrid`` are refused (``total_usd`` None) when the
    site cannot host their owned GPUs; the hybrid's twin is then not run. ``colo`` is
    another building and is never refused."""
    reference = on_demand_option(w, book)
    onprem = owned_option(w, book, "on-prem")
    hybrid_fit = hybrid_site_fit(w, book, site) if site is not None else None
    if hybrid_fit is not None and not hybrid_fit.feasible:
        hybrid = refused(PlanOption("hybrid", None, w.useful_gpu_hours), hybrid_fit,
                         f"the hybrid's {hybrid_fit.gpus:g} owned GPUs")
    else:
        hybrid = hybrid_option(w, book)
    if site is not None:
        fit = site_fit(book, w.gpu, w.gpus, site)
        if not fit.feasible:
            onprem = refused(onprem, fit, f"{w.gpus:g} GPUs")
    raw = [onprem, owned_option(w, book, "colo"), reference,
           commitment_option(w, book, "cloud-1y"), commitment_option(w, book, "cloud-3y"),
           hybrid]
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


def staffing(gpus: float, book: PriceBook) -> dict[str, Any]:
    """Engineers an owned cluster of ``gpus`` needs, by the price book and by the seed's
    rule ("Budget for 0.5 FTE of infrastructure engineering per 32 GPUs. Minimum."):
    ``fte = max(min_fte, gpus / gpus_per_fte)``, ``fte_by_seed_rule = 0.5 x gpus / 32``."""
    o = book.owned
    fte = staff_fte(gpus, o.gpus_per_fte.value, o.min_fte.value)
    seed = 0.5 * gpus / 32.0
    return {"gpus": gpus, "fte": fte, "fte_by_seed_rule": seed,
            "gpus_per_fte": o.gpus_per_fte.value, "min_fte": o.min_fte.value,
            "usd_per_fte_year": o.staff_usd_per_fte_year.value,
            "usd_per_month": owned_staff_usd_per_month(book, gpus),
            "usd_per_month_by_seed_rule": seed * o.staff_usd_per_fte_year.value / 12.0,
            "source": o.gpus_per_fte.source}


def plan_facts(w: Workload, book: PriceBook, opts: list[PlanOption]) -> PlanFacts:
    """The figures the rules of thumb are judged on. On-prem and colo are priced again
    here, as if the site could host them (a site refusal is not economics); the cheapest
    way to rent comes from ``opts``. The 12-month threshold is ``owning_threshold`` of
    the same workload cut to 12 months (a trace's profile dropped: the threshold does
    not depend on the utilization)."""
    reference = next(o for o in opts if o.name == "cloud-on-demand")
    onprem = owned_option(w, book, "on-prem")
    onprem = replace(onprem, breakeven_month=breakeven_month(onprem, reference))
    owned = min((onprem, owned_option(w, book, "colo")), key=lambda o: o.total_usd or 0.0)
    rent = min((o for o in opts if o.name.startswith("cloud-") and o.total_usd is not None),
               key=lambda o: o.total_usd or 0.0)
    w12 = Workload(w.gpus, w.gpu, w.utilization, 12, w.cloud, w.egress_gb_per_month)
    own12 = owned_option(w12, book, "on-prem")
    assert own12.total_usd is not None and owned.total_usd is not None
    rates = owned_rates(book, w.gpu, "on-prem")
    return PlanFacts(
        gpus=w.gpus, utilization=w.utilization, months=w.months,
        capex_per_gpu_usd=rates.capex_per_gpu_usd,
        running_usd_per_gpu_month=rates.opex_per_gpu_month_usd,
        staff_usd_per_month=owned_staff_usd_per_month(book, w.gpus),
        fte=staffing(w.gpus, book)["fte"],
        on_demand_usd_per_gpu_hour=book.offers(w.gpu, w.cloud).on_demand_usd_per_gpu_hour.value,
        owned_name=owned.name, owned_total_usd=owned.total_usd,
        rent_name=rent.name, rent_total_usd=rent.total_usd or 0.0,
        useful_gpu_hours=w.useful_gpu_hours,
        threshold_12m=owning_threshold(w12, own12.total_usd, book),
        threshold_12m_without_resale=owning_threshold(w12, own12.total_usd + own12.resale_usd,
                                                      book),
        resale_share_12m=book_value_fraction(12.0, rates.life_months, rates.residual_fraction),
        breakeven_month=onprem.breakeven_month)


def plan(w: Workload, book: PriceBook, site: SiteSpec | None = None) -> dict[str, Any]:
    """The planner's whole answer as JSON-able data, inputs echoed for recomputation by hand.

    The owning-beats-renting thresholds, the sensitivity table and the rules of thumb are
    the economics of owning, whether or not ``site`` can host it; a refused option says so
    in the table and in ``site``."""
    opts = options(w, book, site)
    thresholds = {name: owning_threshold(w, owned_option(w, book, name).total_usd or 0.0, book)
                  for name in ("on-prem", "colo")}
    used = {path: fig for path, fig in figure_sources(book).items()
            if path.startswith(("owned.", "hybrid.", f"clouds.{w.cloud}.",
                                f"gpus.{w.gpu}.server_capex", f"gpus.{w.gpu}.offers.{w.cloud}."))}
    if site is not None:
        used.update(site_figures(book))
    cheapest = min((o for o in opts if o.total_usd is not None), key=lambda o: o.total_usd or 0.0)
    facts = plan_facts(w, book, opts)
    extra: dict[str, Any] = {}
    if site is not None:
        extra["site"] = site_fit(book, w.gpu, w.gpus, site).to_json()
        extra["site"]["hybrid"] = hybrid_site_fit(w, book, site).to_json()
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
        "staffing": staffing(w.gpus, book),
        "rules_of_thumb": [r.to_json() for r in rules_of_thumb(facts)],
        "rules_of_thumb_basis": cost_basis(facts),
        **extra,
    }
