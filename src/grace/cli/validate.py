"""``grace validate``: check spec files before anyone submits or simulates with them."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from grace.spec.errors import SpecError
from grace.spec.loader import detect_kind, parse_cluster, parse_jobs, read_yaml

console = Console()
err_console = Console(stderr=True)


def validate(files: list[Path] = typer.Argument(..., help="cluster or job YAML files")) -> None:
    """Validate cluster and job files; exit 1 naming each bad field and its fix."""
    failed = 0
    for path in files:
        try:
            data = read_yaml(path)
            kind = detect_kind(data)
            if kind == "cluster":
                spec = parse_cluster(data, str(path))
                console.print(
                    f"[green]ok[/green] {path}: cluster {spec.name!r}, {spec.total_nodes} nodes, "
                    f"{spec.total_gpus} GPUs"
                )
            else:
                jobs = parse_jobs(data, str(path))
                names = ", ".join(j.name for j in jobs[:5]) + (" ..." if len(jobs) > 5 else "")
                console.print(f"[green]ok[/green] {path}: {len(jobs)} job(s): {names}")
        except SpecError as e:
            failed += 1
            err_console.print(f"[red]invalid[/red] {e}")
    if failed:
        raise typer.Exit(code=1)
