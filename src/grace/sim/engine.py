"""The twin's driver: replays a trace through ``core.decide`` on a virtual clock.

It is the same loop as the live reconciler (observe, decide, apply) with the
backend replaced by the runtime model: a started job's completion is an event
at start + modelled run time. A scheduling cycle runs once per instant at
which something changed (an arrival, a completion, a runtime limit) after all
of that instant's events are applied, never on a timer and never per waiting
job.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from grace.core.decisions import DecideResult
from grace.core.jobs import JobId, PendingJob
from grace.core.placement import SliceRequest, WholeRequest
from grace.core.policies import QueuePolicy
from grace.core.quotas import TenantQuota
from grace.core.scheduler import decide
from grace.core.state import SchedulerState
from grace.core.topology import MIG_UNITS, Topology
from grace.sim.events import EventKind, EventQueue
from grace.sim.metrics import MetricsRecorder, SimResult
from grace.sim.runtime_model import RuntimeModel
from grace.sim.traces.model import TraceJob


@dataclass(slots=True)
class SimJob:
    """The twin's bookkeeping for one trace job across its attempts."""

    trace: TraceJob
    pending: PendingJob
    remaining_base_s: float
    attempt: int = 0
    start_s: float = math.nan
    run_s: float = 0.0
    first_start_s: float = math.nan
    end_s: float = math.nan
    outcome: str = "pending"
    preemptions: int = 0
    leaves: int = 0
    min_leaves: int = 0
    nodes: int = 0


@dataclass
class SimConfig:
    """What a run needs besides the cluster and the trace."""

    policy: QueuePolicy
    quotas: dict[str, TenantQuota] = field(default_factory=dict)
    seed: int = 0
    use_estimates: bool = True  # give the scheduler each job's true duration as its estimate
    restart_overhead_s: float = 0.0


class TraceCompiler:
    """Trace rows to PendingJobs without per-row pydantic (this runs 80,000 times).

    Whole-GPU jobs keep a flexible shape; pods of GPU-sharing traces (``gpu_milli``)
    become slices: thousandths of a GPU on a sharing cluster, or the smallest MIG
    slice with at least that share of compute on a MIG cluster.
    """

    def __init__(self, topo: Topology, use_estimates: bool, single_node: bool = False) -> None:
        self.topo = topo
        self.use_estimates = use_estimates
        self.single_node = single_node  # a pod cannot span nodes (Kubernetes)
        self.models = sorted(topo.gpu_models, key=lambda m: (topo.catalog[m].usd_per_hour, m))
        self.shareable = topo.shareable_models
        self.max_node = max(n.gpus for n in topo.nodes)

    def compile(self, tj: TraceJob, job_id: int,
                exclude: frozenset[int] = frozenset()) -> PendingJob | None:
        """The job, or None when no GPU model of this cluster can ever run it."""
        topo = self.topo
        models = tuple(m for m in self.models if tj.gpu_model in (None, m))
        slices: dict[str, SliceRequest] = {}
        whole: WholeRequest | None = None
        if tj.gpu_milli is not None and tj.gpu_milli < 1000:
            models = tuple(m for m in models if m in self.shareable)
            if topo.slice_units == MIG_UNITS:
                c = max(1, math.ceil(tj.gpu_milli * 7 / 1000))
                req = SliceRequest(c, min(8, c + (c >= 3)), f"{c}g")
            else:
                req = SliceRequest(tj.gpu_milli, tj.gpu_milli)
            slices = {m: req for m in models}
            if not slices:
                return None
        else:
            if tj.gpus > topo.total_gpus or (self.single_node and tj.gpus > self.max_node):
                return None
            whole = WholeRequest(tj.gpus, tj.gpus if self.single_node else None)
        if not models:
            return None
        return PendingJob(
            id=JobId(job_id), tenant=tj.tenant, submit_s=tj.submit_s, whole=whole, slices=slices,
            models=models, priority=tj.priority, workload_class=tj.workload_class,
            estimate_s=tj.duration_s if self.use_estimates else None,
            preemptible=tj.preemptible, exclude_nodes=exclude,
        )


class Simulation:
    """One replay; ``run`` returns the metrics. Deterministic for a trace, config and seed."""

    def __init__(self, topo: Topology, jobs: list[TraceJob], config: SimConfig,
                 progress: Callable[[float], None] | None = None) -> None:
        self.topo = topo
        self.config = config
        self.state = SchedulerState(topo, config.policy, config.quotas)
        self.model = RuntimeModel.for_topology(topo)
        self.events = EventQueue()
        self.jobs: dict[JobId, SimJob] = {}
        self.unplaceable: list[TraceJob] = []
        self.progress = progress
        self.metrics = MetricsRecorder(topo)
        self._compile(jobs)

    # ----------------------------------------------------------------- setup
    def _compile(self, jobs: list[TraceJob]) -> None:
        compiler = TraceCompiler(self.topo, self.config.use_estimates)
        for i, tj in enumerate(jobs):
            pj = compiler.compile(tj, i)
            if pj is None:
                self.unplaceable.append(tj)
                continue
            self.jobs[pj.id] = SimJob(tj, pj, tj.duration_s)
            self.events.push(tj.submit_s, EventKind.ARRIVE, pj.id)

    # ----------------------------------------------------------------- loop
    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        events = self.events
        state = self.state
        metrics = self.metrics
        horizon = max((j.trace.submit_s for j in self.jobs.values()), default=0.0)
        n_events = 0
        last_progress = 0.0
        while len(events):
            now = events.peek_time()
            assert now is not None
            metrics.advance(now, state)
            while len(events) and events.peek_time() == now:
                _, kind, payload = events.pop()
                n_events += 1
                if kind == EventKind.ARRIVE:
                    state.submit(self.jobs[payload].pending)
                elif kind == EventKind.COMPLETE:
                    jid, attempt = payload
                    job = self.jobs[jid]
                    if job.attempt == attempt and job.outcome == "running":
                        state.finish(jid, now)
                        self._ended(job, now, "completed")
            result = decide(state, now)
            if result.changed:
                self._apply(result, now)
            metrics.after_cycle(now, state)
            if self.progress and now - last_progress > horizon / 200:
                last_progress = now
                self.progress(min(now / horizon, 1.0) if horizon else 1.0)
        wall = time.perf_counter() - wall0
        return metrics.finish(self.jobs.values(), self.unplaceable, n_events, wall)

    def _apply(self, result: DecideResult, now: float) -> None:
        state = self.state
        for stop in result.stops:
            job = self.jobs[stop.job_id]
            state.finish(stop.job_id, now)
            self._ended(job, now, str(stop.reason))
        for p in result.preemptions:
            job = self.jobs[p.job_id]
            run = state.finish(p.job_id, now)
            state.record_preemption(run.tenant, now)
            done = (now - job.start_s) / job.run_s if job.run_s > 0 else 1.0
            job.remaining_base_s = max(0.0, job.remaining_base_s * (1.0 - done)) \
                + self.config.restart_overhead_s
            job.attempt += 1
            job.preemptions += 1
            job.outcome = "pending"
            if job.pending.estimate_s is not None:
                job.pending.estimate_s = job.remaining_base_s
            state.requeue(run)
            self.metrics.preemptions += 1
        topo = self.topo
        for s in result.starts:
            job = self.jobs[s.job_id]
            state.start(s.job_id, s.placement, now, s.borrowing)
            job.run_s = self.model.run_time(topo, s.placement, job.remaining_base_s)
            job.start_s = now
            job.outcome = "running"
            if math.isnan(job.first_start_s):
                job.first_start_s = now
                nodes = s.placement.nodes(topo)
                job.nodes = len(nodes)
                if len(nodes) > 1:
                    job.leaves = len({topo.nodes[n].leaf for n in nodes})
                    job.min_leaves = topo.min_leaves_for(
                        -(-len(s.placement.gpus) // self.model.gpus_per_node),
                        self.model.nodes_per_leaf)
            self.events.push(now + job.run_s, EventKind.COMPLETE, (job.pending.id, job.attempt))
            limit = job.pending.limit_s
            if limit is not None and limit < job.run_s:
                self.events.push(now + limit, EventKind.WAKE)

    def _ended(self, job: SimJob, now: float, outcome: str) -> None:
        job.end_s = now
        job.outcome = outcome
