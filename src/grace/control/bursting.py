"""Live bursting: the reconciler's side of ``core.bursting``, through a ``CloudProvider``.

Once per reconcile cycle, after the snapshot and before ``decide``
(``Reconciler._burst``; steps 1-4 are ``observe``, step 5 ``burst``):

1. the provider's news: ready nodes join the fleet; reclaimed spot nodes leave
   it and the jobs on them are preempted (requeued; they resume from their
   last checkpoint, as any preempted job does);
2. every offer node not provisioned is taken out of the snapshot (unusable:
   ``decide`` cannot place on it);
3. waiting jobs not yet routed get their owned pools from the routing table
   (their JobSpec says whether the data is sensitive and how big it is); the
   policy's ``BurstJob`` decisions later add the rented pools routing allows;
4. idle rented nodes past ``idle_release_s`` go back to the provider;
5. every ``check_interval_s``, ``plan_bursts`` on the stored pending reasons of
   the previous cycle; its requests go to the provider.

Which nodes are rented lives with the provider (the cloud is the truth about
its own instances) and in this object's fleet; after a control-plane restart a
real provider's ``poll`` would report its instances again. The local provider
keeps them in memory only.

``LiveBursting`` owns the provider and the fleet, and nothing of the reconciler's: each
call takes the snapshot's ``SchedulerState``, the clock and plain mappings (stored
pending reasons, the JobSpecs of jobs not yet routed) and returns ``LiveEffect``s, which
the reconciler applies (``Reconciler._apply_cloud_effects``) before the next call: the
policy in ``burst`` must see the jobs that ``observe`` routed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grace.control.providers import CloudProvider
from grace.core.bursting import (
    BurstPlan,
    CloudFleet,
    JobTraits,
    RouteJob,
    SetNodesUsable,
    held_back,
    plan_bursts,
    plan_releases,
    route,
)
from grace.core.decisions import PendingReason
from grace.core.jobs import JobId, PendingJob
from grace.core.state import SchedulerState
from grace.core.topology import Topology
from grace.spec.bursting import BurstingSpec
from grace.spec.cluster import ClusterSpec

SPOT_RECLAIMED = "preempted: the cloud reclaimed its spot node"


@dataclass(frozen=True, slots=True)
class PreemptJob:
    """The cloud reclaimed a spot node this running job holds: requeue it as any preempted
    job is (the reconciler's store and backend are the reconciler's to change)."""

    job_id: int
    reason: str = SPOT_RECLAIMED


#: What ``LiveBursting`` asks the reconciler to do (a closed set), applied in order.
LiveEffect = SetNodesUsable | RouteJob | PreemptJob


class LiveBursting:
    """Rents, routes and releases for one reconciler."""

    def __init__(self, spec: BurstingSpec, cluster: ClusterSpec, topo: Topology,
                 provider: CloudProvider) -> None:
        problems = spec.check_cluster(cluster)
        if problems:
            raise ValueError("bursting does not fit the cluster:\n" + "\n".join(problems))
        self.spec = spec
        self.topo = topo
        self.provider = provider
        self.plan = BurstPlan.build(spec, topo, {p.name: p.kind for p in cluster.pools})
        self.fleet = CloudFleet()
        self.offer_nodes = {n for o in self.plan.offers.values() for n in self.plan.offer_nodes(o)}
        self.traits: dict[JobId, JobTraits] = {}
        self.next_check = -math.inf
        self.requests: list[str] = []  # provider request ids, for the log

    @staticmethod
    def pool_nodes(cluster: ClusterSpec, spec: BurstingSpec) -> dict[str, tuple[str, ...]]:
        """Each offer pool's node names, for a provider that provisions declared nodes."""
        out: dict[str, tuple[str, ...]] = {}
        for o in spec.offers:
            out[o.pool_name] = tuple(n for g in cluster.node_groups
                                     if cluster.pool_of(g) == o.pool_name for n in g.node_names())
        return out

    @staticmethod
    def unrouted(state: SchedulerState) -> list[JobId]:
        """Waiting jobs without pools: ``observe`` needs their JobSpecs (sensitive data,
        dataset size) to route them. The compiled job is cached, so each is routed once."""
        return [j.id for j in state.pending.values() if j.pools is None]

    def observe(self, state: SchedulerState, now: float,
                specs: Mapping[int, Mapping[str, Any]]) -> list[LiveEffect]:
        """Steps 1-4 of the module docstring: the provider's news, unprovisioned nodes out
        of the snapshot, routing of the jobs in ``unrouted`` (``specs``: their JobSpecs by
        job id), idle release. Reads ``state`` as the snapshot built it."""
        topo = self.topo
        out: list[LiveEffect] = []
        report = self.provider.poll()
        for name in report.ready:
            node = topo.by_name[name]
            self.fleet.ready[node] = now
            pool = topo.nodes[node].pool
            self.fleet.provisioning[pool] = max(0, self.fleet.provisioning.get(pool, 0) - 1)
        reclaimed = {topo.by_name[n] for n in report.preempted}
        for node in reclaimed:
            self.fleet.ready.pop(node, None)
        closed = tuple(n for n in self.offer_nodes if n not in self.fleet.ready)
        if closed:
            out.append(SetNodesUsable(closed, False))
        busy: set[int] = set()
        for run in state.running.values():
            nodes = run.placement.nodes(topo)
            busy.update(nodes)
            if reclaimed.intersection(nodes):
                out.append(PreemptJob(int(run.id)))
        out.extend(self._route_new(state, specs))
        for node, since in list(self.fleet.ready.items()):
            if node in busy:
                self.fleet.ready[node] = None
            elif since is None:
                self.fleet.ready[node] = now
        for rel in plan_releases(self.plan, self.fleet, now):
            self.provider.release([topo.nodes[n].name for n in rel.nodes])
            for n in rel.nodes:
                del self.fleet.ready[n]
            out.append(SetNodesUsable(rel.nodes, False))
        return out

    def burst(self, state: SchedulerState, reasons: Mapping[int, str | None],
              now: float) -> list[LiveEffect]:
        """Step 5: every ``check_interval_s``, ``plan_bursts`` on the stored pending reasons
        of the previous cycle (``reasons``, by job id); its requests go to the provider.
        Called once ``observe``'s effects are applied: the policy reads the routed pools."""
        if not (self.spec.enabled and state.pending and now >= self.next_check):
            return []
        self.next_check = now + self.spec.check_interval_s

        def reason_of(job: PendingJob) -> PendingReason | None:
            r = reasons.get(int(job.id))
            if r is None or r not in PendingReason._value2member_map_:
                return None
            return PendingReason(r)

        decisions = plan_bursts(state, self.plan, self.fleet, reason_of, now, self.traits)
        for p in decisions.provision:
            offer = next(o for o in self.plan.offers.values() if o.name == p.offer)
            self.requests.append(self.provider.request_nodes(offer, p.count))
            self.fleet.provisioning[offer.pool_name] = \
                self.fleet.provisioning.get(offer.pool_name, 0) + p.count
        return [RouteJob(b.job_id, b.pools) for b in decisions.burst]

    def _route_new(self, state: SchedulerState,
                   specs: Mapping[int, Mapping[str, Any]]) -> list[RouteJob]:
        """Routed pools for waiting jobs without pools (the owned part; see ``held_back``)."""
        new = [j for j in state.pending.values() if j.pools is None]
        for job in new:
            spec = specs[int(job.id)]  # a job routed without its spec could leak sensitive data
            self.traits[job.id] = JobTraits(bool(spec.get("sensitive_data", False)),
                                            float(spec.get("dataset_gb", 0.0)))
        return [RouteJob(job.id, held_back(self.plan, route(self.plan, job, self.traits[job.id])))
                for job in new]
