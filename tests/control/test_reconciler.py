"""The reconciler's decisions, driven through a scripted backend and a fake clock.

Every test runs on SQLite and on PostgreSQL (the ``store`` fixture). The
backend is ``ScriptedBackend`` (helpers.py): the test says what each attempt
did; the reconciler must place, launch, restart, cancel, stop, preempt and
recover exactly as the store and ``core`` say, and never launch an attempt twice.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers import (
    LAB,
    FakeClock,
    ScriptedBackend,
    SimulatedCrash,
    add_job,
    authed,
    event_kinds,
)

from grace.backends.base import AttemptStatus
from grace.control.api import create_app
from grace.control.reconciler import DIVERGED_EXIT_CODE, Reconciler
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import AttemptState, JobState
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.spec.loader import load_cluster

A100 = "A100-80GB"
LAB_NODES = {"a100-00", "a100-01", "l40s-00"}


class Rig:
    """A reconciler on the lab cluster with a scripted backend, a fake clock and the API."""

    def __init__(self, store: Store, state_dir: Path, cluster: Path = LAB,
                 backend: ScriptedBackend | None = None, clock: FakeClock | None = None,
                 policy: str = "grace") -> None:
        self.store = store
        self.state_dir = state_dir
        self.clock = clock or FakeClock()
        self.spec = load_cluster(cluster)
        self.topo = Topology.from_spec(self.spec)
        self.backend = backend or ScriptedBackend(self.spec)
        self.rec = Reconciler(store, self.backend, self.topo, get_policy(policy), state_dir,
                              clock=self.clock)
        self._api: TestClient | None = None

    @property
    def api(self) -> TestClient:
        if self._api is None:
            self._api = authed(create_app(self.store, self.topo, self.state_dir,
                                          clock=self.clock, allow_inject=True), self.store)
        return self._api

    def submit(self, name: str = "job", gpus: float | None = 1, **kw) -> int:
        return add_job(self.store, self.clock(), name, gpus, **kw)

    def cycle(self, advance: float = 1.0):
        self.clock.advance(advance)
        return self.rec.cycle()

    def job(self, job_id: int):
        with self.store.read() as s:
            job = repo.require_job(s, job_id)
            _ = list(job.attempts)  # loaded while the session is open
            return job

    def node_of(self, job_id: int, attempt: int | None = None) -> set[str]:
        job = self.job(job_id)
        a = job.attempts[-1] if attempt is None else job.attempts[attempt - 1]
        return {e["node"] for e in a.placement_json}

    def node(self, name: str):
        with self.store.read() as s:
            return next(n for n in repo.nodes(s) if n.name == name)


@pytest.fixture
def rig(store: Store, tmp_path: Path) -> Rig:
    return Rig(store, tmp_path / "state")


def launches_per_job(*backends: ScriptedBackend) -> Counter[int]:
    return Counter(s.job_id for b in backends for s in b.launches)


# ---------------------------------------------------------------- placement and launch
def test_a_submitted_gang_is_placed_and_launched_with_its_nodes_slots_and_env(rig: Rig) -> None:
    jid = rig.submit("ddp", gpus=None, nodes=2, gpus_per_node=2, gpu_model=A100,
                     runtime_limit="10m", env={"MY_FLAG": "1"},
                     command=["python", "examples/train_ddp.py", "--steps", "60"])
    report = rig.cycle()
    assert report.started == [jid]
    [launch] = rig.backend.launches
    assert (launch.job_id, launch.attempt, launch.name) == (jid, 1, "ddp")
    assert launch.command == ("python", "examples/train_ddp.py", "--steps", "60")
    assert {n.node for n in launch.nodes} == {"a100-00", "a100-01"}
    for n in launch.nodes:
        assert len(n.gpus) == 2 and len(set(n.gpus)) == 2
        assert all(0 <= g < 4 for g in n.gpus)
    assert launch.workdir == rig.rec.ctx.dirs.job(jid)
    assert launch.env["GRACE_JOB_UID"] == rig.rec.ctx.dirs.uid(jid)
    assert launch.time_limit_s == 600
    assert launch.env["MY_FLAG"] == "1"
    assert float(launch.env["GRACE_CHECKPOINT_INTERVAL_S"]) > 0
    job = rig.job(jid)
    assert job.state is JobState.RUNNING and job.attempts_count == 1
    [attempt] = job.attempts
    assert attempt.state is AttemptState.RUNNING
    assert attempt.handle == rig.backend.watching[(jid, 1)]
    assert attempt.placement_json == [{"node": n.node, "gpus": list(n.gpus)} for n in launch.nodes]
    assert event_kinds(rig.store, jid) == ["submitted", "placed", "started"]
    # further cycles change nothing: no second launch of a running job
    for _ in range(3):
        rig.cycle()
    assert len(rig.backend.launches) == 1


def test_success_completes_the_job_with_its_events_in_order(rig: Rig) -> None:
    jid = rig.submit("ok", gpus=2)
    rig.cycle()
    rig.cycle(advance=30)
    rig.backend.finish(jid, AttemptStatus.SUCCEEDED)
    report = rig.cycle()
    assert report.ended == [jid]
    job = rig.job(jid)
    assert job.state is JobState.COMPLETED and job.ended_at == rig.clock()
    attempt = job.attempts[0]
    assert (attempt.state, attempt.exit_code, attempt.failure_kind) == (AttemptState.SUCCEEDED, 0,
                                                                        None)
    assert event_kinds(rig.store, jid) == ["submitted", "placed", "started", "completed"]
    rig.cycle()
    assert len(rig.backend.launches) == 1 and rig.job(jid).state is JobState.COMPLETED


def test_gpus_freed_by_an_ended_job_go_to_the_next(rig: Rig) -> None:
    first = rig.submit("all-a100", gpus=None, nodes=2, gpus_per_node=4, gpu_model=A100)
    second = rig.submit("next", gpus=None, nodes=2, gpus_per_node=4, gpu_model=A100)
    rig.cycle()
    assert [s.job_id for s in rig.backend.launches] == [first]
    assert rig.job(second).reason == "waiting-for-capacity"
    rig.backend.finish(first)
    rig.cycle()
    assert [s.job_id for s in rig.backend.launches] == [first, second]


# ---------------------------------------------------------------- failures
def test_a_lost_node_requeues_the_job_and_attempt_2_avoids_the_node(rig: Rig) -> None:
    jid = rig.submit("train", gpus=2, gpu_model=A100)
    rig.cycle()
    [bad] = rig.node_of(jid)
    rig.backend.finish(jid, AttemptStatus.LOST, failed_node=bad,
                       detail=f"agent of node {bad} disappeared without an exit record")
    report = rig.cycle(advance=20)  # failed in its first seconds, but the node's fault
    assert report.requeued == [jid]
    job = rig.job(jid)
    assert job.restarts == 1 and [e["node"] for e in job.exclude_nodes] == [bad]
    first, second = job.attempts
    assert (first.state, first.failure_kind, first.failed_node) == (AttemptState.LOST, "node", bad)
    assert "disappeared" in first.detail
    assert second.number == 2 and second.state is AttemptState.RUNNING
    assert rig.node_of(jid, 2) == {"a100-00", "a100-01"} - {bad}
    assert [(s.job_id, s.attempt) for s in rig.backend.launches] == [(jid, 1), (jid, 2)]
    kinds = event_kinds(rig.store, jid)
    assert kinds == ["submitted", "placed", "started", "failed", "restarted", "placed", "started"]
    rig.backend.finish(jid)
    rig.cycle()
    assert rig.job(jid).state is JobState.COMPLETED


def test_a_failed_node_after_the_user_error_window_is_restarted_as_attempt_2(rig: Rig) -> None:
    jid = rig.submit("train", gpus=4, gpu_model=A100)
    rig.cycle()
    [node] = rig.node_of(jid)
    rig.clock.advance(3600)
    rig.backend.finish(jid, AttemptStatus.FAILED, exit_code=1, failed_node=node,
                       detail=f"rank 2 on node {node} exited 1\nNCCL error: unhandled system error")
    report = rig.cycle()
    assert report.requeued == [jid]
    job = rig.job(jid)
    assert job.state is JobState.RUNNING and job.restarts == 1 and job.attempts_count == 2
    first = job.attempts[0]
    assert (first.state, first.exit_code, first.failed_node) == (AttemptState.FAILED, 1, node)
    assert "NCCL error" in first.detail
    with rig.store.read() as s:
        failed = [e for e in repo.events(s, jid) if e.kind.value == "failed"]
    assert failed[0].detail["node"] == node and failed[0].detail["exit_code"] == 1
    assert [s.attempt for s in rig.backend.launches_of(jid)] == [1, 2]


def test_a_hang_excludes_its_node(rig: Rig) -> None:
    jid = rig.submit("train", gpus=2, gpu_model=A100)
    rig.cycle()
    [node] = rig.node_of(jid)
    rig.backend.finish(jid, AttemptStatus.FAILED, exit_code=-9, failed_node=node,
                       detail="heartbeat missing for 600s")
    rig.cycle(advance=30)
    job = rig.job(jid)
    assert job.attempts[0].failure_kind == "hang" and [e["node"] for e in job.exclude_nodes] == [node]
    assert rig.node_of(jid, 2).isdisjoint({node})


def test_an_application_failure_in_the_first_seconds_is_a_user_error_not_retried(rig: Rig) -> None:
    jid = rig.submit("typo", gpus=1)
    rig.cycle()
    rig.backend.finish(jid, AttemptStatus.FAILED, exit_code=1, failed_node="a100-00",
                       detail="rank 0 on node a100-00 exited 1\nModuleNotFoundError: No module")
    rig.cycle(advance=5)
    job = rig.job(jid)
    assert job.state is JobState.FAILED and job.restarts == 0
    assert "not retried" in job.reason and "application" in job.reason
    assert job.attempts[0].failure_kind == "application"
    for _ in range(3):
        rig.cycle(advance=60)
    assert len(rig.backend.launches_of(jid)) == 1
    assert event_kinds(rig.store, jid)[-1] == "failed"


def test_a_diverged_run_is_not_retried(rig: Rig) -> None:
    jid = rig.submit("lr-too-high", gpus=1)
    rig.cycle()
    rig.clock.advance(3600)
    rig.backend.finish(jid, AttemptStatus.FAILED, exit_code=DIVERGED_EXIT_CODE,
                       detail="loss diverged")
    rig.cycle()
    assert rig.job(jid).state is JobState.DIVERGED
    rig.cycle()
    assert len(rig.backend.launches_of(jid)) == 1


def test_a_launch_the_backend_refuses_is_recorded_and_requeued(rig: Rig) -> None:
    jid = rig.submit("refused", gpus=1)
    rig.backend.refuse_launch.add(jid)
    rig.cycle()
    job = rig.job(jid)
    assert job.state is JobState.PENDING and job.attempts[0].state is AttemptState.FAILED
    assert "refused" in job.attempts[0].detail
    rig.backend.refuse_launch.clear()
    rig.cycle()
    assert rig.job(jid).state is JobState.RUNNING
    assert [s.attempt for s in rig.backend.launches_of(jid)] == [2]


# ---------------------------------------------------------------- cancellation
def test_cancel_of_a_pending_job_ends_it_without_a_launch(rig: Rig) -> None:
    jid = rig.submit("never", gpus=1)
    assert rig.api.post(f"/jobs/{jid}/cancel").status_code == 200
    rig.cycle()
    job = rig.job(jid)
    assert job.state is JobState.CANCELLED and job.attempts == []
    assert rig.backend.launches == [] and rig.backend.cancels == []
    assert event_kinds(rig.store, jid) == ["submitted", "cancelled"]


def test_cancel_of_a_waiting_job_behind_a_full_cluster(rig: Rig) -> None:
    big = rig.submit("big", gpus=None, nodes=2, gpus_per_node=4, gpu_model=A100)
    waiting = rig.submit("waiting", gpus=None, nodes=2, gpus_per_node=4, gpu_model=A100)
    rig.cycle()
    assert rig.job(waiting).state is JobState.PENDING
    rig.api.post(f"/jobs/{waiting}/cancel")
    rig.cycle()
    rig.backend.finish(big)
    rig.cycle()
    assert rig.job(waiting).state is JobState.CANCELLED
    assert launches_per_job(rig.backend) == {big: 1}


def test_cancel_of_a_running_job_asks_the_backend_then_ends_on_its_report(rig: Rig) -> None:
    jid = rig.submit("long", gpus=2)
    rig.cycle()
    assert rig.api.post(f"/jobs/{jid}/cancel").json()["cancel_requested"] is True
    rig.backend.slow_cancel = True  # the processes take a few cycles to end
    rig.cycle()
    assert rig.backend.cancels == [(jid, 1)]
    assert rig.job(jid).state is JobState.RUNNING  # not before the backend says so
    rig.cycle()
    assert rig.job(jid).state is JobState.RUNNING
    rig.backend.end_cancelled()
    rig.cycle()
    job = rig.job(jid)
    assert job.state is JobState.CANCELLED
    assert job.attempts[0].state is AttemptState.CANCELLED
    assert event_kinds(rig.store, jid)[-1] == "cancelled"
    assert len(rig.backend.launches) == 1
    assert rig.api.post(f"/jobs/{jid}/cancel").status_code == 409


# ---------------------------------------------------------------- can it ever run?
def test_a_job_no_gpu_model_fits_is_refused_at_submit(rig: Rig) -> None:
    for body in ({"name": "h100", "gpus": 8, "gpu_model": "H100-SXM"},
                 {"name": "huge", "gpus": 1, "model": {"params_b": 400}},
                 {"name": "wide", "gpus": 64}):
        r = rig.api.post("/jobs", json={**body, "command": ["python", "train.py"]})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["field"] == "gpus"
    assert rig.api.get("/jobs").json() == []
    rig.cycle()
    assert rig.backend.launches == []


def test_a_job_that_becomes_unplaceable_is_failed_with_its_reason(store: Store, tmp_path: Path) -> None:
    lab = Rig(store, tmp_path / "state")
    stuck = lab.submit("a100-only", gpus=None, nodes=2, gpus_per_node=4, gpu_model=A100)
    other = lab.submit("a100-too", gpus=None, nodes=2, gpus_per_node=4, gpu_model=A100)
    lab.cycle()
    assert lab.job(stuck).state is JobState.RUNNING
    # the control plane restarts on a cluster without A100s (nodes retired)
    shrunk = tmp_path / "l40s-only.yaml"
    shrunk.write_text("kind: cluster\nname: l40s-only\nnode_groups:\n"
                      "  - {name: l40s, count: 2, gpu: L40S, gpus_per_node: 4}\n")
    later = Rig(store, tmp_path / "state", cluster=shrunk, clock=lab.clock)
    later.rec.recover()
    later.cycle()
    job = later.job(other)
    assert job.state is JobState.FAILED
    assert "A100-80GB" in job.reason and "not in cluster" in job.reason
    assert event_kinds(store, other) == ["submitted", "failed"]
    # the one running there is failed too, and its processes are stopped
    assert later.job(stuck).state is JobState.FAILED
    assert later.backend.cancels == [(stuck, 1)]
    later.cycle()
    assert later.job(stuck).attempts[0].state is AttemptState.CANCELLED
    later.cycle()
    assert later.backend.launches == [] and later.backend.cancels == [(stuck, 1)]


# ---------------------------------------------------------------- crash and recovery
def test_recover_adopts_live_attempts_and_requeues_dead_ones_without_duplicates(
        store: Store, tmp_path: Path) -> None:
    before = Rig(store, tmp_path / "state")
    alive = before.submit("alive", gpus=1)
    dead = before.submit("dead", gpus=1)
    mid_launch = before.submit("mid-launch", gpus=1)
    waiting = before.submit("waiting", gpus=None, nodes=2, gpus_per_node=4, gpu_model=A100,
                            priority=-1)
    before.backend.crash_on_launch.add(mid_launch)
    with pytest.raises(SimulatedCrash):  # dies after committing "starting", before the launch
        before.cycle()
    assert {s.job_id for s in before.backend.launches} == {alive, dead}
    assert rig_states(before, alive, dead, mid_launch) == ["running"] * 3

    # a new control plane on the same store: the "dead" job's processes died with the old one
    after = Rig(store, tmp_path / "state", clock=before.clock,
                backend=ScriptedBackend(alive_on_adopt={dead: False}))
    requeued = after.rec.recover()
    assert sorted(requeued) == sorted([dead, mid_launch])
    assert {(j, a) for j, a, _ in after.backend.adopts} >= {(alive, 1), (dead, 1)}
    job = after.job(alive)
    assert job.state is JobState.RUNNING and job.attempts[0].state is AttemptState.RUNNING
    assert event_kinds(store, alive)[-1] == "adopted"
    for jid in (dead, mid_launch):
        job = after.job(jid)
        assert job.state is JobState.PENDING and job.attempts[0].state is AttemptState.LOST
        assert event_kinds(store, jid)[-1] == "requeued"

    after.cycle()
    relaunched = launches_per_job(after.backend)
    assert (relaunched[alive], relaunched[dead], relaunched[mid_launch]) == (0, 1, 1)
    assert {s.attempt for s in after.backend.launches if s.job_id != waiting} == {2}
    for _ in range(3):
        for job_id, _attempt in list(after.backend.watching):
            after.backend.finish(job_id)
        after.cycle()
    assert launches_per_job(before.backend, after.backend) == {alive: 1, dead: 2, waiting: 1,
                                                               mid_launch: 1}
    for jid in (alive, dead, mid_launch, waiting):
        job = after.job(jid)
        assert job.state is JobState.COMPLETED, (jid, job.state, job.reason)
        assert event_kinds(store, jid).count("completed") == 1
        assert sum(a.state is AttemptState.SUCCEEDED for a in job.attempts) == 1


def rig_states(rig: Rig, *job_ids: int) -> list[str]:
    return [rig.job(j).state.value for j in job_ids]


def test_recover_twice_and_a_restart_with_nothing_running_are_harmless(
        store: Store, tmp_path: Path) -> None:
    first = Rig(store, tmp_path / "state")
    jid = first.submit("one", gpus=1)
    first.cycle()
    again = Rig(store, tmp_path / "state", clock=first.clock)
    assert again.rec.recover() == []
    assert again.rec.recover() == []
    again.cycle()
    assert again.backend.launches == [] and again.job(jid).state is JobState.RUNNING
    again.backend.finish(jid)
    again.cycle()
    assert again.job(jid).state is JobState.COMPLETED


# ---------------------------------------------------------------- nodes
def test_a_drained_node_gets_no_new_work_and_is_drained_when_its_jobs_left(rig: Rig) -> None:
    first = rig.submit("on-node", gpus=1, gpu_model=A100)
    rig.cycle()
    [node] = rig.node_of(first)
    ops = authed(rig.api.app, rig.store, "operator", name="ops")
    r = ops.post(f"/nodes/{node}/drain", json={"reason": "fan alarm"})
    assert r.status_code == 200 and r.json()["state"] == "draining"
    fillers = [rig.submit(f"fill-{i}", gpus=1) for i in range(10)]
    for _ in range(3):
        rig.cycle()
    for jid in fillers:
        if rig.job(jid).state is JobState.RUNNING:
            assert node not in rig.node_of(jid)
    running = [j for j in fillers if rig.job(j).state is JobState.RUNNING]
    assert len(running) == 8  # every free GPU except the drained node's
    assert {rig.job(j).reason for j in fillers if j not in running} == {"waiting-for-capacity"}
    assert rig.node(node).state == "draining"
    rig.backend.finish(first)
    rig.cycle()
    n = rig.node(node)
    assert n.state == "drained" and n.reason == "drained by ops: fan alarm (its last job left)"
    with rig.store.read() as s:
        history = [(e.to_state.value, e.reason, e.actor) for e in repo.node_events(s, node)]
    # drained by a person: Grace records the move, the person still holds it (no diagnostics)
    assert history == [("draining", "drained by ops: fan alarm", "ops"),
                       ("drained", "drained by ops: fan alarm (its last job left)", "grace")]
    assert n.holder == "ops"
    for _ in range(2):
        rig.cycle()
    assert all(node not in {n.node for n in s.nodes} for s in rig.backend.launches[1:])
    # resumed: it takes work again
    assert rig.api.post(f"/nodes/{node}/resume").status_code == 200
    rig.cycle()
    assert any(node in {n.node for n in s.nodes} for s in rig.backend.launches[9:])


def test_an_idle_node_drains_at_once_and_jobs_needing_it_say_why(rig: Rig) -> None:
    rig.api.post("/nodes/l40s-00/drain", json={"reason": "maintenance"})
    jid = rig.submit("l40s", gpus=1, gpu_model="L40S")
    rig.cycle()
    assert rig.node("l40s-00").state == "drained"
    job = rig.job(jid)
    assert job.state is JobState.PENDING and job.reason == "no-usable-nodes"
    assert rig.backend.launches == []


# ---------------------------------------------------------------- limits and priorities
def test_a_job_past_its_runtime_limit_is_stopped(rig: Rig) -> None:
    jid = rig.submit("slow", gpus=1, runtime_limit="2m")
    rig.cycle()
    assert rig.backend.launches[0].time_limit_s == 120
    rig.cycle(advance=60)
    assert rig.backend.cancels == []
    rig.backend.slow_cancel = True
    rig.cycle(advance=61)
    assert rig.backend.cancels == [(jid, 1)]
    job = rig.job(jid)
    assert job.state is JobState.FAILED and "runtime_limit" in job.reason
    assert event_kinds(rig.store, jid)[-1] == "timeout"
    rig.cycle()  # its processes are still ending: not stopped twice, GPUs still held
    rig.backend.end_cancelled()
    rig.cycle()
    job = rig.job(jid)
    assert job.state is JobState.FAILED and job.attempts[0].state is AttemptState.CANCELLED
    assert len(rig.backend.launches) == 1


def test_a_preempted_job_is_requeued_and_restarts_after_the_urgent_one(rig: Rig) -> None:
    victims = [rig.submit(f"sweep-{i}", gpus=4, gpu_model=A100, preemptible=True,
                          tenant="research") for i in range(2)]
    rig.cycle()
    assert all(rig.job(v).state is JobState.RUNNING for v in victims)
    urgent = rig.submit("urgent", gpus=4, gpu_model=A100, priority=10, tenant="prod")
    rig.backend.slow_cancel = True
    rig.cycle()
    preempted = [v for v in victims if rig.backend.cancels.count((v, 1))]
    assert len(preempted) == 1
    [victim] = preempted
    job = rig.job(victim)
    assert job.state is JobState.PENDING and "preempted" in job.reason
    assert event_kinds(rig.store, victim)[-1] == "preempted"
    assert rig.job(urgent).state is JobState.RUNNING
    assert rig.node_of(urgent) == rig.node_of(victim, 1)
    rig.cycle()  # the victim's processes have not ended yet: nothing changes, nothing twice
    assert rig.job(victim).state is JobState.PENDING
    rig.backend.end_cancelled()
    rig.cycle()
    job = rig.job(victim)
    assert job.attempts[0].state is AttemptState.CANCELLED and job.state is JobState.PENDING
    assert job.reason == "waiting-for-capacity"
    rig.backend.finish(urgent)
    rig.cycle()
    job = rig.job(victim)
    assert job.state is JobState.RUNNING and job.attempts_count == 2
    assert [s.attempt for s in rig.backend.launches_of(victim)] == [1, 2]
    assert launches_per_job(rig.backend) == {victims[0]: 1 + (victims[0] == victim),
                                             victims[1]: 1 + (victims[1] == victim), urgent: 1}


# ---------------------------------------------------------------- why jobs wait
def test_waiting_jobs_record_why(rig: Rig) -> None:
    assert rig.api.put("/tenants/small", json={"guaranteed_gpus": 1,
                                                "borrow_limit_gpus": 0}).status_code == 200
    over = rig.submit("over-quota", gpus=2, tenant="small")
    big = rig.submit("big", gpus=None, nodes=2, gpus_per_node=4, gpu_model=A100)
    waits = rig.submit("waits", gpus=None, nodes=2, gpus_per_node=4, gpu_model=A100)
    rig.cycle()
    assert rig.job(big).state is JobState.RUNNING and rig.job(big).reason is None
    assert rig.job(over).reason == "over-quota"
    assert rig.job(waits).reason == "waiting-for-capacity"
    listed = {j["id"]: j["reason"] for j in rig.api.get("/jobs", params={"state": "pending"}).json()}
    assert listed == {over: "over-quota", waits: "waiting-for-capacity"}
    rig.backend.finish(big)
    rig.cycle()
    assert rig.job(waits).state is JobState.RUNNING


def test_jobs_sharing_a_gpu_are_snapshotted_as_slices_not_twice_the_gpu(rig: Rig) -> None:
    jobs = [rig.submit(f"mig-{i}", gpus=0.25) for i in range(4)]
    rig.cycle()
    assert all(rig.job(j).state is JobState.RUNNING for j in jobs)
    placements = [rig.job(j).attempts[0].placement_json for j in jobs]
    assert all(p[0]["slices"] and p[0]["slices"][0]["gpu"] in p[0]["gpus"] for p in placements)
    shared = Counter((p[0]["node"], p[0]["gpus"][0]) for p in placements)
    assert max(shared.values()) >= 2  # two jobs on one GPU
    for _ in range(3):  # each cycle rebuilds the state from these rows
        rig.cycle()
    whole = rig.submit("whole-a100", gpus=4, gpu_model=A100)
    rig.cycle()  # no A100 node has 4 GPUs free while slices hold one of each
    assert rig.job(whole).state is JobState.PENDING
    for j in jobs:
        rig.backend.finish(j)
    rig.cycle()
    rig.cycle()
    assert rig.job(whole).state is JobState.RUNNING
