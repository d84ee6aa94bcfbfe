"""The metrics a job reports, kept per attempt for sweeps' results and early stopping.

The runtime sends rank 0's reports in its heartbeat records: every record's
``loss`` at its ``step``, and the objectives a script reports with
``rt.report_metric`` under ``"metrics": {name: [[step, value], ...]}``. The
API's heartbeat route merges them into ``<attempt dir>/metrics.json``
(``{name: [[step, value], ...]}``), written by the control plane with a fresh
file renamed over the old one and read back without following links, like
``progress-rank*.json``: the job owns the directory, not the file's contents.

A file stays small: at most ``MAX_METRICS`` names and ``MAX_POINTS`` points a
name; past that every other older point is dropped (the newest are kept whole,
which is what the stopping rules read most).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from grace.backends.isolation import read_job_json
from grace.backends.local_agent import write_json_atomic

FILE = "metrics.json"
MAX_METRICS = 8
MAX_POINTS = 1000


def _points(record: Mapping[str, Any]) -> Iterable[tuple[str, int, float]]:
    step, loss = record.get("step"), record.get("loss")
    if _is_step(step) and _is_value(loss):
        yield "loss", int(step), float(loss)  # type: ignore[arg-type]
    metrics = record.get("metrics")
    if isinstance(metrics, dict):
        for name, pts in metrics.items():
            if not isinstance(name, str) or not isinstance(pts, list):
                continue
            for p in pts:
                if isinstance(p, list) and len(p) == 2 and _is_step(p[0]) and _is_value(p[1]):
                    yield name[:64], p[0], float(p[1])


def _thin(points: list[list[float]]) -> list[list[float]]:
    half = len(points) // 2
    return points[:half:2] + points[half:]


def _is_step(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**63


def _is_value(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def checked(data: Mapping[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """A metrics file's contents as the control plane may trust them: the job's processes
    can replace the file, so only names with lists of ``[int step, finite number]`` pairs
    are kept, at most ``MAX_METRICS`` names of the newest ``MAX_POINTS`` points each;
    anything else is dropped, never raised (the early-stopping watch runs in the cycle)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for name, pts in data.items():
        if len(out) >= MAX_METRICS:
            break
        if not isinstance(name, str) or not isinstance(pts, list):
            continue
        out[name[:64]] = [(p[0], float(p[1])) for p in pts[-MAX_POINTS:]
                          if isinstance(p, list) and len(p) == 2 and _is_step(p[0])
                          and _is_value(p[1])]
    return out


def merge(current: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``current`` (a metrics file's contents) with the points of ``records`` added."""
    out: dict[str, list[list[float]]] = {
        k: [[st, v] for st, v in pts] for k, pts in checked(current).items()}
    for name, step, value in (p for r in records for p in _points(r)):
        if not math.isfinite(value) or (name not in out and len(out) >= MAX_METRICS):
            continue
        series = out.setdefault(name, [])
        series.append([step, value])
        if len(series) > MAX_POINTS:
            out[name] = _thin(series)
    return out


def record(attempt_dir: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Merge rank 0's heartbeat records into the attempt's metrics file (OSError passes)."""
    records = list(records)
    if not any(True for r in records for _ in _points(r)):
        return
    path = attempt_dir / FILE
    write_json_atomic(path, merge(read_job_json(path, None) or {}, records))


#: parsed files by path, with the (mtime, size) they were parsed at: the early-stopping watch
#: reads every trial of a running sweep each cycle, and most files have not changed
_parsed: dict[Path, tuple[tuple[int, int], dict[str, list[tuple[int, float]]]]] = {}
_PARSED_MAX = 4096


def read(attempt_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """An attempt's metrics, ``{name: [(step, value), ...]}`` (empty if none or unreadable)."""
    path = attempt_dir / FILE
    try:
        st = os.lstat(path)
    except OSError:
        return {}
    key = (st.st_mtime_ns, st.st_size)
    hit = _parsed.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    out = checked(read_job_json(path, None) or {})
    if len(_parsed) >= _PARSED_MAX:
        _parsed.clear()
    _parsed[path] = (key, out)
    return out


def history(attempt_dirs: Iterable[Path], name: str) -> list[tuple[int, float]]:
    """One metric over a job's attempts, in step order (a resumed attempt continues it)."""
    return sorted(p for d in attempt_dirs for p in read(d).get(name, []))


__all__ = ["FILE", "MAX_POINTS", "history", "merge", "read", "record"]
