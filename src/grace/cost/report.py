"""The planner's self-contained HTML report: options table, cumulative cost, sensitivity tornado.

Same house style as the twin's report (``grace.sim.report``): one file with
plotly's JavaScript embedded once, so it opens offline, written atomically.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

_STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
          "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
          "td:first-child,th:first-child{text-align:left}")


def _money(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"${v:,.{digits}f}"


def _options_table(result: dict[str, Any]) -> str:
    rows = []
    for o in result["options"]:
        be = "-" if o["breakeven_month"] is None else str(o["breakeven_month"])
        rows.append(f"<tr><td>{html.escape(o['name'])}</td><td>{_money(o['total_usd'])}</td>"
                    f"<td>{_money(o['usd_per_useful_gpu_hour'], 2)}</td><td>{be}</td>"
                    f"<td>{html.escape(o['note'])}</td></tr>")
    return ("<table><tr><th>option</th><th>total</th><th>$/useful GPU-h</th>"
            f"<th>breakeven month</th><th>note</th></tr>{''.join(rows)}</table>")


def _inputs_table(result: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(path)}</td><td>{fig['value']:g}</td><td>{fig['low']:g}</td>"
        f"<td>{fig['high']:g}</td><td>{html.escape(fig['source'])}</td></tr>"
        for path, fig in sorted(result["inputs"]["prices"].items()))
    return ("<table><tr><th>input</th><th>value</th><th>low</th><th>high</th><th>source</th></tr>"
            f"{rows}</table>")


def write_plan_html(result: dict[str, Any], path: Path) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    w = result["inputs"]["workload"]
    title = (f"Grace plan: {w['gpus']:g} x {w['gpu']} at {100 * w['utilization']:.0f}% "
             f"for {w['months']} months")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], subplot_titles=(
        "Cumulative cash spent (USD)", "Sensitivity: owning beats renting above (utilization)"))
    for o in result["options"]:
        ys = o["cumulative_usd_by_month"]
        if ys:
            fig.add_trace(go.Scatter(x=list(range(1, len(ys) + 1)), y=ys, name=o["name"],
                                     mode="lines"), 1, 1)
    rows = list(reversed(result["sensitivity"][:12]))  # largest effect at the top
    base = result["owning_beats_renting_above_utilization_unclamped"]["on-prem"]
    names = [r["input"] for r in rows]
    for end, colour in (("low", "#1f77b4"), ("high", "#d62728")):
        deltas = [r[f"owning_beats_renting_above_utilization_at_{end}"] - base for r in rows]
        fig.add_trace(go.Bar(y=names, x=deltas, base=base, orientation="h", name=f"input at {end}",
                             marker_color=colour), 1, 2)
    fig.update_xaxes(title_text="month", row=1, col=1)
    fig.update_xaxes(title_text="utilization", tickformat=".0%", row=1, col=2)
    fig.update_layout(height=600, title_text=title, barmode="overlay")
    plots = fig.to_html(include_plotlyjs=True, full_html=False)
    threshold = result["owning_beats_renting_above_utilization"]
    answer = (f"Owning (on-prem) beats renting on demand above {100 * threshold:.1f}% utilization."
              if threshold is not None else
              f"Owning never beats renting on demand here (it would need {100 * base:.0f}%).")
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
           f"<p><b>{html.escape(answer)}</b> Useful GPU-hours: {w['useful_gpu_hours']:,.0f}.</p>"
           f"{_options_table(result)}{plots}<h2>Inputs</h2>{_inputs_table(result)}</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)
