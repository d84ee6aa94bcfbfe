"""A million synthetic jobs on the 16,384-GPU cluster: how long the twin takes, how much memory.

Generates ``--jobs`` jobs of the four workload classes (``sim.traces.synthetic``:
experiments, sweeps, fine-tunes, full runs; seeded) offered at ``--load`` of
``examples/clusters/h100-16k.yaml``, then replays them with ``--policy`` (users'
time limits as the estimates, as every twin figure). The replay runs in a child
process so its peak memory is its own.

Prints one JSON object on its last line: ``jobs``, ``generate_s``, ``replay_s``,
``wall_s`` (both), ``events``, ``events_per_s``, ``peak_rss_mb`` and the replay's
headline figures. Issue 20's target: 1,000,000 jobs in <= 5 minutes and <= 4 GiB.

Run: ``python benchmarks/twin_million.py [--jobs 1000000] [--policy grace] [--load 0.8]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "clusters" / "h100-16k.yaml"
KEYS = ("jobs_completed", "jobs_timed_out", "avg_jct_s", "avg_queue_s", "p99_queue_s",
        "gpu_allocation", "events")


def one(jobs: int, policy: str, load: float, seed: int) -> dict:
    from grace.sim.clusters import load_topology
    from grace.sim.runner import ReplayInput, replay
    from grace.sim.traces.synthetic import generate

    topo = load_topology(CLUSTER)
    t0 = time.perf_counter()
    trace = generate(jobs, seed, topo.total_gpus, load)
    generated = time.perf_counter() - t0
    inp = ReplayInput(topo, trace, str(CLUSTER), trace.report.source)
    t1 = time.perf_counter()
    result = replay(inp, policy, seed)
    replayed = time.perf_counter() - t1
    out = {k: result.summary[k] for k in KEYS}
    out.update(jobs=len(trace.jobs), generate_s=round(generated, 1), replay_s=round(replayed, 1),
               wall_s=round(generated + replayed, 1),
               events_per_s=round(result.summary["events"] / replayed),
               peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--policy", default="grace")
    ap.add_argument("--load", type=float, default=0.8, help="offered GPU load (0.8: 80%%)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.jobs, args.policy, args.load, args.seed)))
        return
    proc = subprocess.run([sys.executable, __file__, "--one", "--jobs", str(args.jobs),
                           "--policy", args.policy, "--load", str(args.load),
                           "--seed", str(args.seed)], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(proc.stderr)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{r['jobs']:,} jobs on {CLUSTER.name}: generated in {r['generate_s']} s, replayed "
          f"in {r['replay_s']} s ({r['events_per_s']:,} events/s), peak {r['peak_rss_mb']} MB")
    print(json.dumps({"benchmark": "twin_million", "cluster": str(CLUSTER),
                      "policy": args.policy, "load": args.load, "seed": args.seed, **r}))


if __name__ == "__main__":
    main()
