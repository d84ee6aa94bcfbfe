"""Jinja2 for the dashboard's pages: templates in the package, every value escaped.

``autoescape=True`` for every template (not by file name): a job's name, a node's
drain reason or an alert's labels come from people and jobs, and must never be
read as markup by the browser. The filters format the numbers the pages show the
same way everywhere.
"""

from __future__ import annotations

import functools
import math
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.responses import HTMLResponse

from grace.control.dashboard.assets import STATIC_PREFIX, plotly_url
from grace.control.dashboard.security import page_headers

#: The nav bar: (path, label); the page names its own path to be marked current.
NAV = (("/", "Cluster"), ("/ui/queue", "Queue"), ("/ui/tenants", "Tenants"),
       ("/ui/alerts", "Alerts"), ("/docs", "API"))


def when(at: float | None) -> str:
    """An epoch time as UTC, to the second ("" for none)."""
    if at is None or not math.isfinite(at):
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def span(seconds: float | None) -> str:
    """A duration in the largest unit that keeps it short: 42 s, 7 min, 3.2 h, 2.1 d."""
    if seconds is None or not math.isfinite(seconds):
        return ""
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 172_800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def number(value: float | None, digits: int = 2) -> str:
    """2.0 -> "2", 0.5 -> "0.5", None -> "unlimited" (a quota without a limit)."""
    if value is None:
        return "unlimited"
    if not math.isfinite(value):
        return "unlimited" if value > 0 else "-"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") or "0"


def percent(share: float | None) -> str:
    return "" if share is None or not math.isfinite(share) else f"{100 * share:.0f}%"


def _grace_version() -> str:
    try:
        return version("grace")
    except PackageNotFoundError:  # run from a checkout without installing
        return "dev"


@functools.cache
def environment() -> Environment:
    env = Environment(loader=PackageLoader("grace.control.dashboard", "templates"),
                      autoescape=True, undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True)
    env.filters.update(when=when, span=span, number=number, percent=percent)
    stamp = _grace_version()
    env.globals.update(nav=NAV, plotly_url=plotly_url(),
                       static=lambda name: f"{STATIC_PREFIX}/{name}?v={stamp}")
    return env


def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page: ``template`` rendered with ``context``, sent with the CSP and private headers."""
    html = environment().get_template(template).render(**context)
    return HTMLResponse(html, status_code=status, headers=page_headers())


__all__ = ["NAV", "environment", "number", "page", "percent", "span", "when"]
