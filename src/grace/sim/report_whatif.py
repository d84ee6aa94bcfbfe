"""``grace whatif --html``: the what-if answer as a page like the twin's other reports.

The same template as ``sim.report`` and the planner (``sim.report_page``): the
question and its assumptions, one table of ETTR per checkpoint interval (twin with
and without spares, closed form, GPU-hours lost), and one chart of ETTR per interval
with the twin's spread across seeds as error bars, so a reader sees whether two
intervals really differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from grace.sim.report_page import page, plots, table, write_page

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: the three bars of each interval: twin with spares, closed form, twin without spares
COLOURS = ("#0072B2", "#999999", "#D55E00")


def interval_label(row: dict[str, Any]) -> str:
    """``5 min``, or ``auto (53.8 min)`` for Daly's interval."""
    if row["interval_min"] == "auto":
        return f"auto ({row['interval_s'] / 60:.1f} min)"
    return f"{row['interval_min']:g} min"


def whatif_figure(result: dict[str, Any]) -> go.Figure:
    import plotly.graph_objects as go

    spares, bare = result["rows"], result["rows_without_spares"]
    labels = [interval_label(r) for r in spares]
    fig = go.Figure([
        go.Bar(name=f"twin, {result['spare_nodes']} hot spare nodes", x=labels,
               y=[r["ettr_sim"] for r in spares], marker_color=COLOURS[0],
               error_y={"type": "data", "array": [r["ettr_sim_sd"] for r in spares]}),
        go.Bar(name="closed form (spares replace at once)", x=labels,
               y=[r["ettr_model"] for r in spares], marker_color=COLOURS[1]),
        go.Bar(name="twin, no spares (waits for repairs)", x=labels,
               y=[r["ettr_sim"] for r in bare], marker_color=COLOURS[2],
               error_y={"type": "data", "array": [r["ettr_sim_sd"] for r in bare]}),
    ])
    low = min(r["ettr_sim"] for r in [*spares, *bare])
    fig.update_layout(barmode="group", height=460, title_text="ETTR by checkpoint interval "
                      f"(error bars: one standard deviation over {result['replicates']} seeds)",
                      legend={"orientation": "h", "y": -0.2})
    fig.update_yaxes(title_text="ETTR", tickformat=".0%", range=[max(0.0, low - 0.1), 1.0])
    fig.update_xaxes(title_text="checkpoint interval")
    return fig


def write_whatif_html(result: dict[str, Any], path: Path) -> None:
    title = f"What if: one job of {result['gpus']:,} GPUs for {result['days']:g} days"
    lead = (f"<p class='lead'>Job MTBF {result['mtbf_h']:.2f} h (per-GPU MTBF "
            f"{result['gpu_mtbf_h']:,.0f} h); each checkpoint blocks training "
            f"{result['checkpoint_s']:g} s; a failure costs a {result['restart_s']:g} s restart "
            f"plus the work since the last checkpoint; a drained node is out "
            f"{result['repair_s'] / 3600:g} h. Daly's interval: "
            f"{result['auto_interval_min']:.1f} min.</p>")
    rows = [[interval_label(a), f"{100 * a['ettr_sim']:.2f}% ± {100 * a['ettr_sim_sd']:.2f}",
             f"{100 * a['ettr_model']:.2f}%", f"{a['lost_gpu_hours']:,.0f}",
             f"{a['job_failures']:,.1f}", f"{100 * b['ettr_sim']:.2f}%",
             f"{b['lost_gpu_hours']:,.0f}"]
            for a, b in zip(result["rows"], result["rows_without_spares"], strict=True)]
    header = ["interval", "ETTR twin (spares)", "ETTR closed form", "GPU-h lost (spares)",
              "job failures", "ETTR twin (no spares)", "GPU-h lost (no spares)"]
    meta = (f"<p class='meta'>{result['replicates']} seeds from {result['seed']}, "
            f"{result['spare_nodes']} spare nodes; computed in {result['wall_s']:.1f} s.</p>")
    write_page(path, page(title, lead + table(header, rows) + plots([whatif_figure(result)])
                          + meta))
