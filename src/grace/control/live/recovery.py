"""After a restart, or on taking over from a leader that died: find out what is running.

For every attempt the store says is live: adopt it by its handle (the one in
the store, or the one the backend recorded itself when the crash came between
the launch and saving the handle, or one the backend rebuilds from what a launch
cut short left on disk when every agent of it had started). What cannot be
adopted is ended by the backend (``reap``: every process carrying the attempt's token, or its Slurm
job) *before* its job is queued again, so an attempt whose launch was cut
short can never run beside the next one. Ends requested before the restart
are sent again: a cancel, a move or a failure is not forgotten.
"""

from __future__ import annotations

import logging

from grace.backends.base import ReapError
from grace.control.live.context import LiveContext
from grace.control.live.ending import EndRequests
from grace.control.live.observe import attempt_of
from grace.control.store import repository as repo
from grace.control.store.models import AttemptState, JobEventKind, JobState

log = logging.getLogger("grace.reconciler")


def recover(ctx: LiveContext, ends: EndRequests) -> list[int]:
    """Adopt live attempts, end and requeue the rest; returns the requeued jobs.

    An attempt whose processes survive ``reap`` stays live in the store (its GPUs stay
    held, its job does not start again) and is listed in ``unreaped``: the reconciler
    tries again every cycle (``settle``), so one unkillable process stalls that job only.
    """
    now = ctx.clock()
    backend = ctx.backend
    with ctx.store.read() as s:
        attempts = [(a.job_id, a.number, a.handle or "") for a in repo.running_attempts(s)]
    recorded: dict[tuple[int, int], str] = getattr(backend, "recorded_handles", dict)()
    requeued: list[int] = []
    rebuild = getattr(backend, "cut_short_handle", None)
    for job_id, number, handle in attempts:
        handle = handle or recorded.get((job_id, number), "")
        cut_short = False
        if not handle and rebuild is not None:  # a launch cut short: were all agents started?
            handle = rebuild(job_id, number, ctx.dirs.job(job_id)) or ""
            cut_short = bool(handle)
        try:  # no handle: it died before the launch; a bad one cannot be re-attached either
            alive = bool(handle) and backend.adopt(job_id, number, handle)
        except ValueError as e:
            log.warning("job %s attempt %s cannot be adopted (%s): lost", job_id, number, e)
            alive = False
        if alive:
            if cut_short:
                log.warning("job %s attempt %s: its launch was cut short after every agent "
                            "started; adopted it", job_id, number)
            with ends.transaction() as s:
                attempt = attempt_of(repo.require_job(s, job_id), number)
                attempt.handle = attempt.handle or handle
                repo.add_event(s, job_id, JobEventKind.ADOPTED, now,
                               {"attempt": number, **({"cut_short": True} if cut_short else {})})
                if attempt.end_cause is not None:
                    ends.again(attempt)  # asked to end before the restart: ask again
            continue
        if settle(ctx, ends, job_id, number, now):
            requeued.append(job_id)
    return requeued


def settle(ctx: LiveContext, ends: EndRequests, job_id: int, number: int, now: float) -> bool:
    """End an attempt nothing can adopt: its leftover processes first (``reap``), then its
    record; True if its job was queued again. Raises nothing: on ``ReapError`` the attempt
    is left live and noted in ``ctx.unreaped`` for the next try."""
    if "reap" in ctx.backend.capabilities:
        try:  # whatever a cut-short launch started must be gone before the job runs again
            ended = ctx.backend.reap(job_id, number, ctx.dirs.job(job_id))
        except ReapError as e:
            log.error("job %s attempt %s: %s; its GPUs stay held and the job waits; "
                      "retrying every cycle", job_id, number, e)
            ctx.unreaped.add((job_id, number))
            return False
        if ended:
            log.warning("job %s attempt %s: ended %d leftover process(es) of a launch the "
                        "control plane did not finish", job_id, number, ended)
    ctx.unreaped.discard((job_id, number))
    with ends.transaction() as s:
        job = repo.require_job(s, job_id)
        attempt = attempt_of(job, number)
        if not attempt.is_live:
            return False
        repo.end_attempt(s, attempt, AttemptState.LOST, now, None, "lost",
                         None, "processes gone after a control-plane restart")
        if job.state != JobState.RUNNING:
            return False  # stopped or preempted already
        if job.cancel_requested:
            repo.set_job_state(s, job, JobState.CANCELLED, now, "cancelled",
                               JobEventKind.CANCELLED, {"attempt": number})
            return False
        repo.set_job_state(s, job, JobState.PENDING, now, "requeued: its processes "
                           "died with the control plane", JobEventKind.REQUEUED,
                           {"attempt": number})
        return True


__all__ = ["recover", "settle"]
