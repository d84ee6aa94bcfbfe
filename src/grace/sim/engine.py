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

from grace.core.bursting import RouteJob, SetNodesUsable, requeue_with_pools
from grace.core.checkpoint_stagger import CheckpointPhasing
from grace.core.decisions import DecideResult
from grace.core.health import (
    BreakerTripped,
    DrainNode,
    HealthMonitor,
    HealthTable,
    LemonFlagged,
    RestartJobs,
    ReturnNode,
    RunDiagnostic,
)
from grace.core.jobs import JobId, PendingJob, RunningJob
from grace.core.placement import SliceRequest, WholeRequest
from grace.core.policies import QueuePolicy
from grace.core.quotas import TenantQuota
from grace.core.restart import FailedAttempt, FailureKind, RestartPolicy, on_failure
from grace.core.scheduler import decide
from grace.core.state import SchedulerState
from grace.core.topology import MIG_UNITS, Topology
from grace.core.workflow import Dep, Outcome, Parent, WorkflowFacts, gate
from grace.sim.bursting import CountRentedGpus, PreemptSpot, TwinCloud, TwinEffect, WakeAt
from grace.sim.checkpointing import Banked, bank, failure_plan
from grace.sim.data_path import RERATE_TOLERANCE, UplinkTraffic
from grace.sim.data_path_run import DataPathRun
from grace.sim.estimates import EstimateModel, declare, model_label
from grace.sim.events import EventKind, EventQueue
from grace.sim.failures import FailureModel, NodeFailure, draw_failures, failure_signal
from grace.sim.goodput.model import GoodputModel, GoodputRun
from grace.sim.metrics import MetricsRecorder, SimResult
from grace.sim.runtime_model import RuntimeModel
from grace.sim.traces._common import classify
from grace.sim.traces.model import TraceJob
from grace.spec.bursting import BurstingSpec
from grace.spec.cluster import PoolKind
from grace.spec.workflow import DependencyKind


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
    # the current attempt's plan: restart cost, slowdown, checkpoint interval and cost
    plan: tuple[float, float, float, float] = (0.0, 1.0, math.inf, 0.0)
    placed_nodes: tuple[int, ...] = ()
    failures: int = 0
    stalled: int = 0  # failures in a row without a new checkpoint
    lost_gpu_s: float = 0.0  # restarts and recomputed work
    checkpoint_gpu_s: float = 0.0
    goodput: GoodputRun | None = None  # a job the goodput runtime model plays (sim.goodput)
    # the data path (SimConfig.data_path): a re-rated attempt runs in segments from
    # ``seg_s``; ``epoch`` counts its re-rates so a superseded COMPLETE event is ignored;
    # ``unsaved_*``: work banked at re-rates not yet covered by a checkpoint (a failure
    # before the next checkpoint loses it)
    seg_s: float = math.nan
    epoch: int = 0
    unsaved_base_s: float = 0.0
    unsaved_wall_s: float = 0.0


@dataclass
class SimConfig:
    """What a run needs besides the cluster and the trace."""

    policy: QueuePolicy
    quotas: dict[str, TenantQuota] = field(default_factory=dict)
    seed: int = 0
    # what the scheduler is told about each job's length (sim.estimates): by default the
    # time limit its user asked for, which also ends it (``timeout``) unless enforce_limits
    # is off; ``exact`` is the oracle of true durations, ``none`` tells nothing
    estimates: EstimateModel = EstimateModel.USER
    enforce_limits: bool = True
    restart_overhead_s: float = 0.0
    failures: FailureModel | None = None
    restart_policy: RestartPolicy = field(
        default_factory=lambda: RestartPolicy(exclude_failed_node=False))
    until_s: float | None = None  # stop the clock here (what-if runs of one long job)
    health_table: HealthTable | None = None  # None: the default table (core.health)
    bursting: BurstingSpec | None = None  # cloud pools rented on demand (sim.bursting)
    pool_kinds: dict[str, PoolKind] = field(default_factory=dict)  # pool -> kind, for routing
    # scheduling rounds: arrivals and freed GPUs are acted on at multiples of round_s, and
    # every round while jobs wait (a policy may change its mind as service accrues)
    round_s: float | None = None
    goodput: GoodputModel | None = None  # profiles for jobs that name an application
    # the data-path model (sim.data_path, opt-in): step time from compute, all-reduce over
    # the placement's slowest tier and input loading, with contention for uplinks and the
    # file system, re-rating running jobs as loads change; off: the stretch factor of
    # sim.runtime_model, and every figure as before
    data_path: bool = False
    # with data_path, a storage tier and checkpointing jobs (failures): when each job's
    # checkpoints fall, which sets how long their bursts share the file system's writes
    checkpoint_phases: CheckpointPhasing = CheckpointPhasing.START
    # with data_path: how much of a crossing job's all-reduce loads each uplink
    uplink_traffic: UplinkTraffic = UplinkTraffic.ALL_RANKS


class TraceCompiler:
    """Trace rows to PendingJobs without per-row pydantic (this runs 80,000 times).

    Whole-GPU jobs keep a flexible shape; pods of GPU-sharing traces (``gpu_milli``)
    become slices: thousandths of a GPU on a sharing cluster, or the smallest MIG
    slice with at least that share of compute on a MIG cluster.
    """

    def __init__(self, topo: Topology, estimates: EstimateModel = EstimateModel.NONE,
                 single_node: bool = False, seed: int = 0, enforce_limits: bool = True) -> None:
        self.topo = topo
        self.estimates = estimates
        self.seed = seed  # the user model's draws are keyed by the run's seed and the job
        self.enforce_limits = enforce_limits
        self.limits_from_trace = 0  # jobs compiled whose limit the trace gave
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
        said = declare(self.estimates, tj, self.seed, self.enforce_limits)
        self.limits_from_trace += said.from_trace
        # a class the trace does not declare is guessed from what the submitter declared
        wclass = tj.workload_class or classify(tj.gpus, said.estimate_s, tj.name)
        return PendingJob(
            id=JobId(job_id), tenant=tj.tenant, submit_s=tj.submit_s, whole=whole, slices=slices,
            models=models, priority=tj.priority, workload_class=wclass,
            estimate_s=said.estimate_s, limit_s=said.limit_s,
            preemptible=tj.preemptible, exclude_nodes=exclude,
            cpu_milli=tj.cpu_milli, memory_mib=tj.memory_mib,
        )


class Simulation:
    """One replay; ``run`` returns the metrics. Deterministic for a trace, config and seed."""

    def __init__(self, topo: Topology, jobs: list[TraceJob], config: SimConfig,
                 progress: Callable[[float], None] | None = None) -> None:
        self.topo = topo
        self.config = config
        self.state = SchedulerState(topo, config.policy, config.quotas)
        self.model = RuntimeModel.for_topology(topo)
        self.dp: DataPathRun | None = (
            DataPathRun(topo, self.model, config.checkpoint_phases, config.uplink_traffic)
            if config.data_path else None)
        self._touched: set[int] = set()  # running jobs to re-rate before time moves on
        self.events = EventQueue()
        self.jobs: dict[JobId, SimJob] = {}
        self.unplaceable: list[TraceJob] = []
        self.progress = progress
        self.metrics = MetricsRecorder(topo)
        self.node_jobs: dict[int, set[JobId]] = {}
        self.lemons: frozenset[int] = frozenset()
        self.health: HealthMonitor | None = None
        self.cloud: TwinCloud | None = None
        if config.bursting is not None:
            self.cloud = TwinCloud(config.bursting, topo, config.pool_kinds, config.seed)
            self._apply_cloud_effects(self.cloud.unprovision_all(), 0.0)
            self.metrics.track_cloud(self.cloud.owned_gpus)
        # Slurm's workflows: jobs the gate (core.workflow) holds back until it admits them
        self.flows: dict[JobId, WorkflowFacts] = {}
        self.gated: dict[JobId, None] = {}  # arrived, not yet admitted (in arrival order)
        self.offered: set[JobId] = set()  # a group's tasks admitted into the state
        self._compile(jobs)
        if config.failures is not None:
            self.health = HealthMonitor([n.name for n in topo.nodes], config.health_table)
            horizon = config.until_s or self._failure_horizon()
            failures, self.lemons = draw_failures(topo, config.failures, horizon, config.seed)
            for f in failures:
                self.events.push(f.at_s, EventKind.NODE_FAIL, f)

    # ----------------------------------------------------------------- setup
    def _compile(self, jobs: list[TraceJob]) -> None:
        c = self.config
        compiler = TraceCompiler(self.topo, c.estimates, seed=c.seed,
                                 enforce_limits=c.enforce_limits)
        for i, tj in enumerate(jobs):
            pj = compiler.compile(tj, i)
            if pj is None:
                self.unplaceable.append(tj)
                continue
            if self.cloud is not None:
                pj = pj.reshaped(pools=self.cloud.route(pj))
            job = self.jobs[pj.id] = SimJob(tj, pj, tj.duration_s)
            if tj.application is not None:
                if self.config.goodput is None:
                    raise ValueError(f"job {tj.job_id} names application {tj.application!r}; "
                                     "replaying it needs the profiles (--profiles app-profiles/)")
                job.goodput = self.config.goodput.job(tj)
            self.events.push(tj.submit_s, EventKind.ARRIVE, pj.id)
        self._workflows()
        #: the summary's ``estimates``: the model, and for ``user`` where the limits came from
        self.estimates_label = model_label(c.estimates, compiler.limits_from_trace, len(self.jobs))

    def _workflows(self) -> None:
        """The gate's facts of each job that declares a workflow (dependencies on earlier
        trace jobs, a hold, an array limit), and a wake-up at each release."""
        ids = {j.trace.job_id: jid for jid, j in self.jobs.items()}
        groups: dict[str, int] = {}
        for jid, job in self.jobs.items():
            tj = job.trace
            if not (tj.after or tj.release_s is not None or tj.array_limit):
                continue
            group = groups.setdefault(tj.array_group, int(jid)) if tj.array_group else None
            # a parent the trace does not hold is gone: never satisfiable (id -1)
            deps = tuple(Dep(DependencyKind(kind), int(ids.get(parent, -1)))
                         for kind, parent in tj.after)
            self.flows[jid] = WorkflowFacts(int(jid), tj.release_s is not None, deps, group,
                                            tj.array_index, tj.array_limit)
            if tj.release_s is not None and math.isfinite(tj.release_s):
                self.events.push(tj.release_s, EventKind.WAKE)

    def _gate(self, now: float) -> None:
        """Offer ``decide`` the arrived jobs the workflow gate admits now; end the ones
        whose dependency can never be met (cancelled, or failed for a preflight), as
        live does. A group's tasks already offered count against its limit until they
        end (the state keeps an offered job queued; live re-gates it each cycle)."""
        facts = []
        for jid in self.gated:
            f = self.flows[jid]
            release = self.jobs[jid].trace.release_s
            facts.append(WorkflowFacts(f.job_id, release is not None and now < release,
                                       f.dependencies, f.group, f.index, f.max_parallel))
        parents = {d.job: self._parent(JobId(d.job)) for f in facts for d in f.dependencies
                   if JobId(d.job) in self.jobs}
        active: dict[int, int] = {}
        for jid in self.offered:
            group = self.flows[jid].group
            if group is not None and self.jobs[jid].outcome in ("pending", "running"):
                active[group] = active.get(group, 0) + 1
        result = gate(facts, parents, active)
        for n in result.never:
            del self.gated[JobId(n.job_id)]
            job = self.jobs[JobId(n.job_id)]
            # ended without a start: counted as ended, not in the wait and run statistics
            job.outcome = "failed" if n.fail else "cancelled"
            self.metrics.ended += 1
        for admitted in map(JobId, result.admitted):
            del self.gated[admitted]
            self.offered.add(admitted)
            self.state.submit(self.jobs[admitted].pending)

    def _parent(self, jid: JobId) -> Parent:
        outcome = self.jobs[jid].outcome
        if outcome in ("pending", "running"):
            return Parent(Outcome.NOT_ENDED, outcome)
        return Parent(Outcome.SUCCEEDED if outcome == "completed" else Outcome.FAILED, outcome)

    def _failure_horizon(self) -> float:
        """Failures are drawn over twice the span of the trace as declared (submissions
        plus the estimates the scheduler was given): long enough to cover the tail of
        queued work, and nodes keep failing only while jobs remain. Never the true
        durations: the failure draws would then depend on them."""
        end = max((j.pending.submit_s + (j.pending.estimate_s or j.pending.limit_s or 0.0)
                   for j in self.jobs.values()), default=0.0)
        return 2.0 * end + 86_400.0

    # ----------------------------------------------------------------- loop
    def run(self) -> SimResult:
        wall0 = time.perf_counter()
        events = self.events
        state = self.state
        metrics = self.metrics
        until = self.config.until_s
        horizon = until or max((j.trace.submit_s for j in self.jobs.values()), default=0.0)
        n_events = 0
        last_progress = 0.0
        round_s = self.config.round_s
        next_tick = -1.0
        while len(events):
            now = events.peek_time()
            assert now is not None
            if until is not None and now > until:
                break
            if self._all_done():
                break
            if self.dp is not None and self._pop_stale():
                continue  # a completion a re-rate superseded: no instant to act on
            metrics.advance(now, state)
            while len(events) and events.peek_time() == now:
                _, kind, payload = events.pop()
                n_events += 1
                if kind == EventKind.ARRIVE:
                    if payload in self.flows:
                        self.gated[payload] = None
                    else:
                        state.submit(self.jobs[payload].pending)
                elif kind == EventKind.COMPLETE:
                    jid, attempt, epoch = payload
                    job = self.jobs[jid]
                    if job.attempt == attempt and job.epoch == epoch and job.outcome == "running":
                        self._bank(job, now, complete=True)
                        self._release(job, now)
                        self._ended(job, now, "completed")
                elif kind == EventKind.NODE_FAIL:
                    self._node_failed(payload, now)
                elif kind == EventKind.NODE_RETURN:
                    node, level = payload
                    self._diagnostic_done(node, level, now)
            if round_s is not None:
                tick = math.ceil(now / round_s - 1e-9) * round_s
                if tick > now:  # act on it at the round's end
                    if next_tick != tick:
                        next_tick = tick
                        events.push(tick, EventKind.WAKE)
                    if self.dp is not None:
                        self._settle(now)
                    metrics.after_cycle(now, state)
                    continue
            if self.gated:
                self._gate(now)
            if self.cloud is not None:
                self._apply_cloud_effects(self.cloud.due(now, self.node_jobs), now)
            result = decide(state, now)
            if result.changed:
                self._apply(result, now)
            if self.cloud is not None:
                self._apply_cloud_effects(
                    self.cloud.after_cycle(state, now, result, self.node_jobs), now)
            # tick on while jobs wait beside running ones: their service changes the order
            if round_s is not None and state.pending and state.running and next_tick <= now:
                next_tick = now + round_s
                events.push(next_tick, EventKind.WAKE)
            if self.dp is not None:
                self._settle(now)
            metrics.after_cycle(now, state)
            if self.progress and now - last_progress > horizon / 200:
                last_progress = now
                self.progress(min(now / horizon, 1.0) if horizon else 1.0)
        end = until if until is not None else None
        if end is not None:
            metrics.advance(end, state)
            for job in self.jobs.values():
                if job.outcome == "running":
                    self._bank(job, end, complete=False, partial=True)
        wall = time.perf_counter() - wall0
        out = metrics.finish(self.jobs.values(), self.unplaceable, n_events, wall)
        if self.cloud is not None:
            out.summary |= self.cloud.finish(metrics.last_t or 0.0)
        if self.dp is not None:
            out.summary["data_path"] = self.dp.summary()
        return out

    def _pop_stale(self) -> bool:
        """Drop the next event if it is a completion a re-rate superseded."""
        head = self.events.peek()
        if head is None or head[1] != EventKind.COMPLETE:
            return False
        jid, attempt, epoch = head[2]
        job = self.jobs[jid]
        if job.attempt == attempt and job.epoch == epoch and job.outcome == "running":
            return False
        self.events.pop()
        return True

    def _all_done(self) -> bool:
        """With failures drawn far ahead, stop once every job has ended."""
        return ((self.config.failures is not None or self.cloud is not None)
                and self.metrics.ended == len(self.jobs) and not self.state.pending)

    # ----------------------------------------------------------------- attempts
    def _plan(self, job: SimJob, slowdown: float) -> tuple[float, float, float, float]:
        f = self.config.failures
        if f is None and self.cloud is not None:
            return self.cloud.plan_for(job.pending.id, slowdown)
        if f is None:
            return (self.config.restart_overhead_s if job.attempt else 0.0, slowdown, math.inf, 0.0)
        return failure_plan(f, job.pending.gpu_equivalents, job.attempt, slowdown)

    @staticmethod
    def _attempt_wall(remaining_base_s: float, plan: tuple[float, float, float, float]) -> float:
        restart, speed, tau, delta = plan
        work = remaining_base_s * speed
        checkpoints = math.floor(work / tau) if math.isfinite(tau) else 0
        return restart + work + delta * checkpoints

    def _bank(self, job: SimJob, now: float, complete: bool, partial: bool = False) -> float:
        """Credit the work this attempt committed by ``now``; returns GPU-seconds lost."""
        if job.goodput is not None:
            assert self.config.goodput is not None
            return self.config.goodput.bank(job.goodput, job.trace, job, now - job.start_s,
                                            complete, failed=not (complete or partial))
        # a failure loses the restart and the work since the last checkpoint; a planned
        # stop (preemption, end of the clock) only the restart (sim.checkpointing)
        gpus = job.pending.gpu_equivalents
        elapsed = max(0.0, now - job.seg_s)
        banked = bank(job.remaining_base_s, job.plan, elapsed, complete, partial)
        lost, remaining = banked.lost_s, banked.remaining_base_s
        if self.dp is not None:
            more_lost, more_work = self._dp_bank(job, banked, elapsed, complete, partial)
            lost, remaining = lost + more_lost, remaining + more_work
        job.remaining_base_s = remaining
        job.checkpoint_gpu_s += banked.checkpoints * job.plan[3] * gpus
        return lost * gpus

    def _dp_bank(self, job: SimJob, banked: Banked, elapsed: float, complete: bool,
                 partial: bool) -> tuple[float, float]:
        """The data path's part of ending an attempt: book its steps and checkpoints, and
        on a failure before the next checkpoint lose the work banked at earlier re-rates
        too. Returns the extra wall seconds lost and reference work to redo."""
        assert self.dp is not None
        restart, speed, _, delta = job.plan
        if complete:
            work = job.remaining_base_s * speed
        else:
            work = max(0.0, elapsed - min(elapsed, restart) - banked.checkpoints * delta)
        self.dp.account(int(job.pending.id), work, banked.checkpoints, delta)
        lost = redo = 0.0
        if not (complete or partial) and banked.checkpoints == 0:
            lost, redo = job.unsaved_wall_s, job.unsaved_base_s
        job.unsaved_base_s = job.unsaved_wall_s = 0.0
        return lost, redo

    def _rebase(self, job: SimJob, now: float) -> float:
        """Bank a running attempt's work up to ``now`` at its current rate, to go on at
        another; returns the restart still to pay. The segment in flight counts as done
        but unsaved (a later failure before the next checkpoint loses it), a checkpoint
        being written is dropped and the next falls an interval after ``now``, and the
        restart is not paid again (docs/twin.md, "The data path")."""
        assert self.dp is not None
        restart, speed, tau, delta = job.plan
        elapsed = max(0.0, now - job.seg_s)
        b = bank(job.remaining_base_s, job.plan, elapsed, complete=False, partial=True)
        done_wall = (job.remaining_base_s - b.remaining_base_s) * speed
        in_flight = max(0.0, done_wall - b.checkpoints * tau) if math.isfinite(tau) else done_wall
        if b.checkpoints:
            job.unsaved_wall_s = in_flight
            job.unsaved_base_s = in_flight / speed
        else:
            job.unsaved_wall_s += in_flight
            job.unsaved_base_s += in_flight / speed
        self.dp.account(int(job.pending.id), done_wall, b.checkpoints, delta)
        job.checkpoint_gpu_s += b.checkpoints * delta * job.pending.gpu_equivalents
        job.remaining_base_s = b.remaining_base_s
        return max(0.0, restart - elapsed)

    def _settle(self, now: float) -> None:
        """After an instant's events and decisions: re-rate the running jobs whose share of
        a resource changed (a start, an end) or whose checkpoint cost did, once each."""
        assert self.dp is not None
        touched = self._touched | self.dp.settle()
        self._touched = set()
        if touched:
            self._rerate(touched, now)

    def _rerate(self, jids: set[int], now: float) -> None:
        """Running jobs whose share of a resource (or checkpoint cost) changed: apply the
        new rate where it moved by more than ``RERATE_TOLERANCE``, and move their
        completion."""
        dp = self.dp
        assert dp is not None
        for jid in sorted(jids):
            job = self.jobs[JobId(jid)]
            if job.outcome != "running" or job.goodput is not None:
                continue
            restart, old_speed, tau, old_delta = job.plan
            speed = dp.slowdown(jid)
            delta = dp.delta(jid)
            delta = old_delta if delta is None else delta
            if (math.isclose(speed, old_speed, rel_tol=RERATE_TOLERANCE)
                    and math.isclose(delta, old_delta, rel_tol=RERATE_TOLERANCE)):
                dp.totals.rerates_skipped += 1
                continue
            old_end = job.start_s + job.run_s
            restart = self._rebase(job, now)
            job.plan = (restart, speed, tau, delta)
            dp.applied(jid)
            dp.totals.rerates += 1
            job.seg_s = now
            job.epoch += 1
            end = now + self._attempt_wall(job.remaining_base_s, job.plan)
            job.run_s = end - job.start_s
            self.events.push(end, EventKind.COMPLETE, (job.pending.id, job.attempt, job.epoch))
            limit = job.pending.limit_s
            if limit is not None and old_end <= job.start_s + limit < end:
                self.events.push(max(now, job.start_s + limit), EventKind.WAKE)

    def _release(self, job: SimJob, now: float) -> RunningJob:
        for n in job.placed_nodes:
            self.node_jobs[n].discard(job.pending.id)
        job.placed_nodes = ()
        run = self.state.finish(job.pending.id, now)
        if self.dp is not None:
            self._touched |= self.dp.end(int(job.pending.id))
        return run

    def _node_failed(self, failure: NodeFailure, now: float) -> None:
        """A failure becomes a health signal; the health table decides, as it does live."""
        assert self.health is not None and self.config.failures is not None
        state = self.state
        node = failure.node
        name = self.topo.nodes[node].name
        decisions = self.health.observe(failure_signal(failure, name, now))
        if not decisions:
            return  # out of service already, or informational
        self.metrics.node_failures += 1
        drained = any(isinstance(d, DrainNode) for d in decisions)
        for d in decisions:
            if isinstance(d, LemonFlagged):
                self.metrics.lemons_flagged += 1
            elif isinstance(d, BreakerTripped):
                self.metrics.breaker_trips += 1
        if drained:
            state.set_node_usable(node, False)
        for d in decisions:
            if isinstance(d, RestartJobs):
                kind = FailureKind.NODE if d.node_at_fault else FailureKind.APPLICATION
                for jid in sorted(self.node_jobs.get(node, ())):
                    self._job_failed(self.jobs[jid], node, kind, now)
        if drained:
            self._follow_health(node, self.health.jobs_left(name, now), now)

    def _follow_health(self, node: int, decisions: list, now: float) -> None:
        """Diagnostics take time on the virtual clock; a passed level 3 returns the node."""
        f = self.config.failures
        assert f is not None
        for d in decisions:
            if isinstance(d, RunDiagnostic):
                wait = f.level3_s if d.level >= 3 else max(0.0, f.repair_s - f.level3_s)
                self.events.push(now + wait, EventKind.NODE_RETURN, (node, d.level))
            elif isinstance(d, ReturnNode):
                self.state.set_node_usable(node, True)

    def _diagnostic_done(self, node: int, level: int, now: float) -> None:
        assert self.health is not None
        name = self.topo.nodes[node].name
        self._follow_health(node, self.health.diagnostic_result(name, True, now, level), now)

    def _job_failed(self, job: SimJob, node: int, kind: FailureKind, now: float) -> None:
        before = job.remaining_base_s
        lost = self._bank(job, now, complete=False)
        progressed = job.remaining_base_s < before
        run = self._release(job, now)
        job.failures += 1
        job.lost_gpu_s += lost
        self.metrics.job_failures += 1
        attempt = FailedAttempt(kind, node, now - job.start_s, first_attempt=job.attempt == 0,
                                progressed=progressed,
                                restarts_without_progress=job.stalled)
        decision = on_failure(job.pending, attempt, self.config.restart_policy)
        job.stalled = decision.stalled_restarts
        if decision.job is None:
            self._ended(job, now, "failed")
            return
        job.attempt += 1
        job.outcome = "pending"
        job.pending = decision.job
        self._requeue_estimate(job)
        job.pending.attained_gpu_s = run.attained_gpu_s
        self.state.submit(job.pending)
        self.metrics.restarts += 1

    def _requeue_estimate(self, job: SimJob) -> None:
        """A requeued job's estimate for its next attempt. Only the ``exact`` oracle knows
        the remaining work; a user's limit stays the job's limit (Slurm keeps ``--time``
        for the new attempt), and no estimate stays none."""
        if self.config.estimates is EstimateModel.EXACT and job.pending.estimate_s is not None:
            job.pending.estimate_s = job.remaining_base_s

    def _apply(self, result: DecideResult, now: float) -> None:
        state = self.state
        for stop in result.stops:
            job = self.jobs[stop.job_id]
            self._bank(job, now, complete=False)
            self._release(job, now)
            self._ended(job, now, str(stop.reason))
        for p in result.preemptions:
            job = self.jobs[p.job_id]
            self._bank(job, now, complete=False, partial=True)  # planned: it checkpoints first
            run = self._release(job, now)
            state.record_preemption(run.tenant, now)
            job.attempt += 1
            job.preemptions += 1
            job.outcome = "pending"
            self._requeue_estimate(job)
            state.requeue(run)
            self.metrics.preemptions += 1
        topo = self.topo
        for s in result.starts:
            job = self.jobs[s.job_id]
            state.start(s.job_id, s.placement, now, s.borrowing)
            nodes = s.placement.nodes(topo)
            job.placed_nodes = tuple(nodes)
            for n in nodes:
                self.node_jobs.setdefault(n, set()).add(job.pending.id)
            if job.goodput is not None:
                assert self.config.goodput is not None
                job.run_s = self.config.goodput.start(job.goodput, topo, s.placement)
            else:
                slowdown = self.model.run_time(topo, s.placement, 1.0)
                rated = None
                if self.dp is not None:
                    rated = self.dp.start(int(s.job_id), job.trace, s.placement,
                                          job.pending.gpu_equivalents)
                if rated is not None:
                    slowdown, touched = rated
                    self._touched |= touched
                job.plan = self._plan(job, slowdown)
                if rated is not None:
                    self._dp_checkpoints(job, now)
                job.run_s = self._attempt_wall(job.remaining_base_s, job.plan)
            job.start_s = job.seg_s = now
            job.outcome = "running"
            if math.isnan(job.first_start_s):
                job.first_start_s = now
                job.nodes = len(nodes)
                if len(nodes) > 1:
                    job.leaves = len({topo.nodes[n].leaf for n in nodes})
                    job.min_leaves = topo.min_leaves_for(
                        -(-len(s.placement.gpus) // self.model.gpus_per_node),
                        self.model.nodes_per_leaf)
            self.events.push(now + job.run_s, EventKind.COMPLETE,
                             (job.pending.id, job.attempt, job.epoch))
            limit = job.pending.limit_s
            if limit is not None and limit < job.run_s:
                self.events.push(now + limit, EventKind.WAKE)

    def _dp_checkpoints(self, job: SimJob, now: float) -> None:
        """A starting attempt that checkpoints while the file system's writes are modelled:
        its (harmonic) interval, and its write alone as the cost until the instant settles
        (``_settle`` re-rates it and the others from the burst model)."""
        assert self.dp is not None
        restart, speed, tau, _ = job.plan
        if self.dp.models_writes and math.isfinite(tau):
            tau, delta = self.dp.checkpointing(int(job.pending.id), tau, now)
            job.plan = (restart, speed, tau, delta)

    def _ended(self, job: SimJob, now: float, outcome: str) -> None:
        job.end_s = now
        job.outcome = outcome
        self.metrics.ended += 1

    def _apply_cloud_effects(self, effects: list[TwinEffect], now: float) -> None:
        """Carry out what ``TwinCloud`` asks for, in its order. The adapter only reads the
        data it is given, so whatever changes the replay (usable nodes, queues, events,
        failed jobs, metrics) happens here, in the simulation's own methods."""
        for e in effects:
            if isinstance(e, WakeAt):
                self.events.push(e.at, EventKind.WAKE)
            elif isinstance(e, SetNodesUsable):
                for n in e.nodes:
                    self.state.set_node_usable(n, e.usable)
            elif isinstance(e, PreemptSpot):
                for jid in e.job_ids:  # a gang on two preempted nodes fails once
                    job = self.jobs[jid]
                    if job.outcome == "running":
                        self._job_failed(job, e.node, FailureKind.PREEMPTED, now)
            elif isinstance(e, RouteJob):
                requeue_with_pools(self.state, e.job_id, e.pools)
            elif isinstance(e, CountRentedGpus):
                self.metrics.count_cloud(e.gpus, e.provisioned_gpus, e.usd_per_hour)
            else:
                raise TypeError(f"not a bursting effect: {e!r}")
