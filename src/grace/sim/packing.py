"""The FGD paper's packing experiment: pods arrive and never leave; how full does it get?

Weng et al. (ATC'23) replay the openb pods in random order without departures
and report the share of the cluster's GPUs allocated when the GPU requests
that have arrived reach 100% of capacity (and beyond, up to 130%). Pods are
sampled with replacement, seeded, so the arrived load can pass 100%. A pod
that cannot be placed fails and is not retried. As in their simulator, a pod
also needs its CPU and memory on the node it lands on, and runs on one node.

Placement goes through ``core.decide``, one pod per cycle: the same code that
places jobs everywhere else.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from grace.core.policies import get_policy
from grace.core.scheduler import decide
from grace.core.state import SchedulerState
from grace.sim.engine import TraceCompiler
from grace.sim.estimates import EstimateModel
from grace.sim.runner import ReplayInput

#: reference allocation rates at 100% arrived, openb_pod_list_default, mean of 10 seeds
#: (shared/traces/alibaba-gpu-v2023-openb/README.md, from the FGD artifact)
FGD_REFERENCE = {"random": 86.30, "dotprod": 90.62, "gpu-clustering": 91.65,
                 "gpu-packing": 91.78, "best-fit": 92.86, "fgd": 95.23}


def packing_experiment(inp: ReplayInput, policy: str, seed: int,
                       max_arrived: float = 1.3) -> dict[str, Any]:
    t0 = time.perf_counter()
    topo = inp.topo
    # no preemption: FGD's experiment has none, and a displaced pod would stay counted as
    # allocated (and its host CPU as used) while it waits in the queue again
    state = SchedulerState(topo, replace(get_policy(policy), preempt_for_priority=False,
                                         preempt_for_quota=False, preempt_for_las=False))
    compiler = TraceCompiler(topo, EstimateModel.NONE, single_node=True)
    pods = inp.trace.jobs
    rng = np.random.default_rng(seed)
    total = float(topo.total_gpus)
    cpu_free = np.array([n.cpu_cores * 1000 for n in topo.nodes], dtype=np.int64)
    mem_free = np.array([int(n.memory_gb * 1024) for n in topo.nodes], dtype=np.int64)
    arrived = 0.0
    allocated = 0.0
    curve: dict[int, float] = {}
    failed = placed = 0
    next_point = 1
    job_id = 0
    while arrived < max_arrived * total:
        tj = pods[int(rng.integers(len(pods)))]
        share = tj.gpu_milli / 1000.0 if tj.gpu_milli else float(tj.gpus)
        arrived += share
        short = np.flatnonzero((cpu_free < tj.cpu_milli) | (mem_free < tj.memory_mib))
        job = compiler.compile(tj, job_id, frozenset(short.tolist()))
        job_id += 1
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
        "allocated_gpu_share": curve.get(100, 100.0 * allocated / total) / 100.0,
        "allocated_gpu_share_at_130": curve.get(130, 100.0 * allocated / total) / 100.0,
        "fgd_reference_at_100": FGD_REFERENCE,
        "curve": curve,
        "wall_s": time.perf_counter() - t0,
    }
