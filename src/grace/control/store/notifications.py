"""The notification outbox: one row per (job event, destination), written with the event.

Why a table and not a call: a webhook sent from the transaction that moves a
job would be sent for a move that then rolls back, and one sent after the
commit is lost if the process dies in between. The row is written in the
same transaction as the job's event (``grace.control.notify.outbox.record``,
called from ``repository._move_job``), so the event and its notifications
commit together or not at all; the leader's delivery worker
(``grace.control.notify.worker``) reads pending rows, sends them, and marks
each delivered or, after its tries, failed. A crash between the send and the
mark sends it again: delivery is at least once, and ``key`` (the
``Grace-Notification-Id`` header) lets a receiver drop the repeat.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from grace.control.store.models import Base, StrEnumType, _in
from grace.spec.notify import NotifyEvent


class Channel(StrEnum):
    WEBHOOK = "webhook"  # a signed JSON POST
    MAIL = "mail"  # a plain-text message through the server's SMTP relay


class Origin(StrEnum):
    """Who asked for it: the job's own ``notify:``, or the operator's per-tenant hooks."""

    JOB = "job"
    TENANT = "tenant"


class DeliveryStatus(StrEnum):
    PENDING = "pending"  # not delivered yet; tried again at next_try_at
    DELIVERED = "delivered"
    FAILED = "failed"  # gave up: tries spent, or an answer retrying cannot change


class Notification(Base):
    """One notification to one destination, and how its delivery went."""

    __tablename__ = "notifications"
    __table_args__ = (
        CheckConstraint(_in("status", DeliveryStatus), name="status"),
        Index(None, "job_id"),
        Index(None, "status", "next_try_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)  # Grace-Notification-Id
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    event: Mapped[NotifyEvent] = mapped_column(StrEnumType(NotifyEvent))
    channel: Mapped[Channel] = mapped_column(StrEnumType(Channel))
    origin: Mapped[Origin] = mapped_column(StrEnumType(Origin))
    destination: Mapped[str] = mapped_column(Text)  # the URL or the mail address
    payload: Mapped[dict[str, Any]]  # the job as it was at the event (never its env or token)
    status: Mapped[DeliveryStatus] = mapped_column(StrEnumType(DeliveryStatus),
                                                   default=DeliveryStatus.PENDING)
    tries: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[float]
    next_try_at: Mapped[float]
    delivered_at: Mapped[float | None]
    last_error: Mapped[str | None] = mapped_column(Text)


__all__ = ["Channel", "DeliveryStatus", "Notification", "Origin"]
