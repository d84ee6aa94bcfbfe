"""A sweep in the store: its trials, their metric histories, and the results table's rows.

A sweep is a job group of kind ``sweep`` (``repository.add_job_group``): its id
is its first trial's job id, every trial carries ``spec.sweep`` (its
parameters, the metric and the stopping rule) and ``Job.array_id``. The
metric a trial reported lives in its attempts' ``metrics.json``
(``control.sweep_metrics``). Both the early-stopping watch and ``GET
/sweeps/{id}`` read a sweep through here, so the table shows what the rule saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grace.control import sweep_metrics
from grace.control.live.context import JobDirs
from grace.control.store.models import Job, JobState
from grace.core.early_stop import Mode, Trial, incumbent
from grace.spec.trial import SweepTrial

#: the reason prefix of a trial its stopping rule ended (a completed job, not a failure)
EARLY_STOPPED = "early-stopped"


def trials_of(s: Session, sweep_id: int) -> list[Job]:
    """The sweep's trials in trial order (empty if ``sweep_id`` is not a sweep)."""
    rows = s.scalars(select(Job).where(Job.array_id == sweep_id, Job.array_kind == "sweep")
                     .order_by(Job.array_index, Job.id))
    return list(rows)


def trial_info(job: Job) -> SweepTrial | None:
    raw = job.spec_json.get("sweep")
    return SweepTrial.model_validate(raw) if isinstance(raw, dict) else None


def history(dirs: JobDirs, job: Job, metric: str) -> list[tuple[int, float]]:
    """The trial's ``metric`` over all its attempts, in step order."""
    return sweep_metrics.history(
        (dirs.attempt(job.id, n) for n in range(1, (job.attempts_count or 0) + 1)), metric)


def gpu_seconds(job: Job, now: float) -> float:
    """GPU-seconds the trial's attempts held (a live one counted up to ``now``)."""
    return sum(a.gpus * max((a.ended_at if a.ended_at is not None else now)
                            - a.started_at, 0.0) for a in job.attempts)


@dataclass(frozen=True)
class TrialRow:
    job: Job
    params: dict[str, Any]
    points: list[tuple[int, float]]
    gpu_seconds: float

    @property
    def running(self) -> bool:
        return self.job.state == JobState.RUNNING


def rows(s: Session, dirs: JobDirs, sweep_id: int, now: float) -> tuple[SweepTrial, list[TrialRow]]:
    """The sweep's definition (its first trial's) and one row per trial; KeyError if none."""
    jobs = trials_of(s, sweep_id)
    info = trial_info(jobs[0]) if jobs else None
    if info is None:
        raise KeyError(sweep_id)
    out = []
    for job in jobs:
        t = trial_info(job)
        out.append(TrialRow(job, dict(t.params) if t else {},
                            history(dirs, job, info.metric.name), gpu_seconds(job, now)))
    return info, out


def as_trials(trial_rows: Sequence[TrialRow]) -> dict[int, Trial]:
    return {r.job.id: Trial(r.points, r.running) for r in trial_rows}


def results(s: Session, dirs: JobDirs, sweep_id: int, now: float) -> dict[str, Any]:
    """``GET /sweeps/{id}``: every trial's parameters, state, steps and best value, the
    best trial, and the GPU-seconds the sweep used."""
    info, trial_rows = rows(s, dirs, sweep_id, now)
    mode = info.metric.mode
    best_of = min if mode is Mode.MIN else max
    best = incumbent(as_trials(trial_rows), mode)
    trials = []
    for r in trial_rows:
        values = [v for _, v in r.points]
        stopped = (r.job.reason or "").startswith(EARLY_STOPPED)
        trials.append({
            "id": r.job.id, "trial": r.job.array_index, "name": r.job.name,
            "params": r.params, "state": "stopped" if stopped else str(r.job.state),
            "reason": r.job.reason, "steps": max((st for st, _ in r.points), default=0),
            "best": best_of(values) if values else None,
            "last": values[-1] if values else None, "gpu_seconds": round(r.gpu_seconds, 3)})
    head = trial_rows[0].job
    early = info.early_stopping
    return {"id": sweep_id, "name": info.name, "tenant": head.tenant,
            "metric": {"name": info.metric.name, "mode": str(mode)},
            "early_stopping": early.model_dump(mode="json") if early else None,
            "max_parallel": head.array_limit, "trials": trials, "best": best,
            "gpu_seconds": round(sum(r.gpu_seconds for r in trial_rows), 3),
            "done": all(r.job.is_terminal for r in trial_rows)}


__all__ = ["EARLY_STOPPED", "TrialRow", "as_trials", "gpu_seconds", "history", "results",
           "rows", "trial_info", "trials_of"]
