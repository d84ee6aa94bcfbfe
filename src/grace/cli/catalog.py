"""``grace gpus`` and ``grace policies``: what is built in, as tables."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from grace.core.policies import DEFAULT_POLICY, POLICIES
from grace.spec.gpus import BUILTIN_GPUS

console = Console()


def gpus(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """List the built-in GPU catalog."""
    if as_json:
        import json

        print(json.dumps([g.model_dump() for g in BUILTIN_GPUS.values()], indent=2))
        return
    t = Table(title="GPU catalog")
    for col in ("model", "VRAM GB", "BF16 TF", "NVLink GB/s", "W", "ref $/h", "MIG profiles"):
        t.add_column(col)
    for g in BUILTIN_GPUS.values():
        t.add_row(g.name, f"{g.vram_gb:g}", f"{g.bf16_tflops:g}", f"{g.nvlink_gbps:g}",
                  f"{g.board_watts:g}", f"{g.usd_per_hour:.2f}",
                  " ".join(p.name for p in g.mig_profiles) or "-")
    console.print(t)


def policies() -> None:
    """List the queue policies `--policy` accepts."""
    t = Table(title="Queue policies")
    for col in ("name", "order", "backfill", "quotas", "fair share", "preemption"):
        t.add_column(col)
    for p in POLICIES.values():
        name = p.name + (" (default)" if p.name == DEFAULT_POLICY else "")
        t.add_row(name, " > ".join(p.order), _yes(p.backfill), _yes(p.quotas),
                  _yes(p.fair_share), _yes(p.preempts))
    console.print(t)


def _yes(flag: bool) -> str:
    return "yes" if flag else "-"
