"""The store's rows for one cycle, as core's ``SchedulerState``: read, never written.

Jobs that no longer compile against the cluster and live attempts of such jobs
are reported back (``failed``, ``unplaceable``) for ``apply`` to record: the
view itself is one read transaction, so on SQLite it never holds the write
lock that every submission needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from grace.control.live.context import LiveContext
from grace.control.snapshot import DemandTracker, RunningEntry, build_state, nodes_to_placement
from grace.control.store import exclusions
from grace.control.store import repository as repo
from grace.control.store import workflow as flows
from grace.control.store.models import Job, JobState
from grace.core.health import IN_SERVICE, NodeState
from grace.core.jobs import JobCompileError, JobId, PendingJob
from grace.core.quotas import TenantQuota
from grace.core.service import attained_from_attempts
from grace.core.state import SchedulerState
from grace.core.workflow import NeverSatisfied, gate

#: Core counts preemptions per tenant over the last hour (``SchedulerState``).
PREEMPTION_WINDOW_S = 3600.0


@dataclass
class CycleView:
    state: SchedulerState
    pending: dict[JobId, PendingJob]
    reasons: dict[int, str | None]  # as stored: only changes are written back
    failed: list[tuple[int, str]] = field(default_factory=list)  # cannot run here any more
    unplaceable: list[tuple[int, int]] = field(default_factory=list)  # their live attempts
    # the workflow gate (core.workflow): pending jobs not offered to decide, and why; jobs
    # whose dependency can never be met (apply cancels them, or fails a preflight's)
    gated: dict[int, str] = field(default_factory=dict)
    never: list[NeverSatisfied] = field(default_factory=list)


def quotas(s: Session) -> dict[str, TenantQuota]:
    inf = float("inf")
    return {t.name: TenantQuota(
        guaranteed_gpus=t.guaranteed_gpus if t.guaranteed_gpus is not None else inf,
        borrow_limit_gpus=t.borrow_limit_gpus if t.borrow_limit_gpus is not None else inf,
        weight=t.weight, preemptions_per_hour=t.preemptions_per_hour) for t in repo.tenants(s)}


class ViewBuilder:
    def __init__(self, ctx: LiveContext) -> None:
        self.ctx = ctx
        self.demand = DemandTracker(ctx.topo) if ctx.policy.packing == "fragmentation" else None

    def compile(self, job: Job, now: float, failed: list[tuple[int, str]]) -> PendingJob | None:
        """The job as core sees it; None, and the job noted in ``failed``, if it can no
        longer run on this cluster."""
        try:
            return self.ctx.compiler.compile(job.id, job.restarts, job.spec_json,
                                             job.submitted_at, exclusions.active_names(job, now))
        except JobCompileError as e:
            if job.state in (JobState.PENDING, JobState.RUNNING):
                failed.append((job.id, str(e)))
            return None

    def build(self, now: float) -> CycleView:
        failed: list[tuple[int, str]] = []
        with self.ctx.store.read() as s:
            unusable = {n.name for n in repo.nodes(s) if NodeState(n.state) not in IN_SERVICE}
            # every live attempt holds its GPUs, even one whose job was just preempted or
            # stopped and whose processes are still ending; such a job waits for them
            running: list[RunningEntry] = []
            ending: list[RunningEntry] = []
            holding: set[int] = set()
            unplaceable: list[tuple[int, int]] = []
            for a in repo.running_attempts(s):
                if a.job_id in holding:
                    continue
                pj = self.compile(a.job, now, failed)
                if pj is None:
                    unplaceable.append((a.job_id, a.number))
                    continue
                holding.add(a.job_id)
                (running if a.job.state == JobState.RUNNING else ending).append(
                    (pj, nodes_to_placement(self.ctx.topo, a.placement_json),
                     a.started_at or now, bool(a.borrowing)))
            pending: dict[JobId, PendingJob] = {}
            reasons: dict[int, str | None] = {}
            flowing: list[Job] = []
            for job in repo.jobs_in_states(s, [JobState.PENDING]):
                if job.id in holding:
                    continue
                pj = self.compile(job, now, failed)
                if pj is not None:
                    pending[JobId(job.id)] = pj
                    reasons[job.id] = job.reason
                    if flows.has_workflow(job):
                        flowing.append(job)
            gated, never = self._gate(s, flowing, running + ending, pending)
            self._with_service(s, [e[0] for e in running + ending] + list(pending.values()))
            self._catch_up(s, now)
            state = build_state(self.ctx.topo, self.ctx.policy, quotas(s), running,
                                list(pending.values()), unusable, ending,
                                repo.recent_preemptions(s, now - PREEMPTION_WINDOW_S),
                                self.demand.demand if self.demand else None)
        return CycleView(state, pending, reasons, failed, unplaceable, gated, never)

    @staticmethod
    def _gate(s: Session, jobs: list[Job], holding: list[RunningEntry],
              pending: dict[JobId, PendingJob]) -> tuple[dict[int, str], list[NeverSatisfied]]:
        """Take out of ``pending`` the jobs core's workflow gate does not admit this cycle
        (held, waiting on a dependency, over their array's limit); their reasons, and the
        jobs whose dependency can never be met, come back for ``apply`` to record."""
        if not jobs:
            return {}, []
        groups = {j.array_id for j in jobs if j.array_limit}
        active: dict[int, int] = {}
        if groups:
            held = {int(e[0].id) for e in holding}
            for group, count in flows.active_in_groups(s, groups, held).items():
                active[group] = count
        facts = [flows.facts(j) for j in jobs]
        parents = flows.parents(s, (d.job for f in facts for d in f.dependencies))
        result = gate(facts, parents, active)
        for jid in [*result.waiting, *(n.job_id for n in result.never)]:
            pending.pop(JobId(jid), None)
        return {j: str(r) for j, r in result.waiting.items()}, result.never

    def _with_service(self, s: Session, jobs: list[PendingJob]) -> None:
        """Give requeued jobs the service their ended attempts attained, as the twin's
        state keeps it (least-attained-service policies order and preempt by it)."""
        if not self.ctx.policy.las_ordered:
            return
        spans = repo.ended_attempt_spans(s, [j.id for j in jobs])
        for j in jobs:
            if j.id in spans:
                j.attained_gpu_s, j.level_since_s = attained_from_attempts(
                    self.ctx.policy, spans[j.id])

    def _catch_up(self, s: Session, now: float) -> None:
        """Count jobs submitted since the last cycle in the packer's request mix."""
        if self.demand is None:
            return
        newer = repo.jobs_after(s, self.demand.last_id)
        self.demand.catch_up((j.id, self.compile(j, now, [])) for j in newer)


__all__ = ["PREEMPTION_WINDOW_S", "CycleView", "ViewBuilder", "quotas"]
