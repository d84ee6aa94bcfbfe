"""``grace whatif``: one long job of N GPUs for D days, under failures, per checkpoint interval.

For each checkpoint interval (fixed ones, and Grace's automatic one from Daly's
formula) the twin runs the job on a cluster of exactly its size, with or
without hot spare nodes, for D days of virtual time with Llama-3-like failure
rates, several seeds each, and measures ETTR: the share of wall time that
advanced training. Beside it stands the closed-form ETTR of
``core.checkpoint.expected_ettr``, which assumes a failed node is replaced at
once (hot spares): the twin with spares should agree with it within a point;
without spares the job also waits for repairs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from grace.core.checkpoint import LLAMA3_GPU_MTBF_H, choose_interval, expected_ettr, job_mtbf_s
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.sim.engine import SimConfig, Simulation
from grace.sim.estimates import EstimateModel
from grace.sim.failures import FailureModel
from grace.sim.traces.model import TraceJob
from grace.spec.loader import parse_cluster


@dataclass(frozen=True)
class WhatIfInput:
    gpus: int
    days: float
    intervals_min: tuple[float | None, ...] = (5.0, 30.0, 60.0, None)  # None: automatic
    checkpoint_s: float = 60.0
    restart_s: float = 600.0
    repair_s: float = 4 * 3600.0
    gpu_mtbf_h: float = LLAMA3_GPU_MTBF_H
    gpus_per_node: int = 8
    gpu_model: str = "H100-SXM"
    spare_nodes: int | None = None  # None: 1% of the job's nodes, at least one
    replicates: int = 4
    seed: int = 0


def _cluster(inp: WhatIfInput, spares: int) -> Topology:
    """The job's nodes plus spares on a 32-node-per-leaf fat tree; a job that fits one
    leaf gets its spares under the same leaf, so a spare is a drop-in replacement."""
    job_nodes = -(-inp.gpus // inp.gpus_per_node)
    per_leaf = job_nodes + spares if job_nodes <= 32 else 32
    return Topology.from_spec(parse_cluster({
        "name": f"whatif-{inp.gpus}",
        "node_groups": [{"name": "n", "count": job_nodes + spares, "gpu": inp.gpu_model,
                         "gpus_per_node": inp.gpus_per_node, "nodes_per_leaf": per_leaf,
                         "leaves_per_pod": 16}]}))


def _one(inp: WhatIfInput, topo: Topology, interval_s: float | None, seed: int) -> dict[str, float]:
    horizon = inp.days * 86_400.0
    model = FailureModel(gpu_mtbf_h=inp.gpu_mtbf_h, repair_s=inp.repair_s,
                         restart_s=inp.restart_s, checkpoint_s=inp.checkpoint_s,
                         checkpoint_interval_s=interval_s)
    job = TraceJob("whatif", 0.0, horizon * 10, inp.gpus, preemptible=False)
    config = SimConfig(policy=get_policy("grace"), seed=seed, estimates=EstimateModel.NONE,
                       failures=model, until_s=horizon)
    sim = Simulation(topo, [job], config)
    sim.metrics.set_horizon(horizon)
    result = sim.run()
    j = next(iter(sim.jobs.values()))
    useful = j.trace.duration_s - j.remaining_base_s
    return {"ettr": useful / horizon, "failures": float(j.failures),
            "lost_gpu_hours": inp.gpus * (horizon - useful) / 3600.0,
            "node_failures": float(result.summary["node_failures"])}


def run_whatif(inp: WhatIfInput) -> dict[str, Any]:
    t0 = time.perf_counter()
    nodes = -(-inp.gpus // inp.gpus_per_node)
    spares = inp.spare_nodes if inp.spare_nodes is not None else max(1, math.ceil(0.01 * nodes))
    mtbf = job_mtbf_s(inp.gpus, inp.gpu_mtbf_h)
    auto = choose_interval(inp.gpus, inp.checkpoint_s, inp.restart_s, inp.gpu_mtbf_h)
    tables: dict[str, list[dict[str, Any]]] = {}
    for label, n_spares in (("rows", spares), ("rows_without_spares", 0)):
        topo = _cluster(inp, n_spares)
        rows = []
        for minutes in inp.intervals_min:
            interval_s = auto.interval_s if minutes is None else minutes * 60.0
            runs = [_one(inp, topo, interval_s, inp.seed + r) for r in range(inp.replicates)]
            ettrs = np.array([r["ettr"] for r in runs])
            rows.append({
                "interval_min": "auto" if minutes is None else minutes,
                "interval_s": interval_s,
                "ettr_sim": float(ettrs.mean()),
                "ettr_sim_sd": float(ettrs.std(ddof=1)) if len(ettrs) > 1 else 0.0,
                "ettr_model": expected_ettr(interval_s, inp.checkpoint_s, mtbf, inp.restart_s),
                "lost_gpu_hours": float(np.mean([r["lost_gpu_hours"] for r in runs])),
                "job_failures": float(np.mean([r["failures"] for r in runs])),
            })
        tables[label] = rows
    return {
        "gpus": inp.gpus, "days": inp.days, "gpu_model": inp.gpu_model,
        "gpu_mtbf_h": inp.gpu_mtbf_h, "mtbf_h": mtbf / 3600.0,
        "checkpoint_s": inp.checkpoint_s, "restart_s": inp.restart_s,
        "repair_s": inp.repair_s, "spare_nodes": spares, "replicates": inp.replicates,
        "seed": inp.seed, "auto_interval_min": auto.interval_s / 60.0,
        "auto_method": auto.method, **tables, "wall_s": time.perf_counter() - t0,
    }
