"""The store's half of Slurm's workflows: hold, release, requeue; the gate's facts.

Like ``repository`` (whose rules hold here: the caller owns the transaction, a
refused change writes nothing, every change is audited with its actor), with the
moves ``scontrol`` makes:

- ``hold``: a pending job only (a running one must be requeued with hold);
- ``release``: a held job;
- ``request_requeue``: a running job is flagged, and the reconciler ends its attempt
  with SIGTERM (it checkpoints) and queues it again, not counted as a failure; an
  ended job (completed, failed, cancelled, timed out, diverged) is pending again at
  once, as ``scontrol requeue`` does for a batch job. ``hold=True`` is requeuehold.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grace.control.store import audit
from grace.control.store import repository as repo
from grace.control.store.errors import IllegalJobTransition
from grace.control.store.models import TERMINAL_JOB_STATES, Job, JobEventKind, JobState
from grace.core.workflow import Dep, Outcome, Parent, WorkflowFacts
from grace.spec.workflow import DependencyKind

#: ``Job.reason`` of a job a user held (the gate's typed reason has the same text).
HELD_REASON = "held"


def hold(session: Session, job: Job, now: float, actor: str = audit.CONTROL_PLANE,
         token_id: str | None = None) -> Job:
    """Hold a pending job: the scheduler never sees it until it is released."""
    if job.state is not JobState.PENDING:
        raise IllegalJobTransition(
            f"job {job.id} is {job.state}: only a pending job can be held (requeue a running "
            "one with hold=true)")
    if job.cancel_requested:
        raise IllegalJobTransition(f"job {job.id} is being cancelled; nothing to hold")
    if not job.held:
        job.held = True
        job.reason = HELD_REASON
        repo.add_event(session, job.id, JobEventKind.HELD, now, {}, actor, token_id)
    return job


def release(session: Session, job: Job, now: float, actor: str = audit.CONTROL_PLANE,
            token_id: str | None = None) -> Job:
    """Release a held job: it is offered to the scheduler from the next cycle."""
    if not job.held:
        raise IllegalJobTransition(f"job {job.id} is not held ({job.state}); nothing to release")
    job.held = False
    if job.state is JobState.PENDING:
        job.reason = None  # the next cycle writes why it still waits
    repo.add_event(session, job.id, JobEventKind.RELEASED, now, {}, actor, token_id)
    return job


def request_requeue(session: Session, job: Job, now: float, held: bool = False,
                    actor: str = audit.CONTROL_PLANE, token_id: str | None = None) -> bool:
    """Requeue ``job``; True if done now (it had ended), False if the reconciler will
    (it runs). A pending job cannot be requeued (it is queued already)."""
    if job.state is JobState.PENDING:
        raise IllegalJobTransition(
            f"job {job.id} is pending: it is queued already (hold it to keep it from starting)")
    if job.cancel_requested and not job.is_terminal:
        raise IllegalJobTransition(f"job {job.id} is being cancelled; it cannot be requeued")
    if job.state in TERMINAL_JOB_STATES:
        was = job.state
        job.state, job.ended_at = JobState.PENDING, None
        job.cancel_requested, job.requeue_requested = False, False
        job.launch_failures = 0
        job.held = held
        job.reason = HELD_REASON if held else None
        repo.add_event(session, job.id, JobEventKind.REQUEUED, now,
                       {"from": was.value, "to": JobState.PENDING.value, "held": held,
                        "reason": f"requeued by {actor}"}, actor, token_id)
        return True
    job.requeue_requested = True
    job.held = job.held or held
    audit.append(session, actor, audit.AuditAction.JOB_REQUEUE_REQUESTED,
                 audit.job_target(job.id), audit.AuditOutcome.OK, now, token_id,
                 {"held": held})
    return False


def requeue_requested(session: Session) -> list[Job]:
    """Jobs a user asked to requeue whose request the reconciler has not carried out."""
    return list(session.scalars(select(Job).where(Job.requeue_requested.is_(True))
                                .order_by(Job.id)))


def facts(job: Job) -> WorkflowFacts:
    """The job as the gate sees it (its dependencies are in the spec, the rest in columns)."""
    return facts_of(job.id, job.held, job.spec_json, job.array_id, job.array_index,
                    job.array_limit)


def facts_of(job_id: int, held: bool, spec_json: dict[str, Any], array_id: int | None,
             array_index: int | None, array_limit: int | None) -> WorkflowFacts:
    """``facts`` from the columns themselves (the reconciler's mirror reads no ORM rows)."""
    deps = tuple(Dep(DependencyKind(d["kind"]), int(d["job"]))
                 for d in spec_json.get("dependency") or ())
    return WorkflowFacts(job_id, bool(held), deps, array_id, array_index or 0, array_limit)


def has_workflow(job: Job) -> bool:
    return flows_in(job.held, job.spec_json, job.array_limit)


def flows_in(held: bool, spec_json: dict[str, Any], array_limit: int | None) -> bool:
    """Does the workflow gate have a say over the job (held, a dependency, an array limit)?"""
    return bool(held or spec_json.get("dependency") or array_limit)


_OUTCOME = {JobState.PENDING: Outcome.NOT_ENDED, JobState.RUNNING: Outcome.NOT_ENDED,
            JobState.COMPLETED: Outcome.SUCCEEDED}


def parents(session: Session, ids: Iterable[int]) -> dict[int, Parent]:
    """The outcome of each job in ``ids`` that exists (one query). A job array's id
    stands for all its tasks, as in Slurm: ended when every task has, succeeded when
    every task did (the first that did not names the state and reason)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = session.execute(select(Job.id, Job.state, Job.reason, Job.array_id, Job.array_kind)
                           .where(Job.id.in_(wanted) | Job.array_id.in_(wanted))
                           .order_by(Job.id))
    tasks: dict[int, list[Parent]] = {}
    for jid, state, reason, group, kind in rows:
        parent = Parent(_OUTCOME.get(JobState(state), Outcome.FAILED), _verb(JobState(state)),
                        reason)
        array = kind == "array" and group is not None
        if jid in wanted and not (array and jid == group):
            tasks.setdefault(jid, []).append(parent)
        if array and group in wanted:
            tasks.setdefault(group, []).append(parent)
    return {key: _all_of(found) for key, found in tasks.items()}


def _all_of(tasks: list[Parent]) -> Parent:
    for outcome in (Outcome.NOT_ENDED, Outcome.FAILED):
        first = next((p for p in tasks if p.outcome is outcome), None)
        if first is not None:
            return first
    return tasks[0]


def active_in_groups(session: Session, groups: Iterable[int | None],
                     holding: set[int]) -> dict[int, int]:
    """How many of each group's tasks hold GPUs (``holding``: the jobs with a live
    attempt this cycle, including one still ending after a preemption)."""
    wanted = [g for g in groups if g is not None]
    out: dict[int, int] = {}
    rows = session.execute(select(Job.id, Job.array_id).where(Job.array_id.in_(wanted)))
    for jid, group in rows:
        if jid in holding and group is not None:
            out[group] = out.get(group, 0) + 1
    return out


def _verb(state: JobState) -> str:
    return {JobState.PENDING: "is pending", JobState.RUNNING: "is running",
            JobState.CANCELLED: "was cancelled"}.get(state, str(state))


__all__ = ["HELD_REASON", "active_in_groups", "facts", "has_workflow", "hold", "parents", "release",
           "request_requeue", "requeue_requested"]
