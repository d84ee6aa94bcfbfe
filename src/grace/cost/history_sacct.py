"""A Slurm accounting export as a history: what ``grace assess --format sacct`` reads.

Produce it with::

    sacct -X --parsable2 --allusers --starttime 2025-01-01 \\
      --format=JobID,JobName,Account,User,Submit,Start,End,Elapsed,Timelimit,NNodes,AllocTRES,State

Columns are found by header name, in any order and letter case; ``--columns``
renames one (``gpus=ReqTRES`` reads the GPUs from ``ReqTRES``). Needed: Submit,
Start, AllocTRES and Elapsed or End. Unlike a public trace, sacct records when
each job *started*, so queue waits are known, and how many nodes it spanned.

Per row:

- GPUs: the ``gres/gpu=N`` count in AllocTRES (or the sum of typed
  ``gres/gpu:h100=N`` entries when only those appear); a typed entry that names a
  catalog GPU (``h100`` -> none, ``H100-SXM`` -> H100-SXM) sets the job's model.
  Jobs without GPUs are skipped ("no GPUs in AllocTRES"): they are CPU work.
- Start ``Unknown``/``None``/blank: the job never ran (pending, cancelled while
  queued); skipped ("never started").
- Run time: Elapsed (``[D-][HH:]MM:SS``), else End - Start; a zero-length job is
  skipped. A job still running has Elapsed so far.
- Tenant: Account, else User (``alice(1001)`` -> ``alice``), else ``default``.
- Timelimit: Slurm's forms; a bare number is minutes (as ``sacct -c`` prints it).
- Job steps (``123.batch``, ``123.0``) are skipped: ``-X`` leaves them out, and a
  step counted as a job would count its GPUs twice.

Timestamps without a zone are read as UTC (``_common.timestamp_s``): only their
differences matter here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from grace.cost.history import History, HistoryFormat, HistoryJob
from grace.cost.history_table import cell_reader, headed_rows, parse_role_map
from grace.sim.traces._common import (
    RowError,
    duration_s,
    positive_duration,
    time_limit_s,
    timestamp_s,
    unique_id,
)
from grace.spec.gpus import BUILTIN_GPUS

#: role -> sacct's column name
COLUMNS = {"id": "JobID", "name": "JobName", "account": "Account", "user": "User",
           "submit": "Submit", "start": "Start", "end": "End", "elapsed": "Elapsed",
           "limit": "Timelimit", "nodes": "NNodes", "gpus": "AllocTRES", "state": "State"}
REQUIRED: tuple[str | tuple[str, ...], ...] = ("submit", "start", "gpus", ("elapsed", "end"))
SACCT_FORMAT = ",".join(COLUMNS.values())
#: Slurm's words for "no time": the job never started, or has not ended
_NO_TIME = {"", "unknown", "none", "n/a"}
_UNTYPED = re.compile(r"(?:^|,)gres/gpu=(\d+)")
_TYPED = re.compile(r"(?:^|,)gres/gpu:([^=,]+)=(\d+)")
_CATALOG = {name.lower(): name for name in BUILTIN_GPUS}


def tres_gpus(text: str) -> tuple[int, str | None]:
    """GPUs in a TRES string and the catalog model a typed entry names (or None)."""
    typed = _TYPED.findall(text)
    untyped = _UNTYPED.search(text)
    count = int(untyped.group(1)) if untyped else sum(int(n) for _, n in typed)
    models = {_CATALOG.get(t.lower()) for t, _ in typed}
    model = models.pop() if len(models) == 1 else None
    return count, model


def _when(text: str, what: str) -> float | None:
    return None if text.strip().lower() in _NO_TIME else _stamp(text, what)


def _stamp(text: str, what: str) -> float:
    try:
        return timestamp_s(text)
    except RowError:
        raise RowError(f"unparseable {what} time") from None


def load_sacct(path: Path | str, columns: str | None = None) -> History:
    """Read a ``sacct --parsable2`` export (see the module docstring); bad rows are counted."""
    names = {**COLUMNS, **parse_role_map(columns, list(COLUMNS), "gpus=ReqTRES,account=Group")}
    history = History(source=str(path), format=HistoryFormat.SACCT)
    pending: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    skipped: dict[str, int] = {}
    with headed_rows(path, names, REQUIRED, what="sacct") as (col, rows):
        cell = cell_reader(col)
        for row in rows:
            history.rows += 1
            try:
                raw_id = cell(row, "id") or str(history.rows - 1)
                if "." in raw_id:
                    raise RowError("job step (export with sacct -X)")
                gpus, model = tres_gpus(cell(row, "gpus"))
                if gpus <= 0:
                    raise RowError("no GPUs in AllocTRES")
                submit = _stamp(cell(row, "submit"), "submit")
                start = _when(cell(row, "start"), "start")
                if start is None:
                    raise RowError("never started")
                elapsed = cell(row, "elapsed")
                if elapsed:
                    run = duration_s(elapsed, elapsed=True)
                else:
                    end = _when(cell(row, "end"), "end")
                    if end is None:
                        raise RowError("no Elapsed and no End")
                    run = positive_duration(end - start)
                nodes_text = cell(row, "nodes")
                nodes = int(nodes_text) if nodes_text.isdigit() and int(nodes_text) > 0 else None
                limit = time_limit_s(cell(row, "limit"), 60.0, names["limit"])
                tenant = (cell(row, "account") or cell(row, "user").split("(")[0].strip()
                          or "default")
            except RowError as e:
                skipped[e.reason] = skipped.get(e.reason, 0) + 1
                continue
            state = cell(row, "state").split(" ")[0] or None
            pending.append({"job_id": unique_id(raw_id, seen), "tenant": tenant,
                            "submit_s": submit, "start_s": max(start, submit), "run_s": run,
                            "gpus": float(gpus), "nodes": nodes, "gpu_model": model,
                            "name": cell(row, "name") or None, "limit_s": limit,
                            "state": state})
    history.skipped = skipped
    if pending:
        t0 = min(j["submit_s"] for j in pending)
        history.origin_epoch_s = t0
        pending.sort(key=lambda j: j["submit_s"])
        history.jobs = [HistoryJob(**{**j, "submit_s": j["submit_s"] - t0,
                                      "start_s": j["start_s"] - t0}) for j in pending]
    return history


__all__ = ["COLUMNS", "SACCT_FORMAT", "load_sacct", "tres_gpus"]
