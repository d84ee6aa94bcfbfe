"""Tiresias (NSDI'19) simulator trace (``60_job.csv``, ``tf_job.csv``).

Columns: ``job_id, num_gpu, submit_time, iterations, model_name, duration,
interval``, times in seconds (the Tiresias simulator advances its clock in
seconds). ``tf_job.csv`` has a different column set but the four used here.
It repeats job id 10 twice; duplicates become ``10#2`` so ids stay unique.

There is no tenant; the workload class is guessed at replay time from size and
requested limit, as for Philly (``traces._common.classify``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grace.sim.traces._common import (
    RowError,
    csv_table,
    duration_s,
    field,
    finish,
    finite,
    gpu_count,
    unique_id,
)
from grace.sim.traces.model import LoadReport, Trace

REQUIRED = ("job_id", "num_gpu", "submit_time", "duration")


def load_tiresias(path: Path | str) -> Trace:
    """Load a Tiresias job CSV (seconds), one tenant."""
    report = LoadReport(source=str(path))
    pending: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    with csv_table(path, REQUIRED) as (col, rows):
        for row in rows:
            report.rows += 1
            try:
                raw_id = field(row, col["job_id"]) or f"row-{report.rows - 1}"
                submit = finite(field(row, col["submit_time"]), "submit time")
                duration = duration_s(field(row, col["duration"]))
                gpus = gpu_count(field(row, col["num_gpu"]))
            except RowError as e:
                report.skip(e.reason)
                continue
            pending.append({
                "job_id": f"tiresias-{unique_id(raw_id, seen)}",
                "submit_s": submit,
                "duration_s": duration,
                "gpus": gpus,
            })
    return finish(pending, report)
