"""``grace whatif``: ETTR of one long job per checkpoint interval, with and without spares."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from grace.cli.fit import Column, fit_table
from grace.cli.json_out import to_stdout
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
    json_out: Path | None = typer.Option(
        None, "--json", help="write the result as JSON here (- : to stdout, without the table)"),
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
    # on stderr, so stdout stays the table (or the JSON); gone once the replays are done
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(bar_width=20),
                  TaskProgressColumn(),
                  TextColumn("{task.fields[days]}"),
                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("replaying", total=None, days="")
        result = run_whatif(WhatIfInput(
            gpus=gpus, days=days, intervals_min=tuple(intervals), checkpoint_s=checkpoint_s,
            restart_s=restart_s, repair_s=repair_s, gpu_mtbf_h=gpu_mtbf_h,
            spare_nodes=spare_nodes, replicates=replicates, seed=seed),
            progress=lambda done, total: bar.update(
                task, completed=done, total=total, days=f"{done:,.0f}/{total:,.0f} days"))
    if not to_stdout(json_out):  # --json -: the JSON alone on stdout
        console.print(f"job of {gpus:,} GPUs for {days:g} days: MTBF {result['mtbf_h']:.2f} h, "
                      f"checkpoint {checkpoint_s:g} s, restart {restart_s:g} s, "
                      f"automatic interval {result['auto_interval_min']:.1f} min (Daly)")
        console.print(_table(result, console.width))
    if json_out:
        from grace.cli.simulate import _write_json

        _write_json(json_out, result)
    if html_out:
        from grace.sim.report_whatif import write_whatif_html

        write_whatif_html(result, html_out)


def _table(result: dict, width: int = 80) -> RenderableType:
    """Figures whole in ``width`` cells; the six columns split into tables that repeat the
    interval where they do not fit side by side (``cli.fit``)."""
    rows = []
    for a, b in zip(result["rows"], result["rows_without_spares"], strict=True):
        label = "auto" if a["interval_min"] == "auto" else f"{a['interval_min']:g} min"
        if a["interval_min"] == "auto":
            label += f" ({a['interval_s'] / 60:.1f} min)"
        rows.append([label, f"{100 * a['ettr_sim']:.2f}% ± {100 * a['ettr_sim_sd']:.2f}",
                     f"{100 * a['ettr_model']:.2f}%", f"{a['lost_gpu_hours']:,.0f}",
                     f"{100 * b['ettr_sim']:.2f}%", f"{b['lost_gpu_hours']:,.0f}"])
    return fit_table(
        [Column("interval"), *(Column(c, justify="right") for c in (
            "ETTR twin (spares)", "ETTR model", "lost GPU-h (spares)", "ETTR twin (no spares)",
            "lost GPU-h (no spares)"))], rows, width, title="ETTR by checkpoint interval")
