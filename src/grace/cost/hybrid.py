"""The ``hybrid`` option of ``grace plan``: own part of the capacity, burst the rest.

Simulated, not estimated: :func:`grace.cost.hybrid_twin.run_hybrid_twin` replays
a synthetic job mix at the workload's load on ``K = owned_fraction x N`` owned
GPUs with the burst policy on (queueing, provisioning delays, spot preemptions,
idle release, reservations kept once taken). The replay gives cloud dollars per
GPU-hour of work, which is then scaled to the plan's months:

- month ``m`` rents ``useful_m x cloud_usd_per_work_gpu_hour`` (the replay's rate),
  plus egress on the share of the work that ran in the cloud;
- the owned part is ``owned_cash_series`` for ``K`` GPUs, as for ``on-prem``;
- cumulative cash by month is their sum; the total is its last entry less the owned
  hardware's resale at book value (``owned_resale_usd``), as for ``on-prem``.

The replay runs at the workload's *average* load: a trace's month-to-month
profile shapes the rent (``useful_m``), not the replay, and every month is assumed
to look like the simulated window (stationarity). ``detail`` carries the
replay's figures, including the service users got (average JCT, p99 queue).
"""

from __future__ import annotations

from grace.cost.hybrid_twin import run_hybrid_twin
from grace.cost.pricebook import PriceBook
from grace.cost.tco import (
    cloud_terms,
    owned_cash_series,
    owned_rates,
    owned_resale_usd,
    owned_staff_usd_per_month,
)
from grace.cost.workload import PlanOption, Workload


def hybrid_option(workload: Workload, book: PriceBook, seed: int = 0) -> PlanOption:
    """Owned on-prem GPUs for ``owned_fraction`` of N, the rest burst as the twin decides."""
    run = run_hybrid_twin(workload, book, seed=seed)
    rate = run.cloud_usd_per_work_gpu_hour
    egress_per_month = (workload.egress_gb_per_month * (1.0 - run.owned_work_share)
                        * cloud_terms(book, workload.cloud).egress_usd_per_gb.value)
    staff = owned_staff_usd_per_month(book, run.owned_gpus)
    rates = owned_rates(book, workload.gpu, "on-prem")
    owned = owned_cash_series(workload.months, run.owned_gpus, rates, staff)
    resale = owned_resale_usd(workload.months, run.owned_gpus, rates)
    cumulative, rented = [], 0.0
    for cash, useful in zip(owned, workload.useful_by_month, strict=True):
        rented += useful * rate + egress_per_month
        cumulative.append(cash + rented)
    detail = {"owned_gpus": float(run.owned_gpus),
              "cloud_usd_per_work_gpu_hour": rate,
              "owned_work_share": run.owned_work_share,
              "rent_usd_per_month": rented / workload.months,
              "owned_staff_usd_per_month": staff,
              "twin_jobs": float(run.jobs), "twin_window_days": run.window_days,
              "twin_work_gpu_hours": run.work_gpu_hours, "twin_cloud_usd": run.cloud_usd,
              "twin_cloud_gpu_hours_billed": run.cloud_gpu_hours,
              "twin_burst_jobs": float(run.burst_jobs),
              "twin_spot_preemptions": float(run.spot_preemptions),
              "twin_avg_jct_h": run.avg_jct_h, "twin_p99_queue_h": run.p99_queue_h,
              **{f"twin_cloud_usd_{k}": v for k, v in run.cloud_usd_by_kind.items()}}
    note = (f"twin: {run.jobs} jobs over {run.window_days:.0f} days on {run.owned_gpus} owned "
            f"GPUs, {1 - run.owned_work_share:.0%} of the work burst; avg JCT "
            f"{run.avg_jct_h:.1f} h, p99 queue {run.p99_queue_h:.1f} h")
    return PlanOption("hybrid", cumulative[-1] - resale, workload.useful_gpu_hours,
                      tuple(cumulative), note=note, detail=detail, resale_usd=resale)
