"""``grace whatif``: one long job of N GPUs for D days, under failures, per checkpoint interval.

For each checkpoint interval (fixed ones, and Grace's automatic one from Daly's
formula) the twin runs the job on a cluster of exactly its size, with or
without hot spare nodes, for D days of virtual time with Llama-3-like failure
rates, several seeds each, and measures ETTR: the share of wall time that
advanced training. Beside it stands the closed-form ETTR of
``core.checkpoint.expected_ettr``, which assumes a failed node is replaced at
once (hot spares): the twin with spares should agree with it within a point;
without spares the job also waits for repairs.

Two ways to get the same numbers (``WhatIfMethod``): ``timeline`` (the default)
replays each seed once and banks its attempts under every interval
(``sim.whatif_timeline``: 8 replays for 4 intervals x 4 seeds x with and without
spares, about 35 s for the README's 16,384 GPUs over 54 days on a 2-core machine);
``replay`` runs ``Simulation`` once per interval and seed (32 replays, about 9
minutes there): the reference the timeline is tested against.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from grace.core.checkpoint import LLAMA3_GPU_MTBF_H, choose_interval, expected_ettr, job_mtbf_s
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.sim.engine import SimConfig, Simulation
from grace.sim.estimates import EstimateModel
from grace.sim.failures import FailureModel
from grace.sim.traces.model import TraceJob
from grace.sim.whatif_timeline import bank_interval, replay_attempts
from grace.spec.loader import parse_cluster

#: ``progress(done, total)``: replayed days so far, of all the replays
Progress = Callable[[float, float], None]


class WhatIfMethod(StrEnum):
    """How the replays are run; both give the same numbers (see the module docstring)."""

    TIMELINE = "timeline"  # one replay per seed, banked under every interval
    REPLAY = "replay"  # one ``Simulation`` per interval and seed: the reference


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


def _model(inp: WhatIfInput, interval_s: float | None) -> FailureModel:
    return FailureModel(gpu_mtbf_h=inp.gpu_mtbf_h, repair_s=inp.repair_s,
                        restart_s=inp.restart_s, checkpoint_s=inp.checkpoint_s,
                        checkpoint_interval_s=interval_s)


def _config(inp: WhatIfInput, interval_s: float | None, seed: int) -> SimConfig:
    """The replay's configuration; the timeline takes its policies from it too."""
    return SimConfig(policy=get_policy("grace"), seed=seed, estimates=EstimateModel.NONE,
                     failures=_model(inp, interval_s), until_s=inp.days * 86_400.0)


def _one(inp: WhatIfInput, topo: Topology, interval_s: float | None, seed: int) -> dict[str, float]:
    """The reference: one ``Simulation`` of the job for one interval and seed."""
    horizon = inp.days * 86_400.0
    job = TraceJob("whatif", 0.0, horizon * 10, inp.gpus, preemptible=False)
    sim = Simulation(topo, [job], _config(inp, interval_s, seed))
    sim.metrics.set_horizon(horizon)
    result = sim.run()
    j = next(iter(sim.jobs.values()))
    useful = j.trace.duration_s - j.remaining_base_s
    return {"ettr": useful / horizon, "failures": float(j.failures),
            "lost_gpu_hours": inp.gpus * (horizon - useful) / 3600.0,
            "node_failures": float(result.summary["node_failures"])}


def _timeline_runs(inp: WhatIfInput, topo: Topology, intervals_s: list[float],
                   progress: Callable[[float], None]) -> list[list[dict[str, float]]]:
    """Per interval, per seed: each seed replayed once and banked under every interval."""
    out: list[list[dict[str, float]]] = [[] for _ in intervals_s]
    for r in range(inp.replicates):
        config = _config(inp, None, inp.seed + r)
        assert config.failures is not None and config.until_s is not None

        def tell(share: float, seeds_done: int = r) -> None:
            progress(seeds_done + share)

        timeline = replay_attempts(
            topo, inp.gpus, config.failures, config.until_s, config.seed, config.policy,
            config.restart_policy, tell)
        for runs, interval_s in zip(out, intervals_s, strict=True):
            runs.append(bank_interval(timeline, _model(inp, interval_s), config.restart_policy))
    return out


def _replay_runs(inp: WhatIfInput, topo: Topology, intervals_s: list[float],
                 progress: Callable[[float], None]) -> list[list[dict[str, float]]]:
    """Per interval, per seed: one ``Simulation`` each (the reference)."""
    out = []
    for i, interval_s in enumerate(intervals_s):
        runs = []
        for r in range(inp.replicates):
            runs.append(_one(inp, topo, interval_s, inp.seed + r))
            progress((i * inp.replicates + r + 1) / len(intervals_s))
        out.append(runs)
    return out


def run_whatif(inp: WhatIfInput, method: WhatIfMethod = WhatIfMethod.TIMELINE,
               progress: Progress | None = None) -> dict[str, Any]:
    """The what-if table; ``progress(done, total)`` is told the replayed days."""
    t0 = time.perf_counter()
    nodes = -(-inp.gpus // inp.gpus_per_node)
    spares = inp.spare_nodes if inp.spare_nodes is not None else max(1, math.ceil(0.01 * nodes))
    mtbf = job_mtbf_s(inp.gpus, inp.gpu_mtbf_h)
    auto = choose_interval(inp.gpus, inp.checkpoint_s, inp.restart_s, inp.gpu_mtbf_h)
    intervals_s = [auto.interval_s if m is None else m * 60.0 for m in inp.intervals_min]
    # progress counts replayed days: the timeline replays each seed once, the reference
    # once per interval too
    per_seed = inp.days * (len(intervals_s) if method is WhatIfMethod.REPLAY else 1)
    total = 2 * inp.replicates * per_seed
    runner = _timeline_runs if method is WhatIfMethod.TIMELINE else _replay_runs
    tables: dict[str, list[dict[str, Any]]] = {}
    for part, (label, n_spares) in enumerate((("rows", spares), ("rows_without_spares", 0))):
        topo = _cluster(inp, n_spares)
        rows = []

        def tell(seeds_done: float, part: int = part) -> None:
            if progress is not None:
                progress((part * inp.replicates + seeds_done) * per_seed, total)

        for minutes, interval_s, runs in zip(inp.intervals_min, intervals_s,
                                             runner(inp, topo, intervals_s, tell), strict=True):
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
