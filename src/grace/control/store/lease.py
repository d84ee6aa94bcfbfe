"""The leader lease: exactly one control plane acts on a store, and a deposed one cannot write.

Two ``grace up`` on one store would both launch the same pending job, both
requeue the same "lost" attempt and both end each other's work. So the active
control plane holds one row, ``leases.name = 'leader'`` (holder ``host:pid``,
``epoch``, ``acquired_at``, ``renewed_at``, ``expires_at``), and renews it;
every other one stands by and polls.

- ``try_acquire`` takes the lease only if there is no row or it expired, in one
  statement each (an ``INSERT ... ON CONFLICT DO NOTHING``, or an ``UPDATE
  ... WHERE expires_at < :now OR holder = :me``) whose RETURNING row says who won:
  two standbys racing for an expired lease cannot both win, on SQLite (writers
  serialised) or PostgreSQL (the loser's UPDATE re-reads the winner's row).
  Every acquisition adds one to ``epoch``.
- ``renew`` extends it only while holder *and* epoch are still ours; False
  means another control plane took over.
- ``release`` (clean shutdown) sets ``expires_at`` to now, so a standby takes
  over at its next poll instead of waiting out the TTL.
- The epoch is the fence: ``Store.fence = (holder, epoch)`` makes every write
  transaction check, before its commit and inside it, that the row still says
  so (``Store.transaction``). A leader that was paused or cut off past its
  TTL, and was replaced meanwhile, gets ``Fenced`` instead of a commit.

The numbers: TTL 10 s, renewed every 2 s, a standby polls every 1 s, so after a
SIGKILL of the leader a standby leads within TTL + poll = 11 s (<= 15 s even
with a renewal just before the kill and a slow poll). Times are ``time.time()``
on each control plane: they are assumed to share a clock within a second or
two (NTP). A takeover waits for the TTL as the *standby's* clock reads it, so a
standby whose clock runs ahead takes over that much early; the fence still
keeps the old leader's writes out of the store, whatever the clocks say.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from grace.control.store.db import Store
from grace.control.store.models import Lease

LEADER = "leader"
DEFAULT_TTL_S = 10.0  # a leader not heard from for this long is presumed dead
RENEW_EVERY_S = 2.0  # five renewals per TTL: a slow transaction or two does not lose it
POLL_EVERY_S = 1.0  # how often a standby looks for an expired lease

_LEASES: Table = Lease.__table__  # type: ignore[assignment]


def this_holder() -> str:
    """``host:pid``: names this process to an operator reading ``psql`` or ``/healthz``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def local_time(t: float) -> str:
    """Epoch seconds as local ISO time to the second, for people (``2026-12-01T14:03:07``)."""
    return datetime.fromtimestamp(t).isoformat(timespec="seconds")


@dataclass(frozen=True)
class LeaseInfo:
    """The lease row as read: who leads, since when, and until when unless renewed."""

    holder: str
    epoch: int
    acquired_at: float
    renewed_at: float
    expires_at: float

    def live(self, now: float) -> bool:
        """Still held: the same test ``try_acquire`` makes, from the other side."""
        return self.expires_at >= now

    @property
    def since(self) -> str:
        return local_time(self.acquired_at)


class LeaderLease:
    """This process's claim on the store's ``leader`` lease.

    The lease statements run on connections of their own (``store.engine``), not
    in ``Store.transaction()``: acquiring must work before there is a fence, and
    renewing must not be refused by the very fence it keeps alive.
    """

    def __init__(self, store: Store, holder: str | None = None,
                 ttl_s: float = DEFAULT_TTL_S) -> None:
        self.store = store
        self.holder = holder or this_holder()
        self.ttl_s = ttl_s
        self.epoch: int | None = None  # ours while we hold it
        self.expires_at = 0.0  # as we last wrote it

    @property
    def held(self) -> bool:
        """We hold it as far as we know (the last acquire or renew succeeded)."""
        return self.epoch is not None

    @property
    def fence(self) -> tuple[str, int]:
        """What ``Store.fence`` must be set to while we lead."""
        if self.epoch is None:
            raise RuntimeError("the lease is not held; acquire it first")
        return self.holder, self.epoch

    def try_acquire(self, now: float, *, force: bool = False) -> bool:
        """Take the lease if nobody holds it (no row, or it expired); True if we now hold it.

        ``force`` takes it whoever holds it: only for a caller that knows the holder is
        dead (``grace up`` on SQLite, which holds a lock on the file that a live holder
        would hold instead). Either way the epoch grows, so the previous term is fenced.
        """
        values = {"holder": self.holder, "acquired_at": now, "renewed_at": now,
                  "expires_at": now + self.ttl_s}
        with self.store.engine.begin() as conn:
            stmt = update(_LEASES).where(_LEASES.c.name == LEADER)
            if not force:
                stmt = stmt.where(or_(_LEASES.c.expires_at < now, _LEASES.c.holder == self.holder))
            # RETURNING, not rowcount: the new epoch from the same statement that won it
            epoch = conn.execute(stmt.values(epoch=_LEASES.c.epoch + 1, **values)
                                 .returning(_LEASES.c.epoch)).scalar_one_or_none()
            if epoch is None:  # no row yet, or a live one of someone else's
                epoch = conn.execute(self._insert(conn, {"name": LEADER, "epoch": 1, **values})
                                     .returning(_LEASES.c.epoch)).scalar_one_or_none()
        self.epoch = epoch
        if epoch is None:
            return False
        self.expires_at = now + self.ttl_s
        return True

    @staticmethod
    def _insert(conn: Connection, values: dict[str, Any]) -> Any:
        """``INSERT ... ON CONFLICT DO NOTHING``: a row that appeared meanwhile wins, no error
        (a failed plain INSERT would abort a PostgreSQL transaction)."""
        dialect = conn.dialect.name
        if dialect == "sqlite":
            return sqlite_insert(_LEASES).values(**values).on_conflict_do_nothing(
                index_elements=["name"])
        if dialect == "postgresql":
            return pg_insert(_LEASES).values(**values).on_conflict_do_nothing(
                index_elements=["name"])
        raise NotImplementedError(f"no leader lease on {dialect!r}; use SQLite or PostgreSQL")

    def renew(self, now: float) -> bool:
        """Extend the lease by a TTL from ``now``; False if it is no longer ours (holder or
        epoch changed: another control plane took over), after which we hold nothing.

        An expired lease nobody took over is still ours to renew: no one else wrote meanwhile,
        since anyone who did would have had to take it (and change the epoch) first.
        """
        if self.epoch is None:
            return False
        with self.store.engine.begin() as conn:
            matched = conn.execute(update(_LEASES).where(
                _LEASES.c.name == LEADER, _LEASES.c.holder == self.holder,
                _LEASES.c.epoch == self.epoch).values(
                renewed_at=now, expires_at=now + self.ttl_s)).rowcount
        if matched != 1:
            self.epoch = None
            return False
        self.expires_at = now + self.ttl_s
        return True

    def release(self, now: float) -> bool:
        """On a clean shutdown: let a standby take over at its next poll, not after the TTL.

        Holder and epoch stay in the row (only ``expires_at`` moves), so a write of ours
        still in flight is not fenced until someone actually takes over. False if it was
        not ours any more.
        """
        if self.epoch is None:
            return False
        with self.store.engine.begin() as conn:
            matched = conn.execute(update(_LEASES).where(
                _LEASES.c.name == LEADER, _LEASES.c.holder == self.holder,
                _LEASES.c.epoch == self.epoch).values(expires_at=now)).rowcount
        self.epoch = None
        self.expires_at = now
        return matched == 1

    def current(self, session: Session | None = None) -> LeaseInfo | None:
        """Who holds the lease (maybe expired), and since when; None before anyone took it."""
        if session is None:
            with self.store.read() as s:
                return self.current(s)
        row = session.execute(select(_LEASES).where(_LEASES.c.name == LEADER)).first()
        if row is None:
            return None
        return LeaseInfo(row.holder, row.epoch, row.acquired_at, row.renewed_at, row.expires_at)


@dataclass(frozen=True)
class Role:
    """One consistent view of this process's part: ``leader`` or ``standby``, and who leads."""

    role: str = "standby"
    leader: str = ""  # host:pid of the leader as last seen ("" before anyone took the lease)
    epoch: int = 0
    since: float | None = None

    @property
    def leading(self) -> bool:
        return self.role == "leader"


class Leadership:
    """What this process is now, set by the server's lease keeper and read by the API
    (``/healthz``, and the guard that refuses writes on a standby) from other threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._role = Role()

    def set(self, role: str, leader: str, epoch: int, since: float | None) -> None:
        with self._lock:
            self._role = Role(role, leader, epoch, since)

    def get(self) -> Role:
        with self._lock:
            return self._role

    @property
    def leading(self) -> bool:
        return self.get().leading

    def health(self) -> dict[str, Any]:
        """The keys ``/healthz`` adds: role, leader, epoch."""
        r = self.get()
        return {"role": r.role, "leader": r.leader, "epoch": r.epoch}


__all__ = [
    "DEFAULT_TTL_S",
    "LEADER",
    "POLL_EVERY_S",
    "RENEW_EVERY_S",
    "LeaderLease",
    "Leadership",
    "LeaseInfo",
    "Role",
    "local_time",
    "this_holder",
]
