"""The ``hybrid`` option of ``grace plan``: own part of the capacity, rent the overflow.

TO BE REPLACED by the twin: the issue asks for the hybrid option to be
simulated (the workload replayed through the twin with bursting on, so queue
waits, provisioning delays and spot preemptions come out of the simulation).
Until that is wired in, :func:`hybrid_option` is a closed-form model with the
same inputs and output, so the planner, its JSON and its report do not change
when the simulation replaces it.
"""

from __future__ import annotations

from grace.cost.pricebook import PriceBook
from grace.cost.tco import (
    HOURS_PER_MONTH,
    cloud_terms,
    owned_cash_series,
    owned_rates,
    owned_staff_usd_per_month,
    spot_billed_hours,
)
from grace.cost.workload import PlanOption, Workload


def hybrid_option(workload: Workload, book: PriceBook) -> PlanOption:
    """Owned on-prem capacity for part of the workload, the rest rented from ``workload.cloud``.

    Analytic model, month by month (``H`` = the month's useful GPU-hours:
    ``gpus * utilization * 730`` for a summary workload, the trace's profile otherwise):

    - owned GPUs ``K = owned_fraction * gpus`` (pro rata: a fraction of a node costs
      that fraction of the node), run at most ``owned_max_utilization`` busy;
    - owned useful hours ``Ho = min(H, K * 730 * owned_max_utilization)``; the owned
      pool is filled first;
    - overflow ``Hr = H - Ho``: a share ``spot_share_of_overflow`` runs on spot, billed
      ``spot_billed_hours`` (the preemption overhead), the rest on on-demand, billed as used;
    - egress: ``egress_gb_per_month * Hr / H`` (only rented work moves data out);
    - cash by month m: ``owned_cash_series(...)[m - 1]`` (the owned hardware sold at book
      value in the last month) plus the rent of months 1..m.

    ``detail`` reports monthly averages. Assumes the work inside a month is spread
    evenly (no peaks within it) and that rented capacity is there when needed: no
    queueing for it and no provisioning delay, which the twin simulation will add.
    """
    o = book.hybrid
    terms = cloud_terms(book, workload.cloud)
    offers = book.offers(workload.gpu, workload.cloud)
    owned_gpus = o.owned_fraction.value * workload.gpus
    rates = owned_rates(book, workload.gpu, "on-prem")
    staff = owned_staff_usd_per_month(book, owned_gpus)

    capacity = owned_gpus * HOURS_PER_MONTH * o.owned_max_utilization.value
    od_rate = offers.on_demand_usd_per_gpu_hour.value
    note = "analytic model (to be replaced by the twin)"
    if offers.spot_usd_per_gpu_hour is None:
        spot_share, spot_rate = 0.0, 0.0
        note += f"; {workload.cloud} has no spot offer for {workload.gpu}: overflow on on-demand"
    else:
        spot_share, spot_rate = o.spot_share_of_overflow.value, offers.spot_usd_per_gpu_hour.value
    rents = []
    totals = {"owned_useful": 0.0, "overflow": 0.0, "spot_billed": 0.0, "od_billed": 0.0}
    for useful in workload.useful_by_month:
        owned_useful = min(useful, capacity)
        overflow = useful - owned_useful
        spot_useful = overflow * spot_share
        spot_billed = spot_billed_hours(spot_useful, terms.spot_preemptions_per_node_hour.value,
                                        terms.restart_overhead_hours.value)
        od_billed = overflow - spot_useful
        egress = (workload.egress_gb_per_month * (overflow / useful if useful else 0.0)
                  * terms.egress_usd_per_gb.value)
        rents.append(spot_billed * spot_rate + od_billed * od_rate + egress)
        for key, v in (("owned_useful", owned_useful), ("overflow", overflow),
                       ("spot_billed", spot_billed), ("od_billed", od_billed)):
            totals[key] += v
    owned = owned_cash_series(workload.months, owned_gpus, rates, staff)
    cumulative, rented = [], 0.0
    for cash, rent in zip(owned, rents, strict=True):
        rented += rent
        cumulative.append(cash + rented)
    n = workload.months
    detail = {"owned_gpus": owned_gpus, "owned_useful_gpu_hours_per_month": totals["owned_useful"] / n,
              "overflow_gpu_hours_per_month": totals["overflow"] / n,
              "spot_billed_gpu_hours_per_month": totals["spot_billed"] / n,
              "on_demand_billed_gpu_hours_per_month": totals["od_billed"] / n,
              "rent_usd_per_month": rented / n, "owned_staff_usd_per_month": staff}
    return PlanOption("hybrid", cumulative[-1], workload.useful_gpu_hours, tuple(cumulative),
                      note=note, detail=detail)
