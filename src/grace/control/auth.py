"""Who is calling, and what they may do: the API's tokens, roles and tenant scopes.

Every request but ``/healthz`` carries ``Authorization: Bearer <token>``. A user
token has one role; each role may do what the ones below it may:

=========  ==========================================================
admin      everything: tokens, the audit trail, fault injection
operator   nodes (drain, resume, signals, the breaker), quotas, any job
member     submit, read, cancel its own tenant's jobs
viewer     read its tenant's jobs (every tenant's, if it has none)
=========  ==========================================================

A job token (``gjob_...``, one per attempt, in the attempt's ``GRACE_TOKEN``)
may post its own attempt's heartbeats and nothing else.

A browser signed in to the dashboard (``control.dashboard``) sends the cookie
``grace_session`` instead: it stands for the token the person signed in with and
is accepted for GET and HEAD only. A browser attaches cookies to requests that
other pages cause (a form posted from another site), so a cookie that could drive
a write would let any page act as the person (CSRF). SameSite=Strict already keeps
browsers from sending it with requests another site starts; refusing it for writes
holds even where that fails, and reads change nothing. The session is checked
against its token on every request: revoking or expiring the token ends it.

Another tenant's job is answered 404, exactly like a job that does not exist,
so a member cannot learn which job ids other tenants have. The tenant a member
submits for, and the actor of everything anyone does, come from the token, never
from the request body.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from fastapi import HTTPException, Request

from grace.control.store import tokens
from grace.control.store.db import Store
from grace.control.store.models import Role
from grace.control.store.tokens import JobClaim, TokenProblem, TokenRefused

#: Highest first: a role may do everything a later one may.
ROLE_ORDER = (Role.ADMIN, Role.OPERATOR, Role.MEMBER, Role.VIEWER)
#: How often a token's ``last_used_at`` is written at most (a write per GET would
#: take SQLite's write lock for every read).
LAST_USED_EVERY_S = 60.0
#: The dashboard's session cookie, and the only methods it authenticates (see above).
SESSION_COOKIE = "grace_session"
COOKIE_METHODS = frozenset({"GET", "HEAD"})


class SessionLookup(Protocol):
    """Where sessions live (``control.dashboard.session.Sessions``): id -> token text."""

    def token_for(self, session_id: str, now: float) -> str | None: ...

    def end(self, session_id: str) -> None: ...


class PrincipalKind(StrEnum):
    USER = "user"  # an API token of a person or a tool
    JOB = "job"  # one attempt's own token


@dataclass(frozen=True)
class Principal:
    """The caller of one request, as its token says."""

    kind: PrincipalKind
    token_id: str
    name: str
    role: Role | None = None  # None for a job token
    tenant: str | None = None
    job: JobClaim | None = None

    @property
    def actor(self) -> str:
        """How the audit trail and job histories name this caller."""
        return self.name

    def at_least(self, role: Role) -> bool:
        return self.role is not None and ROLE_ORDER.index(self.role) <= ROLE_ORDER.index(role)

    @property
    def all_tenants(self) -> bool:
        """Operators and admins act on every tenant; a viewer without a tenant reads them all."""
        return self.at_least(Role.OPERATOR) or (self.role is Role.VIEWER and self.tenant is None)

    def sees(self, tenant: str) -> bool:
        return self.all_tenants or tenant == self.tenant


def role_names(at_least: Role) -> str:
    """``operator or admin``: the roles that may do what needs ``at_least``."""
    allowed = [r.value for r in ROLE_ORDER[: ROLE_ORDER.index(at_least) + 1]]
    return " or ".join(reversed(allowed))


class Authenticator:
    """Turns a request's bearer token into a ``Principal`` (401 when it cannot)."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time,
                 admin_token_hint: str | None = None) -> None:
        self.store = store
        self.clock = clock
        self.hint = admin_token_hint
        self._used: dict[str, float] = {}
        self._lock = threading.Lock()
        #: set by ``control.dashboard``; without it a session cookie authenticates nothing
        self.sessions: SessionLookup | None = None

    def how_to_get_one(self) -> str:
        where = (f"; `grace up` wrote the first admin token to {self.hint}" if self.hint
                 else "")
        return ("send 'Authorization: Bearer <token>' (the CLI reads GRACE_TOKEN, or the file "
                "GRACE_TOKEN_FILE names); an admin makes tokens with `grace token create "
                f"--tenant T --role member`{where}")

    def refuse(self, why: str) -> HTTPException:
        return HTTPException(401, detail=f"{why}: {self.how_to_get_one()}",
                             headers={"WWW-Authenticate": "Bearer"})

    def identify(self, request: Request) -> Principal:
        presented = _bearer(request)
        sessions = self.sessions
        session = request.cookies.get(SESSION_COOKIE) if sessions is not None else None
        if presented is None and sessions is not None and session:
            if request.method not in COOKIE_METHODS:
                raise self.refuse(f"a dashboard session cookie authenticates reads only "
                                  f"(GET, HEAD), not {request.method}")
            presented = sessions.token_for(session, self.clock())
            if presented is None:
                raise self.refuse("this dashboard session has ended; sign in again")
            try:
                return self.principal_for(presented)
            except HTTPException:
                sessions.end(session)  # its token was revoked or expired: so is the session
                raise
        if presented is None:
            raise self.refuse("no token")
        return self.principal_for(presented)

    def principal_for(self, presented: str) -> Principal:
        """The caller ``presented`` (a token's text) names; 401 saying why when none."""
        now = self.clock()
        try:
            if presented.startswith(tokens.JOB_PREFIX):
                with self.store.read() as s:
                    claim = tokens.job_claim(s, presented)
                return Principal(PrincipalKind.JOB, f"job-{claim.job_id}-{claim.attempt}",
                                 f"job {claim.job_id} attempt {claim.attempt}", job=claim)
            with self.store.lookup() as conn:
                row = tokens.authenticate(conn, presented, now)
                principal = Principal(PrincipalKind.USER, row.id, row.name, Role(row.role),
                                      row.tenant)
        except TokenRefused as e:
            raise self.refuse(_WHY[e.problem]) from e
        self._note_use(principal.token_id, now)
        return principal

    def _note_use(self, token_id: str, now: float) -> None:
        with self._lock:
            if now - self._used.get(token_id, -LAST_USED_EVERY_S) < LAST_USED_EVERY_S:
                return
            self._used[token_id] = now
        try:
            with self.store.transaction() as s:
                row = s.get(tokens.ApiToken, token_id)
                if row is not None:
                    row.last_used_at = now
        except Exception:  # a standby or a full disk must not refuse a read over a timestamp
            return


_WHY = {
    TokenProblem.MALFORMED: "not a Grace token",
    TokenProblem.UNKNOWN: "unknown token",
    TokenProblem.REVOKED: "this token was revoked",
    TokenProblem.EXPIRED: "this token has expired",
}


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def forbidden(who: Principal, what: str, needs: Role) -> HTTPException:
    if who.kind is PrincipalKind.JOB:
        return HTTPException(403, detail="a job token may only post its own attempt's heartbeats")
    return HTTPException(403, detail=f"role {who.role} may not {what}: it needs "
                                     f"{role_names(needs)}")


def requirement(auth: Authenticator, needs: Role, what: str) -> Callable[[Request], Principal]:
    """A FastAPI dependency: the caller, who must hold ``needs`` (or a higher role)."""

    def dependency(request: Request) -> Principal:
        who = auth.identify(request)
        request.state.principal = who
        if who.kind is not PrincipalKind.USER or not who.at_least(needs):
            raise forbidden(who, what, needs)
        return who

    dependency.__name__ = f"needs_{needs.value}"
    return dependency


def job_requirement(auth: Authenticator) -> Callable[[Request, int], Principal]:
    """A FastAPI dependency for ``/jobs/{job_id}/heartbeats``: that job's own token."""

    def dependency(request: Request, job_id: int) -> Principal:
        who = auth.identify(request)
        request.state.principal = who
        if who.kind is not PrincipalKind.JOB:
            raise HTTPException(403, detail="heartbeats come from the job itself: use the "
                                            "GRACE_TOKEN its attempt was started with")
        assert who.job is not None
        if who.job.job_id != job_id:
            raise HTTPException(404, detail=f"no job {job_id}")
        return who

    return dependency


def principal_of(request: Request) -> Principal | None:
    """The caller a dependency identified for this request (None before, or without one)."""
    value: Any = getattr(request.state, "principal", None)
    return value if isinstance(value, Principal) else None


__all__ = ["COOKIE_METHODS", "ROLE_ORDER", "SESSION_COOKIE", "Authenticator", "Principal",
           "PrincipalKind", "SessionLookup", "forbidden", "job_requirement", "principal_of",
           "requirement", "role_names"]
