"""Group commit: concurrent small writes share one transaction, each in a savepoint.

Under many clients every ``POST /jobs`` was two write transactions of its own
(the job, then the request's audit entry), each taking the write lock, bumping
the audit chain's head and the change clock, and committing. Here a writer
thread takes every unit of work waiting when it is free (up to ``max_batch``),
runs them one after another in a single transaction, each inside a savepoint,
and commits once. While it commits, the next units queue up: the busier the
API, the larger the groups. A group first runs without savepoints (each is two
round trips on PostgreSQL); only if a unit raises is the group rolled back and
run again with a savepoint per unit.

A unit may return ``AfterFlush(answer)``: its caller then gets ``answer()``, called
once the group's rows are flushed. A unit that adds rows without flushing (a job
whose id is assigned at the flush) then costs the group one flush in all, not one
each.

Nothing is acknowledged before it is committed: ``run`` returns a unit's result
(or raises its error) only after the group's commit. A unit that raises is
rolled back to its savepoint, with the audit entries it staged, and only its
caller sees the error; the others commit. A unit may therefore run twice: it
must only write through the session it is given. If the commit itself fails (the
database is gone, another control plane took the lease), every caller of the
group gets that error and nothing of the group is stored.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from sqlalchemy.orm import Session

from grace.control.store.audit import drop_staged, staged_count

if TYPE_CHECKING:
    from grace.control.store.db import Store

T = TypeVar("T")
Work = Callable[[Session], Any]

#: Units in one transaction at most (a group's savepoints and rows stay small).
MAX_BATCH = 256
#: A writer thread with nothing to do for this long ends (the next unit starts another).
IDLE_S = 2.0


class GroupCommit:
    """One store's writer of grouped units of work."""

    def __init__(self, store: Store, max_batch: int = MAX_BATCH) -> None:
        self.store = store
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[tuple[Work, Future[Any]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._writer: threading.Thread | None = None
        #: groups committed and units in them, since the store opened (the benchmark's)
        self.groups = 0
        self.units = 0

    @overload
    def run(self, work: Callable[[Session], AfterFlush[T]]) -> T: ...

    @overload
    def run(self, work: Callable[[Session], T]) -> T: ...

    def run(self, work: Callable[[Session], Any]) -> Any:
        """Do ``work`` in the next group's transaction; its result once that committed.

        Refused inside a ``store.transaction()`` of this thread (or inside a unit): the
        writer would wait for this thread's write lock while this thread waits for it."""
        return self.submit(work).result()

    async def run_async(self, work: Callable[[Session], Any]) -> Any:
        """``run`` for a coroutine on the event loop: it waits without a thread. A route that
        blocked a pool thread on ``run`` cost two more thread handoffs per request (the
        writer waking that thread, that thread waking the loop), each a futex, a context
        switch and a pass of the interpreter lock: on two cores about 0.3 ms of a
        request's CPU (``benchmarks/api_floor.py`` measures the framework's share)."""
        return await asyncio.wrap_future(self.submit(work))

    def submit(self, work: Callable[[Session], Any]) -> Future[Any]:
        """Queue ``work`` for the next group; its future settles once that committed."""
        if self.store.writes_open() or threading.current_thread() is self._writer:
            raise RuntimeError("group_commit.run inside a write transaction would wait on "
                               "itself: write through the session already open")
        done: Future[Any] = Future()
        self._queue.put((work, done))
        with self._lock:
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._loop, name="grace-group-commit",
                                                daemon=True)
                self._writer.start()
        return done

    def waiting(self) -> int:
        """Units queued for the next group (not yet taken by the writer)."""
        return self._queue.qsize()

    def _loop(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._writer = None
                        return
                continue
            group = [first]
            while len(group) < self.max_batch:
                try:
                    group.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._commit(group)

    def _commit(self, group: list[tuple[Work, Future[Any]]]) -> None:
        live = [(work, done) for work, done in group if done.set_running_or_notify_cancel()]
        try:
            try:
                outcomes = self._together(live)
            except _UnitFailed:  # rare: redo the group, each unit in a savepoint of its own
                outcomes = self._apart(live)
        except BaseException as e:  # the group's commit failed: no unit of it is stored
            for _, done in live:
                done.set_exception(e)
            if not isinstance(e, Exception):
                raise
            return
        self.groups += 1
        self.units += len(outcomes)
        for done, ok, value in outcomes:
            if ok:
                done.set_result(value)
            else:
                done.set_exception(value)

    def _together(self, group: list[tuple[Work, Future[Any]]]) -> list[Outcome]:
        """Every unit in one transaction with no savepoints (each costs two round trips on
        PostgreSQL); if one raises, nothing is kept and ``_UnitFailed`` says to redo."""
        outcomes: list[Outcome] = []
        with self.store.transaction() as s:
            for work, done in group:
                try:
                    outcomes.append((done, True, work(s)))
                except Exception as e:
                    raise _UnitFailed from e
            s.flush()  # every unit's rows at once
            try:
                outcomes = [(done, ok, _answer(value)) for done, ok, value in outcomes]
            except Exception as e:
                raise _UnitFailed from e
        return outcomes

    def _apart(self, group: list[tuple[Work, Future[Any]]]) -> list[Outcome]:
        """The group again, each unit in a savepoint: one that raises is rolled back (with
        the audit entries it staged) and only its caller gets the error."""
        outcomes: list[Outcome] = []
        with self.store.transaction() as s:
            for work, done in group:
                mark = staged_count(s)
                try:
                    with s.begin_nested():
                        value = work(s)
                        s.flush()
                        outcomes.append((done, True, _answer(value)))
                except Exception as e:  # handed to its own caller
                    drop_staged(s, mark)
                    outcomes.append((done, False, e))
        return outcomes


class AfterFlush(Generic[T]):
    """A unit's answer that needs its rows flushed first (their ids): ``answer()`` is
    called after the group's flush, in the group's transaction."""

    __slots__ = ("answer",)

    def __init__(self, answer: Callable[[], T]) -> None:
        self.answer = answer


def _answer(value: Any) -> Any:
    return value.answer() if isinstance(value, AfterFlush) else value


class _UnitFailed(Exception):
    """A unit raised in a group run without savepoints: roll it all back and redo apart."""


Outcome = tuple[Future[Any], bool, Any]


__all__ = ["MAX_BATCH", "AfterFlush", "GroupCommit"]
