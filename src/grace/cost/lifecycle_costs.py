"""``grace lifecycle``'s prices: what an owned GPU costs to keep running as it ages, what a
newer one costs in full, and what buying, leasing or committing to cloud costs for a gap.

Small functions on price-book figures (``grace.cost.tco`` does the energy, space,
maintenance and staff arithmetic), so each series the plan prints can be recomputed from
the figures it echoes. Conventions: a month is 730 hours; a GPU's share of a node's cost
is the node's cost over its GPU count; ages are in months.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from grace.cost.pricebook import PriceBook
from grace.cost.tco import (
    HOURS_PER_MONTH,
    book_value_fraction,
    energy_usd_per_month,
    maintenance_usd_per_month,
    owned_rates,
    owned_staff_usd_per_month,
    space_usd_per_month,
)
from grace.spec.gpus import BUILTIN_GPUS

#: a 1-year commitment is the cloud option: the shortest term that is a commitment at all
CLOUD_TERM_MONTHS = 12


class TrancheKind(StrEnum):
    """How a gap in capacity is filled."""

    BUY = "buy"
    LEASE = "lease"
    CLOUD = "cloud-1y"


def lead_months(lead_time_weeks: float) -> int:
    """An order's lead time in whole 730-hour months, rounded up: ``ceil(weeks * 168 / 730)``."""
    return math.ceil(lead_time_weeks * 168.0 / HOURS_PER_MONTH - 1e-9)


def staff_per_gpu_month(book: PriceBook, pool_gpus: float) -> float:
    """Each owned GPU's share of the staff a pool of ``pool_gpus`` needs:
    ``owned_staff_usd_per_month(pool) / pool`` (``max(min_fte, pool / gpus_per_fte)`` FTE)."""
    return owned_staff_usd_per_month(book, pool_gpus) / pool_gpus


def speed_ratio(old: str, new: str) -> float:
    """Work an ``old`` GPU does in an hour, in hours of a ``new`` one: the catalog's dense
    BF16 TFLOP/s ratio. An ASSUMPTION: training is compute-bound and both reach the same
    share of their peak; memory- or network-bound jobs gain less from a newer GPU."""
    return BUILTIN_GPUS[old].bf16_tflops / BUILTIN_GPUS[new].bf16_tflops


@dataclass(frozen=True)
class RunningCost:
    """Monthly cost of keeping one owned GPU of ``model`` running, capital excluded.

    ``at(age) = energy + space + maintenance * (1 + maintenance_growth) ** (age / 12) + staff``:
    support, spares and failures grow with age (``lifecycle.maintenance_growth_per_year``);
    power, space and the staff share do not.
    """

    model: str
    node_kw: float
    energy: float
    space: float
    maintenance: float
    maintenance_growth_per_year: float
    staff: float

    def at(self, age_months: float) -> float:
        grown = (1.0 + self.maintenance_growth_per_year) ** (max(age_months, 0.0) / 12.0)
        return self.energy + self.space + self.maintenance * grown + self.staff

    def to_json(self) -> dict[str, float | str]:
        return {"model": self.model, "node_kw": self.node_kw,
                "energy_usd_per_gpu_month": self.energy, "space_usd_per_gpu_month": self.space,
                "maintenance_usd_per_gpu_month_new": self.maintenance,
                "maintenance_growth_per_year": self.maintenance_growth_per_year,
                "staff_usd_per_gpu_month": self.staff}


def running_cost(book: PriceBook, model: str, site: str, staff: float) -> RunningCost:
    """``RunningCost`` of ``model`` from the book: node draw, energy, space and maintenance
    through ``tco`` (the same functions ``grace plan`` uses), each over the node's GPUs."""
    r = owned_rates(book, model, site)
    o, g = book.owned, book.gpu(model).node_gpus
    space_rate = (o.facility_usd_per_kw_month if site == "on-prem"
                  else o.colo_rent_usd_per_kw_month).value
    server = book.gpu(model).server_capex_per_node_usd.value
    return RunningCost(
        model, r.node_kw,
        energy_usd_per_month(r.node_kw, o.pue.value, o.electricity_usd_per_kwh.value) / g,
        space_usd_per_month(r.node_kw, space_rate) / g,
        maintenance_usd_per_month(server, o.maintenance_fraction_per_year.value) / g,
        book.lifecycle.maintenance_growth_per_year.value, staff)


@dataclass(frozen=True)
class NewRate:
    """The full owned rate of a newer GPU, falling as price-performance improves:

    ``at(t) = (capital + opex + staff) * 0.5 ** (t / (12 * doubling_years))`` per GPU-hour,
    the sum being ``tco.owned_usd_per_gpu_hour`` for the staff pool.
    """

    model: str
    capital_usd_per_gpu_hour: float
    opex_usd_per_gpu_hour: float
    staff_usd_per_gpu_hour: float
    doubling_years: float

    @property
    def today(self) -> float:
        return self.capital_usd_per_gpu_hour + self.opex_usd_per_gpu_hour + \
            self.staff_usd_per_gpu_hour

    def at(self, month: float) -> float:
        return self.today * 0.5 ** (month / (12.0 * self.doubling_years))

    def to_json(self) -> dict[str, float | str]:
        return {"model": self.model, "capital_usd_per_gpu_hour": self.capital_usd_per_gpu_hour,
                "opex_usd_per_gpu_hour": self.opex_usd_per_gpu_hour,
                "staff_usd_per_gpu_hour": self.staff_usd_per_gpu_hour,
                "usd_per_gpu_hour_today": self.today,
                "price_performance_doubling_years": self.doubling_years}


def new_rate(book: PriceBook, gpu: str, site: str, staff: float) -> NewRate:
    r = owned_rates(book, gpu, site)
    return NewRate(gpu, r.capital_usd_per_gpu_hour(), r.opex_per_gpu_month_usd / HOURS_PER_MONTH,
                   staff / HOURS_PER_MONTH,
                   book.lifecycle.price_performance_doubling_years.value)


@dataclass(frozen=True)
class Retirement:
    """One owned generation against the newer one, plan months 1..N.

    ``old[t-1] = running.at(age + t) / 730 / speed`` (its cost per hour of the newer GPU's
    work, no capital: that money is spent); ``new[t-1] = new_rate.at(t)``;
    ``month`` is the first t with ``old > new``, None if it never comes.
    """

    model: str
    count: int
    age_months: float
    speed: float
    running: RunningCost
    old: tuple[float, ...]
    new: tuple[float, ...]
    month: int | None


def retirement(model: str, count: int, age_months: float, running: RunningCost,
               newer: NewRate, months: int) -> Retirement:
    speed = speed_ratio(model, newer.model)
    old = tuple(running.at(age_months + t) / HOURS_PER_MONTH / speed
                for t in range(1, months + 1))
    new = tuple(newer.at(t) for t in range(1, months + 1))
    month = next((t for t in range(1, months + 1) if old[t - 1] > new[t - 1]), None)
    return Retirement(model, count, age_months, speed, running, old, new, month)


@dataclass(frozen=True)
class OptionCost:
    """One way to fill a gap of ``gpus`` from month ``start`` to the horizon's end.

    ``cash`` is what it adds to each plan month (index 0 = month 1); ``total_usd`` is
    their sum less ``resale_usd`` (a bought tranche's book value after the horizon).
    """

    kind: TrancheKind
    gpus: int
    start: int
    cash: tuple[float, ...]
    resale_usd: float = 0.0
    billed_months: int = 0
    usd_per_month: float = 0.0

    @property
    def total_usd(self) -> float:
        return sum(self.cash) - self.resale_usd

    def to_json(self) -> dict[str, float | str | int]:
        return {"kind": self.kind.value, "total_usd": self.total_usd,
                "cash_usd": sum(self.cash), "resale_usd": self.resale_usd,
                "billed_months": self.billed_months, "usd_per_month": self.usd_per_month}


def _months_held(start: int, months: int) -> int:
    return months - start + 1


def buy_cost(book: PriceBook, gpu: str, site: str, gpus: int, start: int, months: int,
             running: RunningCost) -> OptionCost:
    """Capex paid in the delivery month, ``running.at(age)`` every month held (age 0 first),
    and after the horizon the hardware's book value (``tco.book_value_fraction``) credited."""
    r = owned_rates(book, gpu, site)
    cash = [0.0] * months
    cash[start - 1] += gpus * r.capex_per_gpu_usd
    for t in range(start, months + 1):
        cash[t - 1] += gpus * running.at(t - start)
    held = _months_held(start, months)
    resale = gpus * r.capex_per_gpu_usd * book_value_fraction(held, r.life_months,
                                                              r.residual_fraction)
    return OptionCost(TrancheKind.BUY, gpus, start, tuple(cash), resale, held,
                      gpus * r.capex_per_gpu_usd)


def lease_cost(book: PriceBook, gpu: str, site: str, gpus: int, start: int, months: int,
               running: RunningCost) -> OptionCost:
    """``lease_rate_per_month * capex`` a month for whole terms (renewed to cover the horizon;
    the rest of the last term billed in the horizon's last month), plus ``running.at(age)``:
    the lessee pays power, space, upkeep and staff, not the capital."""
    r = owned_rates(book, gpu, site)
    lc = book.lifecycle
    payment = gpus * r.capex_per_gpu_usd * lc.lease_rate_per_month.value
    term = max(1, round(lc.lease_term_months.value))
    held = _months_held(start, months)
    billed = math.ceil(held / term) * term
    cash = [0.0] * months
    for t in range(start, months + 1):
        cash[t - 1] += payment + gpus * running.at(t - start)
    cash[months - 1] += payment * (billed - held)
    return OptionCost(TrancheKind.LEASE, gpus, start, tuple(cash), 0.0, billed, payment)


def cloud_cost(book: PriceBook, gpu: str, cloud: str, gpus: int, start: int,
               months: int) -> OptionCost | None:
    """``gpus * 730 * reserved_1y`` a month for whole 1-year terms (the rest of the last term
    billed in the horizon's last month, as ``grace plan`` bills a commitment); None when the
    book has no 1-year commitment for this GPU on this cloud."""
    fig = book.offers(gpu, cloud).reserved_1y_usd_per_gpu_hour
    if fig is None:
        return None
    monthly = gpus * HOURS_PER_MONTH * fig.value
    held = _months_held(start, months)
    billed = math.ceil(held / CLOUD_TERM_MONTHS) * CLOUD_TERM_MONTHS
    cash = [0.0] * months
    for t in range(start, months + 1):
        cash[t - 1] += monthly
    cash[months - 1] += monthly * (billed - held)
    return OptionCost(TrancheKind.CLOUD, gpus, start, tuple(cash), 0.0, billed, monthly)


def choose(buy: OptionCost | None, lease: OptionCost | None, cloud: OptionCost | None,
           uncertain: bool, uncertain_reason: str,
           preserve_cash: bool) -> tuple[TrancheKind, str]:
    """The seed's rule: committed cloud use when demand is uncertain, lease when cash
    preservation matters, else buy or lease, whichever costs less over the horizon.

    ``buy``/``lease`` are None when an order placed now would arrive after the horizon,
    ``cloud`` when the book has no 1-year commitment for the GPU on this cloud.
    """
    if cloud is not None and (uncertain or buy is None or lease is None):
        why = (f"demand is uncertain ({uncertain_reason})" if uncertain else
               "an order placed now arrives after the horizon")
        return TrancheKind.CLOUD, f"{why}: commit to cloud"
    if buy is None or lease is None:
        raise ValueError("nothing ordered now arrives within the horizon and the price book "
                         "has no 1-year commitment to bridge it; give a longer --months")
    prefix = ("demand is uncertain but the book has no 1-year commitment; "
              if uncertain else "")
    if preserve_cash:
        return TrancheKind.LEASE, prefix + "--preserve-cash: lease, no capital spent"
    if buy.total_usd <= lease.total_usd:
        return TrancheKind.BUY, prefix + (f"buying costs ${buy.total_usd:,.0f} over the horizon, "
                                          f"leasing ${lease.total_usd:,.0f}")
    return TrancheKind.LEASE, prefix + (f"leasing costs ${lease.total_usd:,.0f} over the "
                                        f"horizon, buying ${buy.total_usd:,.0f}")
