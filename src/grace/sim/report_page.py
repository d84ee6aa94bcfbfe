"""The one page template and stylesheet of Grace's HTML reports.

The twin's report (``sim.report``), the planner's (``cost.report``) and the what-if
page (``cli.whatif``) are read side by side, so they share a look: this template,
tables with the label column on the left and figures on the right, and plotly's
JavaScript embedded once per page from the installed package (the file opens
offline and loads nothing from another host). Pages are written atomically, so a
reader never opens half a file.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}"
    "h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.5em}h3{font-size:1.05em}"
    "p.lead{font-size:1.05em}p.meta{color:#555}"
    "table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}th{background:#f4f4f4}"
    ".swatch{display:inline-block;width:.8em;height:.8em;margin-right:.4em;"
    "vertical-align:middle}.wide{overflow-x:auto}"
)


def table(header: Sequence[str], rows: Iterable[Sequence[str]], escape: bool = True) -> str:
    """An HTML table; cells are escaped unless the caller built them as HTML."""
    def cell(v: str) -> str:
        return html.escape(v) if escape else v

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<div class='wide'><table><tr>{head}</tr>{body}</table></div>"


def plots(figures: Iterable[go.Figure]) -> str:
    """The figures as HTML, plotly's JavaScript inline with the first one only."""
    return "".join(fig.to_html(include_plotlyjs=i == 0, full_html=False)
                   for i, fig in enumerate(figures))


def page(title: str, body: str) -> str:
    """A whole document: ``body`` is HTML, the title is escaped."""
    t = html.escape(title)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{t}</title>"
            f"<style>{STYLE}</style></head><body><h1>{t}</h1>{body}</body></html>")


def write_page(path: Path, doc: str) -> None:
    """Write atomically: a temporary file beside ``path``, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)
