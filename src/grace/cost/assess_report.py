"""``grace assess --html``: the assessment as one self-contained page.

The body is a Jinja2 template (``templates/assess.html.j2``, every value escaped:
job names and tenants come from people) inside the page every Grace report shares
(``grace.sim.report_page``: its style, plotly's JavaScript embedded once, written
atomically). It shows the six indicators with their evidence and thresholds, the
verdict and the dollars behind it, the workload-class table with every option's
monthly cost, and the history's GPU-hours by month (with the fleet's capacity when
the assessment sized one). Everything it shows is read from the JSON ``grace
assess --json`` writes, so the page and the JSON never disagree.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from grace.cost.history import MONTH_S
from grace.sim.report_page import page, plots, write_page

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: lists longer than this are shown by their length in the inputs table (they are in the JSON)
LIST_SHOWN = 8
EXTRA_STYLE = ("<style>td.text,th.text{text-align:left;max-width:42em}td.met-yes{color:#1a7f37}"
               "td.met-no{color:#555}td.met-unknown{color:#9a6700}td.chosen{font-weight:bold}"
               "p.verdict{font-size:1.15em}</style>")


@functools.cache
def _env() -> Environment:
    return Environment(loader=PackageLoader("grace.cost", "templates"), autoescape=True,
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def met_word(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def usd(value: Any) -> str:
    return f"${value:,.0f}" if isinstance(value, int | float) else "-"


def _value(key: str, value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "-"
    if isinstance(value, int | float):
        if "usd" not in key.lower():
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
        return f"${value:,.2f}" if "per_" in key.lower() else usd(value)
    if isinstance(value, list):
        if len(value) > LIST_SHOWN:
            return f"{len(value)} values (in the JSON)"
        return ", ".join(_value(key, v) for v in value)
    return str(value)


def flatten(data: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """``{"a": {"b": 1}}`` -> ``("a.b", "1")``: a nested JSON object as table rows."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list) and data and all(isinstance(v, dict) for v in data):
        for n, v in enumerate(data):  # a list of records: each by its name, else its place
            rest = {k: x for k, x in v.items() if k != "name"}
            yield from flatten(rest, f"{prefix}.{v.get('name', n)}")
    else:
        yield prefix, _value(prefix, data)


def _fleet_gpus(result: dict[str, Any]) -> float | None:
    """The fleet the assessment judged against, where its JSON says one."""
    for where in (result.get("inputs", {}), result.get("dollars", {})):
        for key in ("gpus", "fleet_gpus", "cluster_gpus"):
            v = where.get(key) if isinstance(where, dict) else None
            if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
                return float(v)
    return None


def month_labels(n: int, origin_epoch_s: float | None) -> list[str]:
    """Each 730-hour month's first day (``2026-01-05``), or ``month 1``... without dates."""
    if origin_epoch_s is None:
        return [f"month {m + 1}" for m in range(n)]
    return [time.strftime("%Y-%m-%d", time.gmtime(origin_epoch_s + m * MONTH_S))
            for m in range(n)]


def monthly_figure(result: dict[str, Any]) -> go.Figure:
    """GPU-hours each month as bars; the fleet's capacity (GPUs x 730 h) as a line."""
    import plotly.graph_objects as go

    h = result["inputs"]["history"]
    monthly = h.get("gpu_hours_by_month") or []
    labels = month_labels(len(monthly), h.get("origin_epoch_s"))
    fig = go.Figure(go.Bar(x=labels, y=monthly, name="GPU-hours used",
                           hovertemplate="%{x}: %{y:,.0f} GPU-hours<extra></extra>"))
    gpus = _fleet_gpus(result)
    if gpus is not None and monthly:
        cap = gpus * MONTH_S / 3600.0
        fig.add_trace(go.Scatter(x=labels, y=[cap] * len(labels), mode="lines",
                                 name=f"{gpus:g} GPUs all month",
                                 line={"dash": "dash", "color": "#d62728"}))
    fig.update_layout(height=380, margin={"l": 60, "r": 30, "t": 30, "b": 60},
                      yaxis_title="GPU-hours", xaxis_title="month starting",
                      legend={"orientation": "h", "y": 1.12})
    return fig


def render_body(result: dict[str, Any]) -> str:
    h = result["inputs"]["history"]
    options = sorted({o for c in result.get("placement_by_class", [])
                      for o in (c.get("usd_per_month") or {})})
    inputs = {k: v for k, v in result["inputs"].items() if k != "history"}
    dollars = result.get("dollars") or {}
    history_echo = {k: v for k, v in h.items() if k != "skipped"}
    start = (time.strftime("%Y-%m-%d", time.gmtime(h["origin_epoch_s"]))
             if h.get("origin_epoch_s") is not None else "")
    return _env().get_template("assess.html.j2").render(
        r=result, h=h, options=options, met=met_word, usd=usd, start=start,
        dollars=list(flatten({k: v for k, v in dollars.items() if k != "options"})),
        dollar_options=[o for o in dollars.get("options") or [] if isinstance(o, dict)],
        inputs=[*flatten(inputs), *flatten(history_echo, "history")],
        plot=Markup(plots([monthly_figure(result)])))  # plotly built this HTML: not escaped


def write_assess_html(result: dict[str, Any], path: Path) -> None:
    """The report at ``path``, written atomically."""
    gpu = result.get("inputs", {}).get("gpu", "")
    title = f"Grace assess: {Path(str(result['inputs']['history']['path'])).name}" + (
        f" against {gpu}" if gpu else "")
    write_page(path, page(title, EXTRA_STYLE + render_body(result)))


__all__ = ["flatten", "month_labels", "monthly_figure", "render_body", "write_assess_html"]
