"""What a team actually ran: the record ``grace assess`` and ``grace lifecycle`` judge.

A job log (sacct, a generic CSV, Grace's own store, a public trace) gives jobs;
a cloud bill gives GPU-hours by instance type and period, and sometimes the
capacity errors a team hit. Both come in as one :class:`History`, so every
indicator reads the same record whichever source it came from, and says
"unknown" (not "no") when the source does not hold what it needs.

:func:`load_history` reads any :class:`HistoryFormat`: the public traces through
``grace.sim.traces`` (:func:`from_trace`), the rest through one small module each
(``history_sacct``, ``history_csv``, ``history_bill``, ``history_store``); see
docs/assess.md for what each source gives and lacks.

This is a look back at the past, not a scheduling decision: run times here are
what the jobs really took (the twin's rule against reading true durations is
about deciding, and nothing here decides a placement).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from grace.spec.job import WorkloadClass

if TYPE_CHECKING:
    from grace.sim.traces.model import Trace

DAY_S = 86_400.0
#: a month as the cost planner counts it: 730 hours (``grace.cost.tco.HOURS_PER_MONTH``)
MONTH_S = 730 * 3600.0


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
    #: the job's spec declared it handles sensitive data (Grace's store: ``JobSpec.
    #: sensitive_data``); False where the source cannot say (every other format)
    sensitive_data: bool = False

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
    #: epoch seconds of time 0 (the first submission or bill period), where the source
    #: has calendar times; None where it does not keep them (public traces are shifted
    #: to start at 0 by their loaders), so reports then count months from the start
    origin_epoch_s: float | None = None

    @property
    def kept(self) -> int:
        """Records kept: jobs plus bill lines."""
        return len(self.jobs) + len(self.usage)

    def summary(self) -> str:
        """``<source>: N of M rows kept; skipped 3 no GPUs, 1 missing start`` (for stderr)."""
        parts = ", ".join(f"{n} {why}" for why, n in
                          sorted(self.skipped.items(), key=lambda kv: (-kv[1], kv[0])))
        return f"{self.source}: {self.kept} of {self.rows} rows kept" + (
            f"; skipped {parts}" if parts else "")

    @property
    def span_s(self) -> float:
        """From the first submission (or bill period) to the last end."""
        ends = [j.began_s + j.run_s for j in self.jobs] + [u.end_s for u in self.usage]
        starts = [j.submit_s for j in self.jobs] + [u.start_s for u in self.usage]
        return max(ends) - min(starts) if ends else 0.0

    @property
    def gpu_hours(self) -> float:
        return sum(j.gpu_hours for j in self.jobs) + sum(u.gpu_hours for u in self.usage)

    def gpu_hours_by_period(self, period_s: float = MONTH_S) -> list[float]:
        """GPU-hours in each ``period_s`` block from time 0 (730-hour months by default).

        A job counts from when it began (its start, else its submission) for its run
        time; a bill line spreads its GPU-hours evenly over its period; either is split
        between blocks by overlap. The last block may be partial: it is what was recorded.
        """
        spans = [(j.began_s, j.began_s + j.run_s, j.gpus) for j in self.jobs if j.run_s > 0]
        spans += [(u.start_s, u.end_s, u.gpu_hours * 3600.0 / (u.end_s - u.start_s))
                  for u in self.usage if u.end_s > u.start_s]
        if not spans:
            return []
        out = [0.0] * max(1, math.ceil(max(end for _, end, _ in spans) / period_s))
        for start, end, gpus in spans:
            for m in range(int(start // period_s), min(len(out) - 1, int(end // period_s)) + 1):
                overlap = min(end, (m + 1) * period_s) - max(start, m * period_s)
                if overlap > 0:
                    out[m] += overlap * gpus / 3600.0
        return out

    def nodes_of(self, job: HistoryJob) -> int:
        """Nodes a job spanned: recorded, else its GPUs over ``gpus_per_node``, rounded up."""
        if job.nodes is not None:
            return job.nodes
        return max(1, -(-round(job.gpus * 1000) // (self.gpus_per_node * 1000)))


#: formats whose loader is a ``grace simulate`` trace loader (``grace.sim.traces``)
TRACE_FORMATS = frozenset({HistoryFormat.PHILLY, HistoryFormat.CHRONUS, HistoryFormat.TIRESIAS,
                           HistoryFormat.OPENB})
#: formats that take ``--columns``: a role map (csv) or renamed columns (cloud-bill, sacct)
COLUMN_FORMATS = frozenset({HistoryFormat.CSV, HistoryFormat.CLOUD_BILL, HistoryFormat.SACCT})


def parse_format(fmt: HistoryFormat | str) -> HistoryFormat:
    """``fmt`` as a :class:`HistoryFormat`, or a ValueError listing the formats."""
    if isinstance(fmt, HistoryFormat):
        return fmt
    try:
        return HistoryFormat(fmt.strip().lower())
    except ValueError:
        raise ValueError(f"unknown history format {fmt!r}; use one of "
                         f"{', '.join(f.value for f in HistoryFormat)}") from None


def load_history(path: Path | str, fmt: HistoryFormat | str, columns: str | None = None, *,
                 gpus_per_node: int = 8) -> History:
    """Read a history of ``fmt`` from ``path`` (a file, or for ``grace`` a database URL).

    ``columns`` is ``csv``'s role map (required there), or for ``cloud-bill`` and
    ``sacct`` a map from the standard column names to the file's own. Bad rows are
    skipped and counted in ``History.skipped`` by reason; only a wrong file, format
    or column map raises (ValueError, naming what to fix).
    """
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be at least 1, not {gpus_per_node}")
    if not str(path).strip():
        raise ValueError("no file given: --history names the job log, bill or store to read")
    try:
        history = _load(path, fmt, columns)
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not a text file (UTF-8); give the CSV or sacct export "
                         "itself, uncompressed") from None
    except ValueError as e:  # the trace loaders' wording, for a history that is no trace
        raise ValueError(str(e).replace("trace file ", "file ", 1)) from None
    history.gpus_per_node = gpus_per_node
    return plausible(history)


def _load(path: Path | str, fmt: HistoryFormat | str, columns: str | None) -> History:
    """The loader for ``fmt`` (see ``load_history``)."""
    kind = parse_format(fmt)
    if columns is not None and kind not in COLUMN_FORMATS:
        raise ValueError(f"--columns applies to formats "
                         f"{', '.join(sorted(f.value for f in COLUMN_FORMATS))}, not {kind.value!r}; "
                         "drop it")
    if kind in TRACE_FORMATS:
        from grace.sim.traces import load_trace

        history = from_trace(load_trace(path, kind.value), kind)
    elif kind is HistoryFormat.SACCT:
        from grace.cost.history_sacct import load_sacct

        history = load_sacct(path, columns)
    elif kind is HistoryFormat.CSV:
        from grace.cost.history_csv import load_history_csv

        if columns is None:
            raise ValueError("format 'csv' needs --columns, e.g. "
                             "submit=Submit,duration=Elapsed,gpus=NGPU,tenant=Account")
        history = load_history_csv(path, columns)
    elif kind is HistoryFormat.CLOUD_BILL:
        from grace.cost.history_bill import load_cloud_bill

        history = load_cloud_bill(path, columns)
    else:
        from grace.cost.history_store import load_store

        history = load_store(str(path))
    return history


#: A job that ran longer than this is a unit or parsing mistake (sacct's longest
#: Timelimit is UNLIMITED, but a year-long run is not a training job anyone had).
MAX_RUN_S = 366 * DAY_S
#: More GPUs than any cluster on record gave one job: a mistyped count.
MAX_JOB_GPUS = 100_000.0
#: A history longer than this mixes units (epoch seconds with milliseconds) or dates.
MAX_SPAN_S = 20 * 365 * DAY_S


def _job_problem(j: HistoryJob) -> str | None:
    numbers = (j.submit_s, j.run_s, j.gpus) + ((j.start_s,) if j.start_s is not None else ())
    if not all(math.isfinite(v) for v in numbers):
        return "a time or GPU count that is not a finite number"
    if j.run_s > MAX_RUN_S:
        return f"run time over {MAX_RUN_S / DAY_S:.0f} days (duration unit?)"
    if j.gpus > MAX_JOB_GPUS:
        return f"more than {MAX_JOB_GPUS:,.0f} GPUs"
    if j.start_s is not None and j.start_s < j.submit_s:
        return "start before submit"
    return None


def _line_problem(u: CloudUsage) -> str | None:
    numbers = (u.start_s, u.end_s, u.gpu_hours, u.cost_usd)
    if not all(math.isfinite(v) for v in numbers):
        return "a time, GPU-hours or cost that is not a finite number"
    if u.end_s <= u.start_s:
        return "period ends before it starts"
    if u.gpu_hours > MAX_JOB_GPUS * (u.end_s - u.start_s) / 3600.0:
        return f"more GPU-hours than {MAX_JOB_GPUS:,.0f} GPUs give in the period"
    if (u.capacity_errors is not None and u.launch_requests is not None
            and u.capacity_errors > u.launch_requests):
        return "refusals exceed requests"
    return None


def plausible(history: History) -> History:
    """``history`` without the rows no real job or bill line could be (counted in
    ``skipped`` by reason); a ValueError when what is left spans more than
    ``MAX_SPAN_S``, which only mixed units or dates produce."""
    def keep(problem: str | None) -> bool:
        if problem is not None:
            history.skipped[problem] = history.skipped.get(problem, 0) + 1
        return problem is None

    history.jobs = [j for j in history.jobs if keep(_job_problem(j))]
    history.usage = [u for u in history.usage if keep(_line_problem(u))]
    if history.span_s > MAX_SPAN_S:
        raise ValueError(f"{history.source}: its times span more than "
                         f"{MAX_SPAN_S / DAY_S / 365:.0f} years: mixed units (epoch seconds "
                         "and milliseconds?) or dates; fix the submit column or --columns")
    return history


def from_trace(trace: Trace, fmt: HistoryFormat) -> History:
    """A ``grace simulate`` trace as a history: what each job asked for and how long it ran.

    Public traces record no start times (so no queue waits) and no node counts; a
    GPU-sharing pod (``gpu_milli``) counts as that fraction of one GPU. Kept: tenant,
    name, requested limit, declared workload class and GPU model.
    """
    jobs = [HistoryJob(
        job_id=j.job_id, tenant=j.tenant, submit_s=j.submit_s, run_s=j.duration_s,
        gpus=float(j.gpus) if j.gpu_milli is None else j.gpu_milli / 1000.0,
        gpu_model=j.gpu_model, name=j.name, workload_class=j.workload_class,
        limit_s=j.limit_s) for j in trace.jobs if j.gpus > 0]
    skipped = dict(trace.report.skipped)
    cpu_only = len(trace.jobs) - len(jobs)
    if cpu_only:
        skipped["no GPUs"] = skipped.get("no GPUs", 0) + cpu_only
    return History(source=trace.report.source, format=fmt, jobs=jobs, rows=trace.report.rows,
                   skipped=skipped)
