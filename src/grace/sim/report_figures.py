"""The twin report's plotly figures, built as objects so tests can read them before HTML.

A reader compares policies across subplots, so each policy keeps one colour in every
subplot (``policy_colours``: a fixed palette taken in the order the policies were given)
and the figure has one legend: every trace of a policy shares its ``legendgroup`` and
only the first one shows in the legend, so clicking a policy hides it everywhere.

``main_figure``: JCT and queueing-delay CDFs; jobs waiting; the cluster's GPUs in use
with a capacity line (the owned GPUs, rented ones left out); utilization as a share of
that capacity; GPU-hours by tenant; and, in a bursting replay, rented GPUs (in use solid,
provisioned dotted) and cloud spend accrued over time. ``tenant_figure``: GPUs in use by
tenant over time, one row per policy, with tenants coloured by name (a second palette,
so a tenant is never mistaken for a policy).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from grace.sim.metrics import CLOUD_GPUS, CLOUD_PROVISIONED, CLOUD_USD, SimResult

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: Okabe & Ito's colour-blind-safe palette ("Color Universal Design", 2008) less yellow
#: and black (too faint and too close to the axes on white); then plotly's Dark24.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9")
CAPACITY_COLOUR = "#555555"
CAPACITY_GROUP = "capacity"
#: the tenant charts name this many tenants (by GPU-hours) and add the rest up as "other":
#: fewer in the stacked areas, where similar colours would blur together, than as bars
TOP_TENANTS, TOP_TENANT_BARS = 8, 12
OTHER = "other"


def policy_colours(names: Sequence[str]) -> dict[str, str]:
    """One colour per policy, in the given order: the same policy list always gets the
    same colours, and no two policies share one."""
    from plotly.colors import qualitative

    palette = [*OKABE_ITO, *(c for c in qualitative.Dark24 if c not in OKABE_ITO)]
    if len(names) > len(palette):
        raise ValueError(f"--policies: {len(names)} policies but the report has "
                         f"{len(palette)} distinct colours; compare fewer at a time")
    return {n: palette[i] for i, n in enumerate(names)}


def _cdf(values: np.ndarray, points: int = 400) -> tuple[list[float], list[float]]:
    if not len(values):
        return [], []
    qs = np.linspace(0, 100, points)
    return list(np.percentile(values, qs) / 3600.0), list(qs / 100.0)


def _days(r: SimResult) -> list[float]:
    return [v / 86400 for v in r.series["t_s"]]


def _capacity(results: dict[str, SimResult]) -> float:
    caps = {r.total_gpus for r in results.values()}
    if len(caps) != 1:
        raise ValueError(f"the report compares replays of one cluster, but they have "
                         f"{sorted(caps)} GPUs; write one report per cluster")
    return caps.pop()


def _top_tenants(results: Iterable[SimResult]) -> list[str]:
    """The tenants with the most GPU-hours in any replay, largest first."""
    best: dict[str, float] = {}
    for r in results:
        for t, v in r.tenants.items():
            best[t] = max(best.get(t, 0.0), v["gpu_hours"])
    return sorted(best, key=lambda t: (-best[t], t))


def _capacity_trace(x: list[float], cap: float, show: bool) -> go.Scatter:
    import plotly.graph_objects as go

    return go.Scatter(x=x, y=[cap] * len(x), name=f"capacity ({cap:,.0f} GPUs)",
                      legendgroup=CAPACITY_GROUP, showlegend=show, mode="lines",
                      line={"color": CAPACITY_COLOUR, "dash": "dash", "width": 1.5})


#: where a policy's traces go: (trace, row, col) in ``main_figure``'s grid
Placed = list[tuple["go.Scatter | go.Bar", int, int]]


def _policy_traces(r: SimResult, colour: str, cap: float, tenants: list[str]) -> Placed:
    """One policy's traces for every subplot of ``main_figure``, all in ``colour``."""
    import plotly.graph_objects as go

    line = {"color": colour}
    step = line | {"shape": "hv"}  # the series are piecewise constant between samples
    t = _days(r)
    shown, rest = tenants[:TOP_TENANT_BARS], tenants[TOP_TENANT_BARS:]
    hours = [r.tenants.get(tn, {}).get("gpu_hours", 0.0) for tn in shown]
    labels = list(shown)
    if rest:
        hours.append(sum(r.tenants.get(tn, {}).get("gpu_hours", 0.0) for tn in rest))
        labels.append(OTHER)
    jct, queue = _cdf(r.jct_s), _cdf(r.queue_s)
    util = [a / cap for a in r.series["allocated_gpus"]] if cap else []
    out: Placed = [
        (go.Scatter(x=jct[0], y=jct[1], mode="lines", line=line), 1, 1),
        (go.Scatter(x=queue[0], y=queue[1], mode="lines", line=line), 1, 2),
        (go.Scatter(x=t, y=r.series["queued_jobs"], mode="lines", line=step), 2, 1),
        (go.Scatter(x=t, y=r.series["allocated_gpus"], mode="lines", line=step), 2, 2),
        (go.Scatter(x=t, y=util, mode="lines", line=step), 3, 1),
        (go.Bar(x=labels, y=hours, marker={"color": colour}), 3, 2),
    ]
    if CLOUD_USD in r.series:
        out += [
            (go.Scatter(x=t, y=r.series[CLOUD_GPUS], mode="lines", line=step), 4, 1),
            (go.Scatter(x=t, y=r.series[CLOUD_PROVISIONED], mode="lines",
                        line=step | {"dash": "dot"}), 4, 1),
            (go.Scatter(x=t, y=r.series[CLOUD_USD], mode="lines", line=line), 4, 2),
        ]
    return out


def main_figure(results: dict[str, SimResult], title: str) -> go.Figure:
    from plotly.subplots import make_subplots

    colours = policy_colours(list(results))
    cap = _capacity(results)
    cloud = any(CLOUD_USD in r.series for r in results.values())
    titles = ["JCT distribution (CDF)", "Queueing delay (CDF)", "Jobs waiting",
              "GPUs in use (the cluster's own)", "Utilization (share of the cluster's GPUs)",
              "GPU-hours by tenant"]
    if cloud:
        titles += ["Cloud GPUs: in use (solid), provisioned (dotted)", "Cloud spend accrued ($)"]
    rows = len(titles) // 2
    fig = make_subplots(rows=rows, cols=2, subplot_titles=titles, vertical_spacing=0.3 / rows)
    tenants = _top_tenants(results.values())
    for name, r in results.items():
        for i, (trace, row, col) in enumerate(_policy_traces(r, colours[name], cap, tenants)):
            trace.update(name=name, legendgroup=name, showlegend=i == 0)
            fig.add_trace(trace, row, col)
    end = max((max(_days(r), default=0.0) for r in results.values()), default=0.0)
    fig.add_trace(_capacity_trace([0.0, end], cap, True), 2, 2)
    fig.update_xaxes(type="log", title_text="hours", row=1, col=1)
    fig.update_xaxes(type="log", title_text="hours", row=1, col=2)
    for row in range(2, rows + 1):
        for col in (1, 2):
            if (row, col) != (3, 2):
                fig.update_xaxes(title_text="days", row=row, col=col)
    fig.update_yaxes(title_text="share of jobs", row=1, col=1)
    fig.update_yaxes(title_text="GPUs", row=2, col=2)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.05], row=3, col=1)
    fig.update_yaxes(title_text="GPU-h", row=3, col=2)
    if cloud:
        fig.update_yaxes(title_text="GPUs", row=4, col=1)
        fig.update_yaxes(title_text="$", row=4, col=2)
    fig.update_layout(height=320 * rows, title_text=title, barmode="group",
                      legend={"title": {"text": "policy"}}, hovermode="x")
    return fig


def tenant_figure(results: dict[str, SimResult]) -> go.Figure | None:
    """GPUs in use by tenant (owned and rented), stacked, one row per policy; None
    when no replay ran anything."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    tenants = _top_tenants(results.values())
    if not tenants:
        return None
    shown, rest = tenants[:TOP_TENANTS], tenants[TOP_TENANTS:]
    palette = [*qualitative.Set2, *qualitative.Pastel1, *qualitative.Set3]
    colours = {t: palette[i % len(palette)] for i, t in enumerate([*shown, OTHER])}
    cap = _capacity(results)
    what = "GPUs in use by tenant, owned and rented" if any(
        CLOUD_USD in r.series for r in results.values()) else "GPUs in use by tenant"
    fig = make_subplots(rows=len(results), cols=1, shared_xaxes=True,
                        subplot_titles=[f"{what}: {p}" for p in results],
                        vertical_spacing=0.12 / len(results))
    for row, r in enumerate(results.values(), start=1):
        t = _days(r)
        stacks = [(tn, r.tenant_series.get(tn, [0.0] * len(t))) for tn in shown]
        if rest:
            others = [r.tenant_series[tn] for tn in rest if tn in r.tenant_series]
            stacks.append((OTHER, [float(sum(v)) for v in zip(*others, strict=True)]
                           if others else [0.0] * len(t)))
        for tn, ys in stacks:
            fig.add_trace(go.Scatter(x=t, y=ys, name=tn, legendgroup=tn, showlegend=row == 1,
                                     mode="lines", stackgroup=f"tenants-{row}",
                                     line={"color": colours[tn], "shape": "hv", "width": 0.5}),
                          row, 1)
        fig.add_trace(_capacity_trace([t[0], t[-1]] if t else [], cap, row == 1), row, 1)
        fig.update_yaxes(title_text="GPUs", row=row, col=1)
    fig.update_xaxes(title_text="days", row=len(results), col=1)
    fig.update_layout(height=260 * len(results) + 120, legend={"title": {"text": "tenant"}},
                      hovermode="x")
    return fig
