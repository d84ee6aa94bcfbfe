"""Histories for the lifecycle tests: monthly GPU-hours growing at a chosen rate.

Each month ``m`` (0-based) gets ``jobs_per_month`` jobs, evenly spaced, whose GPU-hours
add up to ``base * (1 + growth) ** m`` (times a random factor ``exp(N(0, noise))`` when
``noise`` > 0). A one-minute job just after the last month marks where the history is
observed to, so every generated month is complete.
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

from grace.cost.history import History, HistoryFormat, HistoryJob
from grace.cost.lifecycle_demand import MONTH_S

RUN_S = 10 * 3600.0


def month_targets(months: int, growth: float, base: float = 20_000.0, noise: float = 0.0,
                  seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return [base * (1.0 + growth) ** m * (math.exp(rng.gauss(0.0, noise)) if noise else 1.0)
            for m in range(months)]


def growing_jobs(months: int, growth: float, jobs_per_month: int = 40, base: float = 20_000.0,
                 noise: float = 0.0, seed: int = 7) -> list[HistoryJob]:
    jobs = []
    for m, target in enumerate(month_targets(months, growth, base, noise, seed)):
        for i in range(jobs_per_month):
            submit = m * MONTH_S + i * MONTH_S / jobs_per_month
            gpus = target / jobs_per_month / (RUN_S / 3600.0)
            jobs.append(HistoryJob(f"{m}-{i}", "team", submit, RUN_S, gpus))
    jobs.append(HistoryJob("end", "team", months * MONTH_S + 1.0, 60.0, 1.0))
    return jobs


def growing_history(months: int, growth: float, noise: float = 0.0, seed: int = 7) -> History:
    return History("generated", HistoryFormat.CSV,
                   growing_jobs(months, growth, noise=noise, seed=seed))


def write_history_csv(path: Path, months: int, growth: float, noise: float = 0.0,
                      seed: int = 7) -> Path:
    """The generated jobs as a CSV ``grace lifecycle --format csv`` reads with :data:`COLUMNS`."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["JobID", "Submit", "Elapsed", "NGPU"])
        for j in growing_jobs(months, growth, noise=noise, seed=seed):
            w.writerow([j.job_id, f"{j.submit_s:.3f}", f"{j.run_s:.0f}", f"{j.gpus:.6f}"])
    return path


COLUMNS = "id=JobID,submit=Submit,duration=Elapsed,gpus=NGPU"
