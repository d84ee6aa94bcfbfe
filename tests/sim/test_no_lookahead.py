"""No look-ahead: no decision in the twin may use a job's true duration or later arrivals.

A live scheduler knows what submitters declared (size, requested limit, name) and what
it has observed so far; how long a job really runs it learns when the job ends. A twin
whose decisions peek at the truth flatters every policy that uses it. Two checks:

- **the guard**: replays whose jobs keep their true duration behind a property that
  raises unless the reader is the runtime model (the engine setting up a job's work),
  the user model standing for the submitter (``sim.estimates.declare``) or the metrics
  after the run. Failures, bursting with spot preemptions, priorities, timeouts and
  requeues are on, so those paths run.
- **the differential property**: two traces equal in all a submitter declares, with
  different true durations, give identical decisions (classes, routes, starts,
  placements, stops, preemptions, rentals, failure draws) until the first instant at
  which a job ends or fails in either replay. Only then may they differ.

Plus the loaders: a class or sweep label never depends on the duration or on jobs
submitted after the job.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grace.core.decisions import DecideResult
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.sim.bursting import TwinEffect, pool_kinds_of
from grace.sim.engine import SimConfig, SimJob, Simulation
from grace.sim.estimates import EstimateModel
from grace.sim.events import EventKind
from grace.sim.failures import FailureModel
from grace.sim.traces._common import classify, mark_sweeps
from grace.sim.traces.generic_csv import load_csv
from grace.sim.traces.model import TraceJob
from grace.spec.bursting import BurstingSpec
from grace.spec.job import WorkloadClass
from grace.spec.loader import parse_cluster

H100 = "H100-SXM"
HOUR = 3600.0
CLUSTER = parse_cluster({
    "name": "hybrid", "pools": [{"name": "own", "kind": "on-prem"},
                                {"name": "spot", "kind": "cloud"},
                                {"name": "od", "kind": "cloud"}],
    "node_groups": [{"name": "own", "count": 4, "gpu": H100, "pool": "own", "nodes_per_leaf": 2},
                    {"name": "spot", "count": 4, "gpu": H100, "pool": "spot"},
                    {"name": "od", "count": 4, "gpu": H100, "pool": "od"}]})
TOPO = Topology.from_spec(CLUSTER)


def bursting(spot_preemptions_per_hour: float) -> BurstingSpec:
    return BurstingSpec.model_validate({
        "queue_wait_threshold_s": 600, "check_interval_s": 60, "idle_release_s": 600,
        "max_spot_runtime_s": 12 * HOUR, "checkpoint_interval_s": 1800, "restart_s": 300,
        "offers": [
            {"name": "spot", "gpu": H100, "kind": "spot", "usd_per_gpu_hour": 2.0,
             "preemptions_per_hour": spot_preemptions_per_hour, "provisioning_delay_s": 300},
            {"name": "od", "gpu": H100, "kind": "on-demand", "usd_per_gpu_hour": 6.0,
             "provisioning_delay_s": 300}]})


BURSTING = bursting(0.5)
FAILURES = FailureModel(gpu_mtbf_h=400.0, restart_s=300.0, checkpoint_s=30.0, repair_s=2 * HOUR)
POLICIES = ("grace", "easy-backfill", "fifo")

# ------------------------------------------------------------------ the guard
_TRUTH = TraceJob.__dict__["duration_s"]  # the slot that holds the true duration
#: (module, function) that may read it: the runtime model, the user model, the metrics
ALLOWED = {("grace.sim.engine", "Simulation._compile"),
           ("grace.sim.estimates", "declare"),
           ("grace.sim.metrics", "MetricsRecorder._tenants")}


class LookAhead(AssertionError):
    """A decision path read a job's true duration."""


class SealedJob(TraceJob):
    """A TraceJob whose true duration only the allowed readers may see."""

    __slots__ = ()

    @property  # type: ignore[override]
    def duration_s(self) -> float:
        caller = sys._getframe(1)
        who = (caller.f_globals.get("__name__", "?"), caller.f_code.co_qualname)
        if who not in ALLOWED and not who[0].startswith("grace.sim.goodput"):
            raise LookAhead(f"{who[0]}.{who[1]} read the true duration of job {self.job_id}")
        return float(_TRUTH.__get__(self, TraceJob))

    @duration_s.setter
    def duration_s(self, value: float) -> None:
        _TRUTH.__set__(self, value)


def sealed(jobs: list[TraceJob]) -> list[TraceJob]:
    return [SealedJob(**{f: _TRUTH.__get__(j, TraceJob) if f == "duration_s" else getattr(j, f)
                         for f in TraceJob.__dataclass_fields__}) for j in jobs]


def mixed_trace(seed: int, n: int = 60) -> list[TraceJob]:
    """Sizes 1-16 GPUs, minutes to days, priorities, some limits from the trace (some of
    them too short, so jobs time out), the rest left to the user model."""
    rng = np.random.default_rng(seed)
    jobs = []
    for i in range(n):
        duration = float(np.exp(rng.uniform(np.log(300.0), np.log(3 * 86_400.0))))
        limit = None if i % 3 else float(rng.choice([0.5, 1.5, 3.0])) * duration
        jobs.append(TraceJob(
            f"j{i}", float(i * rng.uniform(30, 300)), duration, int(rng.choice([1, 2, 4, 8, 16])),
            tenant=f"t{i % 3}", priority=int(rng.choice([0, 0, 0, 5])),
            preemptible=bool(rng.random() < 0.7), limit_s=limit,
            name="sweep-lr" if i % 7 == 0 else None))
    return jobs


def test_the_guard_catches_a_reader() -> None:
    (job,) = sealed([TraceJob("x", 0.0, 100.0, 8)])
    with pytest.raises(LookAhead, match="test_the_guard_catches_a_reader"):
        classify(job.gpus, job.duration_s)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("model", [EstimateModel.USER, EstimateModel.NONE])
def test_no_decision_path_reads_a_true_duration(policy: str, model: EstimateModel) -> None:
    jobs = sealed(mixed_trace(3))
    config = SimConfig(policy=get_policy(policy), seed=5, estimates=model, failures=FAILURES,
                       bursting=BURSTING, pool_kinds=pool_kinds_of(CLUSTER))
    sim = Simulation(TOPO, jobs, config)
    sim.metrics.set_horizon(HOUR)
    s = sim.run().summary  # raises LookAhead on a forbidden read
    # the paths this is meant to cover did run
    assert s["jobs_completed"] > 0 and s["restarts"] > 0 and s["burst_jobs"] > 0
    if model is EstimateModel.USER:
        assert s["jobs_timed_out"] > 0


# ------------------------------------------------------------------ the differential property
class Recorder(Simulation):
    """A replay that writes down every decision with its instant."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.log: list[tuple[float, str, Any]] = []
        self.first_end = math.inf
        super().__init__(*args, **kwargs)
        for j in self.jobs.values():
            p = j.pending
            self.log.append((0.0, "declared", (j.trace.job_id, str(p.workload_class), p.pools,
                                               p.estimate_s, p.limit_s)))
        # the failure schedule is drawn before the clock starts: all of it must match
        self.log.extend((0.0, "failure-draw", f) for _, kind, _, f in sorted(self.events._heap)
                        if kind == EventKind.NODE_FAIL)

    def _name(self, jid: Any) -> str:
        return self.jobs[jid].trace.job_id

    def _apply(self, result: DecideResult, now: float) -> None:
        for s in result.starts:
            self.log.append((now, "start", (self._name(s.job_id), s.placement.gpus,
                                            s.placement.slices, s.borrowing)))
        for st_ in result.stops:
            self.log.append((now, "stop", (self._name(st_.job_id), str(st_.reason))))
        for p in result.preemptions:
            self.log.append((now, "preempt", self._name(p.job_id)))
        super()._apply(result, now)

    def _apply_cloud_effects(self, effects: list[TwinEffect], now: float) -> None:
        for e in effects:
            self.log.append((now, type(e).__name__, repr(e)))
        super()._apply_cloud_effects(effects, now)

    def _job_failed(self, job: SimJob, node: int, kind: Any, now: float) -> None:
        self.first_end = min(self.first_end, now)
        super()._job_failed(job, node, kind, now)

    def _ended(self, job: SimJob, now: float, outcome: str) -> None:
        self.first_end = min(self.first_end, now)
        super()._ended(job, now, outcome)


# failures and spot preemptions rare enough that the window before the first end is long
# (a failure that kills a job closes it), still drawn so their draws are compared
RARE_FAILURES = FailureModel(gpu_mtbf_h=20_000.0, restart_s=300.0, checkpoint_s=30.0)
CALM_BURSTING = bursting(0.0)


def replay_log(jobs: list[TraceJob], policy: str, seed: int) -> Recorder:
    config = SimConfig(policy=get_policy(policy), seed=seed, estimates=EstimateModel.USER,
                       failures=RARE_FAILURES, bursting=CALM_BURSTING,
                       pool_kinds=pool_kinds_of(CLUSTER))
    sim = Recorder(TOPO, jobs, config)
    sim.metrics.set_horizon(HOUR)
    sim.run()
    return sim


def twin_traces(seed: int) -> tuple[list[TraceJob], list[TraceJob]]:
    """Same declarations (submit, size, tenant, priority, limit, name); true durations
    drawn twice, each under the limit or past it. Durations are long and arrivals dense,
    so many decisions (starts, queueing, bursts) come before the first end."""
    rng = np.random.default_rng(seed)
    declared = []
    for i in range(40):
        declared.append(dict(job_id=f"j{i}", submit_s=float(i * rng.uniform(20, 240)),
                             gpus=int(rng.choice([1, 4, 8, 16])), tenant=f"t{i % 2}",
                             priority=int(rng.choice([0, 0, 3])),
                             preemptible=bool(rng.random() < 0.6),
                             limit_s=float(rng.choice([8, 12, 24, 48])) * HOUR))
    a = [TraceJob(duration_s=float(rng.uniform(6, 60)) * HOUR, **d) for d in declared]  # type: ignore[arg-type]
    b = [TraceJob(duration_s=float(rng.uniform(6, 60)) * HOUR, **d) for d in declared]  # type: ignore[arg-type]
    return a, b


@settings(max_examples=6, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), policy=st.sampled_from(POLICIES))
def test_decisions_before_the_first_end_never_depend_on_true_durations(seed: int, policy: str) -> None:
    a_jobs, b_jobs = twin_traces(seed)
    a, b = replay_log(a_jobs, policy, seed), replay_log(b_jobs, policy, seed)
    cutoff = min(a.first_end, b.first_end)
    before_a = [e for e in a.log if e[0] < cutoff]
    before_b = [e for e in b.log if e[0] < cutoff]
    assert before_a == before_b
    # the window holds real decisions, so the comparison could have failed
    assert cutoff >= HOUR
    assert sum(1 for e in before_a if e[1] == "start") >= 2


def test_differing_durations_do_change_the_replay_after_the_window() -> None:
    """The property is not vacuous: the two replays do part ways, after the first end."""
    a_jobs, b_jobs = twin_traces(11)
    a, b = replay_log(a_jobs, "grace", 11), replay_log(b_jobs, "grace", 11)
    assert a.log != b.log


# ------------------------------------------------------------------ the loaders
def test_classes_come_from_what_was_declared(tmp_path: Path) -> None:
    """Two logs that differ only in how long jobs ran load to the same classes and sweeps."""
    rows = [(i * 5, 1 if i % 4 else 8, "a" if i < 12 else "b", lim, name)
            for i, (lim, name) in enumerate([("01:00:00", "x"), ("2-00:00:00", "pretrain-7b"),
                                             ("", "finetune"), ("00:10:00", "")] * 5)]
    paths = []
    for k, scale in enumerate((1, 37)):
        p = tmp_path / f"log{k}.csv"
        p.write_text("submit,elapsed,gpus,user,limit,name\n" + "".join(
            f"{s},{(i + 1) * 60 * scale},{g},{u},{lim},{n}\n"
            for i, (s, g, u, lim, n) in enumerate(rows)))
        paths.append(p)
    cols = {"submit": "submit", "duration": "elapsed", "gpus": "gpus", "tenant": "user",
            "limit": "limit", "name": "name"}
    one, two = (load_csv(p, cols) for p in paths)
    strip = [[(j.job_id, j.workload_class, j.limit_s, j.name) for j in t.jobs] for t in (one, two)]
    assert strip[0] == strip[1]
    assert any(c is WorkloadClass.SWEEP for _, c, _, _ in strip[0])


@given(gaps=st.lists(st.sampled_from([0.0, 5.0, 30.0, 59.0, 61.0, 600.0]), min_size=1,
                     max_size=40), cut=st.integers(0, 40))
def test_a_sweep_label_uses_only_arrivals_up_to_the_job(gaps: list[float], cut: int) -> None:
    """Labels of a log's first jobs are the same whether or not later jobs exist."""
    def jobs(n: int) -> list[dict[str, Any]]:
        t, out = 0.0, []
        for g in gaps[:n]:
            t += g
            out.append({"gpus": 1, "tenant": "a", "submit_s": t, "workload_class": None})
        return out

    full, prefix = jobs(len(gaps)), jobs(cut)
    mark_sweeps(full)
    mark_sweeps(prefix)
    # jobs at the prefix's last instant may share it with jobs cut off: compare before it
    last = prefix[-1]["submit_s"] if prefix else -1.0
    assert [j["workload_class"] for j in full if j["submit_s"] < last] == \
        [j["workload_class"] for j in prefix if j["submit_s"] < last]


def test_classify_reads_size_limit_and_name_only() -> None:
    assert classify(8, 2 * 86_400.0) is WorkloadClass.FULL_RUN
    assert classify(8, 12 * HOUR) is WorkloadClass.FINE_TUNE
    assert classify(1, 1800.0) is WorkloadClass.EXPERIMENT
    assert classify(1, None) is WorkloadClass.EXPERIMENT
    assert classify(16, None) is WorkloadClass.FULL_RUN
    assert classify(64, 600.0, "llama-finetune-v2") is WorkloadClass.FINE_TUNE
    assert classify(1, 86_400.0, "hpo-trial-12") is WorkloadClass.SWEEP
    assert classify(1, 600.0, "pretrain-small") is WorkloadClass.FULL_RUN
