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

    Analytic model (per month; ``H = gpus * utilization * 730`` useful GPU-hours):

    - owned GPUs ``K = owned_fraction * gpus`` (pro rata: a fraction of a node costs
      that fraction of the node), run at most ``owned_max_utilization`` busy;
    - owned useful hours ``Ho = min(H, K * 730 * owned_max_utilization)``; the owned
      pool is filled first;
    - overflow ``Hr = H - Ho``: a share ``spot_share_of_overflow`` runs on spot, billed
      ``spot_billed_hours`` (the preemption overhead), the rest on on-demand, billed as used;
    - egress: ``egress_gb_per_month * Hr / H`` (only rented work moves data out);
    - cash by month m: ``owned_cash_series(...)[m - 1] + m * rent_per_month`` (the owned
      hardware sold at book value in the last month).

    Assumes the overflow is steady (the same every month) and that rented capacity is
    there when needed: no queueing for it and no provisioning delay, which the twin
    simulation will add.
    """
    o = book.hybrid
    terms = cloud_terms(book, workload.cloud)
    offers = book.offers(workload.gpu, workload.cloud)
    owned_gpus = o.owned_fraction.value * workload.gpus
    rates = owned_rates(book, workload.gpu, "on-prem")
    staff = owned_staff_usd_per_month(book, owned_gpus)

    useful = workload.useful_gpu_hours_per_month
    owned_useful = min(useful, owned_gpus * HOURS_PER_MONTH * o.owned_max_utilization.value)
    overflow = useful - owned_useful
    note = "analytic model (to be replaced by the twin)"
    if offers.spot_usd_per_gpu_hour is None:
        spot_useful, spot_rate = 0.0, 0.0
        note += f"; {workload.cloud} has no spot offer for {workload.gpu}: overflow on on-demand"
    else:
        spot_useful = overflow * o.spot_share_of_overflow.value
        spot_rate = offers.spot_usd_per_gpu_hour.value
    spot_billed = spot_billed_hours(spot_useful, terms.spot_preemptions_per_node_hour.value,
                                    terms.restart_overhead_hours.value)
    od_billed = overflow - spot_useful
    egress = workload.egress_gb_per_month * (overflow / useful) * terms.egress_usd_per_gb.value
    rent = spot_billed * spot_rate + od_billed * offers.on_demand_usd_per_gpu_hour.value + egress
    owned = owned_cash_series(workload.months, owned_gpus, rates, staff)
    cumulative = tuple(cash + m * rent for m, cash in enumerate(owned, start=1))
    detail = {"owned_gpus": owned_gpus, "owned_useful_gpu_hours_per_month": owned_useful,
              "overflow_gpu_hours_per_month": overflow,
              "spot_billed_gpu_hours_per_month": spot_billed,
              "on_demand_billed_gpu_hours_per_month": od_billed,
              "rent_usd_per_month": rent, "owned_staff_usd_per_month": staff}
    return PlanOption("hybrid", cumulative[-1], workload.useful_gpu_hours, cumulative,
                      note=note, detail=detail)
