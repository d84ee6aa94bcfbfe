"""``grace sweep ID`` (a sweep's results table) and ``grace submit`` of a ``kind: sweep`` file.

The table has one row per trial: its job id, its parameters, its state
(``stopped`` for a trial its early-stopping rule ended), the steps it got
to, its best value of the sweep's metric and the GPU time it held; the best
trial is marked ``*`` and named under the table, with the GPU-seconds the
whole sweep used. It fits the terminal (80 columns in a pipe): parameters
give way first, in the middle.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from grace.cli.client import JsonOpt, _call, console, err
from grace.cli.fit import Column, Fit, duration, fit_table
from grace.spec.errors import SpecError
from grace.spec.loader import parse_sweep, read_yaml
from grace.spec.sweep import flag_value


def is_sweep_file(path: Path) -> bool:
    """Whether ``path`` says ``kind: sweep`` (an unreadable file is left to the job loader)."""
    try:
        data = read_yaml(path)
    except SpecError:
        return False
    return isinstance(data, dict) and str(data.get("kind", "")).lower() == "sweep"


def submit_sweep(path: Path, flags: dict[str, Any], as_json: bool,
                 tenant: str | None = None) -> None:
    """Validate the sweep here (every bad field named at once), then ``POST /sweeps``;
    ``flags`` (``--time``, ``--hold``, ...) apply to its base job, ``tenant`` (``--tenant``)
    over the file's own."""
    try:
        data = read_yaml(path)
        parse_sweep(data, str(path))
    except SpecError as e:
        err.print(f"[red]invalid[/red] {e}")
        raise typer.Exit(code=1) from e
    body = {k: v for k, v in data.items() if k != "kind"}
    body["job"] = {**body.get("job", {}), **flags}
    if tenant:
        body["tenant"] = body["job"]["tenant"] = tenant
    out = _call("POST", "/sweeps", json=body)
    if as_json:
        print(json.dumps(out))
        return
    console.print(f"submitted sweep {out['id']} {out['name']!r} ({out['tenant']}): "
                  f"{len(out['trials'])} trials, jobs {out['trials'][0]}-{out['trials'][-1]}, "
                  f"{out['max_parallel']} at once; `grace sweep {out['id']}` shows the results")


def _value(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def render(sweep: dict[str, Any], width: int) -> Any:
    """The results table of ``GET /sweeps/{id}``'s answer, ``width`` cells wide."""
    metric = sweep["metric"]
    names = sorted({k for t in sweep["trials"] for k in t["params"]})
    rows = []
    for t in sweep["trials"]:
        params = " ".join(f"{k}={flag_value(t['params'][k])}" for k in names
                          if k in t["params"])
        rows.append([("* " if t["id"] == sweep["best"] else "") + str(t["id"]), params,
                     t["state"], str(t["steps"]), _value(t["best"]),
                     duration(t["gpu_seconds"])])
    stop = sweep.get("early_stopping")
    rule = f"early stopping: {stop['rule']}" if stop else "no early stopping"
    best = next((t for t in sweep["trials"] if t["id"] == sweep["best"]), None)
    caption = "best: none reported yet"
    if best is not None:
        shown = " ".join(f"{k}={flag_value(v)}" for k, v in best["params"].items())
        caption = f"best: job {best['id']} ({shown}), {metric['name']} {_value(best['best'])}"
    caption += (f"; GPU time {duration(sweep['gpu_seconds'])} "
                f"({sweep['gpu_seconds']:.0f} GPU-s); {rule}")
    return fit_table(
        [Column("job", justify="right"), Column("params", Fit.MIDDLE, min_width=12, weight=3),
         Column("state"), Column("steps", justify="right"),
         Column(f"best {metric['name']} ({metric['mode']})", justify="right"),
         Column("GPU time", justify="right")],
        rows, width, title=f"sweep {sweep['id']} {sweep['name']} ({sweep['tenant']})",
        caption=caption)


def sweep(sweep_id: int = typer.Argument(..., help="the sweep's id (its first trial's job)"),
          as_json: bool = JsonOpt) -> None:
    """A sweep's results: each trial's parameters, state, steps and best metric; the best."""
    out = _call("GET", f"/sweeps/{sweep_id}")
    if as_json:
        print(json.dumps(out))
        return
    console.print(render(out, console.width))
    if not out["done"]:
        console.print(Text("still running: run it again for newer figures", style="dim"))


__all__ = ["is_sweep_file", "render", "submit_sweep", "sweep"]
