"""``GET /jobs/{id}/notifications``: the webhooks and mails a job's events made, and how
their delivery went (pending with its next try, delivered, or failed with the error).

A viewer reads its own tenant's jobs (another tenant's is 404, as a missing one).
A webhook URL is shown as its scheme and host only: the path of a chat service's
incoming-webhook URL is its secret, and every viewer of the tenant may list this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import FastAPI
from fastapi import Path as InPath
from sqlalchemy.orm import Session

from grace.control.api_contract import MAX_INT32, READ, errors
from grace.control.auth import Principal
from grace.control.notify import outbox
from grace.control.store.db import Store
from grace.control.store.models import Job
from grace.control.store.notifications import Channel, Notification

JobId = Annotated[int, InPath(ge=1, le=MAX_INT32, description="a job id", examples=[1])]


def shown_destination(row: Notification) -> str:
    """A mail address whole; a URL as ``scheme://host[:port]/…`` (its path may be a secret)."""
    if row.channel is not Channel.WEBHOOK:
        return row.destination
    parts = urlsplit(row.destination)
    tail = "/…" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{parts.netloc}{tail}"


def delivery_json(row: Notification) -> dict[str, Any]:
    return {"id": row.key, "event": row.event.value, "channel": row.channel.value,
            "origin": row.origin.value, "destination": shown_destination(row),
            "status": row.status.value, "tries": row.tries, "created_at": row.created_at,
            "next_try_at": row.next_try_at if row.status.value == "pending" else None,
            "delivered_at": row.delivered_at, "last_error": row.last_error}


def install_notify_routes(app: FastAPI, store: Store, viewer: Any,
                          get: Callable[[Session, int, Principal], Job]) -> None:
    """``get`` finds a job the caller may see (404 otherwise): ``api._get``."""

    @app.get("/jobs/{job_id}/notifications", responses=errors(*READ, 404))
    def job_notifications(job_id: JobId, who: Principal = viewer) -> list[dict[str, Any]]:
        """Each notification of the job, oldest first, with its delivery status."""
        with store.read() as s:
            get(s, job_id, who)
            return [delivery_json(r) for r in outbox.of_job(s, job_id)]


__all__ = ["delivery_json", "install_notify_routes", "shown_destination"]
