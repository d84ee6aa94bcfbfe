"""``grace lifecycle``: a month-by-month capacity plan from what a team actually ran.

The GRACE model's lifecycle pillar "ties procurement schedules to utilization curves":
from a history's monthly GPU-hours and a growth (given, or fitted:
``grace.cost.lifecycle_demand``), for plan months 1..N (month 0 is the end of the history):

1. **Capacity** is the GPUs owned today (``OwnedGroup``: model, count, age) less the
   generations retired, plus the tranches delivered. A GPU counts as one GPU whatever its
   generation (demand is in the history's own GPU-hours).
2. **Retirement**: each owned generation is retired (or repurposed) in the first month its
   cost per useful GPU-hour passes the newer generation's (``lifecycle_costs.retirement``);
   its GPUs leave capacity and stop costing that month, or in month ``lead`` if that is
   later: not before a replacement ordered today could arrive.
3. **Tranches**: at the first month ``c`` demand (GPUs needed at the target utilization)
   exceeds capacity, a tranche is sized in whole nodes of ``gpu`` to cover the largest
   shortfall from ``c`` through ``c + cover_months - 1``; buy, lease and a 1-year cloud
   commitment are each costed from ``c`` to the horizon and one is chosen
   (``lifecycle_costs.choose``); a buy or a lease is ordered ``lead`` months before ``c``
   (``lifecycle.lead_time_weeks`` in months, rounded up), a commitment when it is needed.
   Repeat until no month is short. A tranche that cannot arrive by ``c`` (``c < lead``) is
   ordered at month 0 and marked late; demand it leaves unserved is rented on demand.
4. **Cash**: every month's spending (running costs of owned GPUs, purchases in their
   delivery month, lease payments, commitments, on-demand bridging) summed; all are
   non-negative, so the curve never falls. A bought tranche's resale after the horizon is
   a credit reported beside it, not a drop in the curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from grace.cost.lifecycle_costs import (
    OptionCost,
    Retirement,
    TrancheKind,
    buy_cost,
    choose,
    cloud_cost,
    lead_months,
    lease_cost,
    new_rate,
    retirement,
    running_cost,
    staff_per_gpu_month,
)
from grace.cost.lifecycle_demand import MAX_RESIDUAL_SD, MIN_HISTORY_MONTHS, Demand, project
from grace.cost.pricebook import PriceBook, figure_sources
from grace.cost.tco import HOURS_PER_MONTH
from grace.spec.gpus import BUILTIN_GPUS

#: a tranche covers the shortfall this many months past its delivery by default
DEFAULT_COVER_MONTHS = 12
_EPS = 1e-9


@dataclass(frozen=True)
class OwnedGroup:
    """GPUs of one model owned today, and how old they are."""

    model: str
    count: int
    age_months: float


@dataclass(frozen=True)
class LifecycleInputs:
    """What ``grace lifecycle`` was asked; ``owned`` None means the default (see
    :func:`default_owned`), an empty tuple means nothing owned."""

    months: int
    gpu: str
    site: str = "on-prem"
    cloud: str = "hyperscaler"
    target_utilization: float = 0.7
    growth: float | None = None
    preserve_cash: bool = False
    cover_months: int = DEFAULT_COVER_MONTHS
    owned: tuple[OwnedGroup, ...] | None = None

    def __post_init__(self) -> None:
        """Checked once here, so the plan never meets an impossible input mid-way."""
        if self.months < 1 or self.cover_months < 1:
            raise ValueError("months and cover_months must be at least 1")
        if self.site not in ("on-prem", "colo"):
            raise ValueError(f"site must be on-prem or colo, got {self.site!r}")
        if not 0.0 < self.target_utilization <= 1.0:
            raise ValueError(f"target_utilization is a fraction in (0, 1], got "
                             f"{self.target_utilization}")
        if self.growth is not None and self.growth <= -1.0:
            raise ValueError(f"growth must be above -1 (a monthly fraction), got {self.growth}")
        for o in self.owned or ():
            if o.count < 1 or o.age_months < 0:
                raise ValueError(f"owned {o.model}: count must be at least 1 and age at "
                                 f"least 0, got {o.count} and {o.age_months}")


@dataclass(frozen=True)
class Tranche:
    """One filled gap: when it was needed, ordered and delivered, and what each way cost."""

    crossing_month: int
    order_month: int
    delivered_month: int
    gpus: int
    kind: TrancheKind
    reason: str
    options: dict[str, OptionCost | None] = field(default_factory=dict)

    @property
    def chosen(self) -> OptionCost:
        cost = self.options[self.kind.value]
        assert cost is not None
        return cost


def whole_nodes(gpus: float, node_gpus: int) -> int:
    """``gpus`` rounded up to whole nodes, in GPUs."""
    return math.ceil(gpus / node_gpus - _EPS) * node_gpus


def default_owned(hours: tuple[float, ...], inputs: LifecycleInputs,
                  node_gpus: int) -> tuple[OwnedGroup, ...]:
    """No ``--owned``: the team owns what its busiest complete month needed at the target
    utilization, in whole nodes of ``gpu``, bought new today (age 0)."""
    peak = max(hours) / (HOURS_PER_MONTH * inputs.target_utilization)
    return (OwnedGroup(inputs.gpu, whole_nodes(peak, node_gpus), 0.0),)


def _capacity(base: list[int], tranches: list[Tranche], months: int,
              by_delivery: bool) -> list[int]:
    """GPUs per month: owned groups plus tranches from delivery (or from the crossing they
    answer, for finding the next crossing without counting a late tranche's gap twice)."""
    cap = list(base)
    for tr in tranches:
        first = tr.delivered_month if by_delivery else tr.crossing_month
        for t in range(first, months + 1):
            cap[t - 1] += tr.gpus
    return cap


def _first_short(need: tuple[float, ...], cap: list[int]) -> int | None:
    return next((t for t in range(1, len(need) + 1) if need[t - 1] > cap[t - 1] + _EPS), None)


def plan_tranches(demand: Demand, base: list[int], inputs: LifecycleInputs, book: PriceBook,
                  staff: float) -> list[Tranche]:
    """The module docstring's step 3, repeated until demand fits every month."""
    n, need = inputs.months, demand.gpus_needed
    g = book.gpu(inputs.gpu).node_gpus
    lead = lead_months(book.lifecycle.lead_time_weeks.value)
    running = running_cost(book, inputs.gpu, inputs.site, staff)
    tranches: list[Tranche] = []
    for _ in range(4 * n + 4):  # each tranche ends one crossing; a bound, not a tuning knob
        cover = _capacity(base, tranches, n, by_delivery=False)
        c = _first_short(need, cover)
        if c is None:
            return tranches
        window = range(c, min(n, c + inputs.cover_months - 1) + 1)
        gpus = whole_nodes(max(need[t - 1] - cover[t - 1] for t in window), g)
        arrives = max(c, lead)  # a buy or a lease ordered at max(0, c - lead)
        owned_ok = arrives <= n
        opts: dict[str, OptionCost | None] = {
            TrancheKind.BUY.value: buy_cost(book, inputs.gpu, inputs.site, gpus, arrives, n,
                                            running) if owned_ok else None,
            TrancheKind.LEASE.value: lease_cost(book, inputs.gpu, inputs.site, gpus, arrives, n,
                                                running) if owned_ok else None,
            TrancheKind.CLOUD.value: cloud_cost(book, inputs.gpu, inputs.cloud, gpus, c, n)}
        kind, reason = choose(opts[TrancheKind.BUY.value], opts[TrancheKind.LEASE.value],
                              opts[TrancheKind.CLOUD.value], demand.uncertain,
                              demand.uncertain_reason, inputs.preserve_cash)
        if kind is TrancheKind.CLOUD:
            order, delivered = c, c
        else:
            order, delivered = max(0, c - lead), arrives
        tranches.append(Tranche(c, order, delivered, gpus, kind, reason, opts))
    raise AssertionError("tranche planning did not converge")  # pragma: no cover


def _prices_used(book: PriceBook, inputs: LifecycleInputs, models: set[str]) -> dict[str, Any]:
    keep = ("owned.", "lifecycle.", f"gpus.{inputs.gpu}.offers.{inputs.cloud}.on_demand",
            f"gpus.{inputs.gpu}.offers.{inputs.cloud}.reserved_1y",
            *(f"gpus.{m}.server_capex" for m in models))
    return {p: f for p, f in figure_sources(book).items() if p.startswith(keep)}


def lifecycle_plan(hours: tuple[float, ...], inputs: LifecycleInputs,
                   book: PriceBook) -> dict[str, Any]:
    """The whole plan as JSON-able data; ``hours`` are the history's complete months."""
    n, gpu = inputs.months, inputs.gpu
    g = book.gpu(gpu).node_gpus
    book.offers(gpu, inputs.cloud)
    demand = project(hours, n, inputs.target_utilization, inputs.growth)
    need = demand.gpus_needed
    owned = default_owned(hours, inputs, g) if inputs.owned is None else inputs.owned
    for grp in owned:
        book.gpu(grp.model)
    pool = max(sum(o.count for o in owned), whole_nodes(max(need), g), g)
    staff = staff_per_gpu_month(book, pool)
    newer = new_rate(book, gpu, inputs.site, staff)
    retires: list[Retirement] = [
        retirement(o.model, o.count, o.age_months, running_cost(book, o.model, inputs.site,
                                                                staff), newer, n)
        for o in owned]
    lead = lead_months(book.lifecycle.lead_time_weeks.value)
    leaves = [_leaves(r, lead) for r in retires]
    base = [sum(r.count for r, gone in zip(retires, leaves, strict=True)
                if gone is None or t < gone) for t in range(1, n + 1)]
    tranches = plan_tranches(demand, base, inputs, book, staff)
    capacity = _capacity(base, tranches, n, by_delivery=True)
    cash = _cash(demand, capacity, retires, leaves, tranches, inputs, book)
    return {
        "inputs": {
            "months": n, "gpu": gpu, "site": inputs.site, "cloud": inputs.cloud,
            "target_utilization": inputs.target_utilization, "growth_given": inputs.growth,
            "preserve_cash": inputs.preserve_cash, "cover_months": inputs.cover_months,
            "hours_per_month": HOURS_PER_MONTH, "node_gpus": g,
            "owned": [{"model": o.model, "count": o.count, "age_months": o.age_months}
                      for o in owned],
            "owned_source": ("--owned" if inputs.owned else
                             "a cloud bill or --owned none: a team renting owns nothing "
                             "unless --owned says" if inputs.owned is not None else
                             "assumed: the busiest complete month's GPUs needed, whole nodes "
                             "of --gpu, age 0 (give --owned, or --owned none)"),
            "lead_time_months": lead, "staff_pool_gpus": pool,
            "staff_usd_per_gpu_month": staff,
            "uncertainty_test": {"min_history_months": MIN_HISTORY_MONTHS,
                                 "max_residual_sd": MAX_RESIDUAL_SD},
            "catalog": {m: {"bf16_tflops": BUILTIN_GPUS[m].bf16_tflops,
                            "board_watts": BUILTIN_GPUS[m].board_watts}
                        for m in sorted({gpu, *(o.model for o in owned)})},
            "prices": _prices_used(book, inputs, {gpu, *(o.model for o in owned)}),
        },
        "history": {"complete_months": len(hours), "monthly_gpu_hours": list(hours)},
        "demand": {"trend": demand.trend.to_json(), "fit": demand.fitted.to_json(),
                   "uncertain": demand.uncertain, "uncertain_reason": demand.uncertain_reason,
                   "gpu_hours_by_month": list(demand.gpu_hours),
                   "gpus_needed_by_month": list(need)},
        "capacity": {"owned_gpus_by_month": base, "gpus_by_month": capacity},
        "demand_crosses_owned_capacity_month": _first_short(need, base),
        "tranches": [_tranche_json(i, tr) for i, tr in enumerate(tranches, start=1)],
        "retirement": {"new_rate": newer.to_json(),
                       "generations": [_retirement_json(r, gone)
                                       for r, gone in zip(retires, leaves, strict=True)]},
        "cash": cash,
    }


def _tranche_json(i: int, tr: Tranche) -> dict[str, Any]:
    return {"tranche": i, "crossing_month": tr.crossing_month, "order_month": tr.order_month,
            "delivered_month": tr.delivered_month,
            "late_months": tr.delivered_month - tr.crossing_month,
            "gpus": tr.gpus, "choice": tr.kind.value, "reason": tr.reason,
            "options": {k: None if v is None else v.to_json() for k, v in tr.options.items()}}


def _leaves(r: Retirement, lead: int) -> int | None:
    """The month a retired generation's GPUs leave: its retirement month, but not before a
    replacement ordered today could arrive (month ``lead``)."""
    return None if r.month is None else max(r.month, lead)


def _retirement_json(r: Retirement, leaves: int | None) -> dict[str, Any]:
    return {"model": r.model, "count": r.count, "age_months": r.age_months,
            "speed_vs_new": r.speed, "running": r.running.to_json(),
            "retire_month": r.month, "leaves_month": leaves,
            "action": "keep" if r.month is None else "retire or repurpose",
            "old_usd_per_useful_gpu_hour_by_month": list(r.old),
            "new_usd_per_useful_gpu_hour_by_month": list(r.new)}


def _cash(demand: Demand, capacity: list[int], retires: list[Retirement],
          leaves: list[int | None], tranches: list[Tranche], inputs: LifecycleInputs,
          book: PriceBook) -> dict[str, Any]:
    """Spending by month and kind, and its running total (module docstring, step 4)."""
    n = inputs.months
    owned = [sum(r.count * r.running.at(r.age_months + t)
                 for r, gone in zip(retires, leaves, strict=True) if gone is None or t < gone)
             for t in range(1, n + 1)]
    kinds = {k.value: [0.0] * n for k in TrancheKind}
    for tr in tranches:
        for i, v in enumerate(tr.chosen.cash):
            kinds[tr.kind.value][i] += v
    on_demand = book.offers(inputs.gpu, inputs.cloud).on_demand_usd_per_gpu_hour.value
    unserved = [max(0.0, demand.gpu_hours[t] - capacity[t] * HOURS_PER_MONTH
                    * inputs.target_utilization) for t in range(n)]
    bridge = [h * on_demand for h in unserved]
    monthly = [owned[t] + bridge[t] + sum(v[t] for v in kinds.values()) for t in range(n)]
    cumulative, total = [], 0.0
    for v in monthly:
        total += v
        cumulative.append(total)
    return {"owned_running_usd_by_month": owned,
            **{f"{k}_usd_by_month": v for k, v in kinds.items()},
            "unserved_gpu_hours_by_month": unserved, "on_demand_bridge_usd_by_month": bridge,
            "spent_usd_by_month": monthly, "cumulative_usd_by_month": cumulative,
            "resale_credit_after_horizon_usd": sum(tr.chosen.resale_usd for tr in tranches)}
