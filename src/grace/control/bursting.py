"""Live bursting: the reconciler's side of ``core.bursting``, through a ``CloudProvider``.

Once per reconcile cycle, after the snapshot and before ``decide``
(``Reconciler._burst``):

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from grace.control.providers import CloudProvider
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.core.bursting import (
    BurstJob,
    BurstPlan,
    CloudFleet,
    JobTraits,
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

    def cycle(self, rec: object, state: SchedulerState, reasons: Mapping[int, str | None],
              now: float) -> None:
        """One bursting step for the reconciler ``rec`` (see the module docstring)."""
        topo = self.topo
        report = self.provider.poll()
        for name in report.ready:
            node = topo.by_name[name]
            self.fleet.ready[node] = now
            pool = topo.nodes[node].pool
            self.fleet.provisioning[pool] = max(0, self.fleet.provisioning.get(pool, 0) - 1)
        reclaimed = {topo.by_name[n] for n in report.preempted}
        for node in reclaimed:
            self.fleet.ready.pop(node, None)
        for node in self.offer_nodes:
            if node not in self.fleet.ready:
                state.set_node_usable(node, False)
        busy: set[int] = set()
        for run in state.running.values():
            nodes = run.placement.nodes(topo)
            busy.update(nodes)
            if reclaimed.intersection(nodes):
                rec._preempt(int(run.id), now,  # type: ignore[attr-defined]
                             "preempted: the cloud reclaimed its spot node")
        self._route_new(rec.store, state)  # type: ignore[attr-defined]
        for node, since in list(self.fleet.ready.items()):
            if node in busy:
                self.fleet.ready[node] = None
            elif since is None:
                self.fleet.ready[node] = now
        for rel in plan_releases(self.plan, self.fleet, now):
            self.provider.release([topo.nodes[n].name for n in rel.nodes])
            for n in rel.nodes:
                del self.fleet.ready[n]
                state.set_node_usable(n, False)
        if self.spec.enabled and state.pending and now >= self.next_check:
            self.next_check = now + self.spec.check_interval_s

            def reason_of(job: PendingJob) -> PendingReason | None:
                r = reasons.get(int(job.id))
                return PendingReason(r) if r in PendingReason._value2member_map_ else None

            decisions = plan_bursts(state, self.plan, self.fleet, reason_of, now, self.traits)
            for b in decisions.burst:
                self._requeue(state, b)
            for p in decisions.provision:
                offer = next(o for o in self.plan.offers.values() if o.name == p.offer)
                self.requests.append(self.provider.request_nodes(offer, p.count))
                self.fleet.provisioning[offer.pool_name] = \
                    self.fleet.provisioning.get(offer.pool_name, 0) + p.count

    def _route_new(self, store: Store, state: SchedulerState) -> None:
        """Give waiting jobs without pools their routed pools (queued again: pools are part
        of a job's shape). The compiled job is cached, so each job is routed once."""
        new = [j for j in state.pending.values() if j.pools is None]
        if not new:
            return
        with store.read() as s:
            for job in new:
                spec = repo.get_job(s, int(job.id)).spec_json
                self.traits[job.id] = JobTraits(bool(spec.get("sensitive_data", False)),
                                                float(spec.get("dataset_gb", 0.0)))
        for job in new:
            pools = held_back(self.plan, route(self.plan, job, self.traits[job.id]))
            self._requeue(state, BurstJob(job.id, pools))

    @staticmethod
    def _requeue(state: SchedulerState, b: BurstJob) -> None:
        """Set a waiting job's pools; queued again since pools are part of its shape. The
        compiled job is the cached one, so later snapshots keep them."""
        job = state.withdraw(b.job_id)
        job.pools = b.pools
        job.shape = ()
        job.__post_init__()
        state.submit(job)
