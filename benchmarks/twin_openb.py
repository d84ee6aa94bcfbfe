"""The FGD packing experiment on openb, five seeds, Grace's packing beside best fit.

``grace simulate --format openb --no-departures`` for seeds 42..46 (``sim.packing``):
openb_pod_list_default sampled with replacement on the 1,213 GPU nodes of
openb_node_list_gpu_node, pods never leaving, CPU-only pods kept (as FGD keeps
them) unless ``--drop-cpu-only``. The figure is the allocated GPU share when the
arrived GPU requests reach 100% of the cluster's GPUs, for ``grace``
(fragmentation-aware packing, ``core.fragmentation``) and ``easy-backfill`` (best
fit), against the FGD paper's 95.23% (FGD) and 92.86% (best fit), means of 10 seeds
(shared/traces/alibaba-gpu-v2023-openb/README.md).

Prints one line per run, the means, wall time and peak RSS, then one JSON object on
the last line. Run: ``python benchmarks/twin_openb.py [--drop-cpu-only] [--seeds 42,43]``;
about 70 s on one core.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023-openb" / "csv"
NODES = OPENB / "openb_node_list_gpu_node.csv"
PODS = OPENB / "openb_pod_list_default.csv"
POLICIES = {"grace": "grace", "bestfit": "easy-backfill"}
FGD_PUBLISHED, BESTFIT_PUBLISHED = 95.23, 92.86


def main() -> None:
    from grace.sim.packing import load_packing_input, packing_experiment

    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="42,43,44,45,46")
    ap.add_argument("--drop-cpu-only", action="store_true",
                    help="leave out the pods that ask for no GPU (the experiment's old setting)")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.perf_counter()
    inp = load_packing_input(NODES, PODS, args.drop_cpu_only)
    out: dict[str, object] = {"benchmark": "twin_openb", "trace": str(PODS), "cluster": str(NODES),
                              "cluster_gpus": inp.topo.total_gpus, "drop_cpu_only": args.drop_cpu_only,
                              "seeds": seeds, "pods_skipped": dict(inp.trace.report.skipped)}
    cpu_only: dict[int, int] = {}
    for key, policy in POLICIES.items():
        shares = []
        for seed in seeds:
            r = packing_experiment(inp, policy, seed)
            share = round(100 * r["allocated_gpu_share"], 2)
            shares.append(share)
            cpu_only[seed] = r["cpu_only_pods"]
            print(f"{key:8s} seed {seed}  {share:6.2f}%  pods {r['pods_arrived']:5d} "
                  f"(cpu-only {r['cpu_only_pods']:4d})  failed {r['pods_failed']:5d}  "
                  f"{r['wall_s']:5.1f} s", flush=True)
        mean = round(sum(shares) / len(shares), 3)
        print(f"{key:8s} mean {mean:.3f}%", flush=True)
        out[f"{key}_per_seed"] = shares
        out[f"{key}_mean"] = mean
    out["fgd_published"] = FGD_PUBLISHED
    out["bestfit_published"] = BESTFIT_PUBLISHED
    out["cpu_only_pods"] = cpu_only
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(f"wall {out['wall_s']} s  peak RSS {out['peak_rss_mb']} MB")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
