"""One scenario, two drivers: the twin's ``Simulation`` and the live ``Reconciler``.

A scenario file (``scenarios/*.yaml``) says what happens to a small cluster:
jobs that arrive (with their true durations, which only the world knows, never
the scheduler), health signals that nodes report, and how long it runs. Both
drivers play it:

- the twin: trace jobs and scripted node signals (``NODE_FAIL`` events carrying
  the signal) on the virtual clock, with a failure model that draws nothing
  itself, no checkpoints (a restarted job runs again in full, as the scripted
  backend's does) and no restart overhead;
- live: a ``Reconciler`` on a SQLite store with the scripted backend and a fake
  clock; at each instant the clock is set, jobs are submitted, attempts whose
  time is up are finished, signals are posted to the API's table, then it
  cycles until nothing changes (a real backend takes a cycle or two longer to
  report; the decisions, not their latency, are the contract). Attempts run for
  the same ``RuntimeModel`` time the twin gives their placement, and the same
  diagnostic durations.

Each returns a ``Trace`` of decisions: jobs started (and on which nodes),
preempted, failed and requeued, completed; node moves; breaker trips; lemons.
The contract test asserts the two are equal.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grace.control.diagnostics import TimedDiagnostics
from grace.control.node_health import HealthConfig
from grace.control.reconciler import Reconciler
from grace.control.snapshot import nodes_to_placement
from grace.control.store import repository as repo
from grace.control.store import workflow as flows
from grace.control.store.db import Store
from grace.control.store.models import AttemptState, BreakerEvent, JobEventKind, JobState
from grace.core.capacity import Placement
from grace.core.health import BreakerConfig, HealthTable, LemonConfig, NodeState
from grace.core.jobs import JobId
from grace.core.policies import get_policy
from grace.core.quotas import TenantQuota
from grace.core.restart import RestartPolicy
from grace.core.topology import Topology
from grace.sim.engine import SimConfig, Simulation
from grace.sim.estimates import EstimateModel
from grace.sim.events import EventKind
from grace.sim.failures import FailureCause, FailureModel, NodeFailure
from grace.sim.runtime_model import RuntimeModel
from grace.sim.traces.model import TraceJob
from grace.spec.cluster import ClusterSpec
from grace.spec.loader import parse_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "control"))
from helpers import FakeClock, ScriptedBackend, add_job, job_spec

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
T0 = 1_700_000_000.0  # the live clock's origin; scenario times are seconds after it
REPAIR_S, LEVEL3_S = 3600.0, 900.0  # drain to return, and its last part (the twin's model)


@dataclass(frozen=True)
class ScenarioJob:
    name: str
    at: float
    gpus: int
    duration: float
    tenant: str = "default"
    priority: int = 0
    preemptible: bool = False
    # Slurm's workflows: after: [{afterok: a}], submitted held until release_at (never
    # without one), a job array's group name and its %N limit (tasks index in file order)
    after: tuple[tuple[str, str], ...] = ()
    hold: bool = False
    release_at: float | None = None
    array: str | None = None
    limit: int | None = None

    @classmethod
    def read(cls, row: dict[str, Any]) -> ScenarioJob:
        after = tuple((k, str(v)) for d in row.pop("after", None) or () for k, v in d.items())
        return cls(**row, after=after)


@dataclass(frozen=True)
class ScenarioSignal:
    at: float
    node: str
    signal: str  # a health-table key: xid:79, straggler, thermal-throttle, ...


@dataclass
class Scenario:
    name: str
    why: str
    cluster: ClusterSpec
    policy: str
    jobs: list[ScenarioJob]
    signals: list[ScenarioSignal]
    horizon: float
    quotas: dict[str, TenantQuota] = field(default_factory=dict)
    expect: dict[str, Any] = field(default_factory=dict)
    breaker_share: float = 0.20

    @classmethod
    def load(cls, path: Path) -> Scenario:
        data = yaml.safe_load(path.read_text())
        quotas = {t: TenantQuota(**q) for t, q in (data.get("tenants") or {}).items()}
        return cls(name=path.stem, why=data["why"], cluster=parse_cluster(data["cluster"], str(path)),
                   policy=data.get("policy", "grace"),
                   jobs=[ScenarioJob.read(dict(j)) for j in data.get("jobs") or ()],
                   signals=[ScenarioSignal(**s) for s in data.get("signals") or ()],
                   horizon=float(data["horizon"]), quotas=quotas, expect=data.get("expect") or {},
                   breaker_share=float(data.get("breaker_share", 0.20)))

    @property
    def instants(self) -> list[float]:
        return sorted({j.at for j in self.jobs} | {s.at for s in self.signals}
                      | {j.release_at for j in self.jobs if j.release_at is not None})

    def array_index(self, job: ScenarioJob) -> int:
        return [j.name for j in self.jobs if j.array == job.array].index(job.name)


@dataclass
class Trace:
    """The decisions of one run, in the order they were made."""

    starts: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (job, cause)
    outcomes: dict[str, str] = field(default_factory=dict)  # job -> its state at the horizon
    node_moves: dict[str, list[str]] = field(default_factory=dict)  # node -> states moved to
    breaker_trips: int = 0
    lemons: list[str] = field(default_factory=list)
    max_running: dict[str, int] = field(default_factory=dict)  # array -> most tasks at once

    def running(self, groups: dict[str, int]) -> None:
        for group, n in groups.items():
            self.max_running[group] = max(self.max_running.get(group, 0), n)

    def summary(self) -> dict[str, Any]:
        return {"max_running": dict(sorted(self.max_running.items())),
                "starts": self.starts, "preempted": self.preempted, "failures": self.failures,
                "outcomes": self.outcomes,
                "node_moves": {n: m for n, m in sorted(self.node_moves.items()) if m},
                "breaker_trips": self.breaker_trips, "lemons": sorted(self.lemons)}


def _restart_policy() -> RestartPolicy:
    return RestartPolicy()  # the same in both worlds: failed nodes excluded, 300 s user window


def _health(sc: Scenario) -> tuple[HealthTable, BreakerConfig, LemonConfig]:
    return HealthTable.default(), BreakerConfig(max_share=sc.breaker_share), LemonConfig()


# ---------------------------------------------------------------- the twin
class _RecordingSimulation(Simulation):
    def __init__(self, *args: Any, trace: Trace, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.trace = trace

    def _apply(self, result, now):  # type: ignore[no-untyped-def]
        topo = self.topo
        for p in result.preemptions:
            self.trace.preempted.append(self.jobs[p.job_id].trace.job_id)
        for s in result.starts:
            nodes = tuple(sorted(topo.nodes[n].name for n in s.placement.nodes(topo)))
            self.trace.starts.append((self.jobs[s.job_id].trace.job_id, nodes))
        super()._apply(result, now)
        groups: dict[str, int] = {}
        for j in self.jobs.values():
            if j.trace.array_group and j.outcome == "running":
                groups[j.trace.array_group] = groups.get(j.trace.array_group, 0) + 1
        self.trace.running(groups)

    def _job_failed(self, job, node, kind, now):  # type: ignore[no-untyped-def]
        self.trace.failures.append((job.trace.job_id, kind.value))
        super()._job_failed(job, node, kind, now)


def run_twin(sc: Scenario) -> Trace:
    topo = Topology.from_spec(sc.cluster)
    jobs = [TraceJob(job_id=j.name, submit_s=j.at, duration_s=j.duration, gpus=j.gpus,
                     tenant=j.tenant, priority=j.priority, preemptible=j.preemptible,
                     after=j.after, array_group=j.array, array_limit=j.limit,
                     array_index=sc.array_index(j) if j.array else 0,
                     release_s=(j.release_at if j.release_at is not None else math.inf)
                     if j.hold else None)
            for j in sc.jobs]
    failures = FailureModel(gpu_mtbf_h=1e18, repair_s=REPAIR_S, level3_s=LEVEL3_S, restart_s=0.0,
                            checkpoint_s=0.0, checkpoint_interval_s=math.inf)
    table, breaker, lemons = _health(sc)
    config = SimConfig(policy=get_policy(sc.policy), quotas=sc.quotas, estimates=EstimateModel.NONE,
                       failures=failures, restart_policy=_restart_policy(), until_s=sc.horizon,
                       health_table=table)
    trace = Trace()
    sim = _RecordingSimulation(topo, jobs, config, trace=trace)
    assert sim.health is not None
    sim.health.breaker, sim.health.lemon_rule = breaker, lemons
    for s in sc.signals:
        cause = FailureCause(f"scripted {s.signal}", 1, True, s.signal)
        sim.events.push(s.at, EventKind.NODE_FAIL, NodeFailure(s.at, topo.by_name[s.node], cause))
    sim.run()
    for j in sim.jobs.values():
        trace.outcomes[j.trace.job_id] = {"completed": "completed", "running": "running",
                                          "pending": "pending", "cancelled": "cancelled"
                                          }.get(j.outcome, "failed")
    for n in topo.nodes:
        trace.node_moves[n.name] = [t.to_state.value for t in sim.health.history(n.name)
                                    if t.from_state is not t.to_state]
    trace.breaker_trips = sum(1 for _, _, what in sim.health.breaker_log if what == "tripped")
    trace.lemons = sim.health.lemons()
    return trace


# ---------------------------------------------------------------- live
class _LiveRun:
    def __init__(self, sc: Scenario, state_dir: Path) -> None:
        self.sc = sc
        self.clock = FakeClock(T0)
        self.topo = Topology.from_spec(sc.cluster)
        self.model = RuntimeModel.for_topology(self.topo)
        self.store = Store.open(f"sqlite:///{state_dir / 'grace.sqlite'}")
        self.backend = ScriptedBackend(sc.cluster)
        table, breaker, lemons = _health(sc)
        diag = TimedDiagnostics({2: REPAIR_S - LEVEL3_S, 3: LEVEL3_S})
        self.rec = Reconciler(self.store, self.backend, self.topo, get_policy(sc.policy),
                              state_dir, clock=self.clock, restart_policy=_restart_policy(),
                              health=HealthConfig(table, breaker, lemons), diagnostics=diag)
        with self.store.transaction() as s:
            for tenant, q in sc.quotas.items():
                repo.set_quota(s, tenant, _finite(q.guaranteed_gpus),
                               _finite(q.borrow_limit_gpus), q.weight, q.preemptions_per_hour)
        self.ids: dict[int, str] = {}
        self.duration = {j.name: j.duration for j in sc.jobs}
        self.ends: dict[tuple[int, int], float] = {}  # live attempt -> when its work is done
        self.seen_launches = 0
        self.max_running = Trace()  # only its max_running: tasks of each array at once

    def at(self, t: float) -> None:
        self.clock.now = T0 + t

    def play(self) -> Trace:
        todo = sorted(self.sc.instants)
        while True:
            nxt = min([*todo[:1], *(e - T0 for e in self.ends.values()),
                       *(d - T0 for d in self._diagnostics_due())], default=None)
            if nxt is None or nxt > self.sc.horizon:
                break
            self.at(nxt)
            while todo and todo[0] <= nxt:
                todo.pop(0)
            self._events(nxt)
            self._settle()
        self.at(self.sc.horizon)
        self._settle()
        return self._trace()

    def _diagnostics_due(self) -> list[float]:
        with self.store.read() as s:
            return [n.diagnostic_due for n in repo.nodes(s) if n.diagnostic_due is not None]

    def _events(self, t: float) -> None:
        named = {name: jid for jid, name in self.ids.items()}
        arrays: dict[str, list[ScenarioJob]] = {}
        for j in self.sc.jobs:
            if j.at == t and j.array:
                arrays.setdefault(j.array, []).append(j)
            elif j.at == t:
                deps = [{"kind": k, "job": named[p]} for k, p in j.after]
                jid = add_job(self.store, self.clock(), j.name, j.gpus, tenant=j.tenant,
                              priority=j.priority, preemptible=j.preemptible,
                              dependency=deps, hold=j.hold)
                self.ids[jid] = j.name
        for tasks in arrays.values():  # one group per array, as POST /jobs stores one
            with self.store.transaction() as s:
                specs = [job_spec(j.name, j.gpus, tenant=j.tenant, priority=j.priority,
                                  preemptible=j.preemptible) for j in tasks]
                group = repo.add_job_group(s, specs, tasks[0].limit, self.clock(),
                                           indices=[self.sc.array_index(j) for j in tasks])
                self.ids |= {row.id: j.name for row, j in zip(group, tasks, strict=True)}
        for j in self.sc.jobs:
            if j.hold and j.release_at == t:
                with self.store.transaction() as s:
                    flows.release(s, repo.require_job(s, named[j.name]), self.clock())
        for key, end in list(self.ends.items()):
            if end <= self.clock() and key in self.backend.watching:
                self.backend.finish(key[0], attempt=key[1])
                del self.ends[key]
        with self.store.transaction() as s:
            for sig in self.sc.signals:
                if sig.at == t:
                    kind, _, code = sig.signal.partition(":")
                    repo.add_signal(s, sig.node, kind, self.clock(), int(code) if code.isdigit()
                                    else None, "scripted")

    def _settle(self) -> None:
        """Cycle until a cycle changes nothing (each a millisecond apart on the clock)."""
        for _ in range(8):
            before = self._fingerprint()
            self.rec.cycle()
            self._note_launches()
            self._count_arrays()
            if self._fingerprint() == before:
                return
            self.clock.advance(0.001)

    def _count_arrays(self) -> None:
        arrays = {j.name: j.array for j in self.sc.jobs if j.array}
        if not arrays:
            return
        groups: dict[str, int] = {}
        with self.store.read() as s:
            for job in repo.jobs_in_states(s, [JobState.RUNNING]):
                group = arrays.get(self.ids.get(job.id, ""))
                if group:
                    groups[group] = groups.get(group, 0) + 1
        self.max_running.running(groups)

    def _note_launches(self) -> None:
        for spec in self.backend.launches[self.seen_launches:]:
            with self.store.read() as s:
                attempt = next(a for a in repo.require_job(s, spec.job_id).attempts
                               if a.number == spec.attempt)
                placement = _placement(self.topo, attempt.placement_json)
            took = self.model.run_time(self.topo, placement, self.duration[self.ids[spec.job_id]])
            self.ends[(spec.job_id, spec.attempt)] = self.clock() + took
        self.seen_launches = len(self.backend.launches)
        for key in [k for k in self.ends if k not in self.backend.watching]:
            del self.ends[key]  # cancelled or lost: it will not finish

    def _fingerprint(self) -> tuple[int, int, int]:
        with self.store.read() as s:
            events = sum(len(repo.events(s, j)) for j in self.ids)
            nodes = sum(len(repo.node_events(s, n.name)) for n in self.topo.nodes)
        return events, nodes, len(self.backend.launches)

    def _trace(self) -> Trace:
        trace = Trace(max_running=self.max_running.max_running)
        with self.store.read() as s:
            rows = []
            for jid, name in self.ids.items():
                for e in repo.events(s, jid):
                    rows.append((e.id, name, e))
            for _, name, e in sorted(rows, key=lambda r: r[0]):
                if e.kind is JobEventKind.PLACED:
                    trace.starts.append((name, tuple(sorted(p["node"] for p in e.detail["nodes"]))))
                elif e.kind is JobEventKind.PREEMPTED:
                    trace.preempted.append(name)
            for jid, name in self.ids.items():
                job = repo.require_job(s, jid)
                for a in job.attempts:
                    if a.state in (AttemptState.FAILED, AttemptState.LOST) and a.failure_kind:
                        trace.failures.append((a.ended_at or 0.0, name, a.failure_kind))
                trace.outcomes[name] = {JobState.COMPLETED: "completed", JobState.RUNNING: "running",
                                        JobState.PENDING: "pending",
                                        JobState.CANCELLED: "cancelled"}.get(job.state, "failed")
            trace.failures = [(n, k) for _, n, k in sorted(trace.failures)]  # type: ignore[misc]
            for n in self.topo.nodes:
                trace.node_moves[n.name] = [e.to_state.value for e in repo.node_events(s, n.name)
                                            if e.from_state is not e.to_state]
            trace.breaker_trips = sum(1 for b in s.query(BreakerEvent) if b.what == "tripped")
            trace.lemons = sorted(n.name for n in repo.nodes(s) if n.lemon)
        return trace

    def close(self) -> None:
        self.store.close()


def run_live(sc: Scenario, state_dir: Path) -> Trace:
    run = _LiveRun(sc, state_dir)
    try:
        return run.play()
    finally:
        run.close()


def _finite(x: float) -> float | None:
    return None if math.isinf(x) else x


def _placement(topo: Topology, nodes: list[dict[str, Any]]) -> Placement:
    return nodes_to_placement(topo, nodes)


__all__ = ["SCENARIOS", "JobId", "NodeState", "Scenario", "Trace", "run_live", "run_twin"]
