"""The snapshot ``decide`` reads, and the only code that changes it.

``SchedulerState`` holds the free-capacity index, waiting jobs grouped into
queues of identical shape per tenant (so a shape that cannot be placed is
skipped whole), running jobs sorted by expected end (for backfill shadow
times) and by deadline (for runtime limits), and per-tenant usage.

Drivers (the twin's event loop, the live reconciler) call ``submit``,
``apply``, ``finish``, ``set_node_usable``; ``decide`` only reads.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, deque
from dataclasses import dataclass, field

from grace.core.capacity import FreeCapacity, GroupIndex, Placement
from grace.core.decisions import DecideResult
from grace.core.fragmentation import DemandModel, FragmentationIndex
from grace.core.jobs import JobId, PendingJob, RunningJob
from grace.core.las_ready import LevelReadiness
from grace.core.policies import QueuePolicy
from grace.core.quotas import UNLIMITED, TenantQuota
from grace.core.spine_load import SpineLoad
from grace.core.topology import Topology

QueueKey = tuple[str, tuple]  # (tenant, shape)


@dataclass
class TenantUsage:
    gpus: float = 0.0
    preemption_times: deque[float] = field(default_factory=deque)


def victim_key(run: RunningJob) -> tuple:
    """The order preemption displaces running jobs in: lowest priority first, then the
    most recently started (it has the least work since its start to lose)."""
    return (run.priority, -run.start_s, run.id)


class SchedulerState:
    """Everything the policy engine needs for one cycle, kept incrementally."""

    def __init__(self, topo: Topology, policy: QueuePolicy,
                 quotas: dict[str, TenantQuota] | None = None,
                 demand: DemandModel | None = None) -> None:
        """``demand``: the request mix fragmentation-aware packing scores with, when the
        driver keeps it across states (live rebuilds a state every cycle, so it observes
        each arrival once itself); None: this state observes what is submitted to it,
        as the twin's one state for a whole replay does."""
        self.topo = topo
        self.policy = policy
        self.capacity = FreeCapacity(topo)
        self.spine = SpineLoad(topo)  # uplink load of running gangs that cross leaves
        # fragmentation-aware packing: the request mix and host use it scores with
        self.packer = (FragmentationIndex(self.capacity, demand)
                       if policy.packing == "fragmentation" else None)
        self.observes_arrivals = demand is None
        self.quotas: dict[str, TenantQuota] = dict(quotas or {})
        self.pending: dict[JobId, PendingJob] = {}
        self.running: dict[JobId, RunningJob] = {}
        self.queues: dict[QueueKey, list[tuple[tuple, JobId]]] = {}
        # the same queues sorted by runtime estimate, for EASY backfill's time rule
        self.queues_by_estimate: dict[QueueKey, list[tuple[float, tuple, JobId]]] = {}
        self.usage: dict[str, TenantUsage] = {}
        self.ends: list[tuple[float, JobId]] = []
        self.deadlines: list[tuple[float, JobId]] = []
        # what preemption could take, so decide skips the victim scan when nothing qualifies
        self.preemptible_by_priority: Counter[int] = Counter()
        self.preemptible_borrowing = 0
        # preemptible running jobs, cheapest to displace first (lowest priority, then the
        # latest started): least-attained-service preemption reads the first few of them
        self.victim_order: list[tuple[tuple, JobId]] = []
        # from when each preemptible running job is above each attained-service level
        self.las_ready = LevelReadiness(policy, self.running)
        self.groups_by_model: dict[str, list[GroupIndex]] = {}
        self._groups_cache: dict[tuple, list[tuple[str, GroupIndex]]] = {}
        pool_order = {n.pool: i for i, n in reversed(list(enumerate(topo.nodes)))}
        for key in sorted(self.capacity.groups, key=lambda k: (pool_order[k[0]], k[1])):
            self.groups_by_model.setdefault(key[1], []).append(self.capacity.groups[key])

    # ----------------------------------------------------------------- lookups
    def quota(self, tenant: str) -> TenantQuota:
        return self.quotas.get(tenant, UNLIMITED)

    def tenant_usage(self, tenant: str) -> TenantUsage:
        u = self.usage.get(tenant)
        if u is None:
            u = self.usage[tenant] = TenantUsage()
        return u

    def groups_for(self, job: PendingJob) -> list[tuple[str, GroupIndex]]:
        """The (model, group) pairs a job may be placed in, in preference order (cached)."""
        key = (job.models, job.pools)
        out = self._groups_cache.get(key)
        if out is None:
            out = []
            for m in job.models:
                for g in self.groups_by_model.get(m, ()):
                    if job.pools is None or g.key[0] in job.pools:
                        out.append((m, g))
            self._groups_cache[key] = out
        return out

    def _static_key(self, job: PendingJob) -> tuple:
        return self.policy.static_key(job.priority, job.attained_gpu_s, job.gpu_equivalents,
                                      job.submit_s, job.id)

    # ----------------------------------------------------------------- mutation
    def submit(self, job: PendingJob) -> None:
        if job.id in self.pending or job.id in self.running:
            raise ValueError(f"job {job.id} is already known to the scheduler")
        self.pending[job.id] = job
        if self.packer is not None and self.observes_arrivals and not job.restarts:
            self.packer.observe(job)
        qk = (job.tenant, job.shape)
        key = self._static_key(job)
        bisect.insort(self.queues.setdefault(qk, []), (key, job.id))
        est = job.estimate_s if job.estimate_s is not None else math.inf
        bisect.insort(self.queues_by_estimate.setdefault(qk, []), (est, key, job.id))

    def withdraw(self, job_id: JobId) -> PendingJob:
        """Remove a waiting job (cancelled, or started)."""
        job = self.pending.pop(job_id)
        qk = (job.tenant, job.shape)
        q = self.queues[qk]
        key = self._static_key(job)
        i = bisect.bisect_left(q, (key, job.id))
        assert q[i][1] == job.id
        del q[i]
        qe = self.queues_by_estimate[qk]
        est = job.estimate_s if job.estimate_s is not None else math.inf
        j = bisect.bisect_left(qe, (est, key, job.id))
        assert qe[j][2] == job.id
        del qe[j]
        if not q:
            del self.queues[qk]
            del self.queues_by_estimate[qk]
        return job

    def start(self, job_id: JobId, placement: Placement, now: float,
              borrowing: bool = False) -> RunningJob:
        job = self.withdraw(job_id)
        self.capacity.allocate(placement)
        self.spine.add(placement)
        if self.packer is not None:
            self.packer.host_take(job, placement)
        run = RunningJob(
            id=job.id, tenant=job.tenant, placement=placement, start_s=now,
            gpu_equivalents=job.gpu_equivalents, models=job.models, priority=job.priority,
            preemptible=job.preemptible, borrowing=borrowing, estimate_s=job.estimate_s,
            limit_s=job.limit_s, attained_gpu_s=job.attained_gpu_s,
            level_since_s=job.level_since_s, job=job,
        )
        self.running[job.id] = run
        if run.preemptible:
            self.preemptible_by_priority[run.priority] += 1
            self.preemptible_borrowing += run.borrowing
            bisect.insort(self.victim_order, (victim_key(run), run.id))
            self.las_ready.started(run)
        self.tenant_usage(job.tenant).gpus += run.gpu_equivalents
        bisect.insort(self.ends, (run.expected_end_s, run.id))
        if run.limit_s:
            bisect.insort(self.deadlines, (run.deadline_s, run.id))
        return run

    def finish(self, job_id: JobId, now: float) -> RunningJob:
        """A running job ended (completed, failed, stopped): free its GPUs."""
        run = self.running.pop(job_id)
        if run.preemptible:
            self.preemptible_by_priority[run.priority] -= 1
            if not self.preemptible_by_priority[run.priority]:
                del self.preemptible_by_priority[run.priority]
            self.preemptible_borrowing -= run.borrowing
            entry = (victim_key(run), run.id)
            del self.victim_order[bisect.bisect_left(self.victim_order, entry)]
        self.capacity.release(run.placement)
        self.spine.remove(run.placement)
        if self.packer is not None:
            self.packer.host_give(run.id)
        self.tenant_usage(run.tenant).gpus -= run.gpu_equivalents
        i = bisect.bisect_left(self.ends, (run.expected_end_s, run.id))
        del self.ends[i]
        if run.limit_s:
            i = bisect.bisect_left(self.deadlines, (run.deadline_s, run.id))
            del self.deadlines[i]
        run.level_since_s = self.level_since(run, now)
        run.attained_gpu_s += run.gpu_equivalents * max(0.0, now - run.start_s)
        return run

    def level_since(self, run: RunningJob, now: float) -> float:
        """When ``run`` entered the attained-service level it is in at ``now``: the instant
        its service crossed the level's floor, if that happened during this run."""
        policy = self.policy
        before = policy.level(run.attained_gpu_s)
        attained = run.attained_gpu_s + run.gpu_equivalents * max(0.0, now - run.start_s)
        after = policy.level(attained)
        if after == before or run.gpu_equivalents <= 0:
            return run.level_since_s
        floor = policy.level_floor(after)
        return run.start_s + (floor - run.attained_gpu_s) / run.gpu_equivalents

    def requeue(self, run: RunningJob) -> PendingJob:
        """Put a preempted or failed job back in the queue, keeping its attained service."""
        job = run.job
        assert job is not None, "requeue needs the job the run started from"
        job.attained_gpu_s = run.attained_gpu_s
        job.level_since_s = run.level_since_s
        job.restarts += 1
        self.submit(job)
        return job

    def record_preemption(self, tenant: str, now: float) -> None:
        times = self.tenant_usage(tenant).preemption_times
        while times and times[0] <= now - 3600.0:
            times.popleft()  # pruned by the driver, never by decide
        times.append(now)

    def restore_preemptions(self, history: dict[str, list[float]]) -> None:
        """Preemption times a driver kept (live: the store's events), oldest first."""
        for tenant, times in history.items():
            self.tenant_usage(tenant).preemption_times = deque(sorted(times))

    def preemption_budget_left(self, tenant: str, now: float) -> int:
        """Preemptions the tenant may still take in the hour up to ``now`` (read-only)."""
        u = self.usage.get(tenant)
        recent = 0
        if u is not None:
            times = u.preemption_times
            recent = len(times) - bisect.bisect_right(times, now - 3600.0)
        return self.quota(tenant).preemptions_per_hour - recent

    def set_node_usable(self, node: int, usable: bool) -> None:
        self.capacity.set_usable(node, usable)

    def apply(self, result: DecideResult, now: float) -> list[RunningJob]:
        """Carry out a cycle's decisions on this state, in order.

        Stopped jobs release their GPUs; preempted ones also go back to the
        queue with the service they attained. Returns the jobs started.
        """
        for stop in result.stops:
            self.finish(stop.job_id, now)
        for p in result.preemptions:
            run = self.finish(p.job_id, now)
            self.record_preemption(run.tenant, now)
            self.requeue(run)
        return [self.start(s.job_id, s.placement, now, s.borrowing) for s in result.starts]

    # ----------------------------------------------------------------- reports
    def allocated_gpus(self) -> float:
        return sum(u.gpus for u in self.usage.values())
