"""``grace runbooks`` (the rules, as a table, Prometheus rules or Markdown) and ``grace alerts``.

The runbook is data (``grace/observe/data/runbooks.yaml``, or ``--file``); this
module only shows it: ``grace runbooks`` reads it locally, needing no server,
while ``grace alerts`` asks the running control plane (``GET /alerts``), whose
engine has watched the metrics long enough to know what has held for ``for``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grace.cli.client import JsonOpt, _call
from grace.spec.errors import SpecError

console = Console()
err = Console(stderr=True)

_SHIPPED_SOURCE = "src/grace/observe/data/runbooks.yaml"


def runbooks(
    file: Path | None = typer.Option(
        None, "--file", help="a runbook of your own (kind: runbook); default: the shipped one"),
    prometheus: bool = typer.Option(
        False, "--prometheus", help="print Prometheus alerting rules (grace runbooks --prometheus "
                                    "> rules.yml; promtool check rules accepts them)"),
    markdown: bool = typer.Option(
        False, "--markdown", help="print the runbook page (what docs/runbooks.md holds)"),
) -> None:
    """Show the runbook: each metric threshold, how long it must hold and the operator's action."""
    from grace.observe.promql import rules_yaml
    from grace.observe.runbook_docs import render_markdown
    from grace.observe.runbook_spec import load_runbook

    if prometheus and markdown:
        err.print("[red]invalid[/red] give --prometheus or --markdown, not both")
        raise typer.Exit(code=2)
    try:
        book = load_runbook(file)
    except SpecError as e:
        err.print(f"[red]invalid[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(code=2) from e
    if prometheus:
        source = str(file) if file is not None else f"the shipped runbook ({_SHIPPED_SOURCE})"
        sys.stdout.write(rules_yaml(book, source))
    elif markdown:
        sys.stdout.write(render_markdown(book, str(file) if file is not None else _SHIPPED_SOURCE))
    else:
        console.print(runbook_table(book))


def runbook_table(book: Any) -> Table:
    """Rule, condition, hold time and action; condition and action wrap to fit 80 columns."""
    from grace.observe.promql import duration, expr

    t = Table(title=f"runbook {book.name!r} ({len(book.rules)} rules)", show_lines=True,
              caption="grace runbooks --markdown: the full text with reasons")
    t.add_column("rule", no_wrap=True)
    t.add_column("when", overflow="fold", ratio=4)
    t.add_column("for", no_wrap=True)
    t.add_column("action", overflow="fold", ratio=5)
    for rule in book.rules:
        t.add_row(f"{rule.name}\n[dim]{rule.severity.value}[/dim]", escape(expr(rule)),
                  duration(rule.for_s), escape(rule.action))
    return t


def alerts(as_json: bool = JsonOpt) -> None:
    """Alerts the control plane's runbook raises now, firing first (exit 0 either way)."""
    rows = _call("GET", "/alerts")
    if as_json:
        print(json.dumps(rows))
        return
    if not rows:
        console.print("no alerts: no runbook rule holds now (grace runbooks lists them)")
        return
    console.print(alerts_table(rows, time.time()))


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def alerts_table(rows: list[dict[str, Any]], now: float) -> Table:
    """One row per alert: its state and age, its rule, what holds and what to do."""
    firing = sum(1 for a in rows if a.get("state") == "firing")
    t = Table(title=f"alerts: {firing} firing, {len(rows) - firing} pending", show_lines=True)
    t.add_column("state", no_wrap=True)
    t.add_column("rule", overflow="fold")
    t.add_column("what holds, and what to do", ratio=1)
    styles = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
    for a in rows:
        severity = str(a.get("severity", ""))
        state = f"[{styles.get(severity, 'white')}]{escape(str(a.get('state', '')))}[/]"
        age = _age(now - float(a.get("active_since") or now))
        t.add_row(f"{state}\n{escape(severity)}\n{age}", escape(str(a.get("rule", ""))),
                  f"{escape(str(a.get('summary', '')))}\n[bold]->[/bold] "
                  f"{escape(str(a.get('action', '')))}")
    return t
