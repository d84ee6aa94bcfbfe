"""After a restart, or on taking over from a leader that died: find out what is running.

For every attempt the store says is live: adopt it by its handle (the one in
the store, or the one the backend recorded itself when the crash came between
the launch and saving the handle). What cannot be adopted is ended by the
backend (``reap``: every process carrying the attempt's token, or its Slurm
job) *before* its job is queued again, so an attempt whose launch was cut
short can never run beside the next one. Ends requested before the restart
are sent again: a cancel, a move or a failure is not forgotten.
"""

from __future__ import annotations

import logging

from grace.control.live.context import LiveContext
from grace.control.live.ending import EndRequests
from grace.control.live.observe import attempt_of
from grace.control.store import repository as repo
from grace.control.store.models import AttemptState, JobEventKind, JobState

log = logging.getLogger("grace.reconciler")


def recover(ctx: LiveContext, ends: EndRequests) -> list[int]:
    """Adopt live attempts, end and requeue the rest; returns the requeued jobs."""
    now = ctx.clock()
    backend = ctx.backend
    with ctx.store.read() as s:
        attempts = [(a.job_id, a.number, a.handle or "") for a in repo.running_attempts(s)]
    recorded: dict[tuple[int, int], str] = getattr(backend, "recorded_handles", dict)()
    requeued: list[int] = []
    for job_id, number, handle in attempts:
        handle = handle or recorded.get((job_id, number), "")
        try:  # no handle: it died before the launch; a bad one cannot be re-attached either
            alive = bool(handle) and backend.adopt(job_id, number, handle)
        except ValueError as e:
            log.warning("job %s attempt %s cannot be adopted (%s): lost", job_id, number, e)
            alive = False
        if not alive and "reap" in backend.capabilities:
            # whatever a cut-short launch started must be gone before the job runs again
            ended = backend.reap(job_id, number, ctx.dirs.job(job_id))  # type: ignore[attr-defined]
            if ended:
                log.warning("job %s attempt %s: ended %d leftover process(es) of a launch the "
                            "control plane did not finish", job_id, number, ended)
        with ends.transaction() as s:
            job = repo.require_job(s, job_id)
            attempt = attempt_of(job, number)
            if alive:
                repo.add_event(s, job_id, JobEventKind.ADOPTED, now, {"attempt": number})
                if attempt.end_cause is not None:
                    ends.again(attempt)  # asked to end before the restart: ask again
                continue
            repo.end_attempt(s, attempt, AttemptState.LOST, now, None, "lost",
                             None, "processes gone after a control-plane restart")
            if job.state != JobState.RUNNING:
                continue  # stopped or preempted already
            if job.cancel_requested:
                repo.set_job_state(s, job, JobState.CANCELLED, now, "cancelled",
                                   JobEventKind.CANCELLED, {"attempt": number})
                continue
            repo.set_job_state(s, job, JobState.PENDING, now, "requeued: its processes "
                               "died with the control plane", JobEventKind.REQUEUED,
                               {"attempt": number})
            requeued.append(job_id)
    return requeued


__all__ = ["recover"]
