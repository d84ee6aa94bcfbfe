"""``grace why JOB``: why a job waits, or what bounds it while it runs, and what to do."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape

from grace.cli.client import JsonOpt, _call

console = Console()


def why(job_id: int = typer.Argument(..., help="the job id (from `grace jobs`)"),
        as_json: bool = JsonOpt) -> None:
    """Why a job waits (and what would let it start) or, running, its bottleneck and the fix."""
    out = _call("GET", f"/jobs/{job_id}/why")
    if as_json:
        print(json.dumps(out))
        return
    # the texts may quote a job's own output (``device_ids=[local_rank]``): never markup
    console.print(f"[bold]job {out['job']}[/bold] is {escape(str(out['state']))}: "
                  f"[bold]{escape(str(out['reason']))}[/bold]")
    console.print(f"[bold]what to do[/bold]: {escape(str(out['action']))}")
    figures = out.get("figures") or {}
    if out.get("rule"):
        console.print(f"runbook rule: {escape(str(out['rule']))} (docs/runbooks.md)")
    for key, value in figures.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items()) or "none"
        elif isinstance(value, list):
            value = "; ".join(" ".join(str(v) for v in item.values()) if isinstance(item, dict)
                              else str(item) for item in value) or "none"
        shown = "unknown" if value is None else value  # never Python's None
        console.print(f"  {key.replace('_', ' ')}: {escape(str(shown))}", soft_wrap=False)
