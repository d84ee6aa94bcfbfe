"""``grace lifecycle``'s HTML report: demand against capacity, the retirement test, cash.

The same page as the planner's (``grace.sim.report_page``, plotly embedded once, opens
offline). Three figures, each the full width: GPUs needed against GPUs held, with a
marker where each tranche is ordered and where it arrives; each owned generation's cost
per useful GPU-hour against the newer one's, with its retirement month; the cumulative
cash by month.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grace.sim.report_page import page, plots, table, write_page

if TYPE_CHECKING:
    import plotly.graph_objects as go

KIND_COLOURS = {"buy": "#1f77b4", "lease": "#ff7f0e", "cloud-1y": "#d62728"}


def _months(n: int) -> list[int]:
    return list(range(1, n + 1))


def demand_figure(result: dict[str, Any]) -> go.Figure:
    import plotly.graph_objects as go

    n = result["inputs"]["months"]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=_months(n), y=result["demand"]["gpus_needed_by_month"],
                             name="GPUs needed", mode="lines", line={"color": "#2ca02c"}))
    fig.add_trace(go.Scatter(x=_months(n), y=result["capacity"]["gpus_by_month"],
                             name="GPUs held", mode="lines", line={"shape": "hv",
                                                                   "color": "#1f77b4"}))
    fig.add_trace(go.Scatter(x=_months(n), y=result["capacity"]["owned_gpus_by_month"],
                             name="owned today (after retirements)", mode="lines",
                             line={"shape": "hv", "dash": "dot", "color": "#7f7f7f"}))
    held = result["capacity"]["gpus_by_month"]
    for what, key, symbol in (("ordered", "order_month", "triangle-down"),
                              ("delivered", "delivered_month", "triangle-up")):
        trs = result["tranches"]
        xs = [tr[key] for tr in trs]
        ys = [held[min(max(x, 1), n) - 1] for x in xs]
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers", name=what,
            marker={"symbol": symbol, "size": 12,
                    "color": [KIND_COLOURS[tr["choice"]] for tr in trs]},
            text=[f"tranche {tr['tranche']}: {tr['gpus']} GPUs, {tr['choice']}" for tr in trs],
            hovertemplate="%{text} " + what + " in month %{x}<extra></extra>"))
    fig.update_layout(title="Demand against capacity (GPUs)", height=420,
                      xaxis_title="plan month (0 = now)", yaxis_title="GPUs")
    return fig


def retirement_figure(result: dict[str, Any]) -> go.Figure:
    import plotly.graph_objects as go

    n = result["inputs"]["months"]
    fig = go.Figure()
    gens = result["retirement"]["generations"]
    if gens:
        fig.add_trace(go.Scatter(x=_months(n), y=gens[0]["new_usd_per_useful_gpu_hour_by_month"],
                                 name=f"new {result['inputs']['gpu']} (full owned rate)",
                                 mode="lines", line={"color": "#1f77b4"}))
    for g in gens:
        label = f"{g['count']} x {g['model']}, {g['age_months']:g} months old (running)"
        fig.add_trace(go.Scatter(x=_months(n), y=g["old_usd_per_useful_gpu_hour_by_month"],
                                 name=label, mode="lines"))
        if g["retire_month"] is not None:
            fig.add_vline(x=g["retire_month"], line_dash="dash",
                          annotation_text=f"retire {g['model']} (month {g['retire_month']})")
    fig.update_layout(title="Cost per useful GPU-hour (in hours of the new GPU's work)",
                      height=420, xaxis_title="plan month", yaxis_title="USD")
    return fig


def cash_figure(result: dict[str, Any]) -> go.Figure:
    import plotly.graph_objects as go

    cash = result["cash"]["cumulative_usd_by_month"]
    fig = go.Figure(go.Scatter(x=_months(len(cash)), y=cash, mode="lines",
                               name="cumulative cash", line={"color": "#8c564b"}))
    fig.update_layout(title="Cumulative cash spent (USD)", height=380,
                      xaxis_title="plan month", yaxis_title="USD")
    return fig


def _money(v: float | None) -> str:
    return "-" if v is None else f"${v:,.0f}"


def _tranche_table(result: dict[str, Any]) -> str:
    rows = []
    for tr in result["tranches"]:
        o = tr["options"]
        rows.append([str(tr["tranche"]), str(tr["crossing_month"]), str(tr["order_month"]),
                     str(tr["delivered_month"]), str(tr["gpus"]), tr["choice"],
                     *(_money(None if o[k] is None else o[k]["total_usd"])
                       for k in ("buy", "lease", "cloud-1y")),
                     tr["reason"]])
    return table(["tranche", "needed (month)", "ordered", "delivered", "GPUs", "choice",
                  "buy", "lease", "cloud 1y", "why"], rows)


def _inputs_table(result: dict[str, Any]) -> str:
    rows = [[p, f"{f['value']:g}", f"{f['low']:g}", f"{f['high']:g}", f["source"]]
            for p, f in sorted(result["inputs"]["prices"].items())]
    return table(["input", "value", "low", "high", "source"], rows)


def write_lifecycle_html(result: dict[str, Any], path: Path) -> None:
    i, d = result["inputs"], result["demand"]
    cross = result["demand_crosses_owned_capacity_month"]
    lead = (f"Demand grows {100 * d['trend']['growth_per_month']:.1f}% a month "
            f"({d['trend']['method']}; {'uncertain' if d['uncertain'] else 'steady'}: "
            f"{d['uncertain_reason']}). "
            + ("It stays within owned capacity." if cross is None else
               f"It crosses owned capacity in month {cross}.")
            + f" Cash over {i['months']} months: "
              f"{_money(result['cash']['cumulative_usd_by_month'][-1])}.")
    body = (f"<p class='lead'>{html.escape(lead)}</p>{_tranche_table(result)}"
            f"{plots([demand_figure(result), retirement_figure(result), cash_figure(result)])}"
            f"<h2>Inputs</h2>{_inputs_table(result)}")
    write_page(path, page(f"Grace lifecycle: {i['gpu']} over {i['months']} months", body))
