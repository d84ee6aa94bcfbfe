"""Writing and reading the outbox (``store.notifications``), inside the caller's transaction.

``record`` is called by ``repository._move_job`` after it writes a job's event,
so every job move that a user may want to hear of leaves its notification rows
in the same transaction. It needs the operator's per-tenant webhooks: the
server puts them in the store's ``session_info`` (``install_routes``), which
every write session of that store carries; without them only the job's own
``notify:`` counts.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from grace.control.store.models import Job, JobEventKind, JobState
from grace.control.store.notifications import Channel, DeliveryStatus, Notification, Origin
from grace.spec.notify import NotifyEvent, NotifySpec, TenantNotify

log = logging.getLogger("grace.notify")

#: The key of ``Session.info`` (and ``Store.session_info``) holding ``{tenant: TenantNotify}``.
ROUTES_KEY = "grace.notify.tenant_routes"

_ENDED = frozenset({JobState.COMPLETED, JobState.CANCELLED})
_FAILED = frozenset({JobState.FAILED, JobState.DIVERGED})
_BACK_TO_QUEUE = {JobEventKind.PREEMPTED: NotifyEvent.PREEMPTED,
                  JobEventKind.MOVED: NotifyEvent.MOVED}


def event_of(kind: JobEventKind, to: JobState) -> NotifyEvent | None:
    """The notification a job's move is, if any: by the state it reached, and for a move
    back to the queue by why (preempted, moved, else requeued)."""
    if to in _ENDED:
        return NotifyEvent.ENDED
    if to in _FAILED:
        return NotifyEvent.FAILED
    if to is JobState.RUNNING:
        return NotifyEvent.STARTED
    if to is JobState.PENDING:
        return _BACK_TO_QUEUE.get(JobEventKind(kind), NotifyEvent.REQUEUED)
    return None


def install_routes(session_info: dict[str, Any], tenants: Mapping[str, TenantNotify]) -> None:
    """Give every later write session of a store the operator's per-tenant webhooks."""
    session_info[ROUTES_KEY] = dict(tenants)


def record(session: Session, job: Job, kind: JobEventKind, now: float) -> list[Notification]:
    """The rows for ``job``'s move to its current state (``kind``: the event written for it).

    One per destination that asked for this event: the job's webhook and mail,
    and the tenant's webhooks from the server's file. Nothing is sent here.
    """
    event = event_of(kind, job.state)
    if event is None:
        return []
    wanted: list[tuple[Channel, Origin, str]] = []
    spec = _notify_of(job)
    if spec is not None and event in spec.events:
        if spec.webhook:
            wanted.append((Channel.WEBHOOK, Origin.JOB, spec.webhook))
        if spec.mail:
            wanted.append((Channel.MAIL, Origin.JOB, spec.mail))
    routes: Mapping[str, TenantNotify] = session.info.get(ROUTES_KEY) or {}
    tenant = routes.get(job.tenant)
    if tenant is not None and event in tenant.events:
        wanted.extend((Channel.WEBHOOK, Origin.TENANT, url) for url in tenant.webhooks)
    rows = []
    for channel, origin, destination in dict.fromkeys(wanted):
        key = uuid.uuid4().hex
        row = Notification(key=key, job_id=job.id, event=event, channel=channel, origin=origin,
                           destination=destination, payload=payload(job, event, key, now),
                           status=DeliveryStatus.PENDING, tries=0, created_at=now,
                           next_try_at=now)
        session.add(row)
        rows.append(row)
    return rows


def _notify_of(job: Job) -> NotifySpec | None:
    """The job's ``notify:``; one the checks added since its submit refuse is dropped with a
    warning, never raised: it would roll back the job's move it rides on."""
    raw = (job.spec_json or {}).get("notify")
    if not raw:
        return None
    try:
        return NotifySpec.model_validate(raw)
    except ValidationError as e:
        log.warning("job %s: its notify: no longer validates, so nothing is sent (%s)", job.id, e)
        return None


def payload(job: Job, event: NotifyEvent, key: str, now: float) -> dict[str, Any]:
    """What the receiver gets: the job as it stood at the event. Built field by field from
    columns, never from the spec, so a job's env (its secrets) and tokens never leave."""
    return {"notification_id": key, "event": event.value, "at": now,
            "job": {"id": job.id, "name": job.name, "tenant": job.tenant,
                    "state": JobState(job.state).value, "reason": job.reason,
                    "attempt": job.attempts_count, "restarts": job.restarts,
                    "gpus": job.gpus, "submitted_at": job.submitted_at,
                    "started_at": job.started_at, "ended_at": job.ended_at}}


def due(session: Session, now: float, limit: int = 100) -> list[Notification]:
    """Pending rows whose next try is due, round-robin by tenant: each tenant's oldest, then
    each one's second oldest, and so on, so one tenant's backlog (or slow receiver) does not
    hold up the others'."""
    turn = func.row_number().over(partition_by=Job.tenant,
                                  order_by=(Notification.next_try_at, Notification.id))
    ranked = (select(Notification.id.label("id"), turn.label("turn"))
              .join(Job, Job.id == Notification.job_id)
              .where(Notification.status == DeliveryStatus.PENDING,
                     Notification.next_try_at <= now)
              .subquery())
    return list(session.scalars(
        select(Notification).join(ranked, ranked.c.id == Notification.id)
        .order_by(ranked.c.turn, Notification.next_try_at, Notification.id).limit(limit)))


def of_job(session: Session, job_id: int) -> list[Notification]:
    return list(session.scalars(select(Notification).where(Notification.job_id == job_id)
                                .order_by(Notification.id)))


def mark(session: Session, row_id: int, now: float, error: str | None, retry_at: float | None
         ) -> Notification | None:
    """After one try: delivered (``error`` None), tried again at ``retry_at``, or failed
    (``retry_at`` None). A row already delivered or failed is left as it is."""
    row = session.get(Notification, row_id)
    if row is None or row.status is not DeliveryStatus.PENDING:
        return row
    row.tries += 1
    row.last_error = error
    if error is None:
        row.status, row.delivered_at = DeliveryStatus.DELIVERED, now
    elif retry_at is None:
        row.status = DeliveryStatus.FAILED
    else:
        row.next_try_at = retry_at
    return row


__all__ = ["ROUTES_KEY", "due", "event_of", "install_routes", "mark", "of_job",
           "payload", "record"]
