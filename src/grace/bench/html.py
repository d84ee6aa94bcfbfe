"""The benches' HTML pages: one self-contained file each (plotly's JavaScript inlined, no
CDN, so the page opens on an air-gapped cluster like Grace's dashboard).

``net``: bus bandwidth against message size (log-log), one line per collective, and
latency against size below it: the bandwidth curve flattens at the link's limit, the
latency curve is flat at small sizes (the fixed cost of one collective) and rises once
bandwidth dominates. ``scaling``: throughput and efficiency against rank count, and the
phases of a step per rank count as stacked bars (``allreduce`` drawn apart: it runs
inside ``backward``).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from grace.bench.net import NetReport, Op, format_size
from grace.bench.scaling import ADDITIVE, ScalingReport


def _page(title: str, intro: str, figures: list[Any], out: Path) -> None:
    body = "".join(fig.to_html(include_plotlyjs=i == 0, full_html=False)
                   for i, fig in enumerate(figures))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
                   f"</title></head><body style='font-family:sans-serif;max-width:1100px;margin:auto'>"
                   f"<h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>{body}</body></html>")


def net_html(report: NetReport, out: Path) -> None:
    """Bus bandwidth and latency per size, one trace per collective."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("bus bandwidth (GB/s, nccl-tests definition)",
                                        "latency per operation (us, median)"))
    counts = sorted({r.ranks for r in report.results})
    for op in Op:
        for n in counts:  # one line per collective, and per rank count when several ran
            rows = [r for r in report.results if r.op is op and r.ranks == n]
            if not rows:
                continue
            name = op.value if len(counts) == 1 else f"{op.value} x{n}"
            x = [r.bytes for r in rows]
            labels = [format_size(r.bytes) for r in rows]
            fig.add_trace(go.Scatter(x=x, y=[r.busbw_gbps for r in rows], mode="lines+markers",
                                     name=f"{name} busbw", text=labels, legendgroup=name),
                          row=1, col=1)
            fig.add_trace(go.Scatter(x=x, y=[r.latency_us for r in rows], mode="lines+markers",
                                     name=f"{name} latency", text=labels, legendgroup=name,
                                     showlegend=False), row=2, col=1)
    fig.update_xaxes(type="log", title_text="message size (bytes)", row=2, col=1)
    fig.update_xaxes(type="log", row=1, col=1)
    fig.update_yaxes(type="log", title_text="GB/s", row=1, col=1)
    fig.update_yaxes(type="log", title_text="us", row=2, col=1)
    fig.update_layout(height=800)
    where = ", ".join(report.node_names) or report.host
    said = ",".join(map(str, counts))
    intro = (f"{report.backend.value}, {said} ranks on {report.nodes} node(s) ({where}), "
             f"launcher {report.launcher}. busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n "
             "for all-gather and reduce-scatter (nccl-tests doc/PERFORMANCE.md); "
             "GB/s = 1e9 bytes/s.")
    _page("grace bench net", intro, [fig], out)


def scaling_html(report: ScalingReport, out: Path) -> None:
    """Throughput and efficiency per rank count, and the phase breakdown as stacked bars."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    ranks = [r.ranks for r in report.runs]
    labels = [str(n) for n in ranks]
    curve = make_subplots(specs=[[{"secondary_y": True}]])
    curve.add_trace(go.Bar(x=labels, y=[report.throughput(r) for r in report.runs],
                           name="throughput (samples/s)"), secondary_y=False)
    curve.add_trace(go.Scatter(x=labels, y=[report.efficiency(r) for r in report.runs],
                               mode="lines+markers", name="scaling efficiency"),
                    secondary_y=True)
    curve.update_yaxes(title_text="samples/s (all ranks)", secondary_y=False)
    curve.update_yaxes(title_text="efficiency", tickformat=".0%", range=[0, 1.1],
                       secondary_y=True)
    curve.update_xaxes(title_text="ranks", type="category")
    curve.update_layout(title="throughput and scaling efficiency")
    phases = go.Figure()
    for name in ADDITIVE:
        phases.add_trace(go.Bar(x=labels, y=[r.phases.get(name, 0.0) * 1e3 for r in report.runs],
                                name=name))
    phases.add_trace(go.Scatter(x=labels, y=[r.phases.get("allreduce", 0.0) * 1e3
                                             for r in report.runs],
                                mode="lines+markers", name="allreduce (inside backward)"))
    phases.update_layout(barmode="stack", title="where a step's time goes (ms per step)",
                         xaxis_title="ranks", yaxis_title="ms per step",
                         xaxis_type="category")
    intro = (f"{Path(report.script).name}, {report.backend}, batch {report.batch_size} per "
             f"rank, {report.steps} steps, {report.cpus} CPU(s) on {report.host}. "
             f"efficiency[n] = throughput[n] / (n x throughput[{report.base.ranks}]).")
    _page("grace bench scaling", intro, [curve, phases], out)
