"""The store's change feed: which jobs a commit wrote, as one growing number.

Every write transaction that adds or changes a job, or an attempt of one, stamps
those jobs' ``change_seq`` with a new value of ``change_clock`` as its last
statements before commit. The reconciler then reads only the jobs whose stamp
passed the last one it saw (``changed_since``), instead of every live and
pending job each cycle.

Why a clock row and not a database sequence: a sequence hands out numbers in
the order transactions ask, not the order they commit, so a reader could see 101
committed while 100 is still open and skip 100 for good. Bumping one row takes
its lock until commit; the next writer waits for it, so numbers commit in order
and every number below the largest a reader sees is already visible. The lock is
held only from the bump to the commit, after the transaction's own work.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import event, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from grace.control.store.models import Attempt, ChangeClock, Job

#: ``Session.info`` key: the job ids this transaction wrote so far
_CHANGED = "grace.changed_jobs"

_BUMP = text("UPDATE change_clock SET seq = seq + 1 WHERE id = 1 RETURNING seq")


def _collect(session: Session, _ctx: Any) -> None:
    """After each flush: remember the jobs whose rows (or attempts' rows) it wrote."""
    ids: set[int] = session.info.setdefault(_CHANGED, set())
    for obj in (*session.new, *session.dirty, *session.deleted):
        if isinstance(obj, Job) and obj.id is not None:
            ids.add(obj.id)
        elif isinstance(obj, Attempt) and obj.job_id is not None:
            ids.add(obj.job_id)


def track(writer: sessionmaker[Session]) -> None:
    """Collect changed jobs in every session ``writer`` makes."""
    event.listen(writer, "after_flush", _collect)


def stamp(session: Session) -> int | None:
    """Give the jobs this transaction wrote the next clock value (call last before commit).

    Returns the value, or None when the transaction wrote no job. The jobs' rows are
    locked first, in id order (PostgreSQL): a job locked by another writer that then
    waits for the clock must not find this transaction holding the clock and waiting
    for that job."""
    session.flush()
    ids = sorted(session.info.pop(_CHANGED, ()))
    if not ids:
        return None
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        session.execute(select(Job.id).where(Job.id.in_(ids)).order_by(Job.id).with_for_update())
    seq = int(session.execute(_BUMP).scalar_one())
    for chunk in _chunks(ids, 5000):
        session.execute(update(Job).where(Job.id.in_(chunk)).values(change_seq=seq)
                        .execution_options(synchronize_session=False))
    return seq


def current(session: Session) -> int:
    """The clock's value now (what a first full read has seen everything up to)."""
    return int(session.scalar(select(ChangeClock.seq).where(ChangeClock.id == 1)) or 0)


def _chunks(ids: list[int], size: int) -> Iterable[list[int]]:
    for i in range(0, len(ids), size):
        yield ids[i:i + size]


__all__ = ["current", "stamp", "track"]
