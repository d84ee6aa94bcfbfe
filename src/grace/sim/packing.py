"""The FGD paper's packing experiment: pods arrive and never leave; how full does it get?

Weng et al. (ATC'23) replay the openb pods in random order without departures
and report the share of the cluster's GPUs allocated when the GPU requests
that have arrived reach 100% of capacity (and beyond, up to 130%). Pods are
sampled with replacement, seeded, so the arrived load can pass 100%. A pod
that cannot be placed fails and is not retried. As in their simulator, a pod
also needs its CPU and memory on the node it lands on, and runs on one node.

CPU-only pods (13% of openb's) are kept, as FGD keeps them: they take CPU and
memory on a GPU node, which can strand its GPUs. They count as arrived pods but
add nothing to the arrived GPU load, the experiment's x-axis (arrived GPU
requests as a share of the cluster's GPUs). ``drop_cpu_only`` loads the trace
without them, as this experiment used to run.

GPU pods are placed through ``core.decide``, one pod per cycle: the same code that
places jobs everywhere else. A CPU-only pod asks ``core.decide`` for nothing, so
``sim.cpu_only`` places it by the same policy's packing rule.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from grace.core.policies import get_policy
from grace.core.scheduler import decide
from grace.core.state import SchedulerState
from grace.sim.clusters import load_topology
from grace.sim.cpu_only import place_cpu_only
from grace.sim.engine import TraceCompiler
from grace.sim.estimates import EstimateModel
from grace.sim.runner import ReplayInput
from grace.sim.traces.openb import load_openb_pods

#: reference allocation rates at 100% arrived, openb_pod_list_default, mean of 10 seeds
#: (shared/traces/alibaba-gpu-v2023-openb/README.md, from the FGD artifact)
FGD_REFERENCE = {"random": 86.30, "dotprod": 90.62, "gpu-clustering": 91.65,
                 "gpu-packing": 91.78, "best-fit": 92.86, "fgd": 95.23}


def load_packing_input(cluster: Path | str, trace: Path | str, drop_cpu_only: bool = False) -> ReplayInput:
    """The openb node list and pod list of the experiment; CPU-only pods kept unless ``drop_cpu_only``."""
    topo = load_topology(cluster, "openb")
    pods = load_openb_pods(trace, keep_cpu_only=not drop_cpu_only)
    return ReplayInput(topo, pods, str(cluster), str(trace))


def packing_experiment(inp: ReplayInput, policy: str, seed: int,
                       max_arrived: float = 1.3) -> dict[str, Any]:
    """Sample pods until the arrived GPU requests reach ``max_arrived`` of the cluster's GPUs.

    ``allocated_gpu_share``: allocated GPUs / cluster GPUs when the arrived GPU
    requests reach 100% of the cluster's GPUs; ``curve``: the same at 1..130%."""
    t0 = time.perf_counter()
    topo = inp.topo
    # no preemption: FGD's experiment has none, and a displaced pod would stay counted as
    # allocated (and its host CPU as used) while it waits in the queue again
    state = SchedulerState(topo, replace(get_policy(policy), preempt_for_priority=False,
                                         preempt_for_quota=False, preempt_for_las=False))
    compiler = TraceCompiler(topo, EstimateModel.NONE, single_node=True)
    pods = inp.trace.jobs
    if not any(tj.gpus > 0 for tj in pods):  # the arrived GPU load would never grow
        raise ValueError(f"--trace {inp.trace_path}: no pod asks for a GPU; the packing experiment "
                         "samples pods until their GPU requests reach the cluster's GPUs")
    rng = np.random.default_rng(seed)
    total = float(topo.total_gpus)
    cpu_free = np.array([n.cpu_cores * 1000 for n in topo.nodes], dtype=np.int64)
    mem_free = np.array([int(n.memory_gb * 1024) for n in topo.nodes], dtype=np.int64)
    arrived = 0.0
    allocated = 0.0
    curve: dict[int, float] = {}
    failed = placed = cpu_only = cpu_only_placed = 0
    next_point = 1
    job_id = 0
    while arrived < max_arrived * total:
        tj = pods[int(rng.integers(len(pods)))]
        job_id += 1
        if tj.gpus == 0:
            cpu_only += 1
            node = place_cpu_only(state, cpu_free, mem_free, tj.cpu_milli, tj.memory_mib)
            if node is None:
                failed += 1
                continue
            placed += 1
            cpu_only_placed += 1
            cpu_free[node] -= tj.cpu_milli
            mem_free[node] -= tj.memory_mib
            if state.packer is not None:
                state.packer.hold_host(job_id - 1, (node,), tj.cpu_milli, tj.memory_mib)
            continue
        share = tj.gpu_milli / 1000.0 if tj.gpu_milli else float(tj.gpus)
        arrived += share
        short = np.flatnonzero((cpu_free < tj.cpu_milli) | (mem_free < tj.memory_mib))
        job = compiler.compile(tj, job_id - 1, frozenset(short.tolist()))
        started = None
        if job is not None:
            state.submit(job)
            result = decide(state, 0.0)
            if result.starts:
                started = state.apply(result, 0.0)[0]
            else:
                state.withdraw(job.id)
        if started is None:
            failed += 1
        else:
            placed += 1
            allocated += started.gpu_equivalents
            node = started.placement.nodes(topo)[0]
            cpu_free[node] -= tj.cpu_milli
            mem_free[node] -= tj.memory_mib
        while next_point <= 100 * arrived / total and next_point <= 100 * max_arrived:
            curve[next_point] = 100.0 * allocated / total
            next_point += 1
    state.capacity.check_consistency()
    return {
        "experiment": "no-departures packing (FGD, ATC'23)",
        "policy": policy,
        "cluster": inp.cluster_path,
        "cluster_gpus": topo.total_gpus,
        "trace": inp.trace_path,
        "seed": seed,
        "pods_arrived": job_id,
        "pods_placed": placed,
        "pods_failed": failed,
        "cpu_only_pods": cpu_only,  # arrived pods that asked for no GPU
        "cpu_only_placed": cpu_only_placed,
        "pods_skipped": dict(inp.trace.report.skipped),  # trace rows not sampled from, by reason
        "allocated_gpu_share": curve.get(100, 100.0 * allocated / total) / 100.0,
        "allocated_gpu_share_at_130": curve.get(130, 100.0 * allocated / total) / 100.0,
        "fgd_reference_at_100": FGD_REFERENCE,
        "curve": curve,
        "wall_s": time.perf_counter() - t0,
    }
