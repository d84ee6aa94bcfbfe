"""Placement that counts spine contention against today's, in the twin with the data path on.

Replays the Philly job list (``shared/traces/philly-pollux/philly.csv``, loaded as
``benchmarks/twin_philly.py`` loads it; the scheduler is told users' time limits)
on philly-busy (non-blocking, 1:1) and on philly-busy-4to1 (the same cluster with
4:1 oversubscribed leaf uplinks), with the twin's data-path model on
(``SimConfig.data_path``: jobs crossing a leaf's uplinks share its bandwidth), once
with ``PlacementMode.TOPOLOGY`` (today's placement: fewest leaves, fullest first)
once with ``PlacementMode.CONTENTION`` (``core.spine_load``) and once with
``PlacementMode.HEADROOM`` (the default).
Each run is its own process. ``--jobs N`` replays only the first N jobs of the
trace (in submission order), for a quicker slice; the JSON says which.

Prints one line per run, then one JSON object on the last line: per policy and
fabric, each mode's ``avg_jct_s``, ``p99_queue_s``, ``multi_leaf_share`` (gangs on
more leaves than they need), ``crossing_jobs`` (gangs that spanned leaves) and the
data-path summary, and ``<mode>_over_topology_avg_jct`` (below 1: that mode
lowered average JCT). Modes: ``topology`` (before issue 17), ``contention``,
``headroom`` (the default: contention, and under the grace policy's leaf locality a
gang that one leaf could hold crosses leaves now when every uplink it crosses
stays within capacity, rather than wait for a leaf).

Run: ``python benchmarks/twin_placement_contention.py [--policies grace,easy-backfill]
[--jobs N]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "philly-pollux" / "philly.csv"
FABRICS = {"1:1": ROOT / "examples/clusters/philly-busy.yaml",
           "4:1": ROOT / "examples/clusters/philly-busy-4to1.yaml"}
KEYS = ("jobs", "jobs_completed", "avg_jct_s", "p99_queue_s", "avg_queue_s",
        "gpu_allocation", "multi_leaf_share")


def one(cluster: Path, policy: str, mode: str, jobs: int | None) -> dict:
    from grace.core.placement import PlacementMode
    from grace.core.policies import get_policy
    from grace.sim.engine import SimConfig, Simulation
    from grace.sim.estimates import EstimateModel
    from grace.sim.runner import load_input

    t0 = time.perf_counter()
    inp = load_input(cluster, TRACE, "philly", None)
    trace_jobs = inp.trace.jobs[:jobs] if jobs else inp.trace.jobs
    config = SimConfig(
        policy=dataclasses.replace(get_policy(policy), placement=PlacementMode(mode)),
        estimates=EstimateModel.USER, enforce_limits=True, data_path=True)
    sim = Simulation(inp.topo, trace_jobs, config)
    sim.metrics.set_horizon(max(max((j.submit_s for j in trace_jobs), default=0.0), 1.0))
    result = sim.run()
    crossing = sum(1 for job in sim.jobs.values() if job.leaves > 1)  # its last attempt
    out = {k: result.summary[k] for k in KEYS}
    out["crossing_jobs"] = crossing
    out["data_path"] = result.summary.get("data_path")
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="grace,easy-backfill")
    ap.add_argument("--jobs", type=int, default=None,
                    help="replay only the first N jobs of the trace (default: all)")
    ap.add_argument("--modes", default="topology,contention,headroom",
                    help="PlacementMode values to run; topology (today's) is the baseline")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # cluster policy mode
    args = ap.parse_args()
    if args.one:
        cluster, policy, mode = args.one
        print(json.dumps(one(Path(cluster), policy, mode, args.jobs)))
        return
    results: dict[str, dict[str, dict]] = {}
    for policy in args.policies.split(","):
        for fabric, cluster in FABRICS.items():
            runs = {}
            modes = args.modes.split(",")
            for mode in modes:
                cmd = [sys.executable, __file__, "--one", str(cluster), policy, mode]
                if args.jobs:
                    cmd += ["--jobs", str(args.jobs)]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
                r = runs[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
                print(f"{policy:14s} {fabric} {mode:10s} avg JCT {r['avg_jct_s'] / 3600:7.3f} h  "
                      f"p99 queue {r['p99_queue_s'] / 3600:7.2f} h  crossing {r['crossing_jobs']:5d}"
                      f"  wall {r['wall_s']:6.1f} s", flush=True)
            base = runs.get("topology", {}).get("avg_jct_s")
            ratios = {f"{m}_over_topology_avg_jct": runs[m]["avg_jct_s"] / base
                      for m in modes if m != "topology" and base}
            results.setdefault(policy, {})[fabric] = runs | ratios
    print(json.dumps({"benchmark": "twin_placement_contention", "trace": str(TRACE),
                      "jobs": args.jobs or "all", "estimates": "user", "data_path": True,
                      "results": results}))


if __name__ == "__main__":
    main()
