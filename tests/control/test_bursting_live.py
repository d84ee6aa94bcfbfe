"""Live bursting: the reconciler, the local backend and a provider that adds nodes late.

A 3-node cluster of 2-GPU servers: one on-prem, one to rent as spot, one on
demand. The reconciler runs on a fake clock (provisioning delays and idle
timeouts are virtual); the jobs are real processes of the local backend,
started with a trivial command.

- a 3-day full run holds the on-prem node (runtime limit 3 d);
- a burstable experiment (2 minutes) waits; its forecast wait is the full
  run's 3 days, above the threshold, so one spot node is rented; it is ready
  after the 60 s delay and the experiment runs there;
- a second full run with a 3-day limit waits for on-prem and is never put on
  spot or on-demand (no reserved offer), though the spot node is free once
  the experiment ends;
- the idle spot node is released after ``idle_release_s``;
- a reclaimed spot node preempts its job, which waits to run again.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import FakeClock, add_job

from grace.backends.base import AttemptStatus
from grace.backends.local import LocalBackend
from grace.control.bursting import LiveBursting, PreemptJob
from grace.control.providers import LocalDelayedProvider
from grace.control.reconciler import Reconciler
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import JobState
from grace.core.bursting import RouteJob, SetNodesUsable
from grace.core.jobs import JobId, PendingJob
from grace.core.placement import WholeRequest
from grace.core.policies import get_policy
from grace.core.state import SchedulerState
from grace.core.topology import Topology
from grace.spec.bursting import BurstingSpec
from grace.spec.loader import parse_cluster

REPO = Path(__file__).resolve().parents[2]
GPU = "L40S"
CLUSTER = parse_cluster({
    "name": "burst-lab", "pools": [{"name": "lab", "kind": "on-prem"},
                                   {"name": "spot", "kind": "cloud"},
                                   {"name": "od", "kind": "cloud"}],
    "node_groups": [
        {"name": name, "count": 1, "gpu": GPU, "gpus_per_node": 2, "cpu_cores": 8,
         "memory_gb": 64, "pool": name} for name in ("lab", "spot", "od")]})
BURSTING = BurstingSpec.model_validate({
    "queue_wait_threshold_s": 60, "check_interval_s": 1, "idle_release_s": 30,
    "offers": [
        {"name": "spot", "gpu": GPU, "kind": "spot", "usd_per_gpu_hour": 0.5,
         "gpus_per_node": 2, "preemptions_per_hour": 0.1, "provisioning_delay_s": 60,
         "max_nodes": 1},
        {"name": "od", "gpu": GPU, "kind": "on-demand", "usd_per_gpu_hour": 1.5,
         "gpus_per_node": 2, "provisioning_delay_s": 60, "max_nodes": 1}]})
SLEEP = ["python", "-c", "import time; time.sleep(120)"]
QUICK = ["python", "-c", "print('done')"]


class LiveRig:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock()
        self.store = Store.open(f"sqlite:///{tmp_path / 'grace.sqlite'}")
        self.topo = Topology.from_spec(CLUSTER)
        self.backend = LocalBackend(CLUSTER, tmp_path / "backend", cwd=REPO, use_nvml=False)
        self.rec = Reconciler(self.store, self.backend, self.topo, get_policy("grace"),
                              tmp_path / "state", clock=self.clock)
        self.provider = LocalDelayedProvider(LiveBursting.pool_nodes(CLUSTER, BURSTING),
                                             self.clock)
        self.rec.bursting = LiveBursting(BURSTING, CLUSTER, self.topo, self.provider)

    def submit(self, name: str, command: list[str], **kw: object) -> int:
        return add_job(self.store, self.clock(), name, 2, command=command,
                       env={"OMP_NUM_THREADS": "1"}, **kw)

    def cycle(self, advance: float = 1.0) -> None:
        self.clock.advance(advance)
        self.rec.cycle()

    def job(self, job_id: int):
        with self.store.read() as s:
            job = repo.get_job(s, job_id)
            _ = list(job.attempts)
            return job

    def nodes(self, job_id: int) -> list[set[str]]:
        return [{e["node"] for e in a.placement_json} for a in self.job(job_id).attempts]

    def wait_for(self, job_id: int, state: JobState, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.cycle(1.0)
            if self.job(job_id).state == state:
                return
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} is {self.job(job_id).state}, not {state}")

    def close(self) -> None:
        """Stop every process the test started, through the backend (not the reconciler,
        which would requeue them)."""
        with self.store.read() as s:
            live = [(a.job_id, a.number) for a in repo.running_attempts(s)]
        for job_id, number in live:
            self.backend.cancel(job_id, number, grace_s=1.0)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(
                o.status is AttemptStatus.RUNNING for o in self.backend.poll()):
            time.sleep(0.1)
        self.store.close()


@pytest.fixture
def rig(tmp_path: Path):
    r = LiveRig(tmp_path)
    try:
        yield r
    finally:
        r.close()


def test_a_waiting_experiment_bursts_to_spot_full_runs_never_do_and_idle_nodes_go_back(rig):
    full = rig.submit("full-run", SLEEP, workload_class="full-run", runtime_limit="3d")
    rig.cycle()
    assert rig.nodes(full) == [{"lab-00"}]
    exp = rig.submit("experiment", QUICK, runtime_estimate="2m")
    full2 = rig.submit("full-run-2", QUICK, workload_class="full-run", runtime_limit="3d")
    rig.cycle()  # the experiment's reason is recorded: waiting for capacity
    rig.cycle()  # forecast wait ~3 d > 60 s: one spot node requested (cheapest expected cost)
    assert rig.provider.held == {"spot-00"}
    assert rig.job(exp).state == JobState.PENDING
    rig.cycle(30.0)
    assert rig.job(exp).state == JobState.PENDING  # not ready before the 60 s delay
    rig.cycle(30.0)  # ready: the experiment starts on the rented node
    assert rig.nodes(exp) == [{"spot-00"}]
    rig.wait_for(exp, JobState.COMPLETED)
    # the spot node is free now, but a 3-day full run may not use it
    for _ in range(3):
        rig.cycle(5.0)
        assert rig.job(full2).state == JobState.PENDING and rig.nodes(full2) == []
    assert rig.provider.held == {"spot-00"}
    rig.cycle(30.0)  # idle past idle_release_s: given back
    assert rig.provider.held == set()
    assert rig.rec.bursting is not None and not rig.rec.bursting.fleet.ready


def test_a_reclaimed_spot_node_preempts_its_job_which_waits_to_run_again(rig):
    rig.submit("full-run", SLEEP, workload_class="full-run", runtime_limit="3d")
    rig.cycle()
    exp = rig.submit("experiment", SLEEP, runtime_estimate="10m")
    rig.cycle()
    rig.cycle()
    rig.cycle(60.0)
    assert rig.nodes(exp) == [{"spot-00"}]
    rig.provider.preempt("spot-00")
    rig.cycle()
    assert rig.job(exp).state == JobState.PENDING
    events = [e.kind.value for e in _events(rig, exp)]
    assert "preempted" in events


def _events(rig: LiveRig, job_id: int):
    with rig.store.read() as s:
        return list(repo.events(s, job_id))


def test_the_adapter_takes_data_and_returns_effects_without_touching_the_state():
    """No reconciler in sight: a snapshot, the clock and the JobSpecs of unrouted jobs go in,
    effects come out, and the snapshot is as it was until someone applies them."""
    topo = Topology.from_spec(CLUSTER)
    clock = FakeClock()
    cloud = LiveBursting(BURSTING, CLUSTER, topo,
                         LocalDelayedProvider(LiveBursting.pool_nodes(CLUSTER, BURSTING), clock))
    state = SchedulerState(topo, get_policy("grace"), {})
    for i in (1, 2):
        state.submit(PendingJob(JobId(i), "t", 0.0, WholeRequest(2, None), {}, (GPU,),
                                estimate_s=600.0))
    assert cloud.unrouted(state) == [1, 2]
    usable = list(state.capacity.usable)
    effects = cloud.observe(state, clock(), {1: {}, 2: {"sensitive_data": True}})
    assert state.capacity.usable == usable and cloud.unrouted(state) == [1, 2]
    offer_nodes = {topo.by_name["spot-00"], topo.by_name["od-00"]}
    assert effects[0] == SetNodesUsable(effects[0].nodes, False)
    assert set(effects[0].nodes) == offer_nodes
    assert effects[1:] == [RouteJob(JobId(1), ("lab",)), RouteJob(JobId(2), ("lab",))]
    assert not any(isinstance(e, PreemptJob) for e in effects)
    with pytest.raises(KeyError):  # a job is never routed without its spec
        cloud.observe(state, clock(), {})
