"""Scheduler throughput and latency on the 16,384-GPU H100 fat tree.

Setup: ``examples/clusters/h100-16k.yaml`` and 20,000 jobs drawn from the
Philly job-size mix (share of 1/2/4/8/16/32/64/128-GPU jobs in
``shared/traces/philly-pollux/philly.csv``). The first cycle fills the
cluster and leaves ~10,000 jobs pending. Then, like a live control plane, each
cycle follows one event: a random running job completes, a new job arrives,
and ``decide`` runs with ~10,000 jobs pending.

Prints one JSON object on its last line:
- ``placements_per_s``: gangs placed per second of ``decide`` + ``apply`` time,
  over all cycles (topology-aware placement, backfill policy on);
- ``p99_decision_ms``: 99th percentile of one event-driven cycle's ``decide``;
- ``peak_rss_mb``: the process's peak resident memory.

Run: ``python benchmarks/scheduler.py [--policy grace] [--cycles 3000]``
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import time
from pathlib import Path

from grace.core import SchedulerState, Topology, decide, get_policy
from grace.core.jobs import JobId, PendingJob
from grace.core.placement import WholeRequest
from grace.spec.loader import load_cluster

ROOT = Path(__file__).resolve().parents[1]
#: Philly job sizes (GPUs -> jobs) counted from philly.csv (82,247 jobs).
PHILLY_SIZE_MIX = {1: 76627, 2: 1818, 4: 1870, 8: 1643, 12: 7, 16: 199, 24: 7, 32: 67,
                   64: 6, 128: 3}


def make_job(rng: random.Random, job_id: int, now: float, model: str) -> PendingJob:
    sizes, weights = zip(*PHILLY_SIZE_MIX.items(), strict=True)
    gpus = rng.choices(sizes, weights)[0]
    return PendingJob(
        id=JobId(job_id), tenant=f"vc{rng.randrange(11)}", submit_s=now,
        whole=WholeRequest(gpus), slices={}, models=(model,),
        estimate_s=rng.uniform(600, 86400),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="grace")
    ap.add_argument("--cycles", type=int, default=3000)
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    topo = Topology.from_spec(load_cluster(ROOT / "examples/clusters/h100-16k.yaml"))
    model = topo.nodes[0].gpu_model
    state = SchedulerState(topo, get_policy(args.policy))
    rng = random.Random(args.seed)
    next_id = 0
    while len(state.pending) < args.pending * 2:
        state.submit(make_job(rng, next_id, 0.0, model))
        next_id += 1

    placed = 0
    busy_s = 0.0
    t0 = time.perf_counter()
    result = decide(state, 0.0)
    state.apply(result, 0.0)
    busy_s += time.perf_counter() - t0
    placed += len(result.starts)
    fill_rate = len(result.starts) / busy_s
    # refill the queue to the target depth
    while len(state.pending) < args.pending:
        state.submit(make_job(rng, next_id, 0.0, model))
        next_id += 1

    latencies: list[float] = []
    now = 0.0
    running_ids = list(state.running)
    for _ in range(args.cycles):
        now += 1.0
        victim = running_ids.pop(rng.randrange(len(running_ids)))
        state.finish(victim, now)
        state.submit(make_job(rng, next_id, now, model))
        next_id += 1
        t0 = time.perf_counter()
        result = decide(state, now)
        t1 = time.perf_counter()
        state.apply(result, now)
        t2 = time.perf_counter()
        latencies.append(t1 - t0)
        busy_s += t2 - t0
        placed += len(result.starts)
        running_ids.extend(s.job_id for s in result.starts)

    state.capacity.check_consistency()
    latencies.sort()
    figures = {
        "benchmark": "scheduler",
        "policy": args.policy,
        "cluster_gpus": topo.total_gpus,
        "pending_jobs": len(state.pending),
        "placements": placed,
        "placements_per_s": round(placed / busy_s, 1),
        "initial_fill_placements_per_s": round(fill_rate, 1),
        "p50_decision_ms": round(statistics.median(latencies) * 1e3, 3),
        "p99_decision_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1e3, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
