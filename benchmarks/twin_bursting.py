"""Hybrid bursting on the Philly job list: cloud spend against average JCT (issue 7).

Four replays of the full Philly job list (82,247 jobs) with the ``grace`` policy:

- ``owned-512``: examples/clusters/philly-busy.yaml, no bursting;
- ``owned-360``: philly-busy-70.yaml (30% fewer owned servers), cloud pools never rented;
- ``burst-policy``: philly-busy-70.yaml with examples/bursting.yaml (rent when the forecast
  queue wait of burstable work passes the threshold, cheapest expected cost);
- ``burst-all``: the same with ``queue_wait_threshold_s: 0`` and no wait budget, the
  Starburst paper's baseline "burst everything that waits".

Each runs in its own process. Prints one line per run, then one JSON object on the last
line with each run's figures and the comparison: cloud cost cut and average JCT change of
the policy against burst-all (Starburst, ATC'24, reports a 54-91% cost cut for at most
5.8% higher average JCT).

Run: ``python benchmarks/twin_bursting.py`` (about 4 x 40 s on a 2-core machine).
``--runs burst-policy --tune '{"wait_budget_per_runtime": 0.5}'`` replays the policy
alone with other settings (the trade-off table in docs/bursting.md).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "philly-pollux" / "philly.csv"
SMALL = ROOT / "examples/clusters/philly-busy-70.yaml"
RUNS = {
    "owned-512": (ROOT / "examples/clusters/philly-busy.yaml", None),
    "owned-360": (SMALL, {"enabled": False}),
    "burst-policy": (SMALL, {}),
    "burst-all": (SMALL, {"queue_wait_threshold_s": 0, "wait_budget_per_runtime": 0}),
}
KEYS = ("jobs", "jobs_completed", "avg_jct_s", "p99_jct_s", "avg_queue_s", "p99_queue_s",
        "gpu_allocation", "cloud_usd", "cloud_usd_by_kind", "cloud_gpu_hours", "burst_jobs",
        "spot_preemptions", "restarts")


def one(name: str, policy: str, tune: dict) -> dict:
    from grace.sim.runner import load_input, replay
    from grace.spec.loader import load_bursting

    cluster, overrides = RUNS[name]
    t0 = time.perf_counter()
    inp = load_input(cluster, TRACE, "philly", None)
    bursting = None
    if overrides is not None:
        update = {**overrides, **tune} if name == "burst-policy" else overrides
        base = load_bursting(ROOT / "examples/bursting.yaml")
        bursting = type(base).model_validate(base.model_dump() | update)
    result = replay(inp, policy, bursting=bursting)
    out = {k: result.summary.get(k, 0) for k in KEYS}
    out["cluster"] = str(cluster.relative_to(ROOT))
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="grace")
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--tune", default="{}",
                    help='JSON of bursting fields for burst-policy, e.g. {"wait_budget_per_runtime": 0}')
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.policy, json.loads(args.tune))))
        return
    results: dict[str, dict] = {}
    for name in args.runs.split(","):
        proc = subprocess.run([sys.executable, __file__, "--one", name, "--policy", args.policy,
                               "--tune", args.tune],
                              capture_output=True, text=True, check=True)
        r = results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{name:13s} wall {r['wall_s']:6.1f} s  avg JCT {r['avg_jct_s'] / 3600:7.2f} h  "
              f"p99 queue {r['p99_queue_s'] / 3600:7.2f} h  cloud ${r['cloud_usd']:10,.0f}  "
              f"burst jobs {r['burst_jobs']:6d}", flush=True)
    out: dict = {"benchmark": "twin_bursting", "trace": str(TRACE), "policy": args.policy,
                 "tune": json.loads(args.tune), "runs": results}
    if "burst-policy" in results and "burst-all" in results:
        p, a = results["burst-policy"], results["burst-all"]
        out["vs_burst_all"] = {
            "cloud_cost_cut": 1 - p["cloud_usd"] / a["cloud_usd"] if a["cloud_usd"] else 0.0,
            "avg_jct_increase": p["avg_jct_s"] / a["avg_jct_s"] - 1 if a["avg_jct_s"] else 0.0,
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
