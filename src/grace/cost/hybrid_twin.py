"""The twin run behind ``grace plan``'s hybrid option: owned capacity plus bursting.

A summary workload ("N GPUs at U% for M months") says nothing about which jobs
queue, which may burst, or what spot preemptions cost, and those decide the
hybrid bill. So the planner replays a synthetic job mix with that offered load
through the same scheduler and burst policy the twin and the control plane use:

- cluster: ``K = owned_fraction x N`` GPUs owned (rounded up to whole servers),
  plus one cloud pool per offer the price book has for the GPU and cloud: spot
  and on-demand, each big enough for the whole workload, and 1-year reserved
  sized to the average shortfall ``U x N - K`` (full runs may use nothing else
  beyond owned GPUs by the default routes, so without it a steady load above
  ``K`` would queue for ever);
- jobs: ``grace.sim.traces.synthetic`` (experiments, sweeps, fine-tunes, full
  runs) sized so the owned GPUs see an offered load of ``U x N / K`` and the
  arrivals span about ``window_days``; no job is larger than ``K``, so every
  job can run on owned capacity;
- bursting: ``BurstingSpec`` defaults (routes, spot runtime bound, trigger),
  offers priced from the book, spot preemption rate and restart cost from the
  cloud's terms.

What comes back is per GPU-hour of work, so the planner can scale it to M
months: cloud dollars per GPU-hour of the workload, the share of work the owned
GPUs did, and the service the users got (average JCT, p99 queue wait).
Stationarity is the assumption: every month of the plan looks like the window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.cost.pricebook import PriceBook
from grace.cost.tco import cloud_terms
from grace.cost.workload import Workload
from grace.sim.bursting import pool_kinds_of
from grace.sim.engine import SimConfig, Simulation
from grace.sim.estimates import EstimateModel
from grace.sim.traces import synthetic
from grace.spec.bursting import BurstingSpec, OfferKind, OfferSpec
from grace.spec.cluster import ClusterSpec

OWNED_POOL = "owned"
#: (offer kind, the CloudOffers field that prices it)
_OFFERS = ((OfferKind.SPOT, "spot_usd_per_gpu_hour"),
           (OfferKind.ON_DEMAND, "on_demand_usd_per_gpu_hour"),
           (OfferKind.RESERVED_1Y, "reserved_1y_usd_per_gpu_hour"))


@dataclass(frozen=True)
class HybridTwinRun:
    """One replay's answer, per GPU-hour of work so it scales to any horizon."""

    owned_gpus: int
    work_gpu_hours: float  # GPU-hours the replayed jobs needed
    cloud_usd: float
    cloud_usd_by_kind: dict[str, float]
    cloud_gpu_hours: float  # billed: provisioned node-hours x GPUs
    owned_work_share: float  # of the work, the part owned GPUs did
    avg_jct_h: float
    p99_queue_h: float
    jobs: int
    burst_jobs: int
    spot_preemptions: int
    window_days: float  # the arrivals' span

    @property
    def cloud_usd_per_work_gpu_hour(self) -> float:
        return self.cloud_usd / self.work_gpu_hours if self.work_gpu_hours else 0.0


def hybrid_cluster(w: Workload, book: PriceBook, owned_gpus: int) -> tuple[ClusterSpec, BurstingSpec]:
    """The owned servers plus one cloud pool per offer, and the bursting that rents them."""
    node_gpus = book.gpu(w.gpu).node_gpus
    prices = book.offers(w.gpu, w.cloud)
    terms = cloud_terms(book, w.cloud)
    cloud_nodes = math.ceil(w.gpus / node_gpus)
    pools = [{"name": OWNED_POOL, "kind": "on-prem"}]
    groups = [{"name": "owned", "count": owned_gpus // node_gpus, "gpu": w.gpu,
               "gpus_per_node": node_gpus, "pool": OWNED_POOL}]
    offers = []
    # reserved: only the average shortfall of the owned GPUs (full runs may use nothing
    # else when they do not fit owned capacity); spot and on-demand take the peaks
    shortfall_nodes = max(0, math.ceil((w.utilization * w.gpus - owned_gpus) / node_gpus - 1e-9))
    for kind, field in _OFFERS:
        fig = getattr(prices, field)
        nodes = shortfall_nodes if kind is OfferKind.RESERVED_1Y else cloud_nodes
        if fig is None or nodes == 0:
            continue
        name = f"cloud-{kind.value}"
        pools.append({"name": name, "kind": "cloud"})
        groups.append({"name": name, "count": nodes, "gpu": w.gpu,
                       "gpus_per_node": node_gpus, "pool": name})
        offers.append(OfferSpec(
            name=name, gpu=w.gpu, kind=kind, usd_per_gpu_hour=fig.value, gpus_per_node=node_gpus,
            provisioning_delay_s=terms.provisioning_delay_s.value,
            preemptions_per_hour=terms.spot_preemptions_per_node_hour.value
            if kind is OfferKind.SPOT else 0.0,
            egress_usd_per_gb=terms.egress_usd_per_gb.value, max_nodes=nodes))
    cluster = ClusterSpec.model_validate({"name": "plan-hybrid", "pools": pools,
                                         "node_groups": groups})
    bursting = BurstingSpec(offers=offers,
                            restart_s=max(terms.restart_overhead_hours.value * 3600.0, 0.0))
    return cluster, bursting


def owned_gpus_for(w: Workload, book: PriceBook) -> int:
    """``owned_fraction x N``, rounded up to whole servers (at least one)."""
    node_gpus = book.gpu(w.gpu).node_gpus
    want = book.hybrid.owned_fraction.value * w.gpus
    return max(1, math.ceil(want / node_gpus - 1e-9)) * node_gpus


def run_hybrid_twin(w: Workload, book: PriceBook, seed: int = 0, window_days: float = 56.0,
                    max_jobs: int = 20_000) -> HybridTwinRun:
    """Replay ``window_days`` of the workload on owned GPUs with bursting on."""
    owned = owned_gpus_for(w, book)
    cluster, bursting = hybrid_cluster(w, book, owned)
    load = w.utilization * w.gpus / owned
    # the generator fixes the job count, not the span: probe it, then size the real trace
    probe = synthetic.generate(500, seed, owned, load)
    span_s = max((j.submit_s for j in probe.jobs), default=0.0)
    n_jobs = 500 if span_s <= 0 else int(min(max(500 * window_days * 86_400 / span_s, 200),
                                             max_jobs))
    trace = synthetic.generate(n_jobs, seed, owned, load)
    topo = Topology.from_spec(cluster)
    # users' time limits, as a live cluster would see them: the spot rule, the expected
    # cost and the wait budget of bursting read them, never the true durations. They are
    # not enforced: the plan prices the workload's GPU-hours, and a job killed at its limit
    # would be resubmitted, not dropped from the bill
    config = SimConfig(policy=get_policy("grace"), seed=seed, bursting=bursting,
                       pool_kinds=pool_kinds_of(cluster), estimates=EstimateModel.USER,
                       enforce_limits=False)
    result = Simulation(topo, trace.jobs, config).run()
    s = result.summary
    work_h = sum(j.gpus * j.duration_s for j in trace.jobs) / 3600.0
    owned_h = s["gpu_allocation"] * owned * s["makespan_s"] / 3600.0
    return HybridTwinRun(
        owned_gpus=owned, work_gpu_hours=work_h, cloud_usd=float(s.get("cloud_usd", 0.0)),
        cloud_usd_by_kind=dict(s.get("cloud_usd_by_kind", {})),
        cloud_gpu_hours=float(s.get("cloud_gpu_hours", 0.0)),
        owned_work_share=min(1.0, owned_h / work_h) if work_h else 1.0,
        avg_jct_h=s["avg_jct_s"] / 3600.0, p99_queue_h=s["p99_queue_s"] / 3600.0,
        jobs=len(trace.jobs), burst_jobs=int(s.get("burst_jobs", 0)),
        spot_preemptions=int(s.get("spot_preemptions", 0)),
        window_days=max((j.submit_s for j in trace.jobs), default=0.0) / 86_400)
