"""What happens to a job when one of its attempts fails.

A failed job resumes from its last committed checkpoint on healthy GPUs: it is
queued again with the failed node excluded (when the failure was the node's),
keeping its shape and so its topology constraints. Two things stop the retry
loop: a job that fails in its first minutes on an application error is a user
error (a typo, a bad path) and is not retried, and a job that keeps failing
without committing a new checkpoint exhausts its restart budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from grace.core.jobs import PendingJob


class FailureKind(StrEnum):
    """Whose fault an attempt's failure was, as the health table decided."""

    APPLICATION = "application"  # the job's code or data; node is fine
    NODE = "node"  # hardware: the node is drained
    HANG = "hang"  # heartbeats stopped
    KILLED = "killed"  # a rank was killed by a signal (an operator, a drill, a host OOM)
    PREEMPTED = "preempted"  # not a failure: the scheduler took the GPUs
    OOM = "oom"  # the backend saw its memory limit (memory_gb) end it: the job's own doing


class RestartVerdict(StrEnum):
    RESTART = "restart"
    GIVE_UP_USER_ERROR = "user-error"
    GIVE_UP_BUDGET = "restart-budget-exhausted"
    GIVE_UP_OUT_OF_MEMORY = "out-of-memory"


@dataclass(frozen=True)
class RestartPolicy:
    """Limits on automatic restarts; the defaults suit multi-day training runs."""

    user_error_window_s: float = 300.0  # an application failure this early is the user's
    max_restarts_without_progress: int = 3
    exclude_failed_node: bool = True


@dataclass(frozen=True)
class FailedAttempt:
    """What the driver knows about the attempt that just ended."""

    kind: FailureKind
    node: int | None  # the node to blame, if any
    ran_s: float  # how long this attempt ran
    first_attempt: bool
    progressed: bool  # committed a checkpoint (or, without checkpoints, did useful work)
    restarts_without_progress: int  # before this failure


@dataclass(frozen=True)
class RestartDecision:
    """What the driver records, whatever the verdict: core owns all of the bookkeeping.

    ``restarts`` and ``stalled_restarts`` are the job's new counters (the driver
    stores them as they are, never recomputes them); ``exclude_node`` is the node
    the job must now avoid, if any.
    """

    verdict: RestartVerdict
    reason: str
    job: PendingJob | None = None  # the job to queue again, when restarting
    restarts: int = 0
    stalled_restarts: int = 0
    exclude_node: int | None = None


def on_failure(job: PendingJob, attempt: FailedAttempt,
               policy: RestartPolicy = RestartPolicy()) -> RestartDecision:
    """Decide whether and how ``job`` runs again after ``attempt`` failed.

    An attempt ended by its own memory limit is not retried, however long it ran: the
    same limit on the same code would end it again, and only the user can change it.
    """
    if attempt.kind is FailureKind.OOM:
        return RestartDecision(
            RestartVerdict.GIVE_UP_OUT_OF_MEMORY,
            f"ran out of memory after {attempt.ran_s:.0f}s: its processes on a node used more "
            "than the node's memory limit and the kernel killed one; not retried (the same "
            "limit would end it again): resubmit with a larger memory_gb (per node), or make "
            "the job use less", restarts=job.restarts,
            stalled_restarts=attempt.restarts_without_progress)
    if attempt.kind is FailureKind.APPLICATION and attempt.first_attempt \
            and attempt.ran_s < policy.user_error_window_s:
        return RestartDecision(
            RestartVerdict.GIVE_UP_USER_ERROR,
            f"failed after {attempt.ran_s:.0f}s on its first attempt with an application "
            "error: most likely the job itself (check its logs); not retried")
    # only failures the job may have caused count against it: a node dying under a
    # large job again and again is the cluster's problem, not a reason to give up
    own_fault = attempt.kind in (FailureKind.APPLICATION, FailureKind.HANG, FailureKind.KILLED)
    stalled = 0 if attempt.progressed else attempt.restarts_without_progress + own_fault
    if stalled > policy.max_restarts_without_progress:
        return RestartDecision(
            RestartVerdict.GIVE_UP_BUDGET,
            f"failed {stalled} times in a row without committing a checkpoint; stopped so "
            "it burns no more GPU-hours (resubmit after fixing the cause)",
            restarts=job.restarts, stalled_restarts=stalled)
    blamed = attempt.node if (policy.exclude_failed_node and attempt.node is not None
                              and attempt.kind in (FailureKind.NODE, FailureKind.HANG)) else None
    exclude = job.exclude_nodes | {blamed} if blamed is not None else job.exclude_nodes
    again = job.reshaped(exclude_nodes=exclude, restarts=job.restarts + 1)
    return RestartDecision(RestartVerdict.RESTART, f"{attempt.kind} failure; resuming from the "
                           "last committed checkpoint", again, restarts=again.restarts,
                           stalled_restarts=stalled, exclude_node=blamed)
