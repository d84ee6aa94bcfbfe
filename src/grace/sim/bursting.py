"""Cloud capacity in the twin: rented nodes that arrive late, get preempted and cost money.

The nodes of every offer's cloud pool are in the topology from the start but
unprovisioned: unusable, unbilled, and not counted as the cluster's own
capacity in ``gpu_allocation``. After each scheduling cycle the twin hands the
cycle's pending reasons to ``core.bursting``; its ``BurstJob`` decisions let
jobs onto rented pools (until then a job waits for owned capacity), its
``ProvisionNodes`` become
nodes that turn usable after the offer's provisioning delay, its
``ReleaseNodes`` nodes that turn unusable again. Spot nodes are preempted at the
offer's rate (exponential times, drawn from the run's seed in event order, so a
run repeats exactly); their jobs fail with ``FailureKind.PREEMPTED`` and resume
from their last checkpoint (every ``checkpoint_interval_s``) through the same
restart path as hardware failures, paying ``restart_s`` on the next attempt.

Spend accrues per provisioned node-hour at the offer's price (whole nodes,
from ready to released). Idle time is noticed after each cycle, and a node
still provisioned when the replay ends is billed until its idle timeout.

``TwinCloud`` is given data (the ``SchedulerState``, the cycle's ``DecideResult``, the
simulation's node -> jobs mapping) and returns ``TwinEffect``s; ``Simulation`` applies
them (``_apply_cloud_effects``). So this module imports neither the engine nor its
metrics, and the engine's private methods stay its own.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from grace.core.bursting import (
    BurstPlan,
    CloudFleet,
    JobTraits,
    ProvisionNodes,
    ReleaseNodes,
    RouteJob,
    SetNodesUsable,
    held_back,
    plan_bursts,
    plan_releases,
    route,
)
from grace.core.decisions import DecideResult
from grace.core.jobs import JobId, PendingJob
from grace.core.state import SchedulerState
from grace.core.topology import Topology
from grace.spec.bursting import BurstingSpec, OfferSpec
from grace.spec.cluster import ClusterSpec, PoolKind

_READY, _PREEMPT = 0, 1


@dataclass(frozen=True, slots=True)
class WakeAt:
    """Run a scheduling cycle at ``at``: a node becomes ready, a spot node may be
    preempted, or an idle node reaches its release time, and only a cycle notices."""

    at: float


@dataclass(frozen=True, slots=True)
class PreemptSpot:
    """The cloud took spot node ``node`` back: the jobs on it that still run fail with
    ``FailureKind.PREEMPTED`` (a gang on two preempted nodes fails once)."""

    node: int
    job_ids: tuple[JobId, ...]


@dataclass(frozen=True, slots=True)
class CountRentedGpus:
    """GPUs held on rented nodes after this cycle: ``gpu_allocation`` is the owned
    cluster's, so the metrics leave these out. ``provisioned_gpus`` and ``usd_per_hour``
    are the ready rented nodes' GPUs and hourly price once the cycle's releases are done:
    the report's cloud-GPU and spend-over-time charts (billing is per whole ready node)."""

    gpus: float
    provisioned_gpus: float = 0.0
    usd_per_hour: float = 0.0


#: What ``TwinCloud`` asks the simulation to do (a closed set; ``Simulation`` applies them
#: in order, and the order is the one the adapter's own bookkeeping assumed).
TwinEffect = SetNodesUsable | RouteJob | WakeAt | PreemptSpot | CountRentedGpus

#: Which jobs hold each node: the simulation's ``node_jobs``.
NodeJobs = Mapping[int, Collection[JobId]]


def pool_kinds_of(cluster: ClusterSpec) -> dict[str, PoolKind]:
    return {p.name: p.kind for p in cluster.pools}


@dataclass
class CloudLedger:
    """What renting cost and what it bought."""

    usd_by_kind: dict[str, float] = field(default_factory=dict)
    gpu_hours: float = 0.0
    nodes_provisioned: int = 0
    spot_preemptions: int = 0
    burst_jobs: set[JobId] = field(default_factory=set)

    def bill(self, offer: OfferSpec, seconds: float) -> None:
        hours = max(0.0, seconds) / 3600.0
        gpu_h = hours * offer.gpus_per_node
        self.gpu_hours += gpu_h
        kind = str(offer.kind)
        self.usd_by_kind[kind] = self.usd_by_kind.get(kind, 0.0) + gpu_h * offer.usd_per_gpu_hour

    def summary(self) -> dict[str, Any]:
        return {
            "cloud_usd": sum(self.usd_by_kind.values()),
            "cloud_usd_by_kind": dict(sorted(self.usd_by_kind.items())),
            "cloud_gpu_hours": self.gpu_hours,
            "cloud_nodes_provisioned": self.nodes_provisioned,
            "burst_jobs": len(self.burst_jobs),
            "spot_preemptions": self.spot_preemptions,
        }


class TwinCloud:
    """The twin's side of bursting: provisioning delays, preemptions, billing.

    It keeps its own books (fleet, leases, timers, ledger) and reads the simulation's
    state only through what each call is given; everything that changes the replay comes
    back as ``TwinEffect``s for the simulation to apply, so this module never imports
    the engine (nor the engine's metrics)."""

    def __init__(self, spec: BurstingSpec, topo: Topology, pool_kinds: dict[str, PoolKind],
                 seed: int) -> None:
        self.spec = spec
        self.topo = topo
        self.plan = BurstPlan.build(spec, topo, pool_kinds)
        self.fleet = CloudFleet()
        self.ledger = CloudLedger()
        self.rng = random.Random(f"bursting-{seed}")
        self.node_offer: dict[int, OfferSpec] = {
            n: o for o in self.plan.offers.values() for n in self.plan.offer_nodes(o)}
        self.owned_gpus = sum(n.gpus for n in topo.nodes if n.index not in self.node_offer)
        self.ready_at: dict[int, float] = {}
        self.lease: dict[int, int] = {}  # node -> lease number; stale preemptions are ignored
        self.coming: set[int] = set()
        self._timers: list[tuple[float, int, int, int, int]] = []  # (t, kind, seq, node, lease)
        self._seq = 0
        self.next_check = -math.inf
        self.allocated = 0.0  # GPUs held on rented nodes, after the last cycle
        self.restart_due: set[JobId] = set()  # jobs whose next attempt pays restart_s

    # ----------------------------------------------------------------- set-up
    def unprovision_all(self) -> list[TwinEffect]:
        """Every offer node starts unprovisioned: closed to placement until rented."""
        return [SetNodesUsable(tuple(self.node_offer), False)]

    def route(self, job: PendingJob, traits: JobTraits | None = None) -> tuple[str, ...]:
        """The pools a job starts with: owned ones, until the policy bursts it."""
        return held_back(self.plan, route(self.plan, job, traits or JobTraits()))

    def plan_for(self, job_id: JobId, slowdown: float) -> tuple[float, float, float, float]:
        """The attempt plan when only spot preemptions fail jobs: checkpoints every
        ``checkpoint_interval_s`` (asynchronous, so free), restart cost after a preemption."""
        restart = self.spec.restart_s if job_id in self.restart_due else 0.0
        self.restart_due.discard(job_id)
        return (restart, slowdown, self.spec.checkpoint_interval_s, 0.0)

    # ----------------------------------------------------------------- timers
    def _timer(self, at: float, kind: int, node: int) -> WakeAt:
        self._seq += 1
        heapq.heappush(self._timers, (at, kind, self._seq, node, self.lease.get(node, 0)))
        return WakeAt(at)

    def due(self, now: float, node_jobs: NodeJobs) -> list[TwinEffect]:
        """Nodes that became ready and spot nodes preempted up to ``now``; before the cycle.
        ``node_jobs`` is read as it stands before any of the returned effects is applied."""
        out: list[TwinEffect] = []
        while self._timers and self._timers[0][0] <= now:
            _, kind, _, node, lease = heapq.heappop(self._timers)
            if lease != self.lease.get(node, 0):
                continue
            if kind == _READY:
                self._ready(node, now, out)
            elif node in self.fleet.ready:
                self._preempt(node, now, node_jobs, out)
        return out

    def _ready(self, node: int, now: float, out: list[TwinEffect]) -> None:
        offer = self.node_offer[node]
        self.coming.discard(node)
        self.fleet.provisioning[offer.pool_name] -= 1
        self.fleet.ready[node] = now
        self.ready_at[node] = now
        out.append(SetNodesUsable((node,), True))
        out.append(self._idle_timer(now))
        if offer.preemptions_per_hour > 0:
            wait = self.rng.expovariate(offer.preemptions_per_hour / 3600.0)
            out.append(self._timer(now + wait, _PREEMPT, node))

    def _preempt(self, node: int, now: float, node_jobs: NodeJobs, out: list[TwinEffect]) -> None:
        """Its jobs pay ``restart_s`` on their next attempt; the simulation fails those that
        still run when it applies ``PreemptSpot`` (all of them, unless an earlier preemption
        in the same ``due`` already failed a gang that spans both nodes)."""
        self.ledger.spot_preemptions += 1
        jobs = tuple(sorted(node_jobs.get(node, ())))
        self.restart_due.update(jobs)
        out.append(PreemptSpot(node, jobs))
        self._unprovision(node, now, out)

    def _unprovision(self, node: int, now: float, out: list[TwinEffect]) -> None:
        self.ledger.bill(self.node_offer[node], now - self.ready_at.pop(node))
        del self.fleet.ready[node]
        self.lease[node] = self.lease.get(node, 0) + 1
        out.append(SetNodesUsable((node,), False))

    def _idle_timer(self, now: float) -> WakeAt:
        return WakeAt(now + self.spec.idle_release_s)

    # ----------------------------------------------------------------- each cycle
    def after_cycle(self, state: SchedulerState, now: float, result: DecideResult,
                    node_jobs: NodeJobs) -> list[TwinEffect]:
        """Track idle nodes and the GPUs they hold; release; and, every check interval,
        ask the policy what to rent. ``state`` and ``node_jobs`` are read as they stand
        after the cycle's decisions, before any of the returned effects is applied."""
        out: list[TwinEffect] = []
        fleet = self.fleet
        allocated = 0.0
        cap = state.capacity
        for node in fleet.ready:
            held = node_jobs.get(node)
            allocated += self.topo.nodes[node].gpus - cap.free_count[node]
            if held:
                fleet.ready[node] = None
                self.ledger.burst_jobs.update(held)
            elif fleet.ready[node] is None:
                fleet.ready[node] = now
                out.append(self._idle_timer(now))
        self.allocated = allocated
        if fleet.ready:
            for rel in plan_releases(self.plan, fleet, now):
                self.release(rel, now, node_jobs, out)
        offers = [self.node_offer[n] for n in fleet.ready]
        out.append(CountRentedGpus(allocated, float(sum(o.gpus_per_node for o in offers)),
                                   sum(o.gpus_per_node * o.usd_per_gpu_hour for o in offers)))
        if self.spec.enabled and state.pending and now >= self.next_check:
            self.next_check = now + self.spec.check_interval_s
            # closing released nodes first would not change this: the policy counts free
            # GPUs only on ready rented nodes, and owned capacity only on owned pools
            decisions = plan_bursts(state, self.plan, fleet, result.reason_for, now)
            out.extend(RouteJob(b.job_id, b.pools) for b in decisions.burst)
            for p in decisions.provision:
                self.provision(p, now, out)
        return out

    def provision(self, p: ProvisionNodes, now: float, out: list[TwinEffect]) -> None:
        offer = next(o for o in self.plan.offers.values() if o.name == p.offer)
        free = [n for n in self.plan.offer_nodes(offer)
                if n not in self.fleet.ready and n not in self.coming][:p.count]
        for n in free:
            self.coming.add(n)
            self.lease[n] = self.lease.get(n, 0) + 1
            out.append(self._timer(now + offer.provisioning_delay_s, _READY, n))
        self.fleet.provisioning[offer.pool_name] = \
            self.fleet.provisioning.get(offer.pool_name, 0) + len(free)
        self.ledger.nodes_provisioned += len(free)

    def release(self, rel: ReleaseNodes, now: float, node_jobs: NodeJobs,
                out: list[TwinEffect]) -> None:
        for n in rel.nodes:
            if n in self.fleet.ready and not node_jobs.get(n):
                self._unprovision(n, now, out)

    # ----------------------------------------------------------------- end
    def finish(self, end_s: float) -> dict[str, Any]:
        """Bill nodes still provisioned: idle ones until their idle timeout, busy ones to the end."""
        for node, since in list(self.fleet.ready.items()):
            until = since + self.spec.idle_release_s if since is not None else end_s
            self.ledger.bill(self.node_offer[node], until - self.ready_at[node])
        self.fleet.ready.clear()
        return self.ledger.summary()

