"""What ``decide`` returns: typed decisions, and a typed reason for every job left waiting."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from grace.core.capacity import Placement
from grace.core.jobs import JobId, PendingJob


class PendingReason(StrEnum):
    """Why a job did not start this cycle; ``NEXT_STEP`` says what happens next."""

    WAITING_FOR_CAPACITY = "waiting-for-capacity"
    OVER_QUOTA = "over-quota"
    HELD_FOR_RESERVATION = "held-for-reservation"
    BEHIND_QUEUE_HEAD = "behind-queue-head"
    NOT_EXAMINED = "not-examined"
    NO_USABLE_NODES = "no-usable-nodes"
    # the workflow gate's (core.workflow): never offered to decide this cycle
    HELD = "held"
    DEPENDENCY = "dependency"
    ARRAY_LIMIT = "array-limit"


NEXT_STEP: dict[PendingReason, str] = {
    PendingReason.WAITING_FOR_CAPACITY:
        "no placement fits right now; starts when enough GPUs of a fitting model free up",
    PendingReason.OVER_QUOTA:
        "the tenant is at its quota; starts when its own jobs finish (mark the job "
        "preemptible to let it borrow idle GPUs)",
    PendingReason.HELD_FOR_RESERVATION:
        "it fits now but would delay the job holding the backfill reservation; "
        "starts after that job, or sooner with a shorter runtime_estimate",
    PendingReason.BEHIND_QUEUE_HEAD:
        "strict FIFO: waits until every job ahead of it has started",
    PendingReason.NOT_EXAMINED:
        "the cycle stopped scanning before reaching it (backfill depth); examined next cycle",
    PendingReason.NO_USABLE_NODES:
        "every node with a fitting GPU model is drained or down; starts when one returns",
    PendingReason.HELD:
        "submitted or put on hold: never starts until released (grace release JOB)",
    PendingReason.DEPENDENCY:
        "waits for the jobs it depends on to end as --dependency asks; queued after that",
    PendingReason.ARRAY_LIMIT:
        "its array already runs as many tasks as its %N limit; queued when one ends",
}


class StopReason(StrEnum):
    TIMEOUT = "timeout"


class PreemptReason(StrEnum):
    QUOTA_RECLAIM = "quota-reclaim"
    PRIORITY = "priority"
    LEAST_ATTAINED_SERVICE = "least-attained-service"


class StartNote(StrEnum):
    """Something about a start worth telling its owner; it does not stop the start."""

    # no leaf set within capacity was free: the gang shares an uplink already past its
    # bandwidth (core.spine_load), so its all-reduce may run slower than placed alone
    CROSSES_LOADED_UPLINK = "crosses-loaded-uplink"


@dataclass(frozen=True, slots=True)
class StartJob:
    job_id: JobId
    placement: Placement
    borrowing: bool = False
    notes: tuple[StartNote, ...] = ()


@dataclass(frozen=True, slots=True)
class PreemptJob:
    job_id: JobId
    reason: PreemptReason
    for_job: JobId


@dataclass(frozen=True, slots=True)
class StopJob:
    job_id: JobId
    reason: StopReason


@dataclass(frozen=True, slots=True)
class Reservation:
    """EASY backfill: the blocked head's GPUs are promised at ``shadow_s``."""

    job_id: JobId
    models: frozenset[str]
    shadow_s: float
    extra_gpus: float


@dataclass
class DecideResult:
    """Decisions of one cycle, in the order they must be applied: stops, preemptions, starts."""

    stops: list[StopJob] = field(default_factory=list)
    preemptions: list[PreemptJob] = field(default_factory=list)
    starts: list[StartJob] = field(default_factory=list)
    reasons: dict[JobId, PendingReason] = field(default_factory=dict)
    shape_reasons: dict[tuple, PendingReason] = field(default_factory=dict)
    default_reason: PendingReason = PendingReason.NOT_EXAMINED
    reservations: list[Reservation] = field(default_factory=list)

    def reason_for(self, job: PendingJob) -> PendingReason | None:
        """The reason ``job`` is still waiting, or None if this cycle starts it."""
        if any(s.job_id == job.id for s in self.starts):
            return None
        return self._waiting_reason(job)

    def waiting_reasons(self, jobs: Iterable[PendingJob]) -> Iterator[tuple[JobId, PendingReason]]:
        """``reason_for`` of each of ``jobs`` that still waits, without a scan of the starts
        per job (the live driver asks it of every waiting job, every cycle)."""
        started = {s.job_id for s in self.starts}
        for job in jobs:
            if job.id not in started:
                yield job.id, self._waiting_reason(job)

    def _waiting_reason(self, job: PendingJob) -> PendingReason:
        r = self.reasons.get(job.id)
        if r is not None:
            return r
        return self.shape_reasons.get((job.tenant, job.shape), self.default_reason)

    @property
    def changed(self) -> bool:
        return bool(self.stops or self.preemptions or self.starts)
