"""The jobs table of ``grace jobs`` and ``grace demo``: its columns, ``--format``, wait and run.

A job's wait and run are totals over its attempts: a job preempted or requeued after
its node failed waited again before its next attempt, and that wait is not run time.
``GET /jobs`` answers one summary per job (first start, end), exact for a job that ran
once; for a job with more attempts the caller passes the attempts ``GET /jobs/N``
answers (``requeued_attempts``), so ``wait 0s, run 4m18s`` becomes ``wait 2m01s, run
2m17s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from rich.console import RenderableType

from grace.cli.fit import Cell, Column, Fit, duration, fit_table
from grace.spec.workflow import compact_indices


class JobColumn(StrEnum):
    """What ``grace jobs --format`` may name (as sacct's ``--format`` does)."""

    ID = "id"
    NAME = "name"
    TENANT = "tenant"
    STATE = "state"
    GPUS = "gpus"
    ATTEMPTS = "attempts"
    RESTARTS = "restarts"
    PRIORITY = "priority"
    CLASS = "class"
    SUBMITTED = "submitted"
    STARTED = "started"
    ENDED = "ended"
    WAIT = "wait"
    RUN = "run"
    REASON = "reason"


#: What ``grace jobs`` shows without ``--format``: what fits 80 columns with room for a
#: name and a reason (attempts, priority and times are a ``--format`` away).
DEFAULT_COLUMNS: tuple[JobColumn, ...] = (
    JobColumn.ID, JobColumn.NAME, JobColumn.TENANT, JobColumn.STATE, JobColumn.GPUS,
    JobColumn.WAIT, JobColumn.RUN, JobColumn.REASON)

_LAYOUT: dict[JobColumn, Column] = {
    JobColumn.ID: Column("id", justify="right"),
    JobColumn.NAME: Column("name", Fit.MIDDLE, min_width=10, weight=3),
    JobColumn.TENANT: Column("tenant", Fit.MIDDLE, min_width=10),
    JobColumn.STATE: Column("state"),
    JobColumn.GPUS: Column("gpus", justify="right"),
    JobColumn.ATTEMPTS: Column("attempts", justify="right"),
    JobColumn.RESTARTS: Column("restarts", justify="right"),
    JobColumn.PRIORITY: Column("priority", justify="right"),
    JobColumn.CLASS: Column("class"),
    JobColumn.SUBMITTED: Column("submitted"),
    JobColumn.STARTED: Column("started"),
    JobColumn.ENDED: Column("ended"),
    JobColumn.WAIT: Column("wait", justify="right"),
    JobColumn.RUN: Column("run", justify="right"),
    JobColumn.REASON: Column("reason", Fit.END, min_width=12, weight=2),
}


class FormatError(ValueError):
    """A ``--format`` that names no column, or one that does not exist."""


def parse_format(text: str | None) -> tuple[JobColumn, ...]:
    """``id,name,state`` as columns, in the order given (a repeat is shown once); None or
    empty is the default set. An unknown name is refused with the names allowed."""
    if text is None:
        return DEFAULT_COLUMNS
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    allowed = ", ".join(c.value for c in JobColumn)
    if not names:
        raise FormatError(f"--format names no column; use a comma-separated list of {allowed}")
    unknown = [n for n in names if n not in {c.value for c in JobColumn}]
    if unknown:
        raise FormatError(f"--format: unknown column {', '.join(map(repr, unknown))}; "
                          f"use any of {allowed}")
    return tuple(dict.fromkeys(JobColumn(n) for n in names))


def wait_run(job: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]] | None,
             now: float) -> tuple[float, float]:
    """Seconds ``job`` spent pending and running, in total over its attempts.

    Run is the sum of its attempts' spans (a live one up to ``now``); wait is the rest of
    its life from submission to its end (or ``now``): before its first attempt and
    between attempts, when it was queued again. Without ``attempts`` the summary's first
    start stands for its one attempt. A job cancelled while pending waited until it
    ended, not until ``now``.
    """
    end = job.get("ended_at") or now
    life = max(0.0, end - job["submitted_at"])
    if attempts:
        run = sum(max(0.0, min(a.get("ended_at") or end, end) - a["started_at"])
                  for a in attempts)
    elif job.get("started_at"):
        run = max(0.0, end - job["started_at"])
    else:
        run = 0.0
    return max(0.0, life - run), min(run, life)


def requeued_attempts(rows: Iterable[Mapping[str, Any]],
                      get_job: Callable[[int], Mapping[str, Any]]) -> dict[int, list[Any]]:
    """The attempts of each job in ``rows`` that ran more than once, from ``get_job``
    (``GET /jobs/N``): one request per requeued job, none for the rest."""
    return {r["id"]: list(get_job(r["id"]).get("attempts") or [])
            for r in rows if (r.get("attempts") or 0) > 1}


def shown_reason(job: Mapping[str, Any]) -> str:
    """The job's reason where it says more than its state (a completed job's reason is
    ``completed``: repeating it costs the width a failure's reason needs)."""
    reason = str(job.get("reason") or "")
    return "" if reason == job.get("state") else reason


def _clock(at: float | None) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(at)) if at else "-"


def _value(col: JobColumn, j: Mapping[str, Any], wait: float, run: float) -> Cell:
    match col:
        case JobColumn.GPUS:
            return f"{j['gpus']:g}"
        case JobColumn.WAIT:
            return duration(wait)
        case JobColumn.RUN:
            return duration(run) if run > 0 or j.get("started_at") else "-"
        case JobColumn.CLASS:
            return str(j.get("workload_class") or "")
        case JobColumn.SUBMITTED:
            return _clock(j.get("submitted_at"))
        case JobColumn.STARTED:
            return _clock(j.get("started_at"))
        case JobColumn.ENDED:
            return _clock(j.get("ended_at"))
        case JobColumn.REASON:
            return shown_reason(j)
        case _:
            v = j.get(col.value)
            return "" if v is None else str(v)


#: The order an array's counts are told in (what runs, what waits, what ended), and the
#: short words that keep them on one 80-column line beside a name.
_STATE_ORDER = {"running": "run", "pending": "pend", "completed": "done", "failed": "failed",
                "cancelled": "cancel", "diverged": "diverged"}


def group_arrays(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Each job array's tasks (and each sweep's trials) as one row, where its first task
    is (``12_[0-9%2]``, as squeue names an array; ``grace sweep 12`` lists a sweep's
    trials with their metrics): its state the busiest of its tasks', its reason their counts
    by state (``2 run 3 pend 5 done``: 2 running, 3 pending, 5 completed), its wait until its first task
    started and its run from then until its last ended. Other rows pass as they are."""
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for j in rows:
        a = j.get("array")
        if a:
            groups.setdefault(a["id"], []).append(j)
    out: list[Mapping[str, Any]] = []
    arrays = set(groups)
    for j in rows:
        a = j.get("array")
        if not (a and a["id"] in arrays):
            out.append(j)
            continue
        tasks = groups.pop(a["id"], None)
        if tasks is None:
            continue  # shown with its first-listed task
        counts = {s: sum(1 for t in tasks if t["state"] == s) for s in _STATE_ORDER}
        counts |= {t["state"]: sum(1 for u in tasks if u["state"] == t["state"])
                   for t in tasks if t["state"] not in counts}
        told = " ".join(f"{n} {_STATE_ORDER.get(s, s)}" for s, n in counts.items() if n)
        started = [t["started_at"] for t in tasks if t.get("started_at")]
        ended = [t.get("ended_at") for t in tasks]
        limit = f"%{a['limit']}" if a.get("limit") else ""
        indices = compact_indices([t["array"]["index"] for t in tasks])
        out.append({**tasks[0], "id": f"{a['id']}_[{indices}{limit}]",
                    "state": next(s for s, n in counts.items() if n),
                    "submitted_at": min(t["submitted_at"] for t in tasks),
                    "started_at": min(started) if started else None,
                    "ended_at": max(ended) if all(ended) else None,  # type: ignore[type-var]
                    "attempts": 1, "reason": told})
    return out


def jobs_table(rows: Sequence[Mapping[str, Any]], width: int = 80,
               columns: Sequence[JobColumn] = DEFAULT_COLUMNS,
               attempts: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
               now: float | None = None, title: str | None = "jobs") -> RenderableType:
    """The jobs table, no wider than ``width``: states in full, names elided in the middle,
    reasons on one line (``grace job N`` shows one in full), human durations."""
    now = time.time() if now is None else now
    attempts = attempts or {}
    body = []
    for j in group_arrays(rows):
        wait, run = wait_run(j, attempts.get(j["id"]), now)
        body.append([_value(c, j, wait, run) for c in columns])
    return fit_table([_LAYOUT[c] for c in columns], body, width, title=title)
