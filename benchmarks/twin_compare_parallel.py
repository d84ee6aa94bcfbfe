"""``grace compare`` in parallel against the same replays one after another, in one run.

Loads a trace once (the Philly job list by default, optionally its first ``--jobs``),
then replays it under ``--policies`` twice: one after another in this process
(``workers=1``) and in parallel worker processes (``sim.parallel.replay_many``, one
per policy, at most one per core), timing both on the same machine in the same run
(this machine is shared: only the ratio is comparable). Checks that both give the
same results, every figure but the wall time.

Prints one line per policy, then one JSON object on the last line: ``sequential_s``,
``parallel_s``, ``ratio`` (parallel / sequential; issue 20's target: <= 0.6 with 4
policies on 2 cores), ``workers``, ``cores``, ``identical`` (true when every replay's
summary, series and per-job times match) and per-policy ``wall_s``.

Run: ``python benchmarks/twin_compare_parallel.py [--cluster examples/clusters/philly-busy.yaml]
[--policies fifo,easy-backfill,las,grace] [--jobs N] [--workers N]``
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from grace.sim.metrics import SimResult
from grace.sim.parallel import ReplayRun, available_cores, default_workers, replay_many
from grace.sim.runner import ReplayInput, load_input
from grace.sim.traces.model import Trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "philly-pollux" / "philly.csv"
TIMING = ("wall_s", "events_per_s")


def comparable(r: SimResult) -> str:
    """Everything a replay reports except how long it took."""
    summary = {k: v for k, v in r.summary.items() if k not in TIMING}
    return json.dumps([summary, r.series, r.jct_s.tolist(), r.queue_s.tolist(), r.tenants],
                      sort_keys=True, default=str)


def first_jobs(inp: ReplayInput, n: int | None) -> ReplayInput:
    if n is None:
        return inp
    jobs = sorted(inp.trace.jobs, key=lambda j: j.submit_s)[:n]
    inp.trace = Trace(jobs, inp.trace.report)
    return inp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", default=str(ROOT / "examples/clusters/philly-busy.yaml"))
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--policies", default="fifo,easy-backfill,las,grace")
    ap.add_argument("--jobs", type=int, default=None, help="replay only the first N jobs")
    ap.add_argument("--workers", type=int, default=None,
                    help="parallel workers (default: one per policy, at most one per core)")
    args = ap.parse_args()
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    inp = first_jobs(load_input(Path(args.cluster), Path(args.trace), "philly", None), args.jobs)
    runs = [ReplayRun(n, n) for n in names]
    workers = args.workers or default_workers(len(runs))

    t0 = time.perf_counter()
    parallel = replay_many(inp, runs, workers, keep_jobs=False)  # as grace compare
    parallel_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sequential = replay_many(inp, runs, workers=1, keep_jobs=False)
    sequential_s = time.perf_counter() - t0

    identical = [comparable(a) == comparable(b) for a, b in zip(parallel, sequential, strict=True)]
    for name, seq, par in zip(names, sequential, parallel, strict=True):
        print(f"{name:14s} one by one {seq.summary['wall_s']:6.1f} s  in parallel "
              f"{par.summary['wall_s']:6.1f} s  avg JCT {seq.summary['avg_jct_s'] / 3600:7.2f} h",
              flush=True)
    print(json.dumps({
        "benchmark": "twin_compare_parallel", "cluster": args.cluster, "trace": args.trace,
        "jobs": len(inp.trace.jobs), "policies": names, "workers": workers,
        "cores": available_cores(), "sequential_s": round(sequential_s, 2),
        "parallel_s": round(parallel_s, 2), "ratio": round(parallel_s / sequential_s, 3),
        "identical": all(identical),
        "wall_s": {n: {"sequential": round(s.summary["wall_s"], 2),
                       "parallel": round(p.summary["wall_s"], 2)}
                   for n, s, p in zip(names, sequential, parallel, strict=True)}}))


if __name__ == "__main__":
    main()
