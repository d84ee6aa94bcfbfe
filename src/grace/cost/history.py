"""What a team actually ran: the record ``grace assess`` and ``grace lifecycle`` judge.

A job log (sacct, a generic CSV, Grace's own store, a public trace) gives jobs;
a cloud bill gives GPU-hours by instance type and period, and sometimes the
capacity errors a team hit. Both come in as one :class:`History`, so every
indicator reads the same record whichever source it came from, and says
"unknown" (not "no") when the source does not hold what it needs.

This is a look back at the past, not a scheduling decision: run times here are
what the jobs really took (the twin's rule against reading true durations is
about deciding, and nothing here decides a placement).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from grace.spec.job import WorkloadClass

DAY_S = 86_400.0


class HistoryFormat(StrEnum):
    """The kinds of history ``grace assess --format`` and ``grace lifecycle --format`` read."""

    SACCT = "sacct"
    CSV = "csv"
    GRACE = "grace"
    CLOUD_BILL = "cloud-bill"
    PHILLY = "philly"
    CHRONUS = "chronus"
    TIRESIAS = "tiresias"
    OPENB = "openb"


@dataclass(frozen=True, slots=True)
class HistoryJob:
    """One job as it happened; times in seconds from the history's first submission.

    ``start_s`` is None when the source does not record when a job started (the
    Philly job list, most public traces): queue waits are then unknown, not zero.
    ``nodes`` is None when the source does not say how many nodes a job spanned.
    ``step_time_s`` is the job's mean training step time where the source has it.
    """

    job_id: str
    tenant: str
    submit_s: float
    run_s: float
    gpus: float
    nodes: int | None = None
    start_s: float | None = None
    gpu_model: str | None = None
    name: str | None = None
    workload_class: WorkloadClass | None = None
    limit_s: float | None = None
    state: str | None = None
    step_time_s: float | None = None

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.run_s / 3600.0

    @property
    def wait_s(self) -> float | None:
        """Time queued before it started; None when the source does not record starts."""
        return None if self.start_s is None else max(0.0, self.start_s - self.submit_s)

    @property
    def began_s(self) -> float:
        """When it started running: its recorded start, else its submission."""
        return self.submit_s if self.start_s is None else self.start_s


@dataclass(frozen=True, slots=True)
class CloudUsage:
    """One line of a cloud bill: GPU-hours of one instance type over one period.

    ``start_s``/``end_s`` bound the period (seconds from the bill's first period);
    ``capacity_errors`` counts launch requests the cloud refused for want of
    capacity (InsufficientInstanceCapacity, ZONE_RESOURCE_POOL_EXHAUSTED) where the
    export has them, out of ``launch_requests``; None when the bill does not say.
    """

    start_s: float
    end_s: float
    instance_type: str
    gpu_model: str | None
    gpu_hours: float
    cost_usd: float
    capacity_errors: int | None = None
    launch_requests: int | None = None


@dataclass
class History:
    """Jobs and/or cloud bill lines from one source, with what was skipped reading it."""

    source: str
    format: HistoryFormat
    jobs: list[HistoryJob] = field(default_factory=list)
    usage: list[CloudUsage] = field(default_factory=list)
    gpus_per_node: int = 8
    rows: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def span_s(self) -> float:
        """From the first submission (or bill period) to the last end."""
        ends = [j.began_s + j.run_s for j in self.jobs] + [u.end_s for u in self.usage]
        starts = [j.submit_s for j in self.jobs] + [u.start_s for u in self.usage]
        return max(ends) - min(starts) if ends else 0.0

    @property
    def gpu_hours(self) -> float:
        return sum(j.gpu_hours for j in self.jobs) + sum(u.gpu_hours for u in self.usage)

    def nodes_of(self, job: HistoryJob) -> int:
        """Nodes a job spanned: recorded, else its GPUs over ``gpus_per_node``, rounded up."""
        if job.nodes is not None:
            return job.nodes
        return max(1, -(-round(job.gpus * 1000) // (self.gpus_per_node * 1000)))
