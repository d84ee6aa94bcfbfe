"""Microsoft Philly job list, as shipped with Pollux (``philly.csv``).

Columns: ``timestamp`` (submit, "2017-10-09 07:01:55"), ``duration`` (s),
``num_gpus``, ``gpu_time`` (= duration × num_gpus, unused), ``cluster`` (the
virtual cluster, VC). Philly's VCs are its tenants: each team had one, with a
GPU quota, which is exactly what Grace's tenants model.

The trace has no job names, status, time limits or queueing delay, so job ids
are the row number (``philly-<row>``, 0-based over data rows). The loader labels
only sweeps, from the arrival pattern: a single-GPU job is a ``sweep`` once its
VC's burst (submissions at most 60 s apart) holds >= 5 jobs up to its own
arrival. The other classes are guessed at replay time from size and the
requested limit (``traces._common.classify``; the limit is the user model's
under ``--estimates user``), never from the duration: the scheduler does not
know it.

Philly is bursty: the sweep rule labels 51,024 of the 82,247 jobs (62 %) as
sweeps (54,646 when a burst's first four jobs were labelled too, which needed
the jobs after them).

The file is 82,247 rows; loading it takes a fraction of a second because rows
go through ``csv.reader`` by column position and ``datetime.fromisoformat``.
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
            })
    mark_sweeps(pending)
    return finish(pending, report)
