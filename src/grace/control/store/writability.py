"""Can the store take a write right now, and if not, why (for /healthz and for 5xx bodies).

A control plane whose store cannot be written still answers reads, so a
health check that only reads says "ok" while every submission fails. This
module makes one small write the way every transaction does and reports the
database's own words when it fails ("database or disk is full", "attempt to
write a readonly database", "could not extend file ...: No space left on
device").

Why the probe commits on SQLite and rolls back on PostgreSQL:

* SQLite writes pages only at commit (the WAL append and its fsync), so a full
  disk, a read-only file or a failing device shows only then. The file is this
  control plane's own; rewriting one ``store_meta`` row costs one small fsync.
* PostgreSQL refuses a write it cannot do at the statement (a read-only
  transaction or replica, no space to extend the table, no permission), so a
  rolled-back upsert finds the same failures while writing nothing: a standby
  stays a control plane that writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from grace.control.store.db import Store

#: The probe's row; ``store_meta`` exists from the first migration on.
PROBE_KEY = "write_probe"
_PROBE = text("INSERT INTO store_meta (key, value) VALUES (:key, :value) "
              "ON CONFLICT (key) DO UPDATE SET value = excluded.value")
#: SQLSTATEs (PostgreSQL) and SQLite messages that mean "no space": 507, not 503.
_NO_SPACE_SQLSTATES = frozenset({"53100"})  # disk_full
_NO_SPACE_WORDS = ("disk is full", "no space left on device")


@dataclass(frozen=True)
class StoreFailure:
    """A write the store refused: the HTTP status that says it, and the database's words."""

    status: int  # 507 when out of space, else 503
    reason: str

    @property
    def detail(self) -> str:
        fix = ("free space where the store lives (df -h), then retry"
               if self.status == 507 else "check the store (df -h, permissions, the server), then retry")
        return f"the store cannot be written: {self.reason}; nothing was saved: {fix}"


def _reason(exc: BaseException) -> str:
    """The database's own message, one line, without SQLAlchemy's statement dump."""
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    line = " ".join(str(orig).split())
    return line[:300] or type(orig).__name__


def describe_failure(exc: BaseException) -> StoreFailure:
    """What a store exception means to a client: 507 for no space, 503 otherwise."""
    reason = _reason(exc)
    sqlstate = getattr(getattr(exc, "orig", None), "sqlstate", None)
    no_space = sqlstate in _NO_SPACE_SQLSTATES or any(w in reason.lower() for w in _NO_SPACE_WORDS)
    return StoreFailure(507 if no_space else 503, reason)


def probe_write(store: Store, clock: Callable[[], float] = time.time) -> StoreFailure | None:
    """None when a write goes through; else why not. Cheap enough for every /healthz."""
    try:
        with store.engine.connect() as conn:
            tx = conn.begin()  # BEGIN IMMEDIATE on SQLite (store.db): takes the write lock
            try:
                conn.execute(_PROBE, {"key": PROBE_KEY, "value": repr(clock())})
                if store.dialect == "sqlite":
                    tx.commit()
                else:
                    tx.rollback()
            finally:
                if tx.is_active:
                    tx.rollback()
    except SQLAlchemyError as e:
        return describe_failure(e)
    return None
