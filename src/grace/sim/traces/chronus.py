"""Chronus (SoCC'21) Philly-derived traces with deadline labels (``trace_job_Philly_*.csv``).

Columns: ``job_id, user, num_gpu, submit_time, iterations, model_name,
duration, interval, expect_time_list, expect_value_list, best_effort,
job_type``. ``user`` holds the Philly VC and becomes the tenant.

Times are in minutes, not seconds: Chronus' own scheduler counts an hour as
60 time units (``hour_metric = 60`` in ``alg/scheduler/time_aware_with_lease.py``)
and runs 20-unit lease terms, and the 20,151-unit span is then two weeks of
Philly. ``time_unit`` overrides this if a variant uses another unit.

Chronus itself drops ``num_gpu == 0`` rows; here they are skipped as "zero
GPUs". ``best_effort == 1`` jobs have no deadline: they become preemptible
``experiment`` jobs with priority 0. Deadline jobs are not preemptible;
``strict`` ones get priority 2, ``soft`` ones 1, and their workload class is
guessed at replay time from size and requested limit, as for Philly.
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
    seconds_per,
    unique_id,
)
from grace.sim.traces.model import LoadReport, Trace
from grace.spec.job import WorkloadClass

REQUIRED = ("job_id", "user", "num_gpu", "submit_time", "duration")
OPTIONAL = ("best_effort", "job_type")
_DEADLINE_PRIORITY = {"strict": 2, "soft": 1}


def load_chronus(path: Path | str, time_unit: str = "min") -> Trace:
    """Load a Chronus trace; user → tenant, best-effort → preemptible experiment."""
    scale = seconds_per(time_unit)
    report = LoadReport(source=str(path))
    pending: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    with csv_table(path, REQUIRED, OPTIONAL) as (col, rows):
        i_be, i_type = col.get("best_effort"), col.get("job_type")
        for row in rows:
            report.rows += 1
            try:
                raw_id = field(row, col["job_id"]) or f"row-{report.rows - 1}"
                submit = finite(field(row, col["submit_time"]), "submit time") * scale
                duration = duration_s(field(row, col["duration"]), scale)
                gpus = gpu_count(field(row, col["num_gpu"]))
                tenant = field(row, col["user"]) or "default"
                best_effort = i_be is not None and field(row, i_be) == "1"
                job_type = field(row, i_type) if i_type is not None else ""
            except RowError as e:
                report.skip(e.reason)
                continue
            wclass: WorkloadClass | None
            if best_effort:
                wclass, priority, preemptible = WorkloadClass.EXPERIMENT, 0, True
            else:
                wclass = None  # guessed at replay time from size and requested limit
                priority, preemptible = _DEADLINE_PRIORITY.get(job_type, 1), False
            pending.append({
                "job_id": f"chronus-{unique_id(raw_id, seen)}",
                "submit_s": submit,
                "duration_s": duration,
                "gpus": gpus,
                "tenant": tenant,
                "workload_class": wclass,
                "priority": priority,
                "preemptible": preemptible,
            })
    return finish(pending, report)
