"""The twin's self-contained HTML report: summary table and plots, one file, no network.

plotly's JavaScript (from the installed ``plotly`` package) is embedded once, inline, so
the file opens offline and loads nothing from another host. The figures are built in
``grace.sim.report_figures`` (one colour per policy in every subplot, one legend); the
summary table marks each policy with its colour, so table and charts read together.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from grace.sim.metrics import SimResult
from grace.sim.report_figures import main_figure, policy_colours, tenant_figure
from grace.sim.report_page import page, plots, write_page

if TYPE_CHECKING:
    import plotly.graph_objects as go

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


def figures(results: dict[str, SimResult], title: str) -> list[go.Figure]:
    """The report's figures, in page order: what ``write_html`` draws (and tests read)."""
    tenants = tenant_figure(results)
    return [main_figure(results, title), *([tenants] if tenants is not None else [])]


def write_html(results: dict[str, SimResult], path: Path, title: str) -> None:
    colours = policy_colours(list(results))
    rows = []
    fields = [f for f in SUMMARY_FIELDS if any(f[0] in r.summary for r in results.values())]
    for name, r in results.items():
        cells = "".join(f"<td>{fmt_value(r.summary.get(k, 0), how)}</td>"
                        for k, _, how in fields)
        swatch = f"<span class='swatch' style='background:{colours[name]}'></span>"
        rows.append(f"<tr><th>{swatch}{html.escape(name)}</th>{cells}</tr>")
    head = "".join(f"<th>{label}</th>" for _, label, _ in fields)
    table = (f"<div class='wide'><table><tr><th>policy</th>{head}</tr>{''.join(rows)}"
             f"</table></div>")

    charts = plots(figures(results, title))

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
    write_page(path, page(title, f"{table}{charts}{tenant_html}"))
