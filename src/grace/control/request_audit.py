"""One audit entry per mutating API request, refused ones included (ASGI middleware).

The store writes an entry for each change it makes (``store.audit``), with the
actor the route passed; this adds the request itself: who (the token's name and
id, or ``anonymous``), ``METHOD /path``, and how it ended (``ok``, ``refused``,
``denied``, ``error``), so an attacker's tries are in the trail too, not only
what succeeded. Reads are not audited, nor accepted heartbeats (the access log
has them).

Why a limit on denied entries: a flood of requests without a valid token would
otherwise write one entry each. At most ``DENIED_PER_MINUTE`` denied requests
per client address per minute are written; the rest are counted and the count
goes into the next entry written for that address.

A route that writes through ``store.group_commit`` (``POST /jobs``) may stage its
request's entry in its own unit (``stage_in``): the entry then commits with the job,
in the same transaction, instead of a second unit queued after the answer (under
many clients that second round trip through the one writer thread was half of its
work). The middleware skips a request whose entry was committed so, unless the
answer's status turned out different; a unit that raised takes its staged entry
with it, and the middleware records the failure as for any request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grace.control.auth import Principal
from grace.control.store import audit
from grace.control.store.db import Store

log = logging.getLogger(__name__)
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DENIED_PER_MINUTE = 30
ANONYMOUS = "anonymous"
#: Accepted heartbeats are not audited (each rank posts every few seconds; the access log
#: has them); refused ones are: a forged heartbeat is what the trail is for.
HEARTBEATS = "/heartbeats"
#: ``scope["state"]`` key: the status whose entry a route committed itself (``stage_in``)
AUDITED = "grace.audited_status"


class RequestAudit:
    """ASGI middleware: after each POST/PUT/PATCH/DELETE, append its audit entry.

    ``writes_allowed`` says whether this process may write (a standby may not: it
    refuses the request, and records nothing)."""

    def __init__(self, app: ASGIApp, store: Store, clock: Callable[[], float] = time.time,
                 writes_allowed: Callable[[], bool] = lambda: True) -> None:
        self.app = app
        self.store = store
        self.clock = clock
        self.writes_allowed = writes_allowed
        self._denied: dict[str, tuple[float, int, int]] = {}  # addr -> (minute, written, skipped)
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in WRITES:
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if scope.get("state", {}).get(AUDITED) != status["code"]:
                await anyio.to_thread.run_sync(self._record, scope, status["code"])

    def _record(self, scope: Scope, status: int) -> None:
        if not self.writes_allowed():
            return
        who = _principal(scope)
        outcome = audit.outcome_of_status(status)
        if outcome is audit.AuditOutcome.OK and str(scope.get("path", "")).endswith(HEARTBEATS):
            return  # a job's progress every few seconds is telemetry, not an action
        detail: dict[str, Any] = {"status": status}
        if who is None and outcome is audit.AuditOutcome.DENIED:
            skipped = self._admit_denied(_client(scope))
            if skipped is None:
                return
            if skipped:
                detail["denied_not_recorded"] = skipped
        target = _target(scope)
        try:
            audit.record(self.store, who.actor if who else ANONYMOUS,
                         audit.AuditAction.API_REQUEST, target, outcome, self.clock(),
                         who.token_id if who else None, detail)
        except Exception:  # the answer is already sent; a full disk must not turn it into a 500
            log.exception("could not write the audit entry of %s (%s)", target, status)

    def _admit_denied(self, client: str) -> int | None:
        """None: over this minute's budget (skip it); else how many were skipped before."""
        minute = self.clock() // 60
        with self._lock:
            was, written, skipped = self._denied.get(client, (minute, 0, 0))
            if was != minute:
                written = 0
            if written >= DENIED_PER_MINUTE:
                self._denied[client] = (minute, written, skipped + 1)
                return None
            self._denied[client] = (minute, written + 1, 0)
            if len(self._denied) > 10_000:  # many addresses: forget the old minutes
                self._denied = {k: v for k, v in self._denied.items() if v[0] == minute}
            return skipped


def stage_in(session: Session, scope: Scope, status: int, at: float) -> None:
    """Stage the entry the middleware would write for this request answered ``status``,
    in ``session`` (the route's own write): it commits or rolls back with the route's
    changes. Call ``committed`` once the write committed, so the middleware skips it."""
    who = _principal(scope)
    audit.append(session, who.actor if who else ANONYMOUS, audit.AuditAction.API_REQUEST,
                 _target(scope), audit.outcome_of_status(status), at,
                 who.token_id if who else None, {"status": status})


def committed(scope: Scope, status: int) -> None:
    """The entry ``stage_in`` staged for ``status`` is in the store: don't write another."""
    scope.setdefault("state", {})[AUDITED] = status


def _principal(scope: Scope) -> Principal | None:
    who = scope.get("state", {}).get("principal")
    return who if isinstance(who, Principal) else None


def _target(scope: Scope) -> str:
    return f"{scope['method']} {scope.get('path', '')}"[:400]


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "-"


__all__ = ["ANONYMOUS", "AUDITED", "DENIED_PER_MINUTE", "WRITES", "RequestAudit", "committed",
           "stage_in"]
