"""The audit trail: who did what to which thing, and how it went, as a hash chain.

Every control-plane action (a job placed, started, preempted, moved, restarted,
failed; a node drained or returned; a quota set; the breaker tripped or reset;
a health signal) and every mutating API request appends one ``AuditEntry``:
``seq``, ``at``, ``actor`` (a token's name, or ``grace`` for the control plane
itself), ``token_id``, ``action`` (``AuditAction``), ``target`` (``job:12``,
``node:a100-00``, ``tenant:vision``, ``token:ab12..``, ``breaker``), ``outcome``
(``AuditOutcome``), ``detail``, the previous entry's hash and its own:

    hash = sha256(canonical JSON of {v, seq, at (repr of the float), actor,
                  token_id, action, target, outcome, detail, prev_hash})

so an entry edited in the database no longer matches its hash, and one deleted
leaves a gap in ``seq`` or a ``prev_hash`` that names nothing; ``verify`` walks
the chain and names the first entry where it breaks (``BreakKind`` says how).

Why the entries are written at the end of the transaction, not where
``append`` is called: ``append`` stages the entry in the session, and
``Store.transaction`` calls ``write_staged`` after the caller's block, before
the fence check. There the one ``audit_head`` row is updated first
(``seq = seq + n``), which serializes appenders (its row lock on PostgreSQL,
``BEGIN IMMEDIATE``'s write lock on SQLite), then the entries are inserted and
the head takes the last hash. Taking that lock last means a transaction that
holds it waits for nothing but the lease row, so two writers never deadlock
over it (taken mid-transaction, a writer holding the head could wait for a job
row held by another writer waiting for the head), and the lock is held for the
shortest time. An action and its entry commit together or not at all; ``seq``
is the order in which the writes committed.

What the chain cannot see on its own: someone with write access to the
database who deletes the last entries *and* sets the head back, or who
recomputes every hash from an edited entry onwards, leaves a chain that holds.
Against that, keep the head somewhere the database's writers cannot reach:
``grace audit --head`` prints ``seq:hash`` (put it in a ticket, a log shipped
elsewhere, a signed mail); ``grace audit --verify --anchor seq:hash`` later
checks that the chain still contains that entry with that hash (it fails when
the chain was cut shorter than the anchor, or rewritten at or before it).

Volume: one entry per state change and per mutating request; reads are not
audited (the access log, ``control.access_log``, has one line per request of
every kind). A token's use is the ``token_id`` of its requests' entries, not
an entry of its own.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.orm import Session

from grace.control.store.errors import StoreError
from grace.control.store.models import AuditEntry, AuditHead, JobEventKind

if TYPE_CHECKING:
    from grace.control.store.db import Store

#: The control plane's own name as an actor (what core.health calls GRACE too).
CONTROL_PLANE = "grace"
#: ``prev_hash`` of the first entry, and the head's hash before any entry.
GENESIS_HASH = "0" * 64
#: The version of the hashed form; a new form would get a new number, never a silent change.
HASH_FORM = 1
#: An anchor's form on the command line: ``<seq>:<64 hex digits>``.
ANCHOR_HELP = "seq:hash, as `grace audit --head` printed it"

_STAGED = "grace.audit.staged"  # session.info key: entries waiting for write_staged
# the columns' lengths (PostgreSQL enforces them)
_ACTOR_LEN, _TOKEN_LEN, _TARGET_LEN = 200, 32, 400
_VERIFY_BATCH = 2000
# the statements of an append, built once: a cycle appends several times a second
_HEAD = cast(Table, AuditHead.__table__)
_BUMP_HEAD = (update(_HEAD).where(_HEAD.c.id == 1).values(seq=_HEAD.c.seq + bindparam("n"))
              .returning(_HEAD.c.seq, _HEAD.c.hash))
_SET_HEAD_HASH = update(_HEAD).where(_HEAD.c.id == 1).values(hash=bindparam("new_hash"))
_INSERT_ENTRY = insert(cast(Table, AuditEntry.__table__))
_ENTRY_COLUMNS = ("seq", "at", "actor", "token_id", "action", "target", "outcome", "detail",
                  "prev_hash", "hash")


class AuditAction(StrEnum):
    """What was done. Job actions are one per ``JobEventKind`` (``job.<kind>``)."""

    JOB_SUBMITTED = "job.submitted"
    JOB_PLACED = "job.placed"
    JOB_STARTED = "job.started"
    JOB_FAILED = "job.failed"
    JOB_RESTARTED = "job.restarted"
    JOB_PREEMPTED = "job.preempted"
    JOB_COMPLETED = "job.completed"
    JOB_CANCELLED = "job.cancelled"
    JOB_DIVERGED = "job.diverged"
    JOB_TIMEOUT = "job.timeout"
    JOB_ADOPTED = "job.adopted"
    JOB_REQUEUED = "job.requeued"
    JOB_HEARTBEAT_LOST = "job.heartbeat-lost"
    JOB_MOVED = "job.moved"
    JOB_LAUNCH_FAILED = "job.launch-failed"
    JOB_EXCLUSIONS_CLEARED = "job.exclusions-cleared"
    JOB_EARLY_STOPPED = "job.early-stopped"  # a sweep's stopping rule ended a trial
    JOB_CANCEL_REQUESTED = "job.cancel-requested"  # a flag the reconciler carries out later
    JOB_HELD = "job.held"
    JOB_RELEASED = "job.released"
    JOB_REQUEUE_REQUESTED = "job.requeue-requested"  # a flag, like a cancel request
    JOB_INJECT = "job.inject"  # a fault caused on purpose (``grace inject``)
    NODE_STATE = "node.state"  # a move of the health state machine (or a note: same state)
    NODE_SIGNAL = "node.signal"  # a health signal recorded for the next cycle
    QUOTA_SET = "quota.set"
    BREAKER_TRIPPED = "breaker.tripped"
    BREAKER_RESET = "breaker.reset"
    TOKEN_CREATE = "token.create"
    TOKEN_REVOKE = "token.revoke"
    SESSION_START = "session.start"  # a browser signed in to the dashboard with a token
    API_REQUEST = "api.request"  # one mutating API request, whatever it did


class AuditOutcome(StrEnum):
    OK = "ok"  # done (for the control plane's own actions: it happened)
    REFUSED = "refused"  # a request the API turned down (4xx but 401/403): bad input, conflict
    DENIED = "denied"  # no valid token (401) or not allowed (403)
    ERROR = "error"  # the server failed (5xx)


def job_action(kind: JobEventKind | str) -> AuditAction:
    """The action a job event is audited as (``job.<kind>``)."""
    return AuditAction(f"job.{JobEventKind(kind).value}")


def outcome_of_status(status: int) -> AuditOutcome:
    """An HTTP status as an outcome, for the API's request entries."""
    if status in (401, 403):
        return AuditOutcome.DENIED
    if status >= 500:
        return AuditOutcome.ERROR
    return AuditOutcome.REFUSED if status >= 400 else AuditOutcome.OK


def job_target(job_id: int) -> str:
    return f"job:{job_id}"


def node_target(name: str) -> str:
    return f"node:{name}"


def tenant_target(name: str) -> str:
    return f"tenant:{name}"


def token_target(token_id: str) -> str:
    return f"token:{token_id}"


BREAKER_TARGET = "breaker"


# ---------------------------------------------------------------- hashing
def _json_safe(value: Any) -> Any:
    """``value`` as plain JSON (what the database gives back), so what is hashed is what is
    stored: tuples become lists, keys strings, inf/nan and unknown types their text."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


def entry_hash(seq: int, at: float, actor: str, token_id: str | None, action: str, target: str,
               outcome: str, detail: Any, prev_hash: str) -> str:
    """The SHA-256 (hex) of an entry's canonical form: sorted keys, no spaces, ASCII, ``at``
    as ``repr`` (exact for a float, unlike a rounded decimal)."""
    body = {"v": HASH_FORM, "seq": int(seq), "at": repr(float(at)), "actor": actor,
            "token_id": token_id, "action": action, "target": target, "outcome": outcome,
            "detail": detail, "prev_hash": prev_hash}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _hash_of(row: Any) -> str:
    return entry_hash(row.seq, row.at, row.actor, row.token_id, row.action, row.target,
                      row.outcome, row.detail, row.prev_hash)


def _holds(row: Any) -> bool:
    """Does the row hash to its hash? A row edited into something that cannot even be
    hashed (a non-number ``at``, a NaN in its detail) does not."""
    try:
        return _hash_of(row) == row.hash
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------- writing
def append(session: Session, actor: str, action: AuditAction | str, target: str,
           outcome: AuditOutcome | str, at: float, token_id: str | None = None,
           detail: Mapping[str, Any] | None = None) -> AuditEntry:
    """Stage one entry in the caller's write transaction; it gets its ``seq`` and hashes when
    the transaction ends (``write_staged``), and is lost with it if it rolls back."""
    entry = AuditEntry(at=float(at), actor=str(actor)[:_ACTOR_LEN],
                       token_id=None if token_id is None else str(token_id)[:_TOKEN_LEN],
                       action=AuditAction(action).value, target=str(target)[:_TARGET_LEN],
                       outcome=AuditOutcome(outcome).value, detail=_json_safe(dict(detail or {})))
    session.info.setdefault(_STAGED, []).append(entry)
    return entry


def staged_count(session: Session) -> int:
    """How many entries wait in ``session`` for its commit: a mark for ``drop_staged``."""
    return len(session.info.get(_STAGED, ()))


def drop_staged(session: Session, mark: int) -> None:
    """Forget the entries staged after ``mark``: a unit of a group commit
    (``store.group_commit``) rolled back to its savepoint must not leave its entries to
    be written with the rest of the group."""
    del session.info.get(_STAGED, [])[mark:]


def has_staged(session: Session) -> bool:
    return bool(session.info.get(_STAGED))


def write_staged(session: Session) -> list[AuditEntry]:
    """Chain and insert the entries staged in ``session``: called by ``Store.transaction``
    after the caller's block, before the fence check (see the module docstring for why)."""
    staged: list[AuditEntry] = session.info.pop(_STAGED, None) or []
    if not staged:
        return []
    session.flush()  # the caller's own changes first: the head is the last row locked
    head = session.execute(_BUMP_HEAD, {"n": len(staged)}).one_or_none()
    if head is None:
        raise StoreError("the store has no audit_head row; migrate it (Store.open does)")
    prev_hash, seq = str(head.hash), int(head.seq) - len(staged)
    for entry in staged:
        seq += 1
        entry.seq, entry.prev_hash = seq, prev_hash
        entry.hash = prev_hash = _hash_of(entry)
    # plain INSERTs, not the ORM's unit of work: the entries are never changed afterwards
    session.execute(_INSERT_ENTRY, [{c: getattr(e, c) for c in _ENTRY_COLUMNS} for e in staged])
    session.execute(_SET_HEAD_HASH, {"new_hash": prev_hash})
    return staged


def record(store: Store, actor: str, action: AuditAction | str, target: str,
           outcome: AuditOutcome | str, at: float, token_id: str | None = None,
           detail: Mapping[str, Any] | None = None) -> AuditEntry:
    """One entry, committed when this returns (an API request's entry, written after it):
    grouped with other writers' small units into one transaction (``store.group_commit``)."""
    return store.group_commit.run(
        lambda s: append(s, actor, action, target, outcome, at, token_id, detail))


# ---------------------------------------------------------------- reading
def head(session: Session) -> tuple[int, str]:
    """The chain's newest ``(seq, hash)``: what to keep elsewhere as an anchor."""
    row = session.get(AuditHead, 1)
    if row is None:
        raise StoreError("the store has no audit_head row; migrate it (Store.open does)")
    return int(row.seq), str(row.hash)


def entries(session: Session, since: float | None = None, actor: str | None = None,
            action: AuditAction | str | None = None, target: str | None = None,
            limit: int = 200, offset: int = 0) -> list[AuditEntry]:
    """The newest ``limit`` entries that match (skipping the ``offset`` newest), oldest
    first: a page reads like a log, and ``offset`` pages back in time."""
    query = select(AuditEntry).order_by(AuditEntry.seq.desc()).limit(limit).offset(offset)
    if since is not None:
        query = query.where(AuditEntry.at >= since)
    if actor is not None:
        query = query.where(AuditEntry.actor == actor)
    if action is not None:
        query = query.where(AuditEntry.action == AuditAction(action).value)
    if target is not None:
        query = query.where(AuditEntry.target == target)
    return list(reversed(session.scalars(query).all()))


def entry_json(e: AuditEntry) -> dict[str, Any]:
    return {"seq": e.seq, "at": e.at, "actor": e.actor, "token_id": e.token_id,
            "action": e.action, "target": e.target, "outcome": e.outcome, "detail": e.detail,
            "prev_hash": e.prev_hash, "hash": e.hash}


def entries_json(session: Session, since: float | None = None, actor: str | None = None,
                 action: str | None = None, target: str | None = None, limit: int = 200,
                 offset: int = 0) -> list[dict[str, Any]]:
    """``GET /audit``'s body: ``entries`` as JSON-ready dicts (``limit`` capped at 10,000).
    An unknown ``action`` raises ValueError naming the known ones."""
    if action is not None and action not in {a.value for a in AuditAction}:
        raise ValueError(f"action {action!r} is not an audit action; use one of "
                         f"{[a.value for a in AuditAction]}")
    return [entry_json(e) for e in entries(session, since, actor, action, target,
                                           max(0, min(limit, 10_000)), max(0, offset))]


# ---------------------------------------------------------------- verifying
class BreakKind(StrEnum):
    """How the chain broke at the entry ``ChainBreak.seq`` names."""

    EDITED = "edited"  # its columns do not hash to its hash: the row was changed
    MISSING = "missing"  # no entry with this seq: deleted (or its seq was changed)
    RELINKED = "relinked"  # its prev_hash is not the previous entry's hash: that one was
    # rewritten with a new hash, or this one was put in
    HEAD_AHEAD = "head-ahead"  # the head counts entries the table lacks: deleted at the end
    HEAD_BEHIND = "head-behind"  # entries after the head: added outside the audit trail
    HEAD_MISMATCH = "head-mismatch"  # the last entry's hash is not the head's
    NO_HEAD = "no-head"  # the audit_head row itself is gone
    STRAY = "stray"  # a row with seq < 1: never part of the chain
    ANCHOR = "anchor"  # an anchored (seq, hash) kept elsewhere is not in the chain


@dataclass(frozen=True)
class ChainBreak:
    seq: int
    kind: BreakKind
    message: str


@dataclass(frozen=True)
class Anchor:
    """A ``(seq, hash)`` of the chain recorded somewhere else (``grace audit --head``)."""

    seq: int
    hash: str

    @classmethod
    def parse(cls, text: str) -> Anchor:
        seq, sep, digest = text.strip().partition(":")
        digest = digest.lower()
        if (not sep or not seq.isdigit() or int(seq) < 1 or len(digest) != 64
                or any(c not in "0123456789abcdef" for c in digest)):
            raise ValueError(f"anchor {text!r} is not seq:hash ({ANCHOR_HELP}, e.g. "
                             f"'42:{'ab' * 32}')")
        return cls(int(seq), digest)

    def __str__(self) -> str:
        return f"{self.seq}:{self.hash}"


@dataclass(frozen=True)
class VerifyResult:
    checked: int  # entries walked
    head_seq: int
    head_hash: str
    first_break: ChainBreak | None

    @property
    def ok(self) -> bool:
        return self.first_break is None

    def describe(self) -> str:
        if self.first_break is None:
            return (f"the audit chain holds: {self.checked} entries, head "
                    f"{self.head_seq}:{self.head_hash}")
        b = self.first_break
        return f"the audit chain breaks at entry {b.seq} ({b.kind}): {b.message}"


def _rows(session: Session) -> Iterator[Any]:
    cols = AuditEntry.__table__.c
    query = select(cols.seq, cols.at, cols.actor, cols.token_id, cols.action, cols.target,
                   cols.outcome, cols.detail, cols.prev_hash, cols.hash).order_by(cols.seq)
    yield from session.execute(query.execution_options(yield_per=_VERIFY_BATCH))


def verify(session: Session, anchor: Anchor | None = None) -> VerifyResult:
    """Walk the chain by ``seq`` and name the first entry where it breaks (None: it holds)."""
    head_row = session.get(AuditHead, 1)
    head_seq, head_hash = (-1, "") if head_row is None else (int(head_row.seq), head_row.hash)
    checked, expected, prev_hash = 0, 1, GENESIS_HASH
    stray: int | None = None
    anchored: str | None = None

    def result(brk: ChainBreak | None) -> VerifyResult:
        return VerifyResult(checked, head_seq, head_hash, brk)

    for row in _rows(session):
        if row.seq < 1:
            stray = row.seq if stray is None else stray
            continue
        if row.seq != expected:
            gone = (f"entry {expected}" if row.seq == expected + 1
                    else f"entries {expected} to {row.seq - 1}")
            return result(ChainBreak(expected, BreakKind.MISSING,
                                     f"{gone} missing: entry {row.seq} follows "
                                     f"{'the start' if expected == 1 else f'entry {expected - 1}'}"
                                     " (deleted, or its seq was changed)"))
        if not _holds(row):
            return result(ChainBreak(row.seq, BreakKind.EDITED,
                                     f"its columns do not hash to its hash {row.hash[:12]}..: "
                                     "the row was changed after it was written"))
        if row.prev_hash != prev_hash:
            return result(ChainBreak(row.seq, BreakKind.RELINKED,
                                     f"its prev_hash {row.prev_hash[:12]}.. is not "
                                     f"{'the start' if row.seq == 1 else f'entry {row.seq - 1}'}"
                                     f"'s hash {prev_hash[:12]}..: that entry was rewritten "
                                     "(columns and hash), or this one was forged"))
        if anchor is not None and row.seq == anchor.seq:
            anchored = row.hash
        prev_hash, expected, checked = row.hash, expected + 1, checked + 1
    last = expected - 1
    if head_row is None:
        return result(ChainBreak(last + 1, BreakKind.NO_HEAD,
                                 "the audit_head row is gone: the chain's end cannot be checked"))
    if head_seq > last:
        gone = f"entry {head_seq}" if head_seq == last + 1 else f"entries {last + 1} to {head_seq}"
        return result(ChainBreak(last + 1, BreakKind.HEAD_AHEAD,
                                 f"{gone} missing: the head says the chain has {head_seq} "
                                 f"entries, the table ends at {last} (deleted from the end)"))
    if head_seq < last:
        return result(ChainBreak(head_seq + 1, BreakKind.HEAD_BEHIND,
                                 f"entry {head_seq + 1} comes after the head ({head_seq}): "
                                 "added outside the audit trail"))
    if head_hash != prev_hash:
        return result(ChainBreak(last, BreakKind.HEAD_MISMATCH,
                                 f"the last entry's hash {prev_hash[:12]}.. is not the head's "
                                 f"{head_hash[:12]}..: the entry was rewritten, or the head"))
    if stray is not None:
        return result(ChainBreak(stray, BreakKind.STRAY,
                                 f"a row with seq {stray} is not part of the chain (seq starts "
                                 "at 1): it was put in, or an entry's seq was changed"))
    if anchor is not None:
        if anchor.seq > last:
            return result(ChainBreak(anchor.seq, BreakKind.ANCHOR,
                                     f"the anchor names entry {anchor.seq}, the chain ends at "
                                     f"{last}: entries were deleted from its end, head and all"))
        if anchored != anchor.hash:
            return result(ChainBreak(anchor.seq, BreakKind.ANCHOR,
                                     f"entry {anchor.seq}'s hash {str(anchored)[:12]}.. is not "
                                     f"the anchored {anchor.hash[:12]}..: the chain was "
                                     "rewritten at or before it"))
    return result(None)


def verify_json(session: Session, anchor: str | None = None) -> dict[str, Any]:
    """``GET /audit/verify``'s body: ``{ok, checked, head: {seq, hash}, break: {seq, kind,
    message} | None, message}``. A malformed ``anchor`` raises ValueError saying the form."""
    res = verify(session, Anchor.parse(anchor) if anchor else None)
    b = res.first_break
    return {"ok": res.ok, "checked": res.checked,
            "head": {"seq": res.head_seq, "hash": res.head_hash},
            "break": None if b is None else {"seq": b.seq, "kind": b.kind.value,
                                             "message": b.message},
            "message": res.describe()}


def head_json(session: Session) -> dict[str, Any]:
    """``{seq, hash, anchor}``: the head to keep elsewhere (``anchor`` is ``seq:hash``)."""
    seq, digest = head(session)
    return {"seq": seq, "hash": digest, "anchor": f"{seq}:{digest}"}


__all__ = [
    "ANCHOR_HELP",
    "BREAKER_TARGET",
    "CONTROL_PLANE",
    "GENESIS_HASH",
    "Anchor",
    "AuditAction",
    "AuditOutcome",
    "BreakKind",
    "ChainBreak",
    "VerifyResult",
    "append",
    "entries",
    "entries_json",
    "entry_hash",
    "entry_json",
    "has_staged",
    "head",
    "head_json",
    "job_action",
    "job_target",
    "node_target",
    "outcome_of_status",
    "record",
    "tenant_target",
    "token_target",
    "verify",
    "verify_json",
    "write_staged",
]
