"""``grace showback``: GPU-hours and their cost per tenant, from the live cluster or a twin replay."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, RenderableType
from rich.text import Text

from grace.cli.fit import Cell, Column, fit_table
from grace.cli.json_out import to_stdout, write_json

console = Console()
err = Console(stderr=True)

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_since(text: str, now: float) -> float:
    """``7d``, ``12h``, ``30m`` or ``90s`` before ``now``, as a Unix time."""
    m = _SPAN.match(text.strip())
    if not m:
        raise typer.BadParameter("write a span back from now such as 7d, 12h or 30m",
                                 param_hint="--since")
    return now - float(m.group(1)) * _UNIT_S[m.group(2)]


def showback(
    since: str | None = typer.Option(None, "--since", help="only the last 7d / 12h / 30m"),
    json_out: Path | None = typer.Option(
        None, "--json", help="write the full showback as JSON here (- : to stdout, no table)"),
    cluster: Path | None = typer.Option(None, "--cluster",
                                        help="twin mode: replay --trace on this cluster instead"),
    trace: Path | None = typer.Option(None, "--trace", help="twin mode: the job trace"),
    fmt: str = typer.Option("philly", "--format", help="twin mode: trace format"),
    prices: Path | None = typer.Option(None, "--prices", help="YAML overriding the price book"),
) -> None:
    """Per tenant: GPU-hours allocated and useful, hours lost to queueing, failures and
    waiting on data or synchronization (and the I/O and sync wait shares of GPU time
    held, live), and their cost at the pool's $/GPU-hour."""
    if (cluster is None) != (trace is None):
        raise typer.BadParameter("twin mode needs both --cluster and --trace")
    if cluster is not None and trace is not None:
        report = _twin(cluster, trace, fmt, prices, since)
    else:
        if prices is not None:
            err.print("[yellow]note[/yellow] --prices applies to twin mode; the server prices "
                      "with its own price book")
        report = _live(since)
    if json_out is not None and to_stdout(json_out):  # --json -: the JSON alone on stdout
        write_json(json_out, report)
        return
    console.print(_table(report, console.width))
    if json_out:
        write_json(json_out, report)
        err.print(f"json: {json_out}")


def _live(since: str | None) -> dict[str, Any]:
    from grace.cli.client import _call

    params = {"since": parse_since(since, time.time())} if since else {}
    return _call("GET", "/showback", params=params)


def _twin(cluster: Path, trace: Path, fmt: str, prices: Path | None,
          since: str | None) -> dict[str, Any]:
    from grace.cost.pricebook import load_pricebook
    from grace.cost.rates import cluster_rate
    from grace.cost.showback import showback as make_showback
    from grace.cost.showback_twin import twin_usage
    from grace.sim.runner import load_input, replay
    from grace.spec.errors import SpecError

    try:
        book = load_pricebook(prices)
        inp = load_input(cluster, trace, fmt, None)
    except (SpecError, ValueError, OSError) as e:
        err.print(f"[red]error[/red] {e}")
        raise typer.Exit(code=2) from e
    result = replay(inp, "grace")
    usages = twin_usage(result.jobs, cluster_rate(inp.topo, book))
    now = max((b for u in usages for _, b in u.intervals), default=0.0)
    if since:
        start = parse_since(since, now)
        usages = [u for u in usages if u.held_share_in(start, now) > 0]
    return make_showback(usages, now, capacity_gpus=inp.topo.total_gpus)


#: Showback's columns: the tenant and every figure whole (it is what the table is about).
#: At 80 columns the ten do not fit side by side; ``fit_table`` then deals them into two
#: tables that each repeat the tenant, instead of cutting every header and figure.
COLUMNS = [Column("tenant"), *(Column(c, justify="right") for c in (
    "jobs", "GPU-h", "useful", "useful %", "failures", "data/sync", "I/O wait %",
    "sync wait %", "queue h", "cost", "lost $"))]


def _table(report: dict[str, Any], width: int = 80) -> RenderableType:
    def row(name: Cell, f: dict[str, float]) -> list[Cell]:
        lost = f["failure_usd"] + f["data_sync_usd"] + f["checkpoint_usd"]
        return [name, f"{f['jobs']:,.0f}", f"{f['allocated_gpu_hours']:,.1f}",
                f"{f['useful_gpu_hours']:,.1f}", f"{100 * f['useful_share']:.1f}%",
                f"{f['failure_gpu_hours']:,.1f}", f"{f['data_sync_gpu_hours']:,.1f}",
                f"{100 * f.get('io_wait_share', 0.0):.1f}%",
                f"{100 * f.get('sync_wait_share', 0.0):.1f}%",
                f"{f['queue_hours']:,.1f}", f"${f['allocated_usd']:,.0f}", f"${lost:,.0f}"]

    rows = [row(name, f) for name, f in report["tenants"].items()]
    rows.append(row(Text("cluster", style="bold"), report["totals"]))
    windows = ", ".join(f"{k}: {100 * w['effective_utilization']:.1f}%"
                        for k, w in report["windows"].items()
                        if w.get("effective_utilization") is not None)
    caption = (f"effective utilization (useful GPU-h / GPU-h available): {windows}"
               if windows else None)
    return fit_table(COLUMNS, rows, width, title="Showback by tenant", caption=caption)
