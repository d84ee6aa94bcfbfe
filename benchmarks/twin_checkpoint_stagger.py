"""Checkpoint staggering on the 16,384-GPU cluster: goodput with and without it.

A running-set snapshot of examples/clusters/h100-16k.yaml full of real jobs: Philly's
jobs of 8 GPUs or more (``shared/traces/philly-pollux/philly.csv``, the trace loader
as ``benchmarks/twin_philly.py`` uses it), drawn without replacement with probability
proportional to their duration (what a random instant finds running) until the
16,384 GPUs are taken, each started at a time drawn uniformly over the week before
the snapshot. Per job (docs/checkpoint-staggering.md has the sources):

- checkpoint size: ``core.checkpoint_stagger.checkpoint_gb`` (the per-GPU default the
  twin's data path also uses: a 7B model on 8 GPUs at 14 bytes per parameter);
- write rate alone: ``--gpu-write-gbps`` per GPU (2 GB/s: 16 GB/s per 8-GPU node);
- interval: Daly's for its GPUs (Llama 3's per-GPU MTBF, delta = its write alone),
  rounded to a harmonic one (``harmonic_interval``); restart 600 s (``FailureModel``).

For each file system (``--fs``, GB/s: below the synchronized burst, the Llama 3
storage's sustained 2,000 and two a few times the mean demand, 100 and 40; above it,
an ample 40,000) and each phasing:

- START: an interval after the job's own start (phase = start mod interval);
- SYNCHRONIZED: every job at phase 0 (checkpoints on the hour, say);
- STAGGERED: ``core.checkpoint_stagger.phase_for`` at each start, in start order, with
  the jobs started before it fixed (as the twin and the live launch call it);

``sim.checkpoint_bursts.burst_write_s`` gives each job's mean blocked seconds per
checkpoint over one hyperperiod, and ETTR (GPU-weighted, Daly's closed form with that
delta, failures and restarts included) follows. The write wait is the blocked time
beyond the write alone, in GPU-hours per day.

The same snapshot is then replayed through the twin's engine (``SimConfig.data_path``
with ``checkpoint_phases``, the cluster given a storage tier of ``--engine-fs`` GB/s;
the engine's write rate alone is the job's NICs' (400 Gb/s per GPU), so its
synchronized burst is 819 TB/s and "ample" there is 1,000 TB/s,
Llama 3's failure model, each job arriving at its start time, ``--days`` of clock):
the engine's checkpoint GPU-hours, their write wait and the GPU-hours lost to failures
and checkpoints, per phasing.

Prints tables, then one JSON object on its last line.
Run: ``python benchmarks/twin_checkpoint_stagger.py [--fs 2000,100,40,40000] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from grace.core.checkpoint import daly_interval, job_mtbf_s
from grace.core.checkpoint_stagger import (
    CheckpointLoad,
    CheckpointPhasing,
    checkpoint_gb,
    harmonic_interval,
    peak_demand,
    phase_for,
)
from grace.sim.checkpoint_bursts import burst_write_s, ettr_with_bursts
from grace.sim.failures import FailureModel
from grace.sim.runner import load_input

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "clusters" / "h100-16k.yaml"
TRACE = ROOT.parent / "shared" / "traces" / "philly-pollux" / "philly.csv"
WEEK_S = 7 * 86400.0


def snapshot(seed: int, min_gpus: int) -> tuple[int, list[tuple[int, int, float]]]:
    """(cluster GPUs, [(job, gpus, start_s)]) of a full cluster, in start order."""
    inp = load_input(CLUSTER, TRACE, "philly", None)
    capacity = sum(n.gpus for n in inp.topo.nodes)
    pool = [j for j in inp.trace.jobs if j.gpus >= min_gpus and j.duration_s > 0]
    rng = random.Random(seed)
    keys = sorted(((rng.random() ** (1.0 / j.duration_s), i) for i, j in enumerate(pool)),
                  reverse=True)  # weighted sampling without replacement (Efraimidis-Spirakis)
    taken: list[tuple[int, int, float]] = []
    used = 0
    for _, i in keys:
        g = pool[i].gpus
        if used + g > capacity:
            continue
        used += g
        taken.append((len(taken) + 1, g, rng.uniform(0.0, WEEK_S)))
        if used == capacity:
            break
    taken.sort(key=lambda t: (t[2], t[0]))
    return capacity, taken


def engine_run(jobs: list[tuple[int, int, float]], fs: float, phasing: CheckpointPhasing,
               days: float) -> dict:
    """The same snapshot through the twin's engine (``SimConfig.data_path``, Llama 3's
    failures): each job arrives at its start time and runs past the horizon."""
    import yaml

    from grace.core.policies import get_policy
    from grace.core.topology import Topology
    from grace.sim.engine import SimConfig, Simulation
    from grace.sim.estimates import EstimateModel
    from grace.sim.traces.model import TraceJob
    from grace.spec.loader import parse_cluster

    body = yaml.safe_load(CLUSTER.read_text())
    body["storage"] = {"read_gbps": 1e6, "write_gbps": fs}
    topo = Topology.from_spec(parse_cluster(body))
    trace = [TraceJob(job_id=str(j), submit_s=start, duration_s=1e9, gpus=g)
             for j, g, start in jobs]
    config = SimConfig(policy=get_policy("grace"), estimates=EstimateModel.NONE,
                       failures=FailureModel(), data_path=True, checkpoint_phases=phasing,
                       until_s=days * 86400.0)
    t0 = time.perf_counter()
    result = Simulation(topo, trace, config).run()
    dp = result.summary["data_path"]
    return {"fs_write_gbps": fs, "phasing": str(phasing), "wall_s": round(time.perf_counter() - t0, 1),
            "checkpoint_write_gpu_h": dp["checkpoint_write_gpu_h"],
            "checkpoint_write_wait_gpu_h": dp["checkpoint_write_wait_gpu_h"],
            "lost_gpu_hours": result.summary.get("lost_gpu_hours")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs", default="2000,100,40,40000", help="file-system write GB/s to try")
    ap.add_argument("--gpu-write-gbps", type=float, default=2.0)
    ap.add_argument("--min-gpus", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine", default=None, metavar="FS,PHASING",
                    help="instead: one replay of the snapshot through the twin's engine")
    ap.add_argument("--days", type=float, default=8.0, help="the engine replay's horizon")
    ap.add_argument("--engine-fs", default="2000,1000000",
                    help="file systems (GB/s) to replay through the engine too ('' for none)")
    args = ap.parse_args()
    if args.engine:
        fs_s, phasing_s = args.engine.split(",")
        print(json.dumps(engine_run(snapshot(args.seed, args.min_gpus)[1], float(fs_s),
                                    CheckpointPhasing(phasing_s), args.days)))
        return
    restart_s = FailureModel().restart_s
    capacity, jobs = snapshot(args.seed, args.min_gpus)
    gpus = {j: float(g) for j, g, _ in jobs}
    mtbf = {j: job_mtbf_s(g) for j, g, _ in jobs}
    loads = []
    for j, g, _ in jobs:
        rate = g * args.gpu_write_gbps
        write_s = checkpoint_gb(g) / rate
        loads.append(CheckpointLoad(j, harmonic_interval(daly_interval(write_s, mtbf[j])),
                                    write_s, rate))
    by_id = {ld.job_id: ld for ld in loads}
    burst = sum(ld.write_gbps for ld in loads)
    mean = sum(ld.size_gb / ld.interval_s for ld in loads)
    print(f"{len(jobs)} jobs on {sum(gpus.values()):.0f} of {capacity} GPUs; synchronized burst "
          f"{burst:,.0f} GB/s, mean write demand {mean:,.1f} GB/s", flush=True)
    rows = []
    for fs in (float(x) for x in args.fs.split(",") if x):
        for phasing in CheckpointPhasing:
            t0 = time.perf_counter()
            phases: dict[int, float] = {}
            running: dict[int, tuple[CheckpointLoad, float]] = {}
            for j, _, start in jobs:
                phases[j] = phase_for(phasing, by_id[j], start, running, fs)
                running[j] = (by_id[j], phases[j])
            policy_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            blocked = burst_write_s(loads, phases, fs)
            model_s = time.perf_counter() - t0
            ettr = ettr_with_bursts(loads, blocked, gpus, mtbf, restart_s)
            wait = sum(gpus[ld.job_id] * (blocked[ld.job_id] - ld.write_s) * 86400.0
                       / ld.interval_s for ld in loads) / 3600.0
            row = {"fs_write_gbps": fs, "phasing": str(phasing), "ettr": round(ettr, 6),
                   "mean_blocked_s": round(sum(gpus[j] * b for j, b in blocked.items())
                                           / sum(gpus.values()), 3),
                   "write_wait_gpu_h_per_day": round(wait, 2),
                   "peak_demand_gbps": round(peak_demand(loads, phases), 1),
                   "policy_s": round(policy_s, 2), "model_s": round(model_s, 2)}
            rows.append(row)
            print(f"fs {fs:8,.0f} GB/s  {phasing:12s}  ETTR {ettr:.5f}  blocked "
                  f"{row['mean_blocked_s']:8.2f} s  wait {wait:9.1f} GPU-h/day  "
                  f"(policy {policy_s:.1f} s, model {model_s:.1f} s)", flush=True)
    gains = {}
    for fs in {r["fs_write_gbps"] for r in rows}:
        by = {r["phasing"]: r for r in rows if r["fs_write_gbps"] == fs}
        st = by["staggered"]
        gains[f"{fs:g}"] = {
            "below_burst": fs < burst,
            "ettr_gain_vs_synchronized": round(st["ettr"] - by["synchronized"]["ettr"], 6),
            "ettr_gain_vs_start": round(st["ettr"] - by["start"]["ettr"], 6),
            "wait_removed_vs_synchronized_gpu_h_per_day": round(
                by["synchronized"]["write_wait_gpu_h_per_day"] - st["write_wait_gpu_h_per_day"], 2),
            "wait_removed_vs_start_gpu_h_per_day": round(
                by["start"]["write_wait_gpu_h_per_day"] - st["write_wait_gpu_h_per_day"], 2)}
    engine = []
    for fs in (float(x) for x in args.engine_fs.split(",") if x):
        for phasing in CheckpointPhasing:
            r = engine_run(jobs, fs, phasing, args.days)
            engine.append(r)
            print(f"engine fs {fs:8,.0f} GB/s  {phasing:12s}  checkpoint writes "
                  f"{r['checkpoint_write_gpu_h']:8.1f} GPU-h  wait "
                  f"{r['checkpoint_write_wait_gpu_h']:8.1f} GPU-h  lost {r['lost_gpu_hours']:8.1f}"
                  f" GPU-h  ({r['wall_s']:.0f} s)", flush=True)
    print(json.dumps({"benchmark": "twin_checkpoint_stagger", "cluster": str(CLUSTER.name),
                      "trace": f"philly (jobs >= {args.min_gpus} GPUs, duration-weighted snapshot)",
                      "jobs": len(jobs), "gpus": sum(gpus.values()), "seed": args.seed,
                      "gpu_write_gbps": args.gpu_write_gbps,
                      "synchronized_burst_gbps": round(burst, 1),
                      "mean_write_demand_gbps": round(mean, 2),
                      "runs": rows, "gains": gains, "engine_days": args.days,
                      "engine": engine}))


if __name__ == "__main__":
    main()
