"""One call from (cluster, trace, policy) to a finished replay's summary.

The CLI, the benchmark and the tests all go through ``replay`` so they measure
the same thing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grace.core.checkpoint_stagger import CheckpointPhasing
from grace.core.policies import get_policy
from grace.core.quotas import TenantQuota
from grace.core.topology import Topology
from grace.sim.engine import SimConfig, Simulation
from grace.sim.estimates import EstimateModel, parse_estimate_model
from grace.sim.failures import FailureModel
from grace.sim.goodput.model import GoodputModel
from grace.sim.goodput.profiles import AppProfile
from grace.sim.goodput.progress import GoodputClock
from grace.sim.metrics import SimResult
from grace.sim.traces.model import Trace
from grace.spec.bursting import BurstingSpec


@dataclass
class ReplayInput:
    topo: Topology
    trace: Trace
    cluster_path: str
    trace_path: str
    # training profiles for jobs the goodput runtime model plays (--format pollux)
    profiles: dict[str, AppProfile] | None = None
    round_s: float | None = None  # scheduling rounds (--round-s); None: every event
    per_job: bool = False  # add per_job (trace job name -> JCT s) to the summary


def replay(inp: ReplayInput, policy: str, seed: int = 0,
           quotas: dict[str, TenantQuota] | None = None,
           estimates: EstimateModel | str = EstimateModel.USER,
           progress: Callable[[float], None] | None = None,
           failures: FailureModel | None = None,
           bursting: BurstingSpec | None = None,
           enforce_limits: bool | None = None, data_path: bool = False,
           checkpoint_phases: CheckpointPhasing = CheckpointPhasing.START) -> SimResult:
    """Run one policy over the trace; the summary carries the inputs it assumed.

    ``estimates`` is what the scheduler is told about job lengths (``sim.estimates``):
    users' time limits by default, enforced unless ``enforce_limits`` is False. None:
    enforced, except on profiled training jobs (Pollux's workloads): the published
    simulator they are compared with never ends a job at a limit. ``data_path`` turns on
    the data-path model (``sim.data_path``); the summary then has a ``data_path`` section."""
    t0 = time.perf_counter()
    if isinstance(estimates, bool):  # the old use_estimates flag: say what replaced it
        raise TypeError("replay(estimates=...) takes an EstimateModel (exact, none, user), "
                        f"not {estimates!r}; True was 'exact', False 'none'")
    if enforce_limits is None:
        enforce_limits = inp.profiles is None
    goodput = None if inp.profiles is None else GoodputModel(
        inp.profiles, GoodputClock(round_s=inp.round_s))
    config = SimConfig(policy=get_policy(policy), quotas=quotas or {}, seed=seed,
                       estimates=parse_estimate_model(estimates), enforce_limits=enforce_limits,
                       failures=failures, bursting=bursting,
                       pool_kinds=_pool_kinds(inp, bursting) if bursting is not None else {},
                       round_s=inp.round_s, goodput=goodput, data_path=data_path,
                       checkpoint_phases=checkpoint_phases)
    sim = Simulation(inp.topo, inp.trace.jobs, config, progress=progress)
    horizon = max((j.submit_s for j in inp.trace.jobs), default=0.0)
    sim.metrics.set_horizon(max(horizon, 1.0))
    result = sim.run()
    s = result.summary
    s["jobs"] += inp.trace.report.skipped_total
    s["jobs_skipped"] += inp.trace.report.skipped_total
    s["skipped_reasons"] = dict(inp.trace.report.skipped) | (
        {"no GPU model in the cluster fits": len(sim.unplaceable)} if sim.unplaceable else {})
    s["wall_s"] = time.perf_counter() - t0
    header = {
        "policy": policy,
        "cluster": inp.cluster_path,
        "cluster_gpus": inp.topo.total_gpus,
        "trace": inp.trace_path,
        "seed": seed,
        "estimates": sim.estimates_label,
        "limits_enforced": config.estimates is EstimateModel.USER and enforce_limits,
        "failures": None if failures is None else {
            "gpu_mtbf_h": failures.gpu_mtbf_h, "restart_s": failures.restart_s,
            "checkpoint_s": failures.checkpoint_s, "repair_s": failures.repair_s,
            "lemon_share": failures.lemon_share,
            "checkpoint_interval": failures.checkpoint_interval_s or "auto"},
        "bursting": None if bursting is None else {
            "enabled": bursting.enabled, "queue_wait_threshold_s": bursting.queue_wait_threshold_s,
            "offers": [o.name for o in bursting.offers]},
    }
    if inp.round_s is not None:
        header["round_s"] = inp.round_s
    if inp.per_job:
        s["per_job"] = {j.trace.job_id: j.end_s - j.trace.submit_s
                        for j in sim.jobs.values() if not math.isnan(j.end_s)}
    result.summary = header | s
    result.summary["tenants"] = result.tenants
    return result


def _pool_kinds(inp: ReplayInput, bursting: BurstingSpec) -> dict:
    """Pool kinds come from the cluster spec (the topology keeps only pool names); the
    offers must name its cloud pools."""
    from grace.sim.bursting import pool_kinds_of
    from grace.spec.loader import load_cluster

    cluster = load_cluster(inp.cluster_path)
    problems = bursting.check_cluster(cluster)
    if problems:
        raise ValueError("bursting does not fit the cluster:\n" + "\n".join(problems))
    return pool_kinds_of(cluster)


def load_input(cluster: Path, trace: Path, fmt: str, columns: str | None,
               profiles: Path | None = None, elastic: bool = False) -> ReplayInput:
    from grace.sim.clusters import load_topology
    from grace.sim.traces import load_trace

    topo = load_topology(cluster, fmt)
    if fmt.strip().lower() == "pollux":
        from grace.sim.goodput.profiles import load_profiles
        from grace.sim.traces.pollux import load_pollux

        if profiles is None:
            raise ValueError("--format pollux needs --profiles: the app-profiles/ folder of "
                             "throughput and efficiency measurements beside the workloads")
        apps = load_profiles(profiles)
        return ReplayInput(topo, load_pollux(trace, apps, elastic=elastic), str(cluster),
                           str(trace), profiles=apps)
    if profiles is not None:
        raise ValueError(f"--profiles only applies to --format pollux, not {fmt!r}; drop it")
    tr = load_trace(trace, fmt, columns)
    return ReplayInput(topo, tr, str(cluster), str(trace))
