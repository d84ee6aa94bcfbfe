"""The twin's self-contained HTML report: summary table and plots, one file, no network.

plotly's JavaScript is embedded once, so the file opens offline. Plots: the
JCT distribution (CDF) per policy, queue length and GPU allocation over time,
and per-tenant GPU-hour shares.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from grace.sim.metrics import SimResult

SUMMARY_FIELDS = (
    ("jobs", "jobs", "{:,}"), ("jobs_skipped", "skipped", "{:,}"),
    ("avg_jct_s", "avg JCT (h)", "h"), ("p50_jct_s", "p50 JCT (h)", "h"),
    ("p99_jct_s", "p99 JCT (h)", "h"), ("avg_queue_s", "avg queue (h)", "h"),
    ("p99_queue_s", "p99 queue (h)", "h"), ("makespan_s", "makespan (d)", "d"),
    ("gpu_allocation", "GPU allocation", "%"), ("fragmentation", "fragmentation", "%"),
    ("multi_leaf_share", "multi-leaf share", "%"), ("preemptions", "preemptions", "{:,}"),
    ("restarts", "restarts", "{:,}"), ("jobs_failed", "jobs given up", "{:,}"),
    ("lost_gpu_hours", "GPU-h lost to failures", "{:,.0f}"),
    ("cloud_usd", "cloud spend ($)", "{:,.0f}"),
    ("cloud_gpu_hours", "cloud GPU-h", "{:,.0f}"), ("burst_jobs", "burst jobs", "{:,}"),
    ("spot_preemptions", "spot preemptions", "{:,}"),
    ("wall_s", "wall (s)", "{:.1f}"),
)


def fmt_value(value: float, how: str) -> str:
    if how == "h":
        return f"{value / 3600:.2f}"
    if how == "d":
        return f"{value / 86400:.1f}"
    if how == "%":
        return f"{100 * value:.1f}%"
    return how.format(value)


def _cdf(values: np.ndarray, points: int = 400) -> tuple[list[float], list[float]]:
    if not len(values):
        return [], []
    qs = np.linspace(0, 100, points)
    return list(np.percentile(values, qs) / 3600.0), list(qs / 100.0)


def write_html(results: dict[str, SimResult], path: Path, title: str) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = []
    fields = [f for f in SUMMARY_FIELDS if any(f[0] in r.summary for r in results.values())]
    for name, r in results.items():
        cells = "".join(f"<td>{fmt_value(r.summary.get(k, 0), how)}</td>"
                        for k, _, how in fields)
        rows.append(f"<tr><th>{html.escape(name)}</th>{cells}</tr>")
    head = "".join(f"<th>{label}</th>" for _, label, _ in fields)
    table = f"<table><tr><th>policy</th>{head}</tr>{''.join(rows)}</table>"

    fig = make_subplots(rows=2, cols=2, subplot_titles=(
        "JCT distribution (CDF)", "Queueing delay (CDF)", "Jobs waiting", "GPUs allocated"))
    for name, r in results.items():
        x, y = _cdf(r.jct_s)
        fig.add_trace(go.Scatter(x=x, y=y, name=f"{name} JCT", legendgroup=name), 1, 1)
        x, y = _cdf(r.queue_s)
        fig.add_trace(go.Scatter(x=x, y=y, name=f"{name} queue", legendgroup=name,
                                 showlegend=False), 1, 2)
        t = [v / 86400 for v in r.series["t_s"]]
        fig.add_trace(go.Scatter(x=t, y=r.series["queued_jobs"], name=f"{name} waiting",
                                 legendgroup=name, showlegend=False), 2, 1)
        fig.add_trace(go.Scatter(x=t, y=r.series["allocated_gpus"], name=f"{name} allocated",
                                 legendgroup=name, showlegend=False), 2, 2)
    fig.update_xaxes(type="log", title_text="hours", row=1, col=1)
    fig.update_xaxes(type="log", title_text="hours", row=1, col=2)
    fig.update_xaxes(title_text="days", row=2, col=1)
    fig.update_xaxes(title_text="days", row=2, col=2)
    fig.update_layout(height=800, title_text=title)
    plots = fig.to_html(include_plotlyjs=True, full_html=False)

    tenant_html = ""
    for name, r in results.items():
        trs = "".join(
            f"<tr><td>{html.escape(t)}</td><td>{v['jobs']:,}</td><td>{v['gpu_hours']:,.0f}</td>"
            f"<td>{100 * v['share_of_gpu_hours']:.1f}%</td><td>{v['avg_queue_s'] / 3600:.2f}</td>"
            f"<td>{v['restarts']:,}</td><td>{v['lost_gpu_hours']:,.0f}</td></tr>"
            for t, v in sorted(r.tenants.items(), key=lambda kv: -kv[1]["gpu_hours"])
        )
        tenant_html += (f"<h3>{html.escape(name)}: tenants</h3><table><tr><th>tenant</th>"
                        f"<th>jobs</th><th>GPU-h</th><th>share</th><th>avg queue (h)</th>"
                        f"<th>restarts</th><th>GPU-h lost to failures</th></tr>"
                        f"{trs}</table>")
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}")
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{table}{plots}"
           f"{tenant_html}</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)
