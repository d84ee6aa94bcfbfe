"""The live jobs as the reconciler last read them, kept up to date by the change feed.

A cycle used to load every pending and running job, with its attempts, as ORM
rows: at 10,000 waiting jobs that alone took most of a second. The mirror reads
them once, then each cycle only the jobs whose ``change_seq`` passed the last
one it saw (``store.changes``): a steady cycle reads no row at all. It holds
plain column values, never ORM objects, and only what the cycle's roles read:
the view (core's snapshot), the watches and the health intake's busy nodes.

It is a cache: the store stays the truth, and a mirror built from scratch
(``reload``) equals one kept up to date since the control plane started. Tests
check that every cycle (``Reconciler.verify_views``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from grace.control.store import changes
from grace.control.store.models import LIVE_ATTEMPT_STATES, Attempt, EndCause, Job, JobState

#: Jobs the scheduler's snapshot holds: waiting, or running (a job with a live attempt
#: in any state holds its GPUs too: it is read whatever its state)
WAITING_OR_RUNNING = (JobState.PENDING, JobState.RUNNING)

_JOB_COLUMNS = (Job.id, Job.state, Job.restarts, Job.spec_json, Job.submitted_at,
                Job.exclude_nodes, Job.reason, Job.held, Job.array_id, Job.array_index,
                Job.array_limit, Job.cancel_requested, Job.requeue_requested, Job.change_seq)
_ATTEMPT_COLUMNS = (Attempt.job_id, Attempt.number, Attempt.placement_json, Attempt.started_at,
                    Attempt.borrowing, Attempt.end_cause)
#: ids per IN list (SQLite's limit on bound parameters is far above it)
_CHUNK = 5000


@dataclass(frozen=True, slots=True)
class JobRow:
    """The columns of a job the cycle reads."""

    id: int
    state: JobState
    restarts: int
    spec_json: dict[str, Any]
    submitted_at: float
    exclude_nodes: list[Any]
    reason: str | None
    held: bool
    array_id: int | None
    array_index: int | None
    array_limit: int | None
    cancel_requested: bool = False
    requeue_requested: bool = False


@dataclass(frozen=True, slots=True)
class LiveAttemptRow:
    """A starting or running attempt: where it runs and whether it was asked to end."""

    job_id: int
    number: int
    placement_json: list[dict[str, Any]]
    started_at: float | None
    borrowing: bool
    end_cause: EndCause | None

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(str(e["node"]) for e in self.placement_json)


class StoreMirror:
    """Live jobs and their live attempts, refreshed from the change feed."""

    def __init__(self) -> None:
        self.jobs: dict[int, JobRow] = {}
        #: each job's live attempt (the lowest-numbered one if a job somehow has two)
        self.attempts: dict[int, LiveAttemptRow] = {}
        self.seen = -1  # the change clock up to which every change has been read; -1: none
        self._changed: set[int] = set()  # read since the last ``take_changed``

    @property
    def loaded(self) -> bool:
        return self.seen >= 0

    def reload(self, s: Session) -> set[int]:
        """Read every live job afresh; returns their ids (all of them changed, to a reader
        that knew nothing). The clock is read first: a change committed while the jobs are
        read has a larger number and is read again next time (twice is harmless)."""
        seen = changes.current(s)
        live = select(Attempt.job_id).where(Attempt.state.in_(list(LIVE_ATTEMPT_STATES)))
        rows = s.execute(select(*_JOB_COLUMNS).where(
            or_(Job.state.in_(WAITING_OR_RUNNING), Job.id.in_(live))).order_by(Job.id)).all()
        attempts = s.execute(select(*_ATTEMPT_COLUMNS).where(
            Attempt.state.in_(list(LIVE_ATTEMPT_STATES))).order_by(Attempt.job_id,
                                                                   Attempt.number)).all()
        self.jobs.clear()
        self.attempts.clear()
        self._take(rows, attempts)
        self.seen = seen
        self._changed = set(self.jobs)
        return set(self.jobs)

    def refresh(self, s: Session) -> set[int]:
        """Read the jobs changed since the last read; returns their ids (including jobs
        that left: ended, no live attempt). A mirror never loaded is loaded whole."""
        if not self.loaded:
            return self.reload(s)
        # no ORDER BY: sorting by id invites the planner to walk the whole table by its
        # key instead of the change_seq index (the caller sorts the few rows itself)
        rows = s.execute(select(*_JOB_COLUMNS).where(Job.change_seq > self.seen)).all()
        if not rows:
            return set()
        ids = [int(r.id) for r in rows]
        attempts: list[Any] = []
        for chunk in _chunks(ids):
            attempts += s.execute(select(*_ATTEMPT_COLUMNS).where(
                Attempt.job_id.in_(chunk), Attempt.state.in_(list(LIVE_ATTEMPT_STATES)))
                .order_by(Attempt.job_id, Attempt.number)).all()
        for job_id in ids:
            self.jobs.pop(job_id, None)
            self.attempts.pop(job_id, None)
        self._take(rows, attempts)
        self.seen = max(self.seen, max(int(r.change_seq) for r in rows))
        self._changed.update(ids)
        return set(ids)

    def take_changed(self) -> set[int]:
        """The jobs read since the last call (a role that refreshed earlier in the cycle
        must not hide its changes from the view)."""
        out, self._changed = self._changed, set()
        return out

    def _take(self, rows: Sequence[Any], attempts: Iterable[Any]) -> None:
        for a in attempts:
            if a.job_id not in self.attempts:
                self.attempts[a.job_id] = LiveAttemptRow(
                    int(a.job_id), int(a.number), list(a.placement_json or ()),
                    None if a.started_at is None else float(a.started_at), bool(a.borrowing),
                    None if a.end_cause is None else EndCause(a.end_cause))
        for r in rows:
            if JobState(r.state) in WAITING_OR_RUNNING or r.id in self.attempts:
                self.jobs[int(r.id)] = JobRow(
                    int(r.id), JobState(r.state), int(r.restarts), dict(r.spec_json),
                    float(r.submitted_at), list(r.exclude_nodes or ()), r.reason, bool(r.held),
                    r.array_id, r.array_index, r.array_limit, bool(r.cancel_requested),
                    bool(r.requeue_requested))

    # ----------------------------------------------------------------- readers
    def live_attempts(self) -> list[LiveAttemptRow]:
        """Every live attempt, by job id."""
        return [self.attempts[j] for j in sorted(self.attempts)]

    def asked_to_end(self) -> bool:
        """Has a user asked to cancel or requeue a live job (``Applier.cancellations``)?"""
        return any(r.cancel_requested or r.requeue_requested for r in self.jobs.values())

    def busy_nodes(self) -> set[str]:
        """Nodes some live attempt holds (even one already asked to end: its processes run)."""
        return {n for a in self.attempts.values() for n in a.nodes}


def _chunks(ids: list[int]) -> Iterable[list[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i:i + _CHUNK]


__all__ = ["JobRow", "LiveAttemptRow", "StoreMirror"]
