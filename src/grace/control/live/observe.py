"""What the backend reports about attempts, recorded with core's restart policy.

Each ended attempt is recorded in its own transaction: its outcome, then the
job's move (completed, cancelled, diverged, requeued by ``core.restart``, or
failed for good). An attempt the control plane ended on purpose carries its
``end_cause`` in the store: a move is not a failure (the job keeps its
restart budget and avoids the node), a hang or a bad node is one, whatever
exit code the SIGTERM produced.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from grace.backends.base import AttemptStatus, Observation
from grace.control.live.context import LiveContext
from grace.control.live.files import latest_checkpoint
from grace.control.store import exclusions
from grace.control.store import repository as repo
from grace.control.store.models import (
    FAIL_CAUSES,
    MOVE_CAUSES,
    Attempt,
    AttemptState,
    EndCause,
    Job,
    JobEventKind,
    JobState,
)
from grace.control.stragglers import StragglerWatch
from grace.core.restart import FailedAttempt, FailureKind, RestartVerdict, on_failure
from grace.runtime.divergence import DIVERGED_EXIT_CODE

_ENDED = {AttemptStatus.SUCCEEDED: AttemptState.SUCCEEDED,
          AttemptStatus.CANCELLED: AttemptState.CANCELLED,
          AttemptStatus.LOST: AttemptState.LOST}


@dataclass
class CycleReport:
    started: list[int] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    pending: int = 0
    running: int = 0
    seconds: float = 0.0
    #: seconds per phase: observe (the backend's news), health (signals, drains, Slurm's
    #: node states), watches (heartbeats, stragglers, evictions, early stopping, cancels),
    #: load (the store's changes into the kept snapshot), decide, apply (decisions and
    #: reasons written); commit: the part of all of them spent committing (it overlaps)
    phases: dict[str, float] = field(default_factory=dict)


def failure_kind(obs: Observation) -> FailureKind:
    """Whose fault an attempt's own end was (one the control plane asked for has a cause)."""
    if obs.oom:
        return FailureKind.OOM  # before LOST and signals: the cgroup's counter says why
    if obs.status is AttemptStatus.LOST:
        return FailureKind.NODE
    if "heartbeat" in (obs.detail or ""):
        return FailureKind.HANG
    if obs.exit_code is not None and (obs.exit_code < 0 or obs.exit_code in (137, 143)):
        return FailureKind.KILLED  # a signal, not the job's code: retried, node kept
    return FailureKind.APPLICATION


def attempt_of(job: Job, number: int) -> Attempt:
    for a in job.attempts:
        if a.number == number:
            return a
    raise KeyError(f"job {job.id} has no attempt {number}")


class Observer:
    def __init__(self, ctx: LiveContext, stragglers: StragglerWatch) -> None:
        self.ctx = ctx
        self.stragglers = stragglers

    def observe(self, obs: Observation, now: float, report: CycleReport) -> None:
        if obs.status is AttemptStatus.RUNNING:
            return
        self.stragglers.forget((obs.job_id, obs.attempt))
        with self.ctx.store.transaction() as s:
            job = repo.require_job(s, obs.job_id)
            attempt = attempt_of(job, obs.attempt)
            if not attempt.is_live:
                return  # already recorded
            cause = attempt.end_cause
            if cause in MOVE_CAUSES and obs.status is not AttemptStatus.SUCCEEDED:
                self._moved(s, job, attempt, obs, now, report)
                return
            if cause in FAIL_CAUSES and obs.status is AttemptStatus.CANCELLED:
                # we ended it because it hung or its node went bad: that is a failure
                obs = Observation(obs.job_id, obs.attempt,
                                  AttemptStatus.LOST if cause is EndCause.NODE
                                  else AttemptStatus.FAILED,
                                  obs.exit_code, attempt.end_detail or obs.detail,
                                  attempt.end_node)
            self._ended(s, job, attempt, obs, now, report)

    def _ended(self, s: Session, job: Job, attempt: Attempt, obs: Observation, now: float,
               report: CycleReport) -> None:
        state = _ENDED.get(obs.status, AttemptState.FAILED)
        kind = (FailureKind.HANG if attempt.end_cause is EndCause.HANG
                else FailureKind.APPLICATION if attempt.end_cause is EndCause.APPLICATION
                else failure_kind(obs))
        failed = state in (AttemptState.FAILED, AttemptState.LOST)
        repo.end_attempt(s, attempt, state, now, obs.exit_code, kind.value if failed else None,
                         obs.failed_node, obs.detail)
        report.ended.append(job.id)
        if job.state != JobState.RUNNING:
            return  # stopped or preempted already: the job moved when that was decided
        if obs.status is AttemptStatus.SUCCEEDED:
            repo.set_job_state(s, job, JobState.COMPLETED, now, "completed",
                               JobEventKind.COMPLETED, {"attempt": obs.attempt})
            return
        if obs.status is AttemptStatus.CANCELLED:
            if job.cancel_requested:
                repo.set_job_state(s, job, JobState.CANCELLED, now, "cancelled",
                                   JobEventKind.CANCELLED, {"attempt": obs.attempt})
                return
            kind = FailureKind.NODE  # ended by nobody we know of: requeue, not the job's fault
        if obs.exit_code == DIVERGED_EXIT_CODE:
            repo.set_job_state(s, job, JobState.DIVERGED, now, obs.detail or "diverged",
                               JobEventKind.DIVERGED, {"attempt": obs.attempt})
            return
        self._failed(s, job, attempt, obs, kind, now, report)

    def _moved(self, s: Session, job: Job, attempt: Attempt, obs: Observation, now: float,
               report: CycleReport) -> None:
        """The moved attempt ended (after its checkpoint): requeue the job without the node.

        Not a failure of the job: its restart budget is untouched, as for a preemption.
        """
        cause, node, why = attempt.end_cause, attempt.end_node or "", attempt.end_detail or ""
        repo.end_attempt(s, attempt, AttemptState.CANCELLED, now, obs.exit_code,
                         cause.value if cause else None, node, why)
        report.ended.append(job.id)
        if job.state != JobState.RUNNING:
            return
        if job.cancel_requested:
            repo.set_job_state(s, job, JobState.CANCELLED, now, "cancelled",
                               JobEventKind.CANCELLED, {"attempt": obs.attempt})
            return
        repo.requeue_moved(s, job, now, why, node, {"attempt": obs.attempt, "node": node,
                                                    "cause": cause.value if cause else None,
                                                    "exit_code": obs.exit_code})
        report.requeued.append(job.id)

    def _failed(self, s: Session, job: Job, attempt: Attempt, obs: Observation,
                kind: FailureKind, now: float, report: CycleReport) -> None:
        """Core's restart policy decides; its counters are stored as they are."""
        pj = self.ctx.compiler.compile(job.id, job.restarts, job.spec_json, job.submitted_at,
                                       exclusions.active_names(job, now))
        node = self.ctx.topo.by_name.get(obs.failed_node) if obs.failed_node else None
        ran = now - (attempt.started_at or now)
        progressed = latest_checkpoint(self.ctx.dirs.job(job.id)) != attempt.resumed_from
        decision = on_failure(pj, FailedAttempt(
            kind, node, ran, first_attempt=attempt.number == 1, progressed=progressed,
            restarts_without_progress=job.stalled_restarts or 0), self.ctx.settings.restart_policy)
        detail = {"attempt": obs.attempt, "exit_code": obs.exit_code, "node": obs.failed_node,
                  "cause": kind.value, "detail": obs.detail[-500:]}
        job.stalled_restarts = decision.stalled_restarts
        if decision.verdict is not RestartVerdict.RESTART:
            repo.set_job_state(s, job, JobState.FAILED, now, decision.reason,
                               JobEventKind.FAILED, detail)
            return
        blamed = (self.ctx.topo.nodes[decision.exclude_node].name
                  if decision.exclude_node is not None else None)
        repo.note_failure_and_requeue(s, job, now, decision.reason, detail, exclude_node=blamed,
                                      stalled_restarts=decision.stalled_restarts,
                                      restarts=decision.restarts)
        report.requeued.append(job.id)


__all__ = ["CycleReport", "Observer", "attempt_of", "failure_kind"]
