"""What a GPU-hour costs each way of getting one: small pure functions, formulas in docstrings.

Everything here is arithmetic on numbers the caller passes in, so each figure
``grace plan`` prints can be recomputed by hand from the inputs it echoes (and
the tests do exactly that). Conventions: a month is 730 hours (8,760 / 12);
owned capacity is priced per GPU, a node's costs divided by its GPU count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grace.cost.pricebook import CloudTerms, OwnedCosts, PriceBook
from grace.spec.gpus import BUILTIN_GPUS

HOURS_PER_YEAR = 8760.0
HOURS_PER_MONTH = HOURS_PER_YEAR / 12.0  # 730


def node_kw(board_watts: float, node_gpus: int, power_overhead: float) -> float:
    """Average draw of one node: ``node_gpus * board_watts / 1000 * power_overhead``.

    The overhead covers CPUs, NICs, fans and PSU losses: a DGX H100 draws about
    7.5 kW typical for 8 x 700 W of GPUs, a factor of 1.34.
    """
    return node_gpus * board_watts / 1000.0 * power_overhead


def capex_per_node(server_usd: float, network_usd: float, storage_fraction: float,
                   misc_fraction: float) -> float:
    """Money spent to put one node in service:
    ``server * (1 + storage_fraction + misc_fraction) + network``.
    """
    return server_usd * (1.0 + storage_fraction + misc_fraction) + network_usd


def energy_usd_per_month(kw: float, pue: float, usd_per_kwh: float) -> float:
    """Electricity for a draw of ``kw``: ``kw * pue * usd_per_kwh * 730``."""
    return kw * pue * usd_per_kwh * HOURS_PER_MONTH


def space_usd_per_month(kw: float, usd_per_kw_month: float) -> float:
    """Floor space and cooling billed per kW (colo rent, or an on-prem facility charge):
    ``kw * usd_per_kw_month``. Power is billed separately (``energy_usd_per_month``).
    """
    return kw * usd_per_kw_month


def maintenance_usd_per_month(server_usd: float, fraction_per_year: float) -> float:
    """Support contracts and spares: ``server * fraction_per_year / 12``."""
    return server_usd * fraction_per_year / 12.0


def staff_fte(gpus: float, gpus_per_fte: float, min_fte: float) -> float:
    """Engineers an owned cluster needs: ``max(min_fte, gpus / gpus_per_fte)``."""
    return max(min_fte, gpus / gpus_per_fte)


def staff_usd_per_month(fte: float, usd_per_fte_year: float) -> float:
    """``fte * usd_per_fte_year / 12``."""
    return fte * usd_per_fte_year / 12.0


def spot_billed_hours(useful_hours: float, preemptions_per_node_hour: float,
                      restart_overhead_hours: float) -> float:
    """GPU-hours billed on spot to get ``useful_hours`` of work done.

    Each preemption costs ``restart_overhead_hours`` of the node (reprovision,
    image pull, checkpoint reload, recomputed steps), and preemptions arrive at
    ``rate`` per node-hour, so a share ``rate * overhead`` of billed time is
    lost: ``billed = useful / (1 - rate * overhead)``.
    """
    loss = preemptions_per_node_hour * restart_overhead_hours
    if loss >= 1.0:
        raise ValueError("spot preemptions x restart overhead >= 1: no work would get done")
    return useful_hours / (1.0 - loss)


@dataclass(frozen=True)
class OwnedRates:
    """Per-GPU costs of owned capacity of one GPU model in one kind of site."""

    capex_per_gpu_usd: float
    opex_per_gpu_month_usd: float  # power, space, maintenance (staff is per cluster)
    node_kw: float
    residual_fraction: float
    life_months: float

    def capital_usd_per_gpu_hour(self) -> float:
        """Capex written off over the life, less what the hardware sells for at its end:
        ``capex * (1 - residual) / (life_months * 730)``."""
        return self.capex_per_gpu_usd * (1.0 - self.residual_fraction) / (
            self.life_months * HOURS_PER_MONTH)


def owned_rates(book: PriceBook, gpu: str, site: str) -> OwnedRates:
    """Per-GPU capex and monthly running cost of owned ``gpu`` capacity.

    ``site`` is ``on-prem`` (space at ``facility_usd_per_kw_month``, by default 0:
    an existing machine room) or ``colo`` (space at ``colo_rent_usd_per_kw_month``).
    Per GPU, with ``g`` = GPUs per node and ``kw`` = ``node_kw``:

    - capex = capex_per_node / g
    - opex per month = (energy(kw) + space(kw) + maintenance(server)) / g
    """
    if site not in ("on-prem", "colo"):
        raise ValueError(f"site must be on-prem or colo, got {site!r}")
    o: OwnedCosts = book.owned
    prices = book.gpu(gpu)
    g = prices.node_gpus
    server = prices.server_capex_per_node_usd.value
    kw = node_kw(BUILTIN_GPUS[gpu].board_watts, g, o.node_power_overhead.value)
    capex = capex_per_node(server, o.network_capex_per_node_usd.value,
                           o.storage_capex_fraction.value, o.misc_capex_fraction.value)
    space_rate = (o.facility_usd_per_kw_month if site == "on-prem"
                  else o.colo_rent_usd_per_kw_month).value
    opex = (energy_usd_per_month(kw, o.pue.value, o.electricity_usd_per_kwh.value)
            + space_usd_per_month(kw, space_rate)
            + maintenance_usd_per_month(server, o.maintenance_fraction_per_year.value))
    return OwnedRates(capex / g, opex / g, kw, o.residual_value_fraction.value,
                      o.amortization_years.value * 12.0)


def owned_staff_usd_per_month(book: PriceBook, gpus: float) -> float:
    """Staff for an owned cluster of ``gpus``: ``staff_fte(...) * fte_cost / 12``."""
    o = book.owned
    return staff_usd_per_month(staff_fte(gpus, o.gpus_per_fte.value, o.min_fte.value),
                               o.staff_usd_per_fte_year.value)


def owned_usd_per_gpu_hour(book: PriceBook, gpu: str, site: str, gpus: float) -> float:
    """The steady-state rate an owned pool of ``gpus`` can justify (showback prices at it):

    ``capital_per_gpu_hour + (opex_per_gpu_month + staff_per_month / gpus) / 730``.
    """
    r = owned_rates(book, gpu, site)
    staff = owned_staff_usd_per_month(book, gpus) / gpus
    return r.capital_usd_per_gpu_hour() + (r.opex_per_gpu_month_usd + staff) / HOURS_PER_MONTH


def purchases_by_month(month: int, life_months: float) -> int:
    """Hardware bought by the end of ``month`` (1-based): one at month 0, then one per life:
    ``ceil(month / life_months)`` (at least 1)."""
    return max(1, math.ceil(month / life_months - 1e-9))


def owned_cumulative_usd(month: int, gpus: float, rates: OwnedRates,
                         staff_per_month: float) -> float:
    """Cash spent on owned capacity by the end of ``month``, the hardware still held:

    ``gpus * capex * (purchases - residual * (purchases - 1)) + month * (gpus * opex + staff)``.
    The purchase is paid at month 0, which is why owning starts behind renting. Hardware
    at the end of its life is traded in for its residual when the next is bought, so
    cash never falls from one month to the next (``residual`` < 1).
    """
    bought = purchases_by_month(month, rates.life_months)
    capital = gpus * rates.capex_per_gpu_usd * (bought - rates.residual_fraction * (bought - 1))
    return capital + month * (gpus * rates.opex_per_gpu_month_usd + staff_per_month)


def book_value_fraction(age_months: float, life_months: float, residual: float) -> float:
    """Share of capex hardware is worth at ``age_months``, straight line from 1 to ``residual``
    over its life: ``residual + (1 - residual) * (1 - age / life)``.

    At 36 months of a 4-year life with residual 0 this is 25%, in line with the 25-35%
    resale of 3-year-old H100 servers quoted in shared/pricing/reference_figures.csv.
    """
    age = min(max(age_months, 0.0), life_months)
    return residual + (1.0 - residual) * (1.0 - age / life_months)


def owned_cash_series(months: int, gpus: float, rates: OwnedRates,
                      staff_per_month: float) -> tuple[float, ...]:
    """Cash spent by the end of each month 1..months: ``owned_cumulative_usd(m)``.

    It never falls. Selling the hardware still held at the end is not spending in
    any month of the workload: ``owned_resale_usd`` is that credit, and an option's
    total is the last month's cash less it. (Folding the sale into the last month
    made every owned option's cash curve drop at its end.)
    """
    return tuple(owned_cumulative_usd(m, gpus, rates, staff_per_month)
                 for m in range(1, months + 1))


def owned_resale_usd(months: int, gpus: float, rates: OwnedRates) -> float:
    """What the hardware held at the end of ``months`` sells for, at book value:
    ``gpus * capex * book_value_fraction(age)``, ``age = months - (purchases - 1) * life``
    the age of the newest hardware (a life that has just ended is worth its residual)."""
    life = rates.life_months
    age = months - (purchases_by_month(months, life) - 1) * life
    return gpus * rates.capex_per_gpu_usd * book_value_fraction(age, life,
                                                                rates.residual_fraction)


def commitment_billed_months(months: int, term_months: int) -> int:
    """A commitment is paid for whole terms: ``ceil(months / term) * term``."""
    return math.ceil(months / term_months) * term_months


def cloud_terms(book: PriceBook, cloud: str) -> CloudTerms:
    if cloud not in book.clouds:
        raise ValueError(f"no cloud {cloud!r} in the price book; use one of {sorted(book.clouds)}")
    return book.clouds[cloud]
