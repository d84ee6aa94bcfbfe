"""What running jobs report about themselves, kept in memory for /metrics and the dashboard.

``POST /jobs/N/heartbeats`` hands each batch here (see ``grace.runtime.heartbeat``
for a record's fields). The log keeps, per job:

- the newest record per rank (phase shares, step time, loss, throughput now);
- phase seconds summed over every step the job ever reported, per rank, so
  ``grace_job_phase_seconds_total`` is a true counter: it only grows, across
  attempts too (the largest rank's sum is exported, which is monotonic because
  each rank's is);
- productive step seconds of the live attempt (step time less waiting on data,
  on peers and on checkpoints) for ``grace_job_goodput_ratio``;
- rank 0's points, oldest first, for the dashboard's step-time, loss and phase
  curves (at most :data:`MAX_POINTS` per job, thinned by dropping every other old
  point rather than the oldest, so a long run keeps its whole shape).

Bounded: at most :data:`MAX_JOBS` jobs are remembered (the least recently heard
from are forgotten first). It lives in the API process and starts empty after a
restart: the job's own ``heartbeats-rank<r>.jsonl`` files keep the full history.
Thread-safe: the API answers heartbeats from a thread pool while /metrics reads.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from grace.core.constraint import PhaseShares, shares_from_phases

#: The runtime's phase names (``grace.runtime.timers.PHASES``), the only ones exported:
#: a job may time phases of its own, but label values must stay a closed set.
PHASES = ("data", "h2d", "forward", "backward", "allreduce", "optimizer", "checkpoint", "sync")
#: Waiting on input, and on peers (the same split showback charges as lost time).
IO_PHASES = ("data",)
SYNC_PHASES = ("allreduce", "sync")
#: Time a step spends not computing: what goodput leaves out.
UNPRODUCTIVE_PHASES = (*IO_PHASES, *SYNC_PHASES, "checkpoint")
MAX_POINTS = 2000
MAX_JOBS = 5000


@dataclass(frozen=True, slots=True)
class Point:
    """One heartbeat record of rank 0, as the dashboard plots it."""

    at: float
    attempt: int
    step: int
    step_s: float | None
    loss: float | None
    tokens_per_s: float | None
    phases: dict[str, float]


@dataclass(frozen=True, slots=True)
class CheckpointSave:
    """A committed checkpoint as the runtime reported it (rank 0's ``checkpoints`` field)."""

    step: int
    seconds: float
    size_bytes: int


@dataclass
class _Job:
    attempt: int = 0
    latest: dict[int, dict[str, Any]] = field(default_factory=dict)
    nodes: dict[int, str] = field(default_factory=dict)
    phase_sums: dict[int, dict[str, float]] = field(default_factory=dict)  # rank -> phase -> s
    productive_s: float = 0.0  # rank 0, live attempt
    points: list[Point] = field(default_factory=list)
    last_at: float = 0.0
    summary: JobTelemetry | None = None  # computed at the first read after a change


def _number(value: Any) -> float | None:
    """A finite float, or None: records come from the job and may hold anything."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _phases(record: dict[str, Any]) -> dict[str, float]:
    raw = record.get("phases")
    if not isinstance(raw, dict):
        return {}
    out = {}
    for name in PHASES:
        v = _number(raw.get(name))
        if v is not None and v >= 0:
            out[name] = v
    return out


def _saves(record: dict[str, Any]) -> list[CheckpointSave]:
    raw = record.get("checkpoints")
    if not isinstance(raw, list):
        return []
    out = []
    for item in raw[:100]:
        if not isinstance(item, dict):
            continue
        seconds, size, step = (_number(item.get(k)) for k in ("seconds", "bytes", "step"))
        if seconds is not None and seconds >= 0 and size is not None and size >= 0:
            out.append(CheckpointSave(int(step or 0), seconds, int(size)))
    return out


class HeartbeatLog:
    """The running jobs' recent heartbeats; see the module docstring for what is kept."""

    def __init__(self, max_points: int = MAX_POINTS, max_jobs: int = MAX_JOBS,
                 on_checkpoint: Callable[[CheckpointSave], None] | None = None) -> None:
        self.max_points = max_points
        self.max_jobs = max_jobs
        self.on_checkpoint = on_checkpoint
        self._jobs: OrderedDict[int, _Job] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, job_id: int, attempt: int, rank: int, node: str,
            records: Iterable[dict[str, Any]], received_at: float | None = None) -> None:
        """Fold one batch of one rank's records in (oldest first, as the runtime sends them).

        ``received_at`` (the API's clock) is when the job was last heard from: the records'
        own ``at`` is the job's to write, and a job must not hide a hang by dating its
        records in the future."""
        saves: list[CheckpointSave] = []
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                job = self._jobs[job_id] = _Job()
                while len(self._jobs) > self.max_jobs:
                    self._jobs.popitem(last=False)
            else:
                self._jobs.move_to_end(job_id)
            if attempt > job.attempt:  # a new attempt: its own ranks, its own goodput
                job.attempt, job.latest, job.nodes, job.productive_s = attempt, {}, {}, 0.0
            elif attempt < job.attempt:
                return  # a late batch of an attempt that has ended: it changes nothing now
            sums = job.phase_sums.setdefault(rank, {})
            for record in records:
                if not isinstance(record, dict):
                    continue
                self._fold(job, attempt, rank, record, sums)
                if rank == 0:
                    saves += _saves(record)
            job.nodes[rank] = node
            job.last_at = time.time() if received_at is None else received_at
            job.summary = None
        if self.on_checkpoint is not None:
            for save in saves:
                self.on_checkpoint(save)

    def _fold(self, job: _Job, attempt: int, rank: int, record: dict[str, Any],
              sums: dict[str, float]) -> None:
        phases = _phases(record)
        steps = _number(record.get("steps")) or 0.0
        for name, seconds in phases.items():
            sums[name] = sums.get(name, 0.0) + seconds * steps
        job.latest[rank] = record
        at = _number(record.get("at")) or 0.0
        if rank != 0:
            return
        step_s = _number(record.get("step_s"))
        if step_s is not None and steps:
            lost = sum(phases.get(p, 0.0) for p in UNPRODUCTIVE_PHASES)
            job.productive_s += max(0.0, step_s - lost) * steps
        step = _number(record.get("step"))
        job.points.append(Point(at, attempt, int(step or 0), step_s, _number(record.get("loss")),
                                _number(record.get("tokens_per_s")), phases))
        if len(job.points) > self.max_points:  # halve the older half: keep the run's shape
            half = len(job.points) // 2
            job.points[:half] = job.points[:half:2]

    # ------------------------------------------------------------------ reads
    def series(self, job_id: int) -> list[Point]:
        """Rank 0's points, every attempt this process heard, oldest first."""
        with self._lock:
            job = self._jobs.get(job_id)
            return list(job.points) if job is not None else []

    def latest(self, job_id: int) -> dict[int, dict[str, Any]]:
        """The newest record per rank of the live attempt."""
        with self._lock:
            job = self._jobs.get(job_id)
            return dict(job.latest) if job is not None else {}

    def phase_totals(self, job_id: int) -> dict[str, float]:
        """Seconds per phase over every reported step; the largest rank's (monotonic)."""
        with self._lock:
            job = self._jobs.get(job_id)
            return _largest(job.phase_sums.values()) if job is not None else {}

    def snapshot(self, job_ids: Iterable[int]) -> dict[int, JobTelemetry]:
        """What /metrics exports for these jobs (those this process heard from), at once."""
        out: dict[int, JobTelemetry] = {}
        with self._lock:
            for jid in job_ids:
                job = self._jobs.get(jid)
                if job is None or not job.latest:
                    continue
                if job.summary is None:  # only jobs heard from since the last read cost work
                    job.summary = JobTelemetry.of(job)
                out[jid] = job.summary
        return out

    def forget(self, keep: set[int]) -> None:
        """Drop every job not in ``keep`` (ended long ago); the store keeps their history."""
        with self._lock:
            for jid in [j for j in self._jobs if j not in keep]:
                del self._jobs[jid]


def _largest(per_rank: Iterable[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for sums in per_rank:
        for name, seconds in sums.items():
            out[name] = max(out.get(name, 0.0), seconds)
    return out


@dataclass(frozen=True, slots=True)
class JobTelemetry:
    """One job's exported figures, computed under the log's lock from its newest records."""

    attempt: int
    phase_totals: dict[str, float]
    phase_share: dict[str, float]  # of the latest step time, mean over ranks
    io_share: float
    sync_share: float
    step_s: float | None
    steps_per_s: float | None
    loss: float | None
    productive_s: float
    last_at: float
    #: waits as shares of step wall time, mean over ranks (``core.constraint``); None: no
    #: rank sent a step time yet
    waits: PhaseShares | None = None

    @staticmethod
    def of(job: _Job) -> JobTelemetry:
        shares: dict[str, list[float]] = {}
        step_times = []
        waits: list[PhaseShares] = []
        for record in job.latest.values():
            step_s = _number(record.get("step_s"))
            if step_s is None or step_s <= 0:
                continue
            step_times.append(step_s)
            phases = _phases(record)
            for name, seconds in phases.items():
                shares.setdefault(name, []).append(min(1.0, seconds / step_s))
            waits.append(shares_from_phases(phases, step_s))
        share = {name: sum(v) / len(v) for name, v in shares.items()}
        step_s = max(step_times) if step_times else None  # a synchronous gang runs at its slowest
        rank0 = job.latest.get(0, next(iter(job.latest.values())))
        return JobTelemetry(
            attempt=job.attempt, phase_totals=_largest(job.phase_sums.values()), phase_share=share,
            io_share=min(1.0, sum(share.get(p, 0.0) for p in IO_PHASES)),
            sync_share=min(1.0, sum(share.get(p, 0.0) for p in SYNC_PHASES)),
            step_s=step_s, steps_per_s=1.0 / step_s if step_s else None,
            loss=_number(rank0.get("loss")), productive_s=job.productive_s, last_at=job.last_at,
            waits=_mean_waits(waits))


def _mean_waits(per_rank: list[PhaseShares]) -> PhaseShares | None:
    """The ranks' shares averaged (a mean of valid shares is valid: each stays in [0, 1]
    and their sum at most 1)."""
    if not per_rank:
        return None
    n = len(per_rank)
    return PhaseShares(sum(w.data for w in per_rank) / n,
                       sum(w.communication for w in per_rank) / n,
                       sum(w.checkpoint for w in per_rank) / n,
                       sum(w.allreduce_span for w in per_rank) / n,
                       any(w.estimated for w in per_rank))
