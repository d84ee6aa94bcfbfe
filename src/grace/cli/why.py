"""``grace why JOB``: why a job waits, or what bounds it while it runs, and what to do."""

from __future__ import annotations

import json

import typer
from rich.console import Console

from grace.cli.client import JsonOpt, _call

console = Console()


def why(job_id: int = typer.Argument(..., help="the job id (from `grace jobs`)"),
        as_json: bool = JsonOpt) -> None:
    """Why a job waits (and what would let it start) or, running, its bottleneck and the fix."""
    out = _call("GET", f"/jobs/{job_id}/why")
    if as_json:
        print(json.dumps(out))
        return
    console.print(f"[bold]job {out['job']}[/bold] is {out['state']}: [bold]{out['reason']}[/bold]")
    console.print(f"[bold]what to do[/bold]: {out['action']}")
    figures = out.get("figures") or {}
    if out.get("rule"):
        console.print(f"runbook rule: {out['rule']} (docs/runbooks.md)")
    for key, value in figures.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items()) or "none"
        elif isinstance(value, list):
            value = "; ".join(" ".join(str(v) for v in item.values()) if isinstance(item, dict)
                              else str(item) for item in value) or "none"
        console.print(f"  {key.replace('_', ' ')}: {value}", soft_wrap=False)
