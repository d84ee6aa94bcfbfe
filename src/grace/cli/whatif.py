"""``grace whatif``: ETTR of one long job per checkpoint interval, with and without spares."""

from __future__ import annotations

import html
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from grace.core.checkpoint import LLAMA3_GPU_MTBF_H
from grace.sim.whatif import WhatIfInput, run_whatif

console = Console()
err = Console(stderr=True)


def whatif(
    gpus: int = typer.Option(..., "--gpus", min=1, help="GPUs the job runs on"),
    days: float = typer.Option(..., "--days", min=0.01, help="how long it runs"),
    interval_min: list[str] = typer.Option(
        ["5", "30", "60", "auto"], "--interval-min",
        help="checkpoint intervals to compare, minutes or 'auto' (repeat the flag)"),
    checkpoint_s: float = typer.Option(60.0, "--checkpoint-s", min=0.0,
                                       help="time training blocks per checkpoint"),
    restart_s: float = typer.Option(600.0, "--restart-s", min=0.0,
                                    help="failure to training again (detect, reschedule, load)"),
    repair_s: float = typer.Option(4 * 3600.0, "--repair-s", min=0.0,
                                   help="how long a drained node is out"),
    gpu_mtbf_h: float = typer.Option(LLAMA3_GPU_MTBF_H, "--gpu-mtbf-h", min=1.0,
                                     help="per-GPU MTBF (default: Llama 3's 16,384 x 54 d / 419)"),
    spare_nodes: int | None = typer.Option(None, "--spare-nodes", min=0,
                                           help="hot spare nodes (default 1% of the job's)"),
    replicates: int = typer.Option(4, "--replicates", min=1, help="seeds per interval"),
    seed: int = typer.Option(0, "--seed"),
    json_out: Path | None = typer.Option(None, "--json", help="write the result as JSON here"),
    html_out: Path | None = typer.Option(None, "--html", help="write an HTML report here"),
) -> None:
    """What checkpoint interval should a job of N GPUs for D days use? The twin answers."""
    intervals: list[float | None] = []
    for text in interval_min:
        for part in text.split(","):
            part = part.strip().lower()
            if part == "auto":
                intervals.append(None)
                continue
            try:
                value = float(part)
            except ValueError:
                err.print(f"[red]error[/red] --interval-min: {part!r} is neither minutes nor 'auto'")
                raise typer.Exit(code=2) from None
            if value <= 0:
                err.print("[red]error[/red] --interval-min: intervals must be positive minutes")
                raise typer.Exit(code=2)
            intervals.append(value)
    with console.status("running the twin..."):
        result = run_whatif(WhatIfInput(
            gpus=gpus, days=days, intervals_min=tuple(intervals), checkpoint_s=checkpoint_s,
            restart_s=restart_s, repair_s=repair_s, gpu_mtbf_h=gpu_mtbf_h,
            spare_nodes=spare_nodes, replicates=replicates, seed=seed))
    console.print(f"job of {gpus:,} GPUs for {days:g} days: MTBF {result['mtbf_h']:.2f} h, "
                  f"checkpoint {checkpoint_s:g} s, restart {restart_s:g} s, "
                  f"automatic interval {result['auto_interval_min']:.1f} min (Daly)")
    console.print(_table(result))
    if json_out:
        from grace.cli.simulate import _write_json

        _write_json(json_out, result)
    if html_out:
        _write_html(result, html_out)


def _table(result: dict) -> Table:
    t = Table(title="ETTR by checkpoint interval")
    for col in ("interval", "ETTR twin (spares)", "ETTR model", "lost GPU-h (spares)",
                "ETTR twin (no spares)", "lost GPU-h (no spares)"):
        t.add_column(col, justify="right")
    for a, b in zip(result["rows"], result["rows_without_spares"], strict=True):
        label = "auto" if a["interval_min"] == "auto" else f"{a['interval_min']:g} min"
        if a["interval_min"] == "auto":
            label += f" ({a['interval_s'] / 60:.1f} min)"
        t.add_row(label, f"{100 * a['ettr_sim']:.2f}% ± {100 * a['ettr_sim_sd']:.2f}",
                  f"{100 * a['ettr_model']:.2f}%", f"{a['lost_gpu_hours']:,.0f}",
                  f"{100 * b['ettr_sim']:.2f}%", f"{b['lost_gpu_hours']:,.0f}")
    return t


def _write_html(result: dict, path: Path) -> None:
    import plotly.graph_objects as go

    labels = [str(r["interval_min"]) for r in result["rows"]]
    fig = go.Figure([
        go.Bar(name="twin, hot spares", x=labels, y=[100 * r["ettr_sim"] for r in result["rows"]]),
        go.Bar(name="closed form", x=labels, y=[100 * r["ettr_model"] for r in result["rows"]]),
        go.Bar(name="twin, no spares", x=labels,
               y=[100 * r["ettr_sim"] for r in result["rows_without_spares"]]),
    ])
    fig.update_layout(barmode="group", yaxis_title="ETTR (%)", xaxis_title="interval (min)")
    rows = "".join(
        f"<tr><td>{html.escape(str(a['interval_min']))}</td><td>{100 * a['ettr_sim']:.2f}%</td>"
        f"<td>{100 * a['ettr_model']:.2f}%</td><td>{a['lost_gpu_hours']:,.0f}</td>"
        f"<td>{100 * b['ettr_sim']:.2f}%</td><td>{b['lost_gpu_hours']:,.0f}</td></tr>"
        for a, b in zip(result["rows"], result["rows_without_spares"], strict=True))
    title = f"What if: {result['gpus']:,} GPUs for {result['days']:g} days"
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>"
           f"<h1>{title}</h1><p>job MTBF {result['mtbf_h']:.2f} h, checkpoint "
           f"{result['checkpoint_s']:g} s, restart {result['restart_s']:g} s, spares "
           f"{result['spare_nodes']} nodes</p><table border=1><tr><th>interval</th>"
           f"<th>ETTR twin (spares)</th><th>ETTR model</th><th>lost GPU-h</th>"
           f"<th>ETTR twin (no spares)</th><th>lost GPU-h</th></tr>{rows}</table>"
           f"{fig.to_html(include_plotlyjs=True, full_html=False)}</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc, encoding="utf-8")
