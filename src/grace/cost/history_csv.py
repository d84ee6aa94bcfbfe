"""Any job log with a header row as a history, given which column plays which role.

The same idea as the twin's generic loader (``grace.sim.traces.generic_csv``:
``--columns submit=Submit,duration=Elapsed,gpus=NGPU``) with the roles a look
back needs and a replay does not: when a job really *started* (queue waits), how
many *nodes* it spanned, its *state*, its mean *step time* (scaling evidence)
and the *GPU model* it ran on.

Roles:

- required: ``submit``, ``gpus``, and ``duration`` or both ``start`` and ``end``
  (the run time is then end - start);
- optional: ``start``, ``end``, ``nodes``, ``state``, ``step_s``, ``gpu_model``,
  ``tenant``, ``id``, ``name``, ``limit``.

Values: times are numbers of seconds or ISO-8601 timestamps (the first readable
``submit`` fixes which; ``start``/``end`` must be of the same kind); ``duration``
is seconds or Slurm Elapsed ``[D-][HH:]MM:SS``; ``gpus`` a positive number
(fractions allowed: shared GPUs) or a TRES string with ``gres/gpu=N``; ``limit``
seconds or Slurm's forms; ``step_s`` seconds; ``gpu_model`` a catalog name
(``H100-SXM``), matched without regard to case, or left unsaid when unknown.
Bad rows are skipped and counted by reason.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from grace.cost.history import History, HistoryFormat, HistoryJob
from grace.cost.history_sacct import tres_gpus
from grace.cost.history_table import cell_reader, headed_rows, parse_role_map
from grace.sim.traces._common import (
    RowError,
    duration_s,
    finite,
    positive_duration,
    time_limit_s,
    timestamp_s,
    unique_id,
)
from grace.spec.gpus import BUILTIN_GPUS

ROLES = ("submit", "duration", "gpus", "start", "end", "nodes", "state", "step_s", "gpu_model",
         "tenant", "id", "name", "limit")
EXAMPLE = "submit=Submit,duration=Elapsed,gpus=NGPU,tenant=Account"
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_CATALOG = {name.lower(): name for name in BUILTIN_GPUS}


def parse_columns(text: str) -> dict[str, str]:
    """The role map, checked: a ValueError names what is missing and how to write it."""
    columns = parse_role_map(text, ROLES, EXAMPLE)
    missing = [r for r in ("submit", "gpus") if r not in columns]
    if "duration" not in columns and not {"start", "end"} <= set(columns):
        missing.append("duration (or start and end)")
    if missing:
        raise ValueError(f"--columns lacks {', '.join(missing)}; write e.g. {EXAMPLE} "
                         "(optional: start, end, nodes, state, step_s, gpu_model, id, name, limit)")
    return columns


class _Clock:
    """Times of one file: all numbers (seconds) or all timestamps, fixed by the first row."""

    def __init__(self) -> None:
        self.numeric: bool | None = None

    def read(self, text: str, what: str) -> float:
        if not text:
            raise RowError(f"missing {what} time")
        is_number = bool(_NUMBER.match(text))
        if self.numeric is not None and is_number != self.numeric:
            raise RowError(f"{what} time format differs from earlier rows")
        value = finite(text, f"{what} time") if is_number else timestamp_s(text)
        self.numeric = is_number
        return value


def _gpus(text: str) -> float:
    if "=" in text:
        count, _ = tres_gpus(text)
        value = float(count)
    else:
        value = finite(text, "GPU count")
    if value <= 0:
        raise RowError("no GPUs")
    return value


def load_history_csv(path: Path | str, columns: str | dict[str, str]) -> History:
    """Read a headed CSV whose ``columns`` map roles to column names (module docstring)."""
    roles = parse_columns(columns) if isinstance(columns, str) else dict(columns)
    required: list[str | tuple[str, ...]] = list(roles)  # a column the map names must exist
    history = History(source=str(path), format=HistoryFormat.CSV)
    pending: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    skipped: dict[str, int] = {}
    clock = _Clock()
    with headed_rows(path, roles, required, what="history") as (col, rows):
        cell = cell_reader(col)
        for row in rows:
            history.rows += 1
            try:
                submit = clock.read(cell(row, "submit"), "submit")
                start = None
                if "start" in col:
                    if cell(row, "start").lower() in ("", "unknown", "none"):
                        raise RowError("never started")
                    start = clock.read(cell(row, "start"), "start")
                if "duration" in col and cell(row, "duration"):
                    run = duration_s(cell(row, "duration"), elapsed=True)
                elif start is not None and "end" in col:
                    run = positive_duration(clock.read(cell(row, "end"), "end") - start)
                else:
                    raise RowError("missing duration")
                gpus = _gpus(cell(row, "gpus"))
                nodes_text = cell(row, "nodes")
                nodes = None
                if nodes_text:
                    n = finite(nodes_text, "node count")
                    if n < 1 or not n.is_integer():
                        raise RowError("bad node count")
                    nodes = int(n)
                step_text = cell(row, "step_s")
                step = finite(step_text, "step time") if step_text else None
                if step is not None and step <= 0:
                    raise RowError("bad step time")
                limit = (time_limit_s(cell(row, "limit"), 1.0, roles["limit"])
                         if "limit" in col else None)
            except RowError as e:
                skipped[e.reason] = skipped.get(e.reason, 0) + 1
                continue
            raw_id = cell(row, "id") or str(history.rows - 1)
            pending.append({
                "job_id": unique_id(raw_id, seen), "tenant": cell(row, "tenant") or "default",
                "submit_s": submit, "start_s": None if start is None else max(start, submit),
                "run_s": run, "gpus": gpus, "nodes": nodes,
                "gpu_model": _CATALOG.get(cell(row, "gpu_model").lower()),
                "name": cell(row, "name") or None, "limit_s": limit,
                "state": cell(row, "state").split(" ")[0] or None, "step_time_s": step})
    history.skipped = skipped
    if pending:
        t0 = min(j["submit_s"] for j in pending)
        if not clock.numeric:
            history.origin_epoch_s = t0
        pending.sort(key=lambda j: j["submit_s"])
        history.jobs = [HistoryJob(**{
            **j, "submit_s": j["submit_s"] - t0,
            "start_s": None if j["start_s"] is None else j["start_s"] - t0}) for j in pending]
    return history


__all__ = ["EXAMPLE", "ROLES", "load_history_csv", "parse_columns"]
