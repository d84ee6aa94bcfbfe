"""What the data-path model costs a replay, and what it reports: philly-busy with it off and on.

Replays the Philly job list (``shared/traces/philly-pollux/philly.csv``, loaded as
``benchmarks/twin_philly.py`` loads it, users' time limits) with one policy, once with
the data-path model off (today's stretch factor) and once on (``SimConfig.data_path``:
ring all-reduce over the slowest tier, contention for leaf uplinks and the file system,
running jobs re-rated as loads change), each in its own process. The cluster is
philly-busy by default; ``--cluster`` takes another (e.g. philly-busy-4to1.yaml, whose
uplinks are 4:1 oversubscribed, so crossing gangs contend). ``--jobs N`` replays only
the first N jobs for a quicker slice.

Prints one line per run, then one JSON object on the last line: per run ``wall_s``,
``events``, ``avg_jct_s``, ``p99_queue_s``, ``gpu_allocation`` and (on) the summary's
``data_path`` section; and ``cost_ratio`` (wall with the model on / off).

Run: ``python benchmarks/twin_data_path.py [--cluster ...] [--policy grace] [--jobs N]``.
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
TRACE = ROOT.parent / "shared" / "traces" / "philly-pollux" / "philly.csv"
KEYS = ("jobs", "jobs_completed", "events", "avg_jct_s", "p99_queue_s", "gpu_allocation",
        "multi_leaf_share")


def one(cluster: Path, policy: str, data_path: bool, jobs: int | None) -> dict:
    from grace.core.policies import get_policy
    from grace.sim.engine import SimConfig, Simulation
    from grace.sim.estimates import EstimateModel
    from grace.sim.runner import load_input

    inp = load_input(cluster, TRACE, "philly", None)
    trace_jobs = inp.trace.jobs[:jobs] if jobs else inp.trace.jobs
    t0 = time.perf_counter()
    config = SimConfig(policy=get_policy(policy), estimates=EstimateModel.USER,
                       data_path=data_path)
    sim = Simulation(inp.topo, trace_jobs, config)
    sim.metrics.set_horizon(max(max((j.submit_s for j in trace_jobs), default=0.0), 1.0))
    result = sim.run()
    out = {k: result.summary[k] for k in KEYS}
    out["wall_s"] = round(time.perf_counter() - t0, 2)  # the replay alone, not the load
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if data_path:
        out["data_path"] = result.summary["data_path"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", default=str(ROOT / "examples/clusters/philly-busy.yaml"))
    ap.add_argument("--policy", default="grace")
    ap.add_argument("--jobs", type=int, default=None, help="only the first N jobs")
    ap.add_argument("--one", choices=("off", "on"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(Path(args.cluster), args.policy, args.one == "on", args.jobs)))
        return
    runs = {}
    for mode in ("off", "on"):
        cmd = [sys.executable, __file__, "--cluster", args.cluster, "--policy", args.policy,
               "--one", mode] + (["--jobs", str(args.jobs)] if args.jobs else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        r = runs[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"data path {mode:3s}  wall {r['wall_s']:6.1f} s  avg JCT "
              f"{r['avg_jct_s'] / 3600:7.2f} h  p99 queue {r['p99_queue_s'] / 3600:7.2f} h  "
              f"peak {r['peak_rss_mb']:5.0f} MB", flush=True)
    ratio = runs["on"]["wall_s"] / runs["off"]["wall_s"] if runs["off"]["wall_s"] else None
    print(json.dumps({"benchmark": "twin_data_path", "cluster": args.cluster,
                      "trace": str(TRACE), "policy": args.policy, "jobs": args.jobs or "all",
                      "cost_ratio": ratio, "runs": runs}))


if __name__ == "__main__":
    main()
