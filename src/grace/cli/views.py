"""``grace history`` (sacct), ``grace priority`` (sprio) and ``grace shares`` (sshare).

Each reads one route of ``control.routes_views`` and prints a table that fits the
console (``cli.fit``), or JSON with ``--json`` (printed whole with ``print``, never cut).
``history`` pages through the store with the route's cursor: ``--limit N`` (default 500)
stops after N jobs and says on stderr that more exist; ``--all`` reads every page.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from grace.cli.fit import Cell, Column, Fit, duration, fit_table
from grace.cli.jobs_view import FormatError, JobColumn, jobs_table, parse_format

console = Console()
err = Console(stderr=True)

#: Jobs one history request asks for (the route's maximum).
PAGE = 1000
_SPAN = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
#: ``grace history`` without ``--format``: sacct's usual view, what fits 80 columns.
#: (``submitted``, ``started`` and ``ended`` are a ``--format`` away)
HISTORY_COLUMNS = (JobColumn.ID, JobColumn.NAME, JobColumn.TENANT, JobColumn.GPUS,
                   JobColumn.WAIT, JobColumn.RUN, JobColumn.STATE, JobColumn.REASON)
WHEN_HELP = ("a span back from now (30m, 12h, 2d, 1w), a local date or time "
             "(2026-12-01, '2026-12-01 14:30'), epoch seconds, or 'now'")


def parse_when(text: str, now: float, option: str) -> float:
    """``text`` as epoch seconds: ``2d`` is two days before ``now``; a date or a date and
    time is local time, as sacct reads ``--starttime``; ``all`` is the beginning."""
    t = text.strip().lower()
    if t == "now":
        return now
    if t == "all":
        return 0.0
    span = _SPAN.match(t)
    if span:
        return now - float(span.group(1)) * _UNIT_S[span.group(2)]
    try:
        value = float(t)
    except ValueError:
        pass
    else:
        if value >= 0:
            return value
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a time: use {WHEN_HELP}",
                                 param_hint=option) from None


def history(
        since: str = typer.Option("1d", "--since", help=f"jobs alive since then: {WHEN_HELP}; "
                                                         "'all' for every job"),
        until: str = typer.Option("now", "--until", help=f"jobs submitted by then: {WHEN_HELP}"),
        tenant: str | None = typer.Option(None, "--tenant"),
        state: str | None = typer.Option(None, "--state", help=(
            "one state or several, comma-separated: failed,cancelled")),
        fmt: str | None = typer.Option(None, "--format", help=(
            f"columns, comma-separated, from: {', '.join(JobColumn)} (default "
            f"{','.join(HISTORY_COLUMNS)})")),
        as_json: bool = typer.Option(False, "--json", help="print JSON for scripts"),
        limit: int = typer.Option(500, "--limit", min=1, help="show the oldest N jobs"),
        every: bool = typer.Option(False, "--all", help="every job: page through them all"),
) -> None:
    """Jobs that ran, failed or waited in a time window, oldest first (like sacct; each
    task of an array is a row of its own, with its own state and times)."""
    from grace.cli.client import _call

    now = time.time()
    start, end = parse_when(since, now, "--since"), parse_when(until, now, "--until")
    try:
        columns = parse_format(fmt) if fmt is not None else HISTORY_COLUMNS
    except FormatError as e:
        err.print(f"[red]invalid[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(code=2) from e
    params: dict[str, Any] = {"since": start, "until": end}
    params |= {k: v for k, v in {"tenant": tenant, "state": state}.items() if v}
    want = None if every else limit
    rows: list[dict[str, Any]] = []
    after, more = 0, False
    while True:
        size = PAGE if want is None else min(PAGE, want - len(rows))
        page = _call("GET", "/history", params=params | {"limit": size, "after": after})
        rows += page["jobs"]
        if page["next"] is None:
            break
        after = page["next"]
        if want is not None and len(rows) >= want:
            more = True
            break
    if more:
        err.print(f"showing the oldest {len(rows)} jobs; more exist: --all shows every one "
                  "(or --limit N, or a later --since)", soft_wrap=True)
    if as_json:
        print(json.dumps(rows))
        return
    spans = {r["id"]: r.get("attempt_spans") or [] for r in rows}
    console.print(jobs_table(rows, console.width, columns, spans, now, title=(
        f"history: {len(rows)} job{'' if len(rows) == 1 else 's'}")))


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def priority(tenant: str | None = typer.Option(None, "--tenant"),
             as_json: bool = typer.Option(False, "--json", help="print JSON for scripts")) -> None:
    """Waiting jobs in the order the scheduler visits them, and why (like sprio)."""
    from grace.cli.client import _call

    body = _call("GET", "/priority", params={"tenant": tenant} if tenant else {})
    if as_json:
        print(json.dumps(body))
        return
    order = body["order"]
    rows: list[list[Cell]] = []
    for j in body["jobs"]:
        f = j["factors"]
        rows.append([str(j["position"]), str(j["id"]), j["name"], j["tenant"], f"{j['gpus']:g}",
                     str(j["priority"]), str(f["las"]) if "las" in f else "-",
                     _share(j["fair_share"]), duration(j["wait_s"]), j.get("reason") or ""])
    how = (["tenant fair share (GPUs held / weight, lowest first)"] if body["fair_share"]
           else []) + [{"priority": "priority (highest first)", "las": "service level (lowest "
                        "first)", "size": "size (smallest first)",
                        "submit": "submit time"}.get(o, o) for o in order]
    console.print(fit_table(
        [Column("pos", justify="right"), Column("id", justify="right"),
         Column("name", Fit.MIDDLE, min_width=10, weight=3), Column("tenant", Fit.MIDDLE),
         Column("gpus", justify="right"), Column("prio", justify="right"),
         Column("level", justify="right"), Column("share", justify="right"),
         Column("waited", justify="right"), Column("reason", Fit.END, min_width=10, weight=2)],
        rows, console.width, title=f"priority: {len(rows)} of {body['waiting']} waiting jobs",
        caption=f"policy {body['policy']} visits jobs by " + ", then ".join(how)))
    if body.get("gated"):
        console.print(f"{body['gated']} more pending job(s) wait on a hold, a dependency or "
                      "an array's limit before they join this queue: grace jobs shows which")


def _gpus(value: float | None) -> str:
    return "∞" if value is None else f"{value:g}"


def shares(window: str = typer.Option("7d", "--window", help=(
               "GPU-hours are counted over this span back from now: 12h, 7d, 4w")),
           as_json: bool = typer.Option(False, "--json", help="print JSON for scripts")) -> None:
    """Each tenant's quota, weight, GPUs held, fair share and recent GPU-hours (like sshare)."""
    from grace.cli.client import _call

    now = time.time()
    hours = (now - parse_when(window, now, "--window")) / 3600.0
    if hours <= 0:
        raise typer.BadParameter("give a span back from now, such as 7d", param_hint="--window")
    body = _call("GET", "/shares", params={"window_h": hours})
    if as_json:
        print(json.dumps(body))
        return
    rows: list[list[Cell]] = [
        [t["tenant"], _gpus(t["guaranteed_gpus"]), _gpus(t["borrow_limit_gpus"]),
         f"{t['weight']:g}", f"{100 * t['norm_share']:.0f}%", f"{t['gpus_held']:g}",
         f"{100 * t['usage_share']:.0f}%", f"{t['fair_share']:.2f}", f"{t['gpu_hours']:,.1f}",
         str(t["running"]), str(t["pending"])] for t in body["tenants"]]
    console.print(fit_table(
        [Column("tenant", Fit.MIDDLE, min_width=10),
         *(Column(h, justify="right") for h in (
             "guar", "borrow", "weight", "share", "held", "used", "fair", "GPU-h", "run",
             "wait"))],
        rows, console.width, title=f"shares of {body['total_gpus']:g} GPUs",
        caption=(f"guar/borrow: GPUs guaranteed / borrowable above it (∞: no limit); share: "
                 f"weight over all weights; held/used: GPUs held now, of the cluster; fair: "
                 f"held / weight, the lowest goes first; GPU-h: over the last "
                 f"{duration(hours * 3600)}")))
