"""``grace twin-demo``: the digital twin on real data, in one command.

The Philly job list (82,247 real jobs) replayed on the Philly-size stress
cluster under FIFO, Slurm-like EASY backfill and Grace's default policy, side by
side, with an HTML report. Without the shared traces beside the checkout it
replays a seeded synthetic trace instead.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from grace.sim.report import write_html
from grace.sim.runner import ReplayInput, load_input

console = Console()
REPO = Path(__file__).resolve().parents[3]
PHILLY = REPO.parent / "shared" / "traces" / "philly-pollux" / "philly.csv"


def _input() -> ReplayInput:
    cluster = REPO / "examples" / "clusters" / "philly-busy.yaml"
    if PHILLY.exists():
        return load_input(cluster, PHILLY, "philly", None)
    from grace.sim.clusters import load_topology
    from grace.sim.traces.synthetic import generate

    topo = load_topology(cluster)
    trace = generate(20_000, seed=1, cluster_gpus=topo.total_gpus, load=0.9)
    return ReplayInput(topo, trace, str(cluster), "synthetic (20,000 jobs, seed 1)")


def twin_demo(
    out: Path = typer.Option(Path("out"), "--out", help="where to write demo.json and demo.html"),
    policies: str = typer.Option("fifo,easy-backfill,grace", "--policies"),
) -> None:
    """Replay a real cluster trace under three policies and compare them (the twin)."""
    from grace.cli.simulate import _run, _table, _write_json
    from grace.sim.estimates import EstimateModel

    inp = _input()
    console.print(f"[bold]Grace twin[/bold]: {inp.trace_path} on {inp.cluster_path} "
                  f"({inp.topo.total_gpus} GPUs, {len(inp.trace.jobs):,} jobs)")
    results = {}
    for name in [p.strip() for p in policies.split(",") if p.strip()]:
        results[name] = _run(inp, name, 0, None, EstimateModel.USER)
        s = results[name].summary
        console.print(f"  {name:14s} avg JCT {s['avg_jct_s'] / 3600:7.2f} h   "
                      f"p99 queue {s['p99_queue_s'] / 3600:7.2f} h   wall {s['wall_s']:.1f} s")
    console.print(_table(results))
    _write_json(out / "demo.json", {n: r.summary for n, r in results.items()})
    write_html(results, out / "demo.html", f"Grace twin: {inp.trace_path}")
    console.print(f"wrote {out / 'demo.json'} and {out / 'demo.html'}")
