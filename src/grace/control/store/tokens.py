"""API tokens: made, found, expired and revoked in the store; only hashes are kept.

A user token reads ``grace_<id>_<secret>``: ``id`` (12 hex digits) names the row,
``secret`` is 256 random bits of which the store keeps only the SHA-256. Why a
plain hash and not a password hash (bcrypt, argon2): the secret is random, not
chosen by a person, so there is nothing to guess; a slow hash would only make
every API call slower. The comparison is constant-time all the same.

A job token reads ``gjob_<job>_<attempt>_<mac>``: an HMAC-SHA256 of the store's
id, the job and the attempt under a key kept in ``store_meta`` (made on first
use). It is minted for each attempt at launch and lets that attempt post its own
heartbeats and nothing else; no row per attempt is needed, and a control plane
that restarts verifies the tokens of the attempts it adopts.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import Connection, bindparam, select
from sqlalchemy.orm import Session

from grace.control.store.models import ApiToken, Role, StoreMeta

USER_PREFIX = "grace_"
JOB_PREFIX = "gjob_"
_USER = re.compile(r"^grace_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
_JOB = re.compile(r"^gjob_([0-9]{1,10})_([0-9]{1,10})_([0-9a-f]{64})$")
_JOB_KEY = "job_token_key"


class TokenProblem(StrEnum):
    """Why a presented token does not authenticate (said in the 401, never which part)."""

    MALFORMED = "malformed"
    UNKNOWN = "unknown"
    REVOKED = "revoked"
    EXPIRED = "expired"


class TokenRefused(Exception):
    def __init__(self, problem: TokenProblem, token_id: str | None = None) -> None:
        super().__init__(problem.value)
        self.problem = problem
        self.token_id = token_id


@dataclass(frozen=True)
class JobClaim:
    """What a valid job token names: the one attempt it was minted for."""

    job_id: int
    attempt: int


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create(session: Session, *, name: str, role: Role, tenant: str | None, created_by: str,
           now: float, expires_at: float | None = None) -> tuple[ApiToken, str]:
    """A new token row and the token's text, shown once: the store cannot give it again."""
    token_id = secrets.token_hex(6)
    while session.get(ApiToken, token_id) is not None:  # 2^48 ids: a clash is a curiosity
        token_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    row = ApiToken(id=token_id, name=name, role=Role(role), tenant=tenant,
                   secret_hash=_digest(secret), created_at=now, created_by=created_by,
                   expires_at=expires_at, revoked_at=None, last_used_at=None)
    session.add(row)
    session.flush()
    return row, f"{USER_PREFIX}{token_id}_{secret}"


@dataclass(frozen=True)
class LiveToken:
    """What a request needs of the token it presented (its row, read as plain columns)."""

    id: str
    name: str
    role: Role
    tenant: str | None


#: The columns ``authenticate`` reads, as one statement built once: a plain select, not
#: ``Session.get`` (its ORM work, and building the query anew, was most of what a
#: request's authentication cost)
_LOOKUP = select(ApiToken.id, ApiToken.name, ApiToken.role, ApiToken.tenant,
                 ApiToken.secret_hash, ApiToken.revoked_at, ApiToken.expires_at
                 ).where(ApiToken.id == bindparam("token_id"))


def authenticate(conn: Connection, presented: str, now: float) -> LiveToken:
    """The live token ``presented`` names; raises ``TokenRefused`` saying why not.
    ``conn``: ``Store.lookup``'s (or a session's ``connection()``)."""
    m = _USER.match(presented)
    if m is None:
        raise TokenRefused(TokenProblem.MALFORMED)
    row = conn.execute(_LOOKUP, {"token_id": m.group(1)}).one_or_none()
    if row is None or not hmac.compare_digest(row.secret_hash, _digest(m.group(2))):
        raise TokenRefused(TokenProblem.UNKNOWN)
    if row.revoked_at is not None:
        raise TokenRefused(TokenProblem.REVOKED, row.id)
    if row.expires_at is not None and now >= row.expires_at:
        raise TokenRefused(TokenProblem.EXPIRED, row.id)
    return LiveToken(row.id, row.name, row.role, row.tenant)


def listed(session: Session) -> list[ApiToken]:
    return list(session.scalars(select(ApiToken).order_by(ApiToken.created_at, ApiToken.id)))


def revoke(session: Session, token_id: str, now: float) -> ApiToken | None:
    """Revoke one token (kept, so the audit trail's token ids still resolve); None if unknown."""
    row = session.get(ApiToken, token_id)
    if row is not None and row.revoked_at is None:
        row.revoked_at = now
    return row


def has_admin(session: Session, now: float) -> bool:
    """Is there a live admin token? (``grace up`` makes the first one when there is none.)"""
    rows = session.scalars(select(ApiToken).where(ApiToken.role == Role.ADMIN,
                                                  ApiToken.revoked_at.is_(None)))
    return any(r.expires_at is None or r.expires_at > now for r in rows)


# ---------------------------------------------------------------- job tokens
def _job_key(session: Session, create_missing: bool) -> bytes | None:
    row = session.get(StoreMeta, _JOB_KEY)
    if row is None:
        if not create_missing:
            return None
        row = StoreMeta(key=_JOB_KEY, value=secrets.token_hex(32))
        session.add(row)
        session.flush()
    return bytes.fromhex(row.value)


def _job_mac(key: bytes, job_id: int, attempt: int) -> str:
    return hmac.new(key, f"job:{job_id}:attempt:{attempt}".encode(), hashlib.sha256).hexdigest()


def job_token(session: Session, job_id: int, attempt: int) -> str:
    """The token attempt ``attempt`` of job ``job_id`` gets in its environment (GRACE_TOKEN)."""
    key = _job_key(session, create_missing=True)
    assert key is not None
    return f"{JOB_PREFIX}{job_id}_{attempt}_{_job_mac(key, job_id, attempt)}"


def job_claim(session: Session, presented: str) -> JobClaim:
    """The attempt a job token was minted for; raises ``TokenRefused`` if it is not one."""
    m = _JOB.match(presented)
    if m is None:
        raise TokenRefused(TokenProblem.MALFORMED)
    key = _job_key(session, create_missing=False)
    job_id, attempt = int(m.group(1)), int(m.group(2))
    if key is None or not hmac.compare_digest(_job_mac(key, job_id, attempt), m.group(3)):
        raise TokenRefused(TokenProblem.UNKNOWN)
    return JobClaim(job_id, attempt)


__all__ = ["JOB_PREFIX", "USER_PREFIX", "JobClaim", "TokenProblem", "TokenRefused",
           "authenticate", "create", "has_admin", "job_claim", "job_token", "listed", "revoke"]
