"""The what-if job's attempts from one seeded replay, banked under every checkpoint interval.

``grace whatif`` asks the same question of one seed under several checkpoint
intervals, and the interval changes how much of each attempt is kept, never when
the job fails, restarts, or which nodes it holds:

- failures are drawn up front from the seed and the topology (``sim.failures``);
- what a failure does (drain, diagnose, return; restart the job) is the health
  table's answer to the signal, whatever the job had banked;
- the job asks for ten times the horizon, so it never completes inside it;
- a restart is decided alike whatever was banked, except that a job failing again
  and again without a new checkpoint exhausts its restart budget. The replay
  restarts it (as if it had progressed) and ``bank_interval`` applies the real
  verdict per interval, ending the job where the engine would.

So one replay per seed and spare count gives the attempts (start, end, slowdown,
why it ended), and each interval's ETTR is the engine's own banking
(``sim.checkpointing``) over them: 8 replays instead of 32 for the README's
question, same numbers (``tests/sim/test_whatif.py`` holds them equal to
``Simulation``'s).

The replay is driven as ``Simulation`` drives core: failures become health signals
for ``core.health.HealthMonitor``, its drains and diagnostics run on the virtual
clock, restarts come from ``core.restart.on_failure`` and placements from
``core.scheduler.decide``. With one job on an otherwise idle cluster, decide's
answer depends only on which nodes are usable and which the job excludes, so it is
worked out once per such set: placing 16,384 GPUs costs about 10 ms, and most of
the old replays' time went to placing, allocating and releasing them again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from grace.core.health import DrainNode, HealthMonitor, RestartJobs, ReturnNode, RunDiagnostic
from grace.core.jobs import PendingJob
from grace.core.policies import QueuePolicy
from grace.core.restart import FailedAttempt, FailureKind, RestartPolicy, on_failure
from grace.core.scheduler import decide
from grace.core.state import SchedulerState
from grace.core.topology import Topology
from grace.sim.checkpointing import bank, failure_plan
from grace.sim.engine import TraceCompiler
from grace.sim.estimates import EstimateModel
from grace.sim.events import EventKind, EventQueue
from grace.sim.failures import FailureModel, NodeFailure, draw_failures, failure_signal
from grace.sim.runtime_model import RuntimeModel
from grace.sim.traces.model import TraceJob


@dataclass(frozen=True, slots=True)
class Attempt:
    """One run of the job: ``kind`` is None when the clock stopped it at the horizon."""

    start_s: float
    end_s: float
    slowdown: float
    kind: FailureKind | None = None
    node: int | None = None


@dataclass(frozen=True)
class Timeline:
    """Every attempt of one replay, and the job as it was first queued."""

    job: PendingJob
    duration_s: float
    horizon_s: float
    attempts: tuple[Attempt, ...]


class _Replay:
    """One replay's state: the engine's loop cut down to one job that never completes."""

    def __init__(self, topo: Topology, job: PendingJob, policy: QueuePolicy,
                 restart: RestartPolicy, failures: FailureModel) -> None:
        self.topo = topo
        self.failures = failures
        self.state = SchedulerState(topo, policy)
        self.health = HealthMonitor([n.name for n in topo.nodes])
        self.model = RuntimeModel.for_topology(topo)
        self.restart = restart
        self.events = EventQueue()
        self.job = job
        self.attempts: list[Attempt] = []
        self.down: set[int] = set()
        self.placed: dict[tuple, tuple[frozenset[int], float] | None] = {}
        self.running: tuple[float, frozenset[int], float] | None = None  # start, nodes, slowdown
        self.pending = False
        self.ended = False

    # ------------------------------------------------------------------ attempts
    def try_start(self, now: float) -> None:
        key = (frozenset(self.down), self.job.exclude_nodes)
        if key not in self.placed:
            result = decide(self.state, now)
            if result.starts:
                (start,) = result.starts
                self.placed[key] = (frozenset(start.placement.nodes(self.topo)),
                                    self.model.run_time(self.topo, start.placement, 1.0))
            else:
                self.placed[key] = None
        placed = self.placed[key]
        if placed is not None:
            self.state.withdraw(self.job.id)
            self.pending = False
            self.running = (now, *placed)

    def job_failed(self, kind: FailureKind, node: int, now: float) -> None:
        assert self.running is not None
        start, _, slowdown = self.running
        self.attempts.append(Attempt(start, now, slowdown, kind, node))
        self.running = None
        # as if the attempt had progressed: the budget is the interval's (bank_interval)
        decision = on_failure(self.job, FailedAttempt(
            kind, node, now - start, first_attempt=len(self.attempts) == 1, progressed=True,
            restarts_without_progress=0), self.restart)
        if decision.job is None:
            self.ended = True
            return
        self.job = decision.job
        self.state.submit(self.job)
        self.pending = True

    # ------------------------------------------------------------------ nodes
    def node_failed(self, failure: NodeFailure, now: float) -> None:
        node = failure.node
        name = self.topo.nodes[node].name
        decisions = self.health.observe(failure_signal(failure, name, now))
        drained = any(isinstance(d, DrainNode) for d in decisions)
        if drained:
            self.set_usable(node, False)
        for d in decisions:
            if isinstance(d, RestartJobs) and self.running is not None and node in self.running[1]:
                kind = FailureKind.NODE if d.node_at_fault else FailureKind.APPLICATION
                self.job_failed(kind, node, now)
        if drained:
            self.follow_health(node, self.health.jobs_left(name, now), now)

    def follow_health(self, node: int, decisions: list, now: float) -> None:
        """Diagnostics take time on the virtual clock; a passed level 3 returns the node."""
        f = self.failures
        for d in decisions:
            if isinstance(d, RunDiagnostic):
                wait = f.level3_s if d.level >= 3 else max(0.0, f.repair_s - f.level3_s)
                self.events.push(now + wait, EventKind.NODE_RETURN, (node, d.level))
            elif isinstance(d, ReturnNode):
                self.set_usable(node, True)

    def set_usable(self, node: int, usable: bool) -> None:
        self.state.set_node_usable(node, usable)
        if usable:
            self.down.discard(node)
        else:
            self.down.add(node)

    # ------------------------------------------------------------------ loop
    def run(self, horizon_s: float, seed: int,
            progress: Callable[[float], None] | None) -> None:
        drawn, _ = draw_failures(self.topo, self.failures, horizon_s, seed)
        for f in drawn:
            self.events.push(f.at_s, EventKind.NODE_FAIL, f)
        self.events.push(0.0, EventKind.ARRIVE)
        events = self.events
        shown = 0.0
        while len(events):
            now = events.peek_time()
            assert now is not None
            if now > horizon_s or self.ended:
                break
            while len(events) and events.peek_time() == now:
                _, kind, payload = events.pop()
                if kind == EventKind.ARRIVE:
                    self.state.submit(self.job)
                    self.pending = True
                elif kind == EventKind.NODE_FAIL:
                    self.node_failed(payload, now)
                elif kind == EventKind.NODE_RETURN:
                    node, level = payload
                    name = self.topo.nodes[node].name
                    self.follow_health(node, self.health.diagnostic_result(name, True, now, level),
                                       now)
            if self.pending:
                self.try_start(now)
            if progress is not None and now - shown >= horizon_s / 100:
                shown = now
                progress(now / horizon_s)
        if self.running is not None:
            start, _, slowdown = self.running
            self.attempts.append(Attempt(start, horizon_s, slowdown))
        if progress is not None:
            progress(1.0)


def replay_attempts(topo: Topology, gpus: int, failures: FailureModel, horizon_s: float,
                    seed: int, policy: QueuePolicy, restart: RestartPolicy,
                    progress: Callable[[float], None] | None = None) -> Timeline:
    """The attempts of one job of ``gpus`` GPUs on ``topo`` for ``horizon_s``, as
    ``Simulation`` would play them with this seed (``failures``' interval aside)."""
    duration = horizon_s * 10
    trace = TraceJob("whatif", 0.0, duration, gpus, preemptible=False)
    job = TraceCompiler(topo, EstimateModel.NONE, seed=seed).compile(trace, 0)
    if job is None:
        raise ValueError(f"a job of {gpus} GPUs does not fit the what-if cluster")
    replay = _Replay(topo, job, policy, restart, failures)
    replay.run(horizon_s, seed, progress)
    return Timeline(job, duration, horizon_s, tuple(replay.attempts))


def bank_interval(timeline: Timeline, failures: FailureModel,
                  restart: RestartPolicy) -> dict[str, float]:
    """One interval's outcome from the attempts, as ``Simulation`` banks them: ETTR (useful
    share of the horizon), failures, and the job's GPU-hours lost (``failures`` carries
    the interval; the job ends where its restart budget would end it)."""
    job = timeline.job
    gpus = job.gpu_equivalents
    remaining = timeline.duration_s
    stalled = 0
    failed = 0
    for i, a in enumerate(timeline.attempts):
        plan = failure_plan(failures, gpus, i, a.slowdown)
        elapsed = max(0.0, a.end_s - a.start_s)
        if a.kind is None:
            remaining = bank(remaining, plan, elapsed, complete=False, partial=True).remaining_base_s
            break
        before = remaining
        remaining = bank(remaining, plan, elapsed, complete=False).remaining_base_s
        failed += 1
        decision = on_failure(job, FailedAttempt(
            a.kind, a.node, a.end_s - a.start_s, first_attempt=i == 0,
            progressed=remaining < before, restarts_without_progress=stalled), restart)
        stalled = decision.stalled_restarts
        if decision.job is None:
            break
        job = decision.job
    useful = timeline.duration_s - remaining
    horizon = timeline.horizon_s
    assert math.isfinite(useful)
    return {"ettr": useful / horizon, "failures": float(failed),
            "lost_gpu_hours": gpus * (horizon - useful) / 3600.0}
