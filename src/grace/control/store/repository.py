"""Every read and write the control plane makes, as small functions on a ``Session``.

The caller owns the transaction (``Store.transaction()``): a function here
never commits, so several of them compose into one all-or-nothing change
(e.g. end an attempt, record why, and requeue the job). Each function checks
its own preconditions and raises before writing anything, so a refused change
leaves the transaction as it was.

Invariants kept here (and, where SQL can, by the schema):

- a job moves only along ``JOB_TRANSITIONS``; terminal states are final;
- a job is RUNNING only while it has a live attempt: ``start_attempt`` is the
  one way into RUNNING, and it refuses while an earlier attempt is still live
  (also a unique index), so no job ever runs twice;
- a job may leave RUNNING before its attempt has ended (the decision to
  preempt or stop is committed first, then the backend is told): such an
  attempt is listed by ``orphaned_attempts`` until ``end_attempt`` records it;
- every job state change writes a ``JobEvent``, every node move a ``NodeEvent``;
- every job state change someone asked to hear of (``notify:``, a tenant's webhooks)
  writes its notification rows in the same transaction (``control.notify.outbox``);
- every job event, node move, health signal, quota change and cancel request also
  appends an audit entry (``store.audit``) naming its actor (``grace``, or the
  token's name and id the API passes), in the same transaction;
- every job update bumps ``Job.version`` (SQLAlchemy's version counter).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import event, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, selectinload

from grace.control.notify import outbox
from grace.control.store import audit, exclusions
from grace.control.store.errors import IllegalJobTransition, NotFound, StaleWrite
from grace.control.store.models import (
    LIVE_ATTEMPT_STATES,
    TERMINAL_JOB_STATES,
    Attempt,
    AttemptState,
    EndCause,
    HealthSignalRow,
    Job,
    JobEvent,
    JobEventKind,
    JobState,
    Node,
    NodeEvent,
    StoreMeta,
    Tenant,
)
from grace.core.health import IN_SERVICE, NodeState, check_transition
from grace.core.quotas import TenantQuota
from grace.spec.job import JobSpec

_J = JobState
#: Every allowed job move. Anything else raises IllegalJobTransition.
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # placed (only through start_attempt); cancelled before it ran; failed without running
    # (e.g. it can no longer compile against the cluster)
    _J.PENDING: frozenset({_J.RUNNING, _J.CANCELLED, _J.FAILED}),
    # requeued (restart, preemption, lost processes); or one of the ends
    _J.RUNNING: frozenset({_J.PENDING, _J.COMPLETED, _J.FAILED, _J.CANCELLED, _J.DIVERGED}),
    _J.COMPLETED: frozenset(),
    _J.FAILED: frozenset(),
    _J.CANCELLED: frozenset(),
    _J.DIVERGED: frozenset(),
}

#: The event a job move records when the caller names none.
DEFAULT_EVENT: dict[JobState, JobEventKind] = {
    _J.PENDING: JobEventKind.REQUEUED,
    _J.RUNNING: JobEventKind.PLACED,
    _J.COMPLETED: JobEventKind.COMPLETED,
    _J.FAILED: JobEventKind.FAILED,
    _J.CANCELLED: JobEventKind.CANCELLED,
    _J.DIVERGED: JobEventKind.DIVERGED,
}

#: Job fields update_job_checked may change; state and counters have their own functions.
CHECKED_FIELDS = frozenset({"priority", "exclude_nodes", "reason"})

_ENDED_ATTEMPT_STATES = frozenset(AttemptState) - LIVE_ATTEMPT_STATES


def check_job_transition(job_id: int, frm: JobState, to: JobState) -> None:
    """Raise ``IllegalJobTransition`` (a ValueError) naming the allowed moves."""
    if to not in JOB_TRANSITIONS[frm]:
        allowed = sorted(s.value for s in JOB_TRANSITIONS[frm]) or "none: it has ended"
        raise IllegalJobTransition(f"job {job_id}: {frm} -> {to} is not allowed; from {frm}: {allowed}")


# ---------------------------------------------------------------- events
def add_event(session: Session, job_id: int, kind: JobEventKind, now: float,
              detail: dict[str, Any] | None = None, actor: str = audit.CONTROL_PLANE,
              token_id: str | None = None) -> JobEvent:
    """Append one line to a job's history, and to the audit trail (``job.<kind>``)."""
    event = JobEvent(job_id=job_id, kind=JobEventKind(kind), at=now, detail=dict(detail or {}),
                     actor=actor)
    session.add(event)
    audit.append(session, actor, audit.job_action(event.kind), audit.job_target(job_id),
                 audit.AuditOutcome.OK, now, token_id, event.detail)
    return event


def events(session: Session, job_id: int) -> list[JobEvent]:
    """A job's history, oldest first (in the order the store recorded it)."""
    return list(session.scalars(select(JobEvent).where(JobEvent.job_id == job_id)
                                .order_by(JobEvent.id)))


# ---------------------------------------------------------------- tenants and quotas
#: ``session.info`` key: the tenant rows ``ensure_tenant`` found in this transaction
_TENANTS_HELD = "grace.tenants_held"


@event.listens_for(Session, "after_soft_rollback")
def _forget_held_tenants(session: Session, _previous: Any) -> None:
    """A rollback, a savepoint's included, may have taken back a tenant row inserted in
    it: ``ensure_tenant`` reads again rather than trust what it held."""
    session.info.pop(_TENANTS_HELD, None)


def ensure_tenant(session: Session, name: str) -> Tenant:
    """The tenant row, created unlimited (like core's UNLIMITED) if it is new.

    INSERT ... ON CONFLICT DO NOTHING: two first submissions of a new tenant
    racing on PostgreSQL both succeed instead of one failing on the key.

    The row is kept in ``session.info`` for the rest of the transaction: the session's
    identity map holds rows weakly, so a group of submissions (``store.group_commit``)
    otherwise read the same tenant once per job, each read flushing what was pending.
    """
    held: dict[str, Tenant] = session.info.setdefault(_TENANTS_HELD, {})
    tenant = held.get(name)
    if tenant is not None:
        return tenant
    tenant = session.get(Tenant, name)
    if tenant is not None:
        held[name] = tenant
        return tenant
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(insert(Tenant).values(name=name, guaranteed_gpus=None, borrow_limit_gpus=None,
                                          weight=1.0, preemptions_per_hour=20)
                    .on_conflict_do_nothing(index_elements=["name"]))
    tenant = session.get(Tenant, name)
    assert tenant is not None
    held[name] = tenant
    return tenant


def set_quota(session: Session, tenant: str, guaranteed_gpus: float | None = None,
              borrow_limit_gpus: float | None = None, weight: float = 1.0,
              preemptions_per_hour: int = 20, *, actor: str = audit.CONTROL_PLANE,
              token_id: str | None = None, now: float | None = None) -> Tenant:
    """Create or replace a tenant's quota; None (or inf) means unlimited. Audited with the
    quota before and after (``now``: the entry's time, default the wall clock)."""
    if weight <= 0 or preemptions_per_hour < 0:
        raise ValueError("a quota needs weight > 0 and preemptions_per_hour >= 0")
    for value in (guaranteed_gpus, borrow_limit_gpus):
        if value is not None and value < 0:
            raise ValueError("guaranteed_gpus and borrow_limit_gpus must be >= 0 (or None: unlimited)")
    row = ensure_tenant(session, tenant)
    was = _quota_json(row)
    row.guaranteed_gpus = _finite_or_none(guaranteed_gpus)
    row.borrow_limit_gpus = _finite_or_none(borrow_limit_gpus)
    row.weight = weight
    row.preemptions_per_hour = preemptions_per_hour
    audit.append(session, actor, audit.AuditAction.QUOTA_SET, audit.tenant_target(tenant),
                 audit.AuditOutcome.OK, time.time() if now is None else now, token_id,
                 {"was": was, "now": _quota_json(row)})
    return row


def _quota_json(row: Tenant) -> dict[str, Any]:
    return {"guaranteed_gpus": row.guaranteed_gpus, "borrow_limit_gpus": row.borrow_limit_gpus,
            "weight": row.weight, "preemptions_per_hour": row.preemptions_per_hour}


def _finite_or_none(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else float(value)


def tenants(session: Session) -> list[Tenant]:
    return list(session.scalars(select(Tenant).order_by(Tenant.name)))


def quota_of(tenant: Tenant) -> TenantQuota:
    """The row as core's TenantQuota (NULL limits become ``math.inf``)."""
    return TenantQuota(
        guaranteed_gpus=math.inf if tenant.guaranteed_gpus is None else tenant.guaranteed_gpus,
        borrow_limit_gpus=math.inf if tenant.borrow_limit_gpus is None else tenant.borrow_limit_gpus,
        weight=tenant.weight, preemptions_per_hour=tenant.preemptions_per_hour)


def quotas(session: Session) -> dict[str, TenantQuota]:
    return {t.name: quota_of(t) for t in tenants(session)}


def gpu_hours_by_tenant(session: Session, now: float) -> dict[str, float]:
    """GPU-hours each tenant's attempts used, live ones counted up to ``now``."""
    held = (func.coalesce(Attempt.ended_at, now) - Attempt.started_at) * Attempt.gpus
    rows = session.execute(select(Job.tenant, func.sum(held)).select_from(Attempt)
                           .join(Attempt.job).group_by(Job.tenant))
    return {tenant: max(float(total or 0.0), 0.0) / 3600.0 for tenant, total in rows}


# ---------------------------------------------------------------- jobs
def add_job(session: Session, spec: JobSpec, now: float, actor: str = audit.CONTROL_PLANE,
            token_id: str | None = None, *, numbered: bool = True) -> Job:
    """Store a validated spec as a pending job (its tenant created if new), with its event
    (by ``actor``: the submitting token's name, ``token_id`` its id).

    ``numbered=False`` leaves the job without its id until the session's next flush: its
    event and audit entry are completed then (``_number_jobs``). A group of submissions
    (``store.group_commit``) is then inserted by one flush, not one flush each, which
    was most of the writer thread's time per job under many clients."""
    assert spec.gpus is not None  # JobSpec's validator fills it in
    ensure_tenant(session, spec.tenant)
    job = Job(name=spec.name, tenant=spec.tenant, spec_json=spec.model_dump(mode="json"),
              state=JobState.PENDING, priority=spec.priority,
              workload_class=spec.workload_class.value, gpus=float(spec.gpus), submitted_at=now,
              attempts_count=0, restarts=0, stalled_restarts=0, exclude_nodes=[],
              cancel_requested=False, held=spec.hold, requeue_requested=False)
    session.add(job)
    detail = {"gpus": job.gpus, "tenant": job.tenant}
    event_ = JobEvent(kind=JobEventKind.SUBMITTED, at=now, detail=detail, actor=actor)
    entry = audit.append(session, actor, audit.job_action(event_.kind), _UNNUMBERED_TARGET,
                         audit.AuditOutcome.OK, now, token_id, detail)
    session.info.setdefault(_UNNUMBERED, []).append((job, event_, entry))
    if numbered:
        session.flush()  # assigns job.id (and _number_jobs completes its event and entry)
    return job


#: ``session.info`` key: jobs added without their id yet, each with its event and entry
_UNNUMBERED = "grace.unnumbered_jobs"
#: an unnumbered job's audit target until its flush (never written: see _number_jobs)
_UNNUMBERED_TARGET = "job:?"


@event.listens_for(Session, "after_flush_postexec")
def _number_jobs(session: Session, _ctx: Any) -> None:
    """After a flush gave unnumbered jobs their ids: their events join the session (the
    next flush, at the latest the commit's, writes them) and their audit entries get their
    targets (``audit.write_staged`` flushes before it chains the entries)."""
    waiting = session.info.get(_UNNUMBERED)
    if not waiting:
        return
    still = []
    for job, event_, entry in waiting:
        if job.id is None:
            still.append((job, event_, entry))
            continue
        event_.job_id = job.id
        session.add(event_)
        entry.target = audit.job_target(job.id)
    session.info[_UNNUMBERED] = still


def add_job_group(session: Session, specs: Sequence[JobSpec], max_parallel: int | None,
                  now: float, actor: str = audit.CONTROL_PLANE, token_id: str | None = None,
                  kind: str = "array", indices: Sequence[int] | None = None) -> list[Job]:
    """Store ``specs`` as one throttled group (a job array, or a sweep's trials): one
    pending job per task, in the caller's transaction, so the group is whole or absent.

    The group's id is its first task's job id (Slurm's array job id); each task gets
    its index (``indices``, default 0, 1, ...) and the group's ``max_parallel`` (the gate
    in ``core.workflow`` keeps at most that many running), and in its env
    ``GRACE_ARRAY_JOB_ID``/``GRACE_ARRAY_TASK_ID`` and Slurm's ``SLURM_ARRAY_*`` names.
    """
    if not specs:
        raise ValueError("a job group needs at least one task")
    if kind not in ("array", "sweep"):
        raise ValueError(f"a job group is an 'array' or a 'sweep', not {kind!r}")
    numbers = list(range(len(specs))) if indices is None else list(indices)
    if len(numbers) != len(specs):
        raise ValueError(f"{len(specs)} tasks but {len(numbers)} indices")
    jobs: list[Job] = []
    for spec, index in zip(specs, numbers, strict=True):
        job = add_job(session, spec.model_copy(update={"array": None}), now, actor, token_id)
        jobs.append(job)
        group = jobs[0].id
        job.array_id, job.array_index, job.array_limit = group, index, max_parallel
        job.array_kind = kind
        env = dict(job.spec_json.get("env") or {})
        for prefix in ("GRACE", "SLURM"):
            env[f"{prefix}_ARRAY_JOB_ID"] = str(group)
            env[f"{prefix}_ARRAY_TASK_ID"] = str(index)
        job.spec_json = {**job.spec_json, "env": env}
    return jobs


def get_job(session: Session, job_id: int) -> Job | None:
    return session.get(Job, job_id)


def require_job(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    return job


def list_jobs(session: Session, state: JobState | None = None, tenant: str | None = None,
              limit: int = 200, offset: int = 0, after: int | None = None) -> list[Job]:
    """Jobs newest first, optionally of one state and/or tenant; ``after``: only jobs
    older than that id (keyset paging: a page costs the same at any depth, and a job
    submitted or ended meanwhile never shifts one into the next page twice or never)."""
    query = select(Job).order_by(Job.id.desc()).limit(limit).offset(offset)
    if after is not None:
        query = query.where(Job.id < after)
    if state is not None:
        query = query.where(Job.state == JobState(state))
    if tenant is not None:
        query = query.where(Job.tenant == tenant)
    return list(session.scalars(query))


def jobs_in_states(session: Session, states: Iterable[JobState]) -> list[Job]:
    """Every job in ``states``, oldest first, attempts loaded (the reconciler's snapshot)."""
    wanted = [JobState(s) for s in states]
    return list(session.scalars(select(Job).where(Job.state.in_(wanted)).order_by(Job.id)
                                .options(selectinload(Job.attempts))))


def jobs_by_id(session: Session, ids: Iterable[int]) -> list[Job]:
    """The jobs of ``ids`` that exist (in queries of at most 5,000 ids each)."""
    wanted = sorted(set(ids))
    out: list[Job] = []
    for i in range(0, len(wanted), 5000):
        out += session.scalars(select(Job).where(Job.id.in_(wanted[i:i + 5000])))
    return out


def jobs_after(session: Session, job_id: int) -> list[Job]:
    """Jobs submitted after ``job_id`` (ids only grow), in submission order."""
    return list(session.scalars(select(Job).where(Job.id > job_id).order_by(Job.id)))


def cancel_requested(session: Session) -> list[Job]:
    """Jobs a user asked to cancel that have not ended yet."""
    return list(session.scalars(select(Job).where(Job.cancel_requested.is_(True),
                                                  Job.state.not_in(list(TERMINAL_JOB_STATES)))
                                .order_by(Job.id)))


def request_cancel(session: Session, job_id: int, now: float, actor: str = audit.CONTROL_PLANE,
                   token_id: str | None = None) -> Job:
    """Ask for a cancel; the reconciler carries it out (stops the attempt, then ends the job).

    Only the flag is written here, so the API never races the reconciler over
    the job's state. Asking twice is harmless; asking after the end is refused.
    """
    job = require_job(session, job_id)
    if job.is_terminal:
        raise IllegalJobTransition(f"job {job_id} already ended ({job.state}); nothing to cancel")
    if not job.cancel_requested:
        job.cancel_requested = True
        job.reason = "cancel requested"
        audit.append(session, actor, audit.AuditAction.JOB_CANCEL_REQUESTED,
                     audit.job_target(job_id), audit.AuditOutcome.OK, now, token_id)
    return job


def set_job_state(session: Session, job: Job, new_state: JobState, now: float, reason: str = "",
                  event_kind: JobEventKind | None = None,
                  detail: dict[str, Any] | None = None) -> JobEvent:
    """Move a job along the transition table and record why; illegal moves raise, writing nothing.

    RUNNING is entered only with a live attempt (use ``start_attempt``). Ends
    set ``ended_at``. ``event_kind`` defaults to the state's usual event.
    """
    new_state = JobState(new_state)
    check_job_transition(job.id, job.state, new_state)
    if new_state is JobState.RUNNING and live_attempt(session, job) is None:
        raise IllegalJobTransition(f"job {job.id}: running needs a live attempt; use start_attempt")
    return _move_job(session, job, new_state, now, reason, event_kind, detail)


def _move_job(session: Session, job: Job, new_state: JobState, now: float, reason: str,
              event_kind: JobEventKind | None, detail: dict[str, Any] | None) -> JobEvent:
    """The write half of ``set_job_state``, for callers that checked the move themselves."""
    old_state = job.state
    job.state = new_state
    job.reason = reason or None
    if new_state is JobState.RUNNING and job.started_at is None:
        job.started_at = now
    if new_state in TERMINAL_JOB_STATES:
        job.ended_at = now
    kind = DEFAULT_EVENT[new_state] if event_kind is None else JobEventKind(event_kind)
    body = {"from": old_state.value, "to": new_state.value, **({"reason": reason} if reason else {}),
            **(detail or {})}
    event = add_event(session, job.id, kind, now, body)
    outbox.record(session, job, kind, now)  # its webhooks and mails commit with the event
    return event


def set_pending_reason(session: Session, job_id: int, reason: str) -> None:
    """Why a pending job still waits; written only when it changed (each write bumps the version)."""
    job = require_job(session, job_id)
    if job.state is JobState.PENDING and job.reason != reason:
        job.reason = reason


def note_failure_and_requeue(session: Session, job: Job, now: float, reason: str,
                             detail: dict[str, Any] | None = None, exclude_node: str | None = None,
                             stalled_restarts: int | None = None,
                             restarts: int | None = None) -> None:
    """After a failed attempt that core says to restart: record it and queue the job again.

    Writes the "failed" and "restarted" events, counts the restart, and keeps
    the node to avoid (``exclude_node``) and core's no-progress count
    (``stalled_restarts``) on the job so they survive a control-plane restart.
    """
    check_job_transition(job.id, job.state, JobState.PENDING)  # before anything is written
    add_event(session, job.id, JobEventKind.FAILED, now, detail)
    _move_job(session, job, JobState.PENDING, now, reason, JobEventKind.RESTARTED, detail)
    job.restarts = job.restarts + 1 if restarts is None else restarts
    if stalled_restarts is not None:
        job.stalled_restarts = stalled_restarts
    if exclude_node:
        exclusions.exclude(job, exclude_node, reason, str((detail or {}).get("cause") or "node"),
                           now)


def requeue_moved(session: Session, job: Job, now: float, reason: str, node: str,
                  detail: dict[str, Any] | None = None) -> None:
    """Queue a job again without ``node`` after Grace moved it off (a straggler, a planned
    drain).

    Unlike ``note_failure_and_requeue`` nothing counts against the job's restart
    budget: the node, not the job, was at fault, and the job checkpointed first.
    """
    check_job_transition(job.id, job.state, JobState.PENDING)
    _move_job(session, job, JobState.PENDING, now, reason, JobEventKind.MOVED, detail)
    exclusions.exclude(job, node, reason, str((detail or {}).get("cause") or "moved"), now)


def update_job_checked(session: Session, job_id: int, expected_version: int,
                       **changes: Any) -> Job:
    """Change a job only if it is still at ``expected_version`` (what the caller read).

    For read-modify-write across transactions (a client shows a job, the user
    edits it): raises ``StaleWrite`` instead of overwriting someone else's change.
    Only ``CHECKED_FIELDS`` may be changed this way.
    """
    unknown = set(changes) - CHECKED_FIELDS
    if unknown:
        raise ValueError(f"cannot update {sorted(unknown)} this way; allowed: {sorted(CHECKED_FIELDS)}")
    job = require_job(session, job_id)
    if job.version != expected_version:
        raise StaleWrite(f"job {job_id} is at version {job.version}, not {expected_version}; "
                         "read it again")
    for field, value in changes.items():
        setattr(job, field, list(value) if field == "exclude_nodes" else value)
    session.flush()  # the UPDATE carries WHERE version = expected: a racing writer loses here
    return job


# ---------------------------------------------------------------- attempts
def live_attempt(session: Session, job: Job) -> Attempt | None:
    """The job's starting or running attempt, if any (at most one exists)."""
    return session.scalars(select(Attempt).where(Attempt.job_id == job.id,
                                                 Attempt.state.in_(list(LIVE_ATTEMPT_STATES)))
                           ).one_or_none()


def start_attempt(session: Session, job: Job, placement: Sequence[dict[str, Any]], backend: str,
                  handle: str | None, now: float, resumed_from: str | None = None) -> Attempt:
    """Record the next attempt of a pending job and move the job to RUNNING ("placed").

    Call it and commit before launching, so a crash after the launch still
    finds the attempt to adopt. With ``handle`` None the attempt is STARTING
    until ``set_attempt_running``; with a handle it is RUNNING at once.
    """
    if job.state is not JobState.PENDING:
        raise IllegalJobTransition(f"job {job.id} is {job.state}, not pending: cannot start it")
    if job.cancel_requested:
        raise IllegalJobTransition(f"job {job.id} has a cancel requested: not starting it")
    previous = live_attempt(session, job)
    if previous is not None:
        raise IllegalJobTransition(f"job {job.id}: attempt {previous.number} is still {previous.state}; "
                                   "end it before starting another")
    # no query from here on: the job's changes reach the database as one UPDATE (one version)
    job.attempts_count += 1
    attempt = Attempt(job_id=job.id, number=job.attempts_count, state=AttemptState.STARTING,
                      placement_json=[dict(p) for p in placement], gpus=job.gpus, backend=backend,
                      handle=None, started_at=now, resumed_from=resumed_from)
    session.add(attempt)
    _move_job(session, job, JobState.RUNNING, now, "", JobEventKind.PLACED,
              {"attempt": attempt.number, "nodes": attempt.placement_json,
               "resumed_from": resumed_from})
    if handle is not None:
        set_attempt_running(session, attempt, handle, now)
    return attempt


def set_attempt_running(session: Session, attempt: Attempt, handle: str,
                        now: float | None = None) -> Attempt:
    """The backend launched it: keep the handle to re-attach after a restart ("started")."""
    if attempt.state is not AttemptState.STARTING:
        raise IllegalJobTransition(f"job {attempt.job_id} attempt {attempt.number} is "
                                   f"{attempt.state}, not starting")
    attempt.state = AttemptState.RUNNING
    attempt.handle = handle
    add_event(session, attempt.job_id, JobEventKind.STARTED,
              attempt.started_at if now is None else now, {"attempt": attempt.number})
    return attempt


def end_attempt(session: Session, attempt: Attempt, state: AttemptState, now: float,
                exit_code: int | None = None, failure_kind: str | None = None,
                failed_node: str | None = None, detail: str | None = None,
                event_kind: JobEventKind | None = None) -> Attempt:
    """Record how a live attempt ended. The job's own move is ``set_job_state``'s business.

    No event is written unless ``event_kind`` is given (then one, carrying the
    attempt's outcome), so a failure followed by a requeue does not log twice.
    """
    state = AttemptState(state)
    if state not in _ENDED_ATTEMPT_STATES:
        raise ValueError(f"{state} is not an end state; use one of {sorted(_ENDED_ATTEMPT_STATES)}")
    if not attempt.is_live:
        raise IllegalJobTransition(f"job {attempt.job_id} attempt {attempt.number} already ended "
                                   f"({attempt.state})")
    attempt.state = state
    attempt.ended_at = now
    attempt.exit_code = exit_code
    attempt.failure_kind = failure_kind
    attempt.failed_node = failed_node
    attempt.detail = detail
    if event_kind is not None:
        add_event(session, attempt.job_id, event_kind, now, _attempt_outcome(attempt))
    return attempt


def _attempt_outcome(attempt: Attempt) -> dict[str, Any]:
    return {"attempt": attempt.number, "state": attempt.state.value, "exit_code": attempt.exit_code,
            "failure_kind": attempt.failure_kind, "failed_node": attempt.failed_node,
            "detail": attempt.detail}


def ended_attempt_spans(session: Session,
                        job_ids: Iterable[int]) -> dict[int, list[tuple[float, float, float]]]:
    """Per job, its ended attempts as (started, ended, GPUs), oldest first: the service it
    has attained (core.service)."""
    ids = list(job_ids)
    out: dict[int, list[tuple[float, float, float]]] = {}
    if not ids:
        return out
    rows = session.execute(
        select(Attempt.job_id, Attempt.started_at, Attempt.ended_at, Attempt.gpus)
        .where(Attempt.job_id.in_(ids), Attempt.ended_at.is_not(None))
        .order_by(Attempt.job_id, Attempt.number))
    for job_id, started, ended, gpus in rows:
        out.setdefault(job_id, []).append((started, ended or 0.0, gpus))
    return out


def running_attempts(session: Session) -> list[Attempt]:
    """Every live (starting or running) attempt with its job: what to adopt after a restart."""
    return list(session.scalars(select(Attempt).where(Attempt.state.in_(list(LIVE_ATTEMPT_STATES)))
                                .order_by(Attempt.job_id).options(selectinload(Attempt.job))))


def request_end(attempt: Attempt, cause: EndCause, now: float, node: str | None = None,
                detail: str = "", grace_s: float = 10.0) -> bool:
    """Record that the control plane is ending ``attempt`` and why, before telling the
    backend: the first request wins (a later one would relabel an end already under
    way); False if there was one already."""
    if attempt.end_cause is not None or not attempt.is_live:
        return False
    attempt.end_cause, attempt.end_node, attempt.end_detail = EndCause(cause), node, detail
    attempt.end_requested_at, attempt.end_grace_s = now, grace_s
    return True


def recent_preemptions(session: Session, since: float) -> dict[str, list[float]]:
    """When each tenant's jobs were preempted after ``since`` (core's preemption budgets
    count them per hour; the events are the store's copy of that history)."""
    rows = session.execute(select(Job.tenant, JobEvent.at).join(Job, Job.id == JobEvent.job_id)
                           .where(JobEvent.kind == JobEventKind.PREEMPTED, JobEvent.at > since)
                           .order_by(JobEvent.at))
    out: dict[str, list[float]] = {}
    for tenant, at in rows:
        out.setdefault(tenant, []).append(float(at))
    return out


def store_id(session: Session) -> str:
    """The store's UUID (made by migration 0002): what makes a job's directory its own."""
    row = session.get(StoreMeta, "store_id")
    if row is None:
        raise NotFound("this store has no store_id; migrate it (Store.open does)")
    return row.value


def add_signal(session: Session, node: str, kind: str, at: float, code: int | None = None,
               detail: str = "", actor: str = "grace", token_id: str | None = None
               ) -> HealthSignalRow:
    """A health signal for the reconciler's next cycle; kept until it is handled."""
    require_node(session, node)
    row = HealthSignalRow(node=node, kind=kind, code=code, detail=detail, at=at, actor=actor)
    session.add(row)
    audit.append(session, actor, audit.AuditAction.NODE_SIGNAL, audit.node_target(node),
                 audit.AuditOutcome.OK, at, token_id, {"kind": kind, "code": code, "detail": detail})
    return row


def unhandled_signals(session: Session) -> list[HealthSignalRow]:
    return list(session.scalars(select(HealthSignalRow).where(HealthSignalRow.handled_at.is_(None))
                                .order_by(HealthSignalRow.id)))


def orphaned_attempts(session: Session) -> list[Attempt]:
    """Live attempts whose job is no longer RUNNING (preempted, stopped): stop them, then end them."""
    return [a for a in running_attempts(session) if a.job.state is not JobState.RUNNING]


# ---------------------------------------------------------------- nodes
def upsert_node(session: Session, name: str, gpus: int, gpu_model: str | None) -> Node:
    """Register a node (healthy) or update its inventory; its health state is kept."""
    node = session.get(Node, name)
    if node is None:
        node = Node(name=name, state=NodeState.HEALTHY, gpus=gpus, gpu_model=gpu_model)
        session.add(node)
        return node
    if node.gpus != gpus or node.gpu_model != gpu_model:
        node.gpus, node.gpu_model = gpus, gpu_model
    return node


def set_node_state(session: Session, name: str, to_state: NodeState | str, reason: str,
                   actor: str, now: float, token_id: str | None = None) -> NodeEvent:
    """Move a node along core.health's state machine and record who and why.

    Illegal moves raise ``IllegalTransition`` (a ValueError) and write nothing;
    ``to_state`` equal to the current state records a note (e.g. a new holder).
    """
    node = session.get(Node, name)
    if node is None:
        raise NotFound(f"no node {name!r}")
    to = NodeState(to_state)
    if to is not node.state:
        check_transition(name, node.state, to)
    event = NodeEvent(node=name, at=now, from_state=node.state, to_state=to, reason=reason,
                      actor=actor)
    audit_node_move(session, name, node.state, to, reason, actor, now, token_id)
    node.state, node.reason, node.actor, node.updated_at = to, reason, actor, now
    session.add(event)
    return event


def audit_node_move(session: Session, name: str, from_state: NodeState | None, to: NodeState,
                    reason: str, actor: str, at: float, token_id: str | None = None) -> None:
    """A node's move (or note) in the audit trail; its ``NodeEvent`` is the caller's."""
    audit.append(session, actor, audit.AuditAction.NODE_STATE, audit.node_target(name),
                 audit.AuditOutcome.OK, at, token_id,
                 {"from": None if from_state is None else NodeState(from_state).value,
                  "to": NodeState(to).value, "reason": reason})


def require_node(session: Session, name: str) -> Node:
    node = session.get(Node, name)
    if node is None:
        raise NotFound(f"no node {name!r}; see GET /nodes")
    return node


def nodes(session: Session) -> list[Node]:
    return list(session.scalars(select(Node).order_by(Node.name)))


def node_names_out_of_service(session: Session) -> set[str]:
    """Nodes no job may be placed on now (drained, draining, failed, diagnosing...)."""
    return set(session.scalars(select(Node.name).where(
        Node.state.not_in([NodeState(s) for s in IN_SERVICE]))))


def health_work_waits(session: Session) -> bool:
    """Has the health intake anything to do: a signal not handled yet, a node draining
    (its last job may have left) or diagnosing, a diagnostic level left behind?"""
    signal = session.scalar(select(HealthSignalRow.id).where(HealthSignalRow.handled_at.is_(None))
                            .limit(1))
    node = session.scalar(select(Node.name).where(
        Node.state.in_([NodeState.DRAINING, NodeState.DIAGNOSING])
        | Node.diagnostic_level.is_not(None)).limit(1))
    return signal is not None or node is not None


def evictions(session: Session) -> dict[str, str]:
    """Planned drains asked for and not yet carried out: node -> reason."""
    return {name: str(reason) for name, reason in session.execute(
        select(Node.name, Node.evict_reason).where(Node.evict_reason.is_not(None)))}


def node_events(session: Session, name: str) -> list[NodeEvent]:
    """A node's history, oldest first."""
    return list(session.scalars(select(NodeEvent).where(NodeEvent.node == name)
                                .order_by(NodeEvent.id)))


__all__ = [
    "CHECKED_FIELDS",
    "DEFAULT_EVENT",
    "JOB_TRANSITIONS",
    "add_event",
    "add_job",
    "add_signal",
    "audit_node_move",
    "cancel_requested",
    "check_job_transition",
    "end_attempt",
    "ensure_tenant",
    "events",
    "get_job",
    "gpu_hours_by_tenant",
    "jobs_after",
    "jobs_in_states",
    "list_jobs",
    "live_attempt",
    "node_events",
    "nodes",
    "note_failure_and_requeue",
    "orphaned_attempts",
    "quota_of",
    "quotas",
    "recent_preemptions",
    "request_cancel",
    "request_end",
    "require_job",
    "require_node",
    "running_attempts",
    "set_attempt_running",
    "set_job_state",
    "set_node_state",
    "set_pending_reason",
    "set_quota",
    "start_attempt",
    "store_id",
    "tenants",
    "unhandled_signals",
    "update_job_checked",
    "upsert_node",
]
