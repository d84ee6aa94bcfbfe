"""The planner's self-contained HTML report: options table, cumulative cash, sensitivity tornado.

Same page as the twin's report (``grace.sim.report_page``): one file with plotly's
JavaScript embedded once, so it opens offline, written atomically.

Layout: the cash curves and the tornado are two rows of one figure, each the full
width, so the tornado's input names (up to ~60 characters) sit in the left margin
beside their own bars and never over the cash plot; the margin is sized to the
longest name (``label_margin_px``). Each option keeps one colour, in the table's
swatch too; an owned option's total after selling its hardware at book value is
a separate hollow marker after the last month, not a drop in its cash line.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grace.sim.report_page import page, plots, table, write_page

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: an option's colour in the curves and the table (plotly's default order, fixed by name)
OPTION_COLOURS = {"on-prem": "#1f77b4", "colo": "#ff7f0e", "cloud-on-demand": "#2ca02c",
                  "cloud-1y": "#d62728", "cloud-3y": "#9467bd", "hybrid": "#8c564b"}
#: plotly's default tick font is 12 px; its characters average about 7 px wide
TICK_CHAR_PX = 7
SENSITIVITY_ROWS = 12


def _money(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"${v:,.{digits}f}"


def _options_table(result: dict[str, Any]) -> str:
    rows = []
    for o in result["options"]:
        be = "-" if o["breakeven_month"] is None else str(o["breakeven_month"])
        swatch = (f"<span class='swatch' style='background:{OPTION_COLOURS.get(o['name'], '#777')}'>"
                  "</span>")
        resale = _money(o["resale_usd"]) if o.get("resale_usd") else "-"
        rows.append(f"<tr><td>{swatch}{html.escape(o['name'])}</td><td>{_money(o['total_usd'])}</td>"
                    f"<td>{resale}</td><td>{_money(o['usd_per_useful_gpu_hour'], 2)}</td>"
                    f"<td>{be}</td><td>{html.escape(o['note'])}</td></tr>")
    return ("<div class='wide'><table><tr><th>option</th><th>total</th>"
            "<th>resale credit</th><th>$/useful GPU-h</th>"
            f"<th>breakeven month</th><th>note</th></tr>{''.join(rows)}</table></div>")


def _inputs_table(result: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(path)}</td><td>{fig['value']:g}</td><td>{fig['low']:g}</td>"
        f"<td>{fig['high']:g}</td><td>{html.escape(fig['source'])}</td></tr>"
        for path, fig in sorted(result["inputs"]["prices"].items()))
    return ("<table><tr><th>input</th><th>value</th><th>low</th><th>high</th><th>source</th></tr>"
            f"{rows}</table>")


def short_labels(paths: list[str]) -> list[str]:
    """Each input's last name (``owned.pue`` -> ``pue``), or the whole path where two
    share a last name: the tornado's tick labels (the hover shows the whole path)."""
    last = [p.rsplit(".", 1)[-1] for p in paths]
    return [t if last.count(t) == 1 else p for t, p in zip(last, paths, strict=True)]


def label_margin_px(labels: list[str]) -> int:
    """Left margin that holds the longest tornado label at plotly's tick font."""
    return 40 + TICK_CHAR_PX * max((len(t) for t in labels), default=0)


def plan_figure(result: dict[str, Any]) -> go.Figure:
    """Cash by month (row 1) over the sensitivity tornado (row 2), both the full width."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    months = result["inputs"]["workload"]["months"]
    rows = list(reversed(result["sensitivity"][:SENSITIVITY_ROWS]))  # largest effect on top
    fig = make_subplots(rows=2, cols=1, row_heights=[0.55, 0.45], vertical_spacing=0.14,
                        subplot_titles=(
                            "Cumulative cash spent (USD); hollow marker: total after the "
                            "owned hardware is sold at book value",
                            "Sensitivity: owning beats renting on demand above (utilization)"))
    for o in result["options"]:
        ys = o["cumulative_usd_by_month"]
        if not ys:
            continue
        colour = OPTION_COLOURS.get(o["name"], "#777777")
        fig.add_trace(go.Scatter(x=list(range(1, len(ys) + 1)), y=ys, name=o["name"],
                                 legendgroup=o["name"], mode="lines",
                                 line={"color": colour}), 1, 1)
        if o.get("resale_usd"):
            fig.add_trace(go.Scatter(
                x=[months + 0.5], y=[o["total_usd"]], name=o["name"], legendgroup=o["name"],
                showlegend=False, mode="markers",
                marker={"color": colour, "symbol": "diamond-open", "size": 11},
                hovertemplate=(f"{o['name']}: %{{y:$,.0f}} after selling the hardware for "
                               f"{_money(o['resale_usd'])}<extra></extra>")), 1, 1)
    base = result["owning_beats_renting_above_utilization_unclamped"]["on-prem"]
    paths = [r["input"] for r in rows]
    names = short_labels(paths)
    for end, colour in (("low", "#1f77b4"), ("high", "#d62728")):
        at = [r[f"owning_beats_renting_above_utilization_at_{end}"] for r in rows]
        fig.add_trace(go.Bar(y=names, x=[u - base for u in at], base=base, orientation="h",
                             customdata=list(zip(paths, at, strict=True)),
                             name=f"input at {end}", marker_color=colour, legend="legend2",
                             hovertemplate=f"%{{customdata[0]}} at its {end}: owning beats "
                                           "renting above %{customdata[1]:.1%}<extra></extra>"),
                      2, 1)
    fig.update_xaxes(title_text="month", row=1, col=1)
    fig.update_yaxes(title_text="USD", row=1, col=1)
    fig.update_xaxes(title_text="utilization", tickformat=".0%", row=2, col=1)
    fig.update_yaxes(automargin=True, row=2, col=1)
    fig.update_layout(height=560 + 28 * len(rows), barmode="overlay",
                      margin={"l": label_margin_px(names), "r": 40, "t": 60, "b": 50},
                      # each row its own legend, beside it: options by the cash plot,
                      # the input's low/high by the tornado
                      legend={"y": 1.0, "yanchor": "top", "tracegroupgap": 2},
                      legend2={"y": fig.layout.yaxis2.domain[1], "yanchor": "top"})
    return fig


def _site_section(site: dict[str, Any]) -> str:
    """The site check for on-prem (and the hybrid's owned part), inputs beside results."""
    def row(what: str, s: dict[str, Any]) -> list[str]:
        return [what, "yes" if s["feasible"] else "no", f"{s['gpus']:g}",
                f"{s['draw_kw']:.1f} ({s['draw_kw_low']:.1f}-{s['draw_kw_high']:.1f})",
                f"{s['nodes_needed']}", f"{s['nodes_powered']}", f"{s['nodes_in_boxes']}",
                f"{s['racks']} x {s['nodes_per_rack']}", f"{s['rack_weight_kg']:,.0f}",
                f"{s['floor_load_kg_per_m2']:,.0f}", s["reason"]]
    rows = [row("on-prem", site)]
    if "hybrid" in site:
        rows.append(row("hybrid (owned part)", site["hybrid"]))
    given = (f"The site feeds {site['site_kw']:g} kW, cools {site['cooling_kw']:g} kW, "
             f"racks of {site['rack_kw']:g} kW and {site['rack_units']:g}U, a floor rated "
             f"{site['floor_kg_per_m2']:,.0f} kg/m2; a node draws {site['node_kw']:.2f} kW "
             f"({site['node_gpus']} x {site['board_watts']:g} W x "
             f"{site['node_power_overhead']:g}) and weighs {site['node_weight_kg']:g} kg.")
    return (f"<h2>Site</h2><p>{html.escape(given)}</p>" + table(
        ["owned GPUs", "fits", "GPUs", "draw kW (range)", "nodes", "powered", "in boxes",
         "racks x nodes", "fullest rack kg", "floor kg/m2", "reason"], rows))


def _staffing_and_rules(result: dict[str, Any]) -> str:
    st = result["staffing"]
    staff = (f"{st['fte']:.2f} FTE for {st['gpus']:g} GPUs (1 per {st['gpus_per_fte']:g} GPUs, "
             f"at least {st['min_fte']:g}) = {_money(st['usd_per_month'])} a month; the seed's "
             f"0.5 FTE per 32 GPUs gives {st['fte_by_seed_rule']:.2f} FTE. Source: "
             f"{st['source']}")
    mark = {True: "agrees", False: "differs", None: "no call"}
    rules = [[r["rule"], r["says"], r["plan_says"], mark[r["agrees"]], r["why"]]
             for r in result["rules_of_thumb"]]
    return (f"<h2>Staffing</h2><p>{html.escape(staff)}</p><h2>Rules of thumb</h2>"
            + table(["rule (the seeds)", "it says", "this plan says", "", "why"], rules))


def write_plan_html(result: dict[str, Any], path: Path) -> None:
    w = result["inputs"]["workload"]
    title = (f"Grace plan: {w['gpus']:g} x {w['gpu']} at {100 * w['utilization']:.0f}% "
             f"for {w['months']} months")
    base = result["owning_beats_renting_above_utilization_unclamped"]["on-prem"]
    threshold = result["owning_beats_renting_above_utilization"]
    answer = (f"Owning (on-prem) beats renting on demand above {100 * threshold:.1f}% utilization."
              if threshold is not None else
              f"Owning never beats renting on demand here (it would need {100 * base:.0f}%).")
    body = (f"<p class='lead'><b>{html.escape(answer)}</b> Useful GPU-hours: "
            f"{w['useful_gpu_hours']:,.0f}.</p>{_options_table(result)}"
            f"{plots([plan_figure(result)])}"
            f"{_site_section(result['site']) if 'site' in result else ''}"
            f"{_staffing_and_rules(result) if 'staffing' in result else ''}"
            f"<h2>Inputs</h2>{_inputs_table(result)}")
    write_page(path, page(title, body))
