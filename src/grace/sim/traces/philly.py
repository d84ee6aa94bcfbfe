"""Microsoft Philly job list, as shipped with Pollux (``philly.csv``).

Columns: ``timestamp`` (submit, "2017-10-09 07:01:55"), ``duration`` (s),
``num_gpus``, ``gpu_time`` (= duration × num_gpus, unused), ``cluster`` (the
virtual cluster, VC). Philly's VCs are its tenants: each team had one, with a
GPU quota, which is exactly what Grace's tenants model.

The trace has no job names, status or queueing delay, so job ids are the row
number (``philly-<row>``, 0-based over data rows) and the workload class is a
guess from size, length and arrival pattern:

- ``full-run``: >= 8 GPUs for >= 1 day;
- ``fine-tune``: any other job of >= 1 hour;
- ``sweep``: a burst of >= 5 single-GPU jobs from one VC, each submitted
  within 60 s of the previous one (relabels experiments and fine-tunes);
- ``experiment``: the rest (under an hour).

Philly is bursty: the sweep rule labels 54,646 of the 82,247 jobs (66 %) as
sweeps, yet they hold only ~7 % of the GPU-hours; full-runs (704 jobs) hold
~56 %. Tighter windows shrink the sweep share (10 s: 31,630 jobs).

The file is 82,247 rows; loading it takes a fraction of a second because rows
go through ``csv.reader`` by column position and ``datetime.fromisoformat``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grace.sim.traces._common import (
    RowError,
    classify,
    csv_table,
    duration_s,
    field,
    finish,
    gpu_count,
    mark_sweeps,
    timestamp_s,
)
from grace.sim.traces.model import LoadReport, Trace

REQUIRED = ("timestamp", "duration", "num_gpus", "cluster")


def load_philly(path: Path | str) -> Trace:
    """Load ``philly.csv``; VC → tenant, times in seconds from the first submission."""
    report = LoadReport(source=str(path))
    pending: list[dict[str, Any]] = []
    with csv_table(path, REQUIRED) as (col, rows):
        i_ts, i_dur, i_gpu, i_vc = (col[c] for c in REQUIRED)
        for row in rows:
            n = report.rows
            report.rows += 1
            try:
                submit = timestamp_s(field(row, i_ts))
                duration = duration_s(field(row, i_dur))
                gpus = gpu_count(field(row, i_gpu))
                tenant = field(row, i_vc) or "default"
            except RowError as e:
                report.skip(e.reason)
                continue
            pending.append({
                "job_id": f"philly-{n}",
                "submit_s": submit,
                "duration_s": duration,
                "gpus": gpus,
                "tenant": tenant,
                "workload_class": classify(gpus, duration),
            })
    mark_sweeps(pending)
    return finish(pending, report)
