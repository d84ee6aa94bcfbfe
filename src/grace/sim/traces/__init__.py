"""Trace loaders: real public job logs (and a synthetic generator) as ``TraceJob`` lists.

Every loader returns a :class:`Trace`: jobs sorted by submission, times in
seconds from the first submission, and a :class:`LoadReport` that counts the
rows it skipped and why. A bad row never stops a load; a missing file or
column raises ValueError. :func:`load_trace` picks a loader by format name,
so a command line can take the format as a plain string.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from grace.sim.traces.chronus import load_chronus
from grace.sim.traces.generic_csv import load_csv, parse_column_map
from grace.sim.traces.model import LoadReport, Trace, TraceJob
from grace.sim.traces.openb import OpenbNode, load_openb_nodes, load_openb_pods
from grace.sim.traces.pai import PaiMachine, load_pai_machines, pai_cluster_spec
from grace.sim.traces.philly import load_philly
from grace.sim.traces.synthetic import generate
from grace.sim.traces.tiresias import load_tiresias

_LOADERS: dict[str, Callable[[Path | str], Trace]] = {
    "philly": load_philly,
    "openb": load_openb_pods,
    "chronus": load_chronus,
    "tiresias": load_tiresias,
}
FORMATS = (*_LOADERS, "csv")


def load_trace(path: Path | str, fmt: str, columns: dict[str, str] | str | None = None) -> Trace:
    """Load ``path`` as ``fmt`` (one of :data:`FORMATS`).

    ``columns`` is only for ``fmt="csv"``, where it is required: a role→column
    dict or its CLI form ``"submit=Submit,duration=Elapsed,gpus=NGPU"``.
    """
    key = fmt.strip().lower()
    if key == "csv":
        if columns is None:
            raise ValueError(
                "format 'csv' needs a column map, e.g. submit=Submit,duration=Elapsed,gpus=NGPU"
            )
        return load_csv(path, parse_column_map(columns) if isinstance(columns, str) else columns)
    if key == "pollux":
        raise ValueError("format 'pollux' also needs the app profiles: use "
                         "grace.sim.runner.load_input(..., profiles=...) or load_pollux")
    if key not in _LOADERS:
        raise ValueError(f"unknown trace format {fmt!r}; known formats are {list(FORMATS)}")
    if columns is not None:
        raise ValueError(f"a column map only applies to format 'csv', not {fmt!r}; drop it")
    return _LOADERS[key](path)


__all__ = [
    "FORMATS",
    "LoadReport",
    "OpenbNode",
    "PaiMachine",
    "Trace",
    "TraceJob",
    "generate",
    "load_chronus",
    "load_csv",
    "load_openb_nodes",
    "load_openb_pods",
    "load_pai_machines",
    "load_philly",
    "load_tiresias",
    "load_trace",
    "pai_cluster_spec",
    "parse_column_map",
]
