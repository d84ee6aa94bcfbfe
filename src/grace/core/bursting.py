"""Hybrid cloud bursting: where each job may run, when to rent, what to rent, what to return.

Pure policy, like ``decide``: no I/O, no clock, no randomness. The twin
(``grace.sim.bursting``) and the live controller (``grace.control.bursting``)
call the same three functions and carry out the typed decisions.

**Routing** (``route``): a job may use a pool when the workload class's route
allows the pool's kind and, for a cloud pool provisioned by an offer, the
offer's kind; a job with sensitive data only pools of ``sensitive_data_pools``
kinds; a spot pool only when the job's runtime limit (or, without one, its
estimate) is known and at most ``max_spot_runtime_s``. A job starts with the
owned part (``held_back``) as its ``PendingJob.pools``; a ``BurstJob`` decision
later gives it the whole routed set. Placement works inside one
(pool, GPU model) group, so a gang never spans two pools.

**When to rent** (``plan_bursts``): the time a job has waited plus its forecast
queue wait passes its wait budget: ``queue_wait_threshold_s``, or
``wait_budget_per_runtime`` x its runtime when that is longer (a long job loses
little, relatively, by waiting, and is the most expensive to rent for;
Starburst, ATC'24, makes the same argument for waiting budgets that grow with
the job). Counting the time already waited keeps a job that the forecast keeps
promising a start "soon" from waiting past its budget. The forecast is a
list-scheduling estimate over owned capacity (``OwnedForecast``): waiting jobs
whose reason is capacity (not quota) are taken in the policy's queue order;
each needs the GPUs of the jobs before it that stay in the owned queue plus its
own, less the owned GPUs free now; running jobs on owned capacity release
their GPUs at their expected ends; the forecast is the end at which enough
have been released. A job that bursts leaves the owned queue, so it does not
inflate the forecasts behind it. The estimate ignores that the jobs ahead also
end and give their GPUs back, so it overestimates waits deep in the queue
(that keeps it cheap: one bisect per job), and it counts a running job with no
estimate as never ending. It examines the first ``max_jobs_examined`` jobs in
policy order; a second pass, oldest first, bursts jobs already past their
budget that the first did not reach.

**What to rent**: the allowed offer with the lowest *expected* cost for that
job (the next cheapest when its pool is full), not the lowest sticker price::

    nodes      = ceil(gpus / offer.gpus_per_node)        (billed per whole node)
    restarts   = preemptions_per_hour x nodes x runtime_h (any node lost stops the gang)
    overhead_h = restart_s/3600 + checkpoint_interval_s/2/3600  (work lost per restart)
    usd        = usd_per_gpu_hour x nodes x gpus_per_node x (runtime_h + restarts x overhead_h)
               + dataset_gb x egress_usd_per_gb          (data gravity)

Capacity already provisioned or on its way counts first, so one job is not
rented for twice.

**What to return** (``plan_releases``): a provisioned node of a non-committed
offer that has held no job for ``idle_release_s``. Reserved (1y/3y) nodes are
paid whether used or not, so they are never released.

**Effects** (``SetNodesUsable``, ``RouteJob``): what the drivers' adapters return for the
driver to carry out on its ``SchedulerState``, so that no adapter holds its driver.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from grace.core.decisions import PendingReason
from grace.core.jobs import JobId, PendingJob
from grace.core.state import SchedulerState
from grace.core.topology import Topology
from grace.spec.bursting import COMMITTED, BurstingSpec, OfferKind, OfferSpec
from grace.spec.cluster import PoolKind
from grace.spec.job import WorkloadClass

#: Reasons that more GPUs would cure; a job over its quota gains nothing from renting.
CAPACITY_REASONS = frozenset({PendingReason.WAITING_FOR_CAPACITY, PendingReason.NO_USABLE_NODES,
                              PendingReason.HELD_FOR_RESERVATION, PendingReason.NOT_EXAMINED})


@dataclass(frozen=True, slots=True)
class JobTraits:
    """What routing needs beyond the PendingJob: facts from the JobSpec."""

    sensitive_data: bool = False
    dataset_gb: float = 0.0


NO_TRAITS = JobTraits()


@dataclass(frozen=True, slots=True)
class ProvisionNodes:
    """Rent ``count`` nodes of ``offer`` (its pool's unprovisioned nodes)."""

    offer: str
    count: int
    for_jobs: tuple[JobId, ...]
    expected_usd: float


@dataclass(frozen=True, slots=True)
class BurstJob:
    """Let a waiting job use rented capacity: its pools become ``pools`` (owned and cloud)."""

    job_id: JobId
    pools: tuple[str, ...]


@dataclass
class BurstDecisions:
    """One evaluation's decisions: jobs now allowed on rented pools, and nodes to rent."""

    burst: list[BurstJob] = field(default_factory=list)
    provision: list[ProvisionNodes] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReleaseNodes:
    """Give back these provisioned nodes (topology indices) of ``offer``."""

    offer: str
    nodes: tuple[int, ...]
    reason: str = "idle"


@dataclass
class BurstPlan:
    """The spec bound to one topology: which pools are owned, which offer each cloud pool is."""

    spec: BurstingSpec
    pool_kinds: dict[str, PoolKind]
    offers: dict[str, OfferSpec]  # by pool name
    pool_nodes: dict[str, tuple[int, ...]]  # offer pool -> its nodes, in topology order
    owned_pools: frozenset[str]
    pool_order: tuple[str, ...]

    @classmethod
    def build(cls, spec: BurstingSpec, topo: Topology,
              pool_kinds: Mapping[str, PoolKind]) -> BurstPlan:
        offers = {o.pool_name: o for o in spec.offers}
        order: dict[str, None] = {}
        nodes: dict[str, list[int]] = {p: [] for p in offers}
        for n in topo.nodes:
            order[n.pool] = None
            if n.pool in nodes:
                nodes[n.pool].append(n.index)
        kinds = {p: pool_kinds.get(p, PoolKind.ON_PREM) for p in order}
        owned = frozenset(p for p, k in kinds.items() if k is not PoolKind.CLOUD)
        return cls(spec, kinds, offers, {p: tuple(v) for p, v in nodes.items()}, owned,
                   tuple(order))

    def offer_nodes(self, offer: OfferSpec) -> tuple[int, ...]:
        return self.pool_nodes.get(offer.pool_name, ())


# --------------------------------------------------------------------------- routing
def runtime_bound_s(job: PendingJob) -> float | None:
    """The runtime the spot bound is checked against: the limit, else the estimate."""
    return job.limit_s if job.limit_s is not None else job.estimate_s


def spot_allowed(spec: BurstingSpec, job: PendingJob) -> bool:
    """Spot only for a job known to end within the bound; unknown runtimes never go on spot."""
    bound = runtime_bound_s(job)
    return bound is not None and bound <= spec.max_spot_runtime_s


def route(plan: BurstPlan, job: PendingJob, traits: JobTraits = NO_TRAITS) -> tuple[str, ...]:
    """The pools ``job`` may use, in the topology's order (owned first where listed first)."""
    spec = plan.spec
    r = spec.routes[WorkloadClass(job.workload_class)]
    kinds = set(spec.sensitive_data_pools) & set(r.pools) if traits.sensitive_data \
        else set(r.pools)
    spot_ok = spot_allowed(spec, job)
    out: list[str] = []
    for pool in plan.pool_order:
        if plan.pool_kinds[pool] not in kinds:
            continue
        offer = plan.offers.get(pool)
        if offer is not None and (offer.kind not in r.offers
                                  or (offer.kind is OfferKind.SPOT and not spot_ok)):
            continue
        out.append(pool)
    return tuple(out)


def held_back(plan: BurstPlan, pools: tuple[str, ...]) -> tuple[str, ...]:
    """The pools a job starts with: its routed pools less the rented ones. A job waits for
    owned capacity until the policy bursts it (``BurstJob``); otherwise any job could take a
    free rented node, and rented capacity would serve work that was never worth renting
    for. A job routed to rented pools only keeps them."""
    owned = tuple(p for p in pools if p not in plan.offers)
    return owned or pools


# --------------------------------------------------------------------------- expected cost
def expected_cost_usd(spec: BurstingSpec, offer: OfferSpec, gpus: float, runtime_s: float,
                      dataset_gb: float = 0.0) -> float:
    """What running this job on this offer is expected to cost (formula in the module doc)."""
    nodes = max(1, math.ceil(gpus / offer.gpus_per_node))
    runtime_h = runtime_s / 3600.0
    restarts = offer.preemptions_per_hour * nodes * runtime_h
    overhead_h = (spec.restart_s + spec.checkpoint_interval_s / 2.0) / 3600.0
    billed_h = runtime_h + restarts * overhead_h
    return (offer.usd_per_gpu_hour * nodes * offer.gpus_per_node * billed_h
            + dataset_gb * offer.egress_usd_per_gb)


def ranked_offers(plan: BurstPlan, job: PendingJob, traits: JobTraits = NO_TRAITS,
                  default_runtime_s: float = 3600.0) -> list[tuple[OfferSpec, float]]:
    """The offers ``job`` may use with its expected cost on each, cheapest first.

    A job with neither limit nor estimate is costed at ``default_runtime_s`` (it can
    only be offered non-spot capacity anyway)."""
    runtime = runtime_bound_s(job) or default_runtime_s
    out: list[tuple[OfferSpec, float]] = []
    pools = route(plan, job, traits)
    for pool in pools:
        offer = plan.offers.get(pool)
        if offer is None or offer.gpu not in job.models:
            continue
        out.append((offer, expected_cost_usd(plan.spec, offer, job.gpu_equivalents, runtime,
                                             traits.dataset_gb)))
    out.sort(key=lambda oc: (oc[1], oc[0].name))
    return out


def cheapest_offer(plan: BurstPlan, job: PendingJob,
                   traits: JobTraits = NO_TRAITS) -> tuple[OfferSpec, float] | None:
    """The allowed offer with the lowest expected cost for ``job``, and that cost."""
    ranked = ranked_offers(plan, job, traits)
    return ranked[0] if ranked else None


# --------------------------------------------------------------------------- fleet view
@dataclass
class CloudFleet:
    """What the driver knows about rented nodes, per offer pool.

    ``ready`` maps a provisioned node to the instant it last became idle (None while a
    job holds it); ``provisioning`` counts nodes requested and not yet ready.
    """

    ready: dict[int, float | None] = field(default_factory=dict)
    provisioning: dict[str, int] = field(default_factory=dict)  # offer pool -> nodes

    def provisioned_or_coming(self, plan: BurstPlan, offer: OfferSpec) -> int:
        nodes = plan.offer_nodes(offer)
        return sum(1 for n in nodes if n in self.ready) + self.provisioning.get(offer.pool_name, 0)


# --------------------------------------------------------------------------- forecast
class OwnedForecast:
    """When owned capacity of some GPU models could hold the jobs queued for it so far.

    ``cum[i]`` is the owned GPUs free now plus those released by the first ``i``
    running jobs in expected-end order; a job whose queue-ahead need (``queued``
    plus its own) is covered by ``cum[i]`` is forecast to start at the ``i``-th end.
    """

    def __init__(self, state: SchedulerState, plan: BurstPlan, models: tuple[str, ...],
                 now: float) -> None:
        topo = state.topo
        mset = set(models)
        owned = plan.owned_pools
        free = float(sum(g.free_total for key, g in state.capacity.groups.items()
                         if key[0] in owned and key[1] in mset))
        self.now = now
        self.times: list[float] = []
        self.cum: list[float] = [free]
        for end, jid in state.ends:
            run = state.running[jid]
            if not mset.intersection(run.models):
                continue
            nodes = run.placement.nodes(topo)
            if nodes and topo.nodes[nodes[0]].pool in owned:
                self.times.append(end)
                self.cum.append(self.cum[-1] + run.gpu_equivalents)
        self.queued = 0.0

    def wait_s(self, gpus: float) -> float:
        """Forecast wait of a job of ``gpus`` behind what is queued so far."""
        i = bisect.bisect_left(self.cum, self.queued + gpus - 1e-9)
        if i == 0:
            return 0.0
        if i >= len(self.cum):
            return math.inf
        return max(0.0, self.times[i - 1] - self.now)

    def queue(self, gpus: float) -> None:
        """The job stays in the owned queue: later jobs wait behind it."""
        self.queued += gpus


def wait_budget_s(spec: BurstingSpec, job: PendingJob) -> float:
    """How long a job may be forecast to wait before it is worth renting for: the threshold,
    or a share of its own runtime when that is longer (a long job loses little, relatively,
    by waiting, and is the most expensive to rent for)."""
    runtime = runtime_bound_s(job)
    share = spec.wait_budget_per_runtime * runtime if runtime is not None else 0.0
    return max(spec.queue_wait_threshold_s, share)


# --------------------------------------------------------------------------- decisions
ReasonOf = Callable[[PendingJob], PendingReason | None]


def burstable_waiting(state: SchedulerState, reason_of: ReasonOf,
                      limit: int) -> list[PendingJob]:
    """Up to ``limit`` jobs that wait for capacity (not quota), in the policy's own queue
    order (its static key: priority, then LAS level and gang size under ``grace``), so a
    job's forecast counts only the jobs the scheduler would start before it."""
    out: list[PendingJob] = []
    for _key, jid in heapq.merge(*state.queues.values()):
        job = state.pending[jid]
        r = reason_of(job)
        if r is None or r not in CAPACITY_REASONS:
            continue
        out.append(job)
        if len(out) >= limit:
            break
    return out


def overdue_waiting(state: SchedulerState, reason_of: ReasonOf, spec: BurstingSpec, now: float,
                    skip: set[JobId], limit: int) -> list[PendingJob]:
    """Up to ``limit`` jobs that have already waited past their budget, oldest first.

    ``state.pending`` keeps arrival order, so the walk stops at the first job younger than
    the threshold; it finds the jobs deep in the policy order (big gangs under ``grace``)
    that the forecast pass does not reach."""
    out: list[PendingJob] = []
    for job in state.pending.values():
        waited = now - job.submit_s
        if waited <= spec.queue_wait_threshold_s or len(out) >= limit:
            break
        if job.id in skip or waited <= wait_budget_s(spec, job):
            continue
        r = reason_of(job)
        if r is not None and r in CAPACITY_REASONS:
            out.append(job)
    return out


def plan_bursts(state: SchedulerState, plan: BurstPlan, fleet: CloudFleet,
                reason_of: ReasonOf, now: float,
                traits: Mapping[JobId, JobTraits] | None = None) -> BurstDecisions:
    """Which waiting jobs to burst and which nodes to rent for them.

    A job bursts when the time it has waited plus its forecast wait on owned capacity
    passes its wait budget. Two passes find such jobs: the first ``max_jobs_examined``
    capacity-waiting jobs in the policy's order, with the forecast; then up to as many
    more, oldest first, that have waited past their budget already. A job that bursts
    may use its routed cloud pools: capacity already rented or coming if some is spare,
    else nodes of the offer with its lowest expected cost (the next cheapest when that
    pool is full). A job burst earlier and still waiting keeps its claim."""
    spec = plan.spec
    traits = traits or {}
    out = BurstDecisions()
    waiting = burstable_waiting(state, reason_of, spec.max_jobs_examined)
    if not waiting:
        return out
    # spare rented capacity, in GPUs per offer pool: free on ready nodes, plus nodes coming
    spare: dict[str, float] = {}
    for pool, offer in plan.offers.items():
        free = sum(state.capacity.free_count[n] for n in plan.offer_nodes(offer)
                   if n in fleet.ready)
        spare[pool] = free + fleet.provisioning.get(pool, 0) * offer.gpus_per_node
    wanted: dict[str, tuple[int, list[JobId], float]] = {}

    def rent_for(job: PendingJob, allowed: tuple[str, ...], rented: list[str],
                 job_traits: JobTraits) -> bool:
        """Claim spare rented capacity for ``job``, or rent some; False if no room."""
        covered = next((p for p in rented if spare[p] + 1e-9 >= job.gpu_equivalents), None)
        if covered is None:
            for offer, cost in ranked_offers(plan, job, job_traits):
                nodes = max(1, math.ceil(job.gpu_equivalents / offer.gpus_per_node))
                count, jobs, usd = wanted.get(offer.pool_name, (0, [], 0.0))
                room = min(offer.max_nodes, len(plan.offer_nodes(offer))) \
                    - fleet.provisioned_or_coming(plan, offer) - count
                if nodes <= room:  # else the next cheapest offer with room
                    wanted[offer.pool_name] = (count + nodes, [*jobs, job.id], usd + cost)
                    spare[offer.pool_name] += nodes * offer.gpus_per_node
                    covered = offer.pool_name
                    break
        if covered is None:
            return False
        spare[covered] -= job.gpu_equivalents
        if not any(p in plan.offers for p in (job.pools or ())):
            out.burst.append(BurstJob(job.id, allowed))
        return True

    forecasts: dict[tuple[str, ...], OwnedForecast] = {}
    for job in waiting:
        forecast = forecasts.get(job.models)
        if forecast is None:
            forecast = forecasts[job.models] = OwnedForecast(state, plan, job.models, now)
        job_traits = traits.get(job.id, NO_TRAITS)
        allowed = route(plan, job, job_traits)
        rented = [p for p in allowed if p in plan.offers]
        already = any(p in plan.offers for p in (job.pools or ()))
        waited = max(0.0, now - job.submit_s)
        stays = not rented or (not already and waited + forecast.wait_s(job.gpu_equivalents)
                               <= wait_budget_s(spec, job))
        if stays or not rent_for(job, allowed, rented, job_traits):
            forecast.queue(job.gpu_equivalents)  # it waits for owned capacity
    seen = {j.id for j in waiting}
    for job in overdue_waiting(state, reason_of, spec, now, seen, spec.max_jobs_examined):
        job_traits = traits.get(job.id, NO_TRAITS)
        allowed = route(plan, job, job_traits)
        rented = [p for p in allowed if p in plan.offers]
        if rented:
            rent_for(job, allowed, rented, job_traits)
    out.provision = [ProvisionNodes(plan.offers[p].name, c, tuple(js), usd)
                     for p, (c, js, usd) in wanted.items()]
    return out


def plan_releases(plan: BurstPlan, fleet: CloudFleet, now: float) -> list[ReleaseNodes]:
    """Idle, non-committed rented nodes whose idle time reached ``idle_release_s``."""
    out: list[ReleaseNodes] = []
    for offer in plan.offers.values():
        if offer.kind in COMMITTED:
            continue
        idle = tuple(n for n in plan.offer_nodes(offer)
                     if n in fleet.ready and fleet.ready[n] is not None
                     and now - fleet.ready[n] >= plan.spec.idle_release_s)  # type: ignore[operator]
        if idle:
            out.append(ReleaseNodes(offer.name, idle))
    return out


# --------------------------------------------------------------------------- effects on a state
# The drivers' adapters (``grace.sim.bursting``, ``grace.control.bursting``) never touch the
# driver that calls them: they return effects, and the driver carries them out. These two
# change only a ``SchedulerState``, so both drivers apply them the same way; each adapter
# adds the few effects of its own (a twin event, a live preemption).
@dataclass(frozen=True, slots=True)
class SetNodesUsable:
    """Open or close these nodes (topology indices) to placement: a rented node is placed
    on only while it is provisioned, never before it is ready or after it went back."""

    nodes: tuple[int, ...]
    usable: bool


@dataclass(frozen=True, slots=True)
class RouteJob:
    """Give a waiting job these pools: its owned routed pools when it arrives, its rented
    ones too once the policy bursts it (``BurstJob``)."""

    job_id: JobId
    pools: tuple[str, ...]


def requeue_with_pools(state: SchedulerState, job_id: JobId, pools: tuple[str, ...]) -> None:
    """Carry out a ``RouteJob``: withdraw the waiting job, set its pools and queue it again,
    since pools are part of its shape (the queue a job sits in is keyed by shape)."""
    job = state.withdraw(job_id)
    job.update(pools=pools)
    state.submit(job)
