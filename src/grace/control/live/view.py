"""The store's rows for one cycle, as core's ``SchedulerState``: read, never written.

Jobs that no longer compile against the cluster and live attempts of such jobs
are reported back (``failed``, ``unplaceable``) for ``apply`` to record: the
view itself is one read transaction, so on SQLite it never holds the write
lock that every submission needs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum

from sqlalchemy.orm import Session

from grace.control.live.context import LiveContext
from grace.control.live.mirror import JobRow, StoreMirror
from grace.control.live.view_check import differences
from grace.control.snapshot import DemandTracker, RunningEntry, _free, nodes_to_placement
from grace.control.store import changes, exclusions
from grace.control.store import repository as repo
from grace.control.store import workflow as flows
from grace.control.store.models import Job, JobState
from grace.core.decisions import DecideResult
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


class Slot(StrEnum):
    """How a job is in the kept ``SchedulerState``."""

    RUNNING = "running"  # its live attempt's job runs: it holds its placement
    ENDING = "ending"  # a live attempt of a job stopped or preempted: holds it until it ends
    PENDING = "pending"  # waiting, offered to decide


class ViewBuilder:
    """Core's snapshot of the store, kept across cycles and brought up to date by deltas.

    The first cycle builds the state from every live job; later ones take the jobs the
    change feed names (``StoreMirror``), take each out of the state and put it back as the
    store now says. Some jobs are re-read every cycle whatever the feed says, because
    what they are in the snapshot depends on more than their own rows: ones whose attempt
    is still ending (they hold GPUs only where no running job took them), ones the
    workflow gate judges (a parent's end admits them), ones with time-limited node
    exclusions, ones that did not compile, and ones the last ``decide`` named (the store
    says whether their start or end was carried out). ``incremental = False`` builds
    from scratch every cycle (cloud bursting edits the snapshot it is given)."""

    def __init__(self, ctx: LiveContext, mirror: StoreMirror | None = None) -> None:
        self.ctx = ctx
        self.mirror = mirror if mirror is not None else StoreMirror()
        self.demand = DemandTracker(ctx.topo) if ctx.policy.packing == "fragmentation" else None
        self.incremental = True
        self.state: SchedulerState | None = None
        self._slots: dict[int, Slot] = {}
        self._unusable: set[str] = set()
        self._again: set[int] = set()  # jobs to re-read next cycle (see the class docstring)
        self._flowing: set[int] = set()  # waiting jobs the workflow gate has a say over
        self._excluded: set[int] = set()  # waiting jobs with node exclusions (they expire)
        self._ending: set[int] = set()  # jobs with a live attempt but not running
        self._reasons: dict[int, str | None] = {}  # waiting jobs' stored reasons

    def compile(self, job: Job | JobRow, now: float,
                failed: list[tuple[int, str]]) -> PendingJob | None:
        """The job as core sees it; None, and the job noted in ``failed``, if it can no
        longer run on this cluster."""
        try:
            return self.ctx.compiler.compile(job.id, job.restarts, job.spec_json,
                                             job.submitted_at,
                                             exclusions.names_in_force(job.exclude_nodes, now))
        except JobCompileError as e:
            if job.state in (JobState.PENDING, JobState.RUNNING):
                failed.append((job.id, str(e)))
            return None

    def decided(self, result: DecideResult) -> None:
        """The jobs ``decide`` named are re-read next cycle: what was carried out is the
        store's to say (a launch may fail, a job may end meanwhile)."""
        self._again.update(int(x.job_id) for x in result.starts)
        self._again.update(int(x.job_id) for x in result.stops)
        self._again.update(int(x.job_id) for x in result.preemptions)

    def build(self, now: float) -> CycleView:
        checking = self.verify and self.incremental
        with self.ctx.store.read() as s:
            clock = changes.current(s) if checking else 0  # before anything else is read
            self.mirror.refresh(s)
            changed = self.mirror.take_changed()
            state = self.state
            if state is None or not self.incremental:
                state = SchedulerState(self.ctx.topo, self.ctx.policy, quotas(s),
                                       self.demand.demand if self.demand else None)
                self._slots.clear()
                self._unusable = set()
                self._flowing.clear()
                self._excluded.clear()
                self._ending.clear()
                self._reasons.clear()
                dirty = set(self.mirror.jobs)
            else:
                state.quotas = quotas(s)
                dirty = changed | self._again | self._flowing | self._excluded | self._ending
                for job_id in dirty:
                    self._take_out(state, job_id, now)
            self._again = set()
            self._set_usable(s, state)
            for u in state.usage.values():
                u.preemption_times.clear()
            state.restore_preemptions(repo.recent_preemptions(s, now - PREEMPTION_WINDOW_S))
            self._catch_up(s, now)
            view = self._put_back(s, state, sorted(dirty), now)
        self.state = state if self.incremental else None
        if checking:
            # what this build read that a concurrent write could change, as it read it
            self._check(view, now, (clock, sorted(state.quotas.items()),
                                    sorted(self._unusable)))
        return view

    #: after each build, compare with a snapshot built from scratch and raise if they
    #: differ (tests/conftest.py sets it for the suite; the cost is a full build)
    #: ``GRACE_VERIFY_VIEWS=1`` in the environment sets it in every process (``grace up``
    #: started by a test too)
    verify = os.environ.get("GRACE_VERIFY_VIEWS") == "1"

    def _store_mark(self) -> tuple[object, ...]:
        """What a build reads that a concurrent write can change: the change clock (every
        job write moves it; the kept build read it first), the tenants' quotas and the
        nodes out of service. The same after the fresh build as the kept build read them:
        both builds read the same store."""
        with self.ctx.store.read() as s:
            return (changes.current(s), sorted(quotas(s).items()),
                    sorted(n for n in repo.node_names_out_of_service(s)
                           if n in self.ctx.topo.by_name))

    def _check(self, view: CycleView, now: float, before: tuple[object, ...]) -> None:
        fresh_builder = ViewBuilder(self.ctx, StoreMirror())
        fresh_builder.verify = False
        fresh_builder.demand = self.demand  # caught up already: reads nothing more
        fresh = fresh_builder.build(now)
        wrong = differences(view.state, fresh.state, now)
        for part in ("pending", "reasons", "failed", "unplaceable", "gated", "never"):
            mine, theirs = getattr(view, part), getattr(fresh, part)
            if (sorted(mine) if part == "pending" else mine) != (
                    sorted(theirs) if part == "pending" else theirs):
                wrong.append(f"view.{part}: kept {mine!r:.400} but fresh {theirs!r:.400}")
        if wrong and self._store_mark() == before:
            # a write that lands between the two builds (an API request while the loop
            # runs) is not a fault of the kept snapshot: the next cycle checks again
            raise AssertionError("the kept snapshot differs from a fresh one:\n"
                                 + "\n".join(wrong))

    def _take_out(self, state: SchedulerState, job_id: int, now: float) -> None:
        slot = self._slots.pop(job_id, None)
        self._flowing.discard(job_id)
        self._excluded.discard(job_id)
        self._ending.discard(job_id)
        self._reasons.pop(job_id, None)
        if slot is Slot.PENDING:
            state.withdraw(JobId(job_id))
        elif slot is not None:
            state.finish(JobId(job_id), now)

    def _set_usable(self, s: Session, state: SchedulerState) -> None:
        """Nodes out of service (drained, failed, diagnosing) are out of placement."""
        unusable = {n for n in repo.node_names_out_of_service(s) if n in self.ctx.topo.by_name}
        for name in unusable ^ self._unusable:
            state.set_node_usable(self.ctx.topo.by_name[name], name not in unusable)
        self._unusable = unusable

    def _put_back(self, s: Session, state: SchedulerState, ids: list[int],
                  now: float) -> CycleView:
        """Put ``ids`` (taken out, or never in) into ``state`` as the mirror says: running
        attempts first, then ending ones where their GPUs are still free, then the waiting
        jobs the workflow gate admits. Returns the cycle's view."""
        mirror = self.mirror
        failed: list[tuple[int, str]] = []
        unplaceable: list[tuple[int, int]] = []
        running: list[tuple[int, RunningEntry]] = []
        ending: list[tuple[int, RunningEntry]] = []
        pending: dict[JobId, PendingJob] = {}
        flowing: list[JobRow] = []
        for job_id in ids:
            row = mirror.jobs.get(job_id)
            if row is None:
                continue
            attempt = mirror.attempts.get(job_id)
            pj = self.compile(row, now, failed)
            if pj is None:
                self._again.add(job_id)
                if attempt is not None:
                    unplaceable.append((job_id, attempt.number))
                continue
            if attempt is not None:
                entry: RunningEntry = (pj, nodes_to_placement(self.ctx.topo,
                                                              attempt.placement_json),
                                       attempt.started_at or now, attempt.borrowing)
                (running if row.state == JobState.RUNNING else ending).append((job_id, entry))
            elif row.state == JobState.PENDING:
                pending[JobId(job_id)] = pj
                self._reasons[job_id] = row.reason
                if row.exclude_nodes:
                    self._excluded.add(job_id)
                if flows.flows_in(row.held, row.spec_json, row.array_limit):
                    flowing.append(row)
                    self._flowing.add(job_id)
        holding = set(mirror.attempts) - {job_id for job_id, _ in unplaceable}
        gated, never = self._gate(s, flowing, holding, pending)
        self._with_service(s, [e[1][0] for e in running + ending] + list(pending.values()))
        for job_id, (job, placement, started_at, *borrowing) in running:
            state.submit(job)
            state.start(JobId(job_id), placement, started_at, bool(borrowing and borrowing[0]))
            self._slots[job_id] = Slot.RUNNING
        for job_id, (job, placement, started_at, *borrowing) in ending:
            self._ending.add(job_id)
            if _free(state.capacity, placement):
                state.submit(job)
                state.start(JobId(job_id), placement, started_at,
                            bool(borrowing and borrowing[0]))
                self._slots[job_id] = Slot.ENDING
        for job_id, job in pending.items():
            state.submit(job)
            self._slots[int(job_id)] = Slot.PENDING
        return CycleView(state, state.pending, self._reasons, failed, unplaceable, gated, never)

    @staticmethod
    def _gate(s: Session, jobs: list[JobRow], holding: set[int],
              pending: dict[JobId, PendingJob]) -> tuple[dict[int, str], list[NeverSatisfied]]:
        """Take out of ``pending`` the jobs core's workflow gate does not admit this cycle
        (held, waiting on a dependency, over their array's limit); their reasons, and the
        jobs whose dependency can never be met, come back for ``apply`` to record."""
        if not jobs:
            return {}, []
        groups = {j.array_id for j in jobs if j.array_limit}
        active: dict[int, int] = {}
        if groups:
            for group, count in flows.active_in_groups(s, groups, holding).items():
                active[group] = count
        facts = [flows.facts_of(j.id, j.held, j.spec_json, j.array_id, j.array_index,
                                j.array_limit) for j in jobs]
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
