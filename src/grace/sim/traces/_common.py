"""Helpers every CSV trace loader shares: opening a table, reading one field, finishing a trace.

Public traces are messy in small ways (a blank duration, a ``nan``, a short
row), and a replay of 80,000 jobs must not die on row 61,204. So each field
parser raises :class:`RowError` carrying a short, stable reason; the loader
catches it, counts the reason in the :class:`LoadReport` and moves on. The
reasons are the same words across loaders so reports can be compared.

Only structural problems (no file, no header, a required column absent) raise
``ValueError``: those mean the wrong file or the wrong column map, and no
amount of row skipping would give a meaningful trace.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grace.sim.traces.model import LoadReport, Trace, TraceJob
from grace.spec.job import WorkloadClass

#: Seconds per unit for the ``time_unit`` argument of loaders with numeric times.
TIME_UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "d": 86400.0,
}

HOUR = 3600.0
DAY = 86400.0

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)
# Slurm sacct Elapsed: [D-][HH:]MM:SS[.fff]
_ELAPSED = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


class RowError(Exception):
    """One row cannot become a job; ``reason`` is what the report counts."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def seconds_per(time_unit: str) -> float:
    """The scale of a ``time_unit`` name, or a ValueError listing the known ones."""
    try:
        return TIME_UNITS[time_unit]
    except KeyError:
        raise ValueError(
            f"unknown time_unit {time_unit!r}; use one of {sorted(TIME_UNITS)}"
        ) from None


def require_file(path: Path | str) -> Path:
    """The path, or a ValueError that names it (a FileNotFoundError is not what callers catch)."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory, not a file" if p.is_dir() else "does not exist"
        raise ValueError(f"trace file {p} {what}")
    return p


def pick_delimiter(header_line: str) -> str:
    """The most frequent of , | tab ; in the header (sacct --parsable2 writes '|')."""
    counts = {d: header_line.count(d) for d in (",", "|", "\t", ";")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


@contextmanager
def csv_table(
    path: Path | str,
    required: Sequence[str],
    optional: Sequence[str] = (),
    *,
    delimiter: str | None = ",",
) -> Iterator[tuple[dict[str, int], Iterator[list[str]]]]:
    """Open a headed CSV; yield the column positions and an iterator of non-blank rows.

    Raises ValueError naming the file, the missing column and the columns that
    do exist when a required column is absent. ``delimiter=None`` guesses it
    from the header line.
    """
    p = require_file(path)
    with p.open(newline="", encoding="utf-8-sig") as f:
        if delimiter is None:
            first = f.readline()
            f.seek(0)
            delimiter = pick_delimiter(first)
        reader = csv.reader(f, delimiter=delimiter)
        header = next(reader, None)
        if not header:
            raise ValueError(f"trace file {p} is empty; expected a header row with {list(required)}")
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            raise ValueError(
                f"trace file {p} has no column {missing[0]!r}"
                + (f" (also missing {missing[1:]})" if len(missing) > 1 else "")
                + f"; its columns are {header}"
            )
        index = {c: header.index(c) for c in (*required, *optional) if c in header}
        yield index, (row for row in reader if row and (len(row) > 1 or row[0].strip()))


def field(row: list[str], i: int) -> str:
    """The stripped cell, or RowError for a row cut short."""
    try:
        return row[i].strip()
    except IndexError:
        raise RowError("too few fields") from None


def finite(text: str, what: str) -> float:
    """A finite float; 'missing <what>' / 'unparseable <what>' otherwise (``nan`` is unparseable)."""
    if not text:
        raise RowError(f"missing {what}")
    try:
        value = float(text)
    except ValueError:
        raise RowError(f"unparseable {what}") from None
    if not math.isfinite(value):
        raise RowError(f"unparseable {what}")
    return value


def duration_s(text: str, scale: float = 1.0, *, elapsed: bool = False) -> float:
    """A positive duration in seconds from a number × ``scale`` (or Slurm Elapsed if allowed).

    Zero-length jobs are skipped too: they hold no GPU, and a replay would
    count them as instantly finished work that never competed for capacity.
    """
    if elapsed and ":" in text:
        m = _ELAPSED.match(text)
        if not m:
            raise RowError("unparseable duration")
        days, hours, minutes, secs = m.groups()
        value = int(days or 0) * DAY + int(hours or 0) * HOUR + int(minutes) * 60 + float(secs)
    else:
        value = finite(text, "duration") * scale
    return positive_duration(value)


# Slurm time limits: D-HH[:MM[:SS]], HH:MM:SS or MM:SS (sacct Timelimit, sbatch --time)
_SLURM_LIMIT = re.compile(r"^(?:(\d+)-(\d+)(?::(\d+))?(?::(\d+))?|(\d+):(\d+)(?::(\d+))?)$")
#: Slurm's words for "no limit of the job's own": UNLIMITED is none at all; Partition_Limit is the
#: partition's, which the log does not say (the user model then draws one).
_UNLIMITED = {"unlimited", "infinite", "inf"}
_NOT_SAID = {"", "partition_limit", "none"}


def time_limit_s(text: str, scale: float, column: str) -> float | None:
    """A requested time limit in seconds; ``math.inf`` for UNLIMITED; None when not said.

    Accepts a number (x ``scale``, the loader's time unit) or Slurm's ``[D-]HH:MM:SS``,
    ``D-HH[:MM]``, ``MM:SS``. A bad value is a RowError whose reason names ``column`` and
    the forms it takes, so the report says which column to fix."""
    t = text.strip()
    low = t.lower()
    if low in _NOT_SAID:
        return None
    if low in _UNLIMITED:
        return math.inf
    m = _SLURM_LIMIT.match(t)
    if m:
        d, dh, dm, ds, h_or_m, m_or_s, s3 = m.groups()
        if d is not None:
            value = int(d) * DAY + int(dh) * HOUR + int(dm or 0) * 60 + int(ds or 0)
        elif s3 is not None:
            value = int(h_or_m) * HOUR + int(m_or_s) * 60 + int(s3)
        else:
            value = int(h_or_m) * 60 + int(m_or_s)
    else:
        try:
            value = float(t) * scale
        except ValueError:
            value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise RowError(f"bad time limit in column {column!r} (give seconds, [D-]HH:MM:SS, "
                       "MM:SS or UNLIMITED)")
    return value


def positive_duration(value: float) -> float:
    """``value`` if above zero; 'negative duration' / 'zero duration' otherwise."""
    if value < 0:
        raise RowError("negative duration")
    if value == 0:
        raise RowError("zero duration")
    return value


def gpu_count(text: str) -> int:
    """A positive whole GPU count ('2' or '2.0'); reasons: missing, unparseable, fractional, zero."""
    if not text:
        raise RowError("missing GPU count")
    try:
        value = int(text)
    except ValueError:
        f = finite(text, "GPU count")
        if not f.is_integer():
            raise RowError("fractional GPU count") from None
        value = int(f)
    if value < 0:
        raise RowError("negative GPU count")
    if value == 0:
        raise RowError("zero GPUs")
    return value


def timestamp_s(text: str) -> float:
    """Seconds since the epoch from an ISO-8601 timestamp; a naive one is read as UTC.

    Reading naive times as UTC (not local time) keeps loads identical on every
    machine; only differences between timestamps matter to a replay anyway.
    """
    if not text:
        raise RowError("missing timestamp")
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise RowError("unparseable timestamp") from None
    if dt.tzinfo is None:
        return (dt - _NAIVE_EPOCH).total_seconds()
    return (dt - _EPOCH).total_seconds()


#: Job-name patterns that say what a job is, checked in this order (first match wins).
_NAME_CLASSES: tuple[tuple[re.Pattern[str], WorkloadClass], ...] = (
    (re.compile(r"fine[-_ ]?tun|\bsft\b|lora|(^|[-_])ft([-_]|$)", re.I), WorkloadClass.FINE_TUNE),
    (re.compile(r"sweep|hpo|hparam|hyper[-_]?param|(^|[-_])trial[-_]?\d|grid[-_]?search", re.I),
     WorkloadClass.SWEEP),
    (re.compile(r"pre[-_]?train", re.I), WorkloadClass.FULL_RUN),
    (re.compile(r"debug|smoke|probe|notebook|jupyter|interactive", re.I), WorkloadClass.EXPERIMENT),
)


def classify(gpus: int, limit_s: float | None, name: str | None = None) -> WorkloadClass:
    """Guess a workload class from what a submitter declares: name, size and requested limit.

    Never from the true duration: a live scheduler learns that only when the job ends, so
    a class guessed from it would route and bill a job on knowledge nobody had. In order:

    - a name that says it (``finetune``/``sft``/``lora``, ``sweep``/``hpo``/``trial-3``,
      ``pretrain``, ``debug``/``notebook``...);
    - full-run: >= 8 GPUs asking for >= 1 day (a large pre-training style run);
    - fine-tune: asking for >= 1 hour otherwise (long enough to be real training);
    - experiment: asking for less than an hour;
    - no limit declared: full-run for >= 8 GPUs (the class kept off spot capacity),
      experiment otherwise.

    Sweeps need arrival context, not one row: see :func:`mark_sweeps`.
    """
    if name:
        for pattern, wclass in _NAME_CLASSES:
            if pattern.search(name):
                return wclass
    if limit_s is None:
        return WorkloadClass.FULL_RUN if gpus >= 8 else WorkloadClass.EXPERIMENT
    if gpus >= 8 and limit_s >= DAY:
        return WorkloadClass.FULL_RUN
    if limit_s >= HOUR:
        return WorkloadClass.FINE_TUNE
    return WorkloadClass.EXPERIMENT


def mark_sweeps(
    pending: list[dict[str, Any]], *, window_s: float = 60.0, min_jobs: int = 5
) -> None:
    """Label single-GPU jobs of one tenant's arrival bursts as sweeps, in place.

    A hyper-parameter sweep shows up in a log as many 1-GPU jobs one tenant submits
    within seconds of each other. A burst is a run of such jobs whose consecutive
    submissions are at most ``window_s`` apart. A job is a ``sweep`` once the burst, up
    to its own arrival (jobs submitted before it or at the same instant), holds at least
    ``min_jobs`` jobs: the label uses only arrivals a scheduler has seen when the job
    arrives, never the jobs that follow it (so a burst's first few jobs keep their own
    class). Jobs whose class the trace declared (not None) keep it.
    """
    by_tenant: dict[str, list[dict[str, Any]]] = {}
    for job in pending:
        if job["gpus"] == 1 and job.get("gpu_milli") is None:
            by_tenant.setdefault(job["tenant"], []).append(job)
    for jobs in by_tenant.values():
        jobs.sort(key=lambda j: j["submit_s"])
        start = 0
        i = 0
        while i < len(jobs):
            if i and jobs[i]["submit_s"] - jobs[i - 1]["submit_s"] > window_s:
                start = i
            same = i  # jobs submitted at this instant have all arrived by it
            while same + 1 < len(jobs) and jobs[same + 1]["submit_s"] == jobs[i]["submit_s"]:
                same += 1
            if same + 1 - start >= min_jobs:
                for j in jobs[i:same + 1]:
                    if j.get("workload_class") is None:
                        j["workload_class"] = WorkloadClass.SWEEP
            i = same + 1


def finish(pending: list[dict[str, Any]], report: LoadReport) -> Trace:
    """Shift times so the first submission is 0, sort stably by submit, build the jobs."""
    t0 = min((j["submit_s"] for j in pending), default=0.0)
    pending.sort(key=lambda j: j["submit_s"])  # stable: ties keep file order
    jobs: list[TraceJob] = []
    for j in pending:
        j["submit_s"] -= t0
        jobs.append(TraceJob(**j))
    report.kept = len(jobs)
    return Trace(jobs=jobs, report=report)


def unique_id(raw: str, seen: dict[str, int]) -> str:
    """``raw`` the first time, ``raw#2``, ``raw#3``... after: ids must be unique in a replay."""
    n = seen.get(raw, 0) + 1
    seen[raw] = n
    return raw if n == 1 else f"{raw}#{n}"
