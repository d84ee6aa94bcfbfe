"""Sweeps and preflights through the real API, store and reconciler (a scripted backend):
``POST /sweeps`` runs at most ``max_parallel`` trials, heartbeats carry the metric, the
early-stopping watch ends a weak trial (completed, not failed), ``GET /sweeps/{id}`` and
``grace sweep`` name the best; a preflight gates its job's allocation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import FakeClock, lab_reconciler, make_token
from rich.console import Console

from grace.backends.base import AttemptStatus
from grace.cli.sweep import render
from grace.control.api import create_app
from grace.control.live.context import job_dirs
from grace.control.store import repository as repo
from grace.control.store import tokens
from grace.control.store.db import Store
from grace.control.store.models import EndCause, JobState
from grace.runtime.preflight import PREFLIGHT_STEPS_ENV as RUNTIME_ENV
from grace.spec.trial import PREFLIGHT_STEPS_ENV


class World:
    def __init__(self, store: Store, tmp_path: Path) -> None:
        self.clock = FakeClock()
        self.state = tmp_path / "state"
        self.rec = lab_reconciler(store, self.state, self.clock)
        self.store = store
        app = create_app(store, self.rec.topo, self.state, self.rec, self.rec.backend,
                         clock=self.clock)
        self.member = {"Authorization": f"Bearer {make_token(store, 'member', 'a')}"}
        self.other = {"Authorization": f"Bearer {make_token(store, 'member', 'b')}"}
        self.client = TestClient(app)
        self.dirs = job_dirs(store, self.state)

    def state_of(self, job_id: int) -> JobState:
        with self.store.read() as s:
            return repo.require_job(s, job_id).state

    def running(self, ids: list[int]) -> list[int]:
        return [i for i in ids if self.state_of(i) == JobState.RUNNING]

    def report(self, job_id: int, points: list[tuple[int, float]]) -> None:
        """What the runtime of the job's attempt 1 sends: val_loss in a heartbeat record."""
        self.dirs.attempt(job_id, 1).mkdir(parents=True, exist_ok=True)
        with self.store.transaction() as s:
            token = tokens.job_token(s, job_id, 1)
        r = self.client.post(f"/jobs/{job_id}/heartbeats", headers={
            "Authorization": f"Bearer {token}"}, json={"attempt": 1, "rank": 0, "records": [
                {"step": points[-1][0], "loss": points[-1][1],
                 "metrics": {"val_loss": [list(p) for p in points]}}]})
        assert r.status_code == 204, r.text


@pytest.fixture
def world(store: Store, tmp_path: Path) -> World:
    return World(store, tmp_path)


def _sweep(**over: Any) -> dict[str, Any]:
    return {"kind": "sweep", "name": "lr", "job": {"gpus": 0.25, "command": ["python", "t.py"]},
            "parameters": {"lr": [0.3, 0.1, 0.03, 0.001]}, "max_parallel": 2,
            "metric": {"name": "val_loss", "mode": "min"},
            "early_stopping": {"rule": "median", "grace_steps": 5, "min_trials": 2}, **over}


def good(final: float) -> list[tuple[int, float]]:
    return [(s, 1.0 - (1.0 - final) * s / 10) for s in range(1, 11)]


def test_a_sweep_runs_max_parallel_stops_a_weak_trial_and_names_the_best(world: World) -> None:
    r = world.client.post("/sweeps", json=_sweep(), headers=world.member)
    assert r.status_code == 201, r.text
    out = r.json()
    sweep_id, ids = out["id"], out["trials"]
    assert sweep_id == ids[0] and len(ids) == 4 and out["tenant"] == "a"
    with world.store.read() as s:  # each trial's submission is recorded with its actor
        assert all(repo.events(s, i)[0].actor == "member-a" for i in ids)
    world.rec.cycle()
    assert world.running(ids) == ids[:2]  # max_parallel
    launch = world.rec.backend.launches_of(ids[0])[0]
    assert launch.command[-1] == "--lr=0.3" and launch.env["GRACE_PARAM_LR"] == "0.3"
    assert all(len(n.gpus) == 1 for n in launch.nodes)  # a slice of one GPU
    world.report(ids[0], good(0.2))
    world.report(ids[1], good(0.1))
    for j in ids[:2]:
        world.rec.backend.finish(j)
    world.rec.cycle()
    world.rec.cycle()
    assert world.running(ids) == ids[2:]
    world.report(ids[2], good(0.15))
    world.report(ids[3], [(s, 1.0) for s in range(1, 7)])  # lr 0.001: it does not learn
    world.rec.cycle()
    assert world.state_of(ids[3]) == JobState.COMPLETED
    assert world.state_of(ids[2]) == JobState.RUNNING  # good so far: it runs on
    with world.store.read() as s:
        job = repo.require_job(s, ids[3])
        assert job.reason is not None and job.reason.startswith("early-stopped: median rule")
        assert job.attempts[0].end_cause is EndCause.EARLY_STOP
    assert (ids[3], 1) in world.rec.backend.cancels
    world.rec.backend.finish(ids[2])
    world.rec.cycle()

    res = world.client.get(f"/sweeps/{sweep_id}", headers=world.member).json()
    assert res["done"] and res["best"] == ids[1]
    states = {t["id"]: t["state"] for t in res["trials"]}
    assert states == {ids[0]: "completed", ids[1]: "completed", ids[2]: "completed",
                      ids[3]: "stopped"}
    assert [t["params"] for t in res["trials"]] == [{"lr": v} for v in (0.3, 0.1, 0.03, 0.001)]
    assert res["trials"][1]["best"] == pytest.approx(0.1) and res["trials"][1]["steps"] == 10

    console = Console(width=80, record=True, force_terminal=False)
    console.print(render(res, 80))
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert f"best: job {ids[1]} (lr=0.1)" in text and "stopped" in text


def test_sweep_requests_are_checked_and_scoped(world: World) -> None:
    bad = world.client.post("/sweeps", json=_sweep(parameters={"lr": {"uniform": [1, 0]}},
                                                    trials=2), headers=world.member)
    assert bad.status_code == 422
    assert any(p["field"].startswith("parameters.lr") for p in bad.json()["detail"])
    huge = world.client.post("/sweeps", json=_sweep(job={"gpus": 64, "command": ["x"]}),
                             headers=world.member)
    assert huge.status_code == 422 and huge.json()["detail"][0]["field"] == "gpus"
    forged = world.client.post("/jobs", headers=world.member, json={
        "name": "x", "gpus": 1, "command": ["x"], "sweep": {"name": "s", "trial": 0,
                                                           "trials": 1}})
    assert forged.status_code == 422 and forged.json()["detail"][0]["field"] == "sweep"
    plain_id = world.client.post("/jobs", headers=world.member,
                                 json={"name": "p0", "gpus": 1, "command": ["x"]}).json()["id"]
    smuggled = world.client.post("/sweeps", headers=world.member, json=_sweep(job={
        "gpus": 0.25, "command": ["x"], "dependency": [{"kind": "preflight", "job": plain_id}]}))
    assert smuggled.status_code == 422, smuggled.text
    assert smuggled.json()["detail"][0]["field"] == "job.dependency.0.kind"
    sweep_id = world.client.post("/sweeps", json=_sweep(), headers=world.member).json()["id"]
    assert world.client.get(f"/sweeps/{sweep_id}", headers=world.other).status_code == 404
    plain = world.client.post("/jobs", headers=world.member,
                              json={"name": "p", "gpus": 1, "command": ["x"]}).json()["id"]
    r = world.client.get(f"/sweeps/{plain}", headers=world.member)
    assert r.status_code == 404 and "not a sweep" in r.json()["detail"]


def _preflighted(world: World) -> tuple[int, int]:
    r = world.client.post("/jobs", headers=world.member, json={
        "name": "big", "gpus": 8, "command": ["python", "train.py"], "env": {"A": "1"},
        "preflight": {"gpus": 1, "steps": 20}})
    assert r.status_code == 201, r.text
    return r.json()["id"], r.json()["preflight"]


def test_a_failed_preflight_fails_the_job_before_its_allocation(world: World) -> None:
    assert PREFLIGHT_STEPS_ENV == RUNTIME_ENV  # the control plane sets what the runtime reads
    big, pre = _preflighted(world)
    world.rec.cycle()
    assert world.state_of(pre) == JobState.RUNNING and world.state_of(big) == JobState.PENDING
    launch = world.rec.backend.launches_of(pre)[0]
    assert launch.env[PREFLIGHT_STEPS_ENV] == "20" and launch.env["A"] == "1"
    assert sum(len(n.gpus) for n in launch.nodes) == 1
    world.rec.backend.finish(pre, AttemptStatus.FAILED, exit_code=86,
                             detail="diverged at step 5: loss is nan")
    world.rec.cycle()
    world.rec.cycle()
    assert world.state_of(pre) == JobState.DIVERGED
    with world.store.read() as s:
        job = repo.require_job(s, big)
        assert job.state == JobState.FAILED and job.attempts_count == 0
        assert job.reason is not None and job.reason.startswith(f"preflight job {pre} diverged")
    assert world.rec.backend.launches_of(big) == []


def test_a_passed_preflight_lets_the_job_take_its_gpus(world: World) -> None:
    big, pre = _preflighted(world)
    world.rec.cycle()
    world.rec.backend.finish(pre)
    world.rec.cycle()
    world.rec.cycle()
    assert world.state_of(pre) == JobState.COMPLETED
    assert world.state_of(big) == JobState.RUNNING
    launch = world.rec.backend.launches_of(big)[0]
    assert sum(len(n.gpus) for n in launch.nodes) == 8
    assert PREFLIGHT_STEPS_ENV not in launch.env


def test_a_member_cannot_run_a_sweep_as_another_tenant_or_depend_on_its_jobs(
        world: World) -> None:
    """The base job's own ``tenant`` and ``dependency`` pass the same checks as ``POST /jobs``:
    a member's trials run as its tenant only, and depend only on jobs it can see."""
    as_a = world.client.post("/sweeps", headers=world.other,
                             json=_sweep(job={"tenant": "a", "gpus": 0.25, "command": ["x"]}))
    assert as_a.status_code in (403, 422), as_a.text
    assert "tenant" in as_a.text
    theirs = world.client.post("/jobs", headers=world.member,
                               json={"name": "a-job", "gpus": 1, "command": ["x"]}).json()["id"]
    probe = world.client.post("/sweeps", headers=world.other, json=_sweep(job={
        "gpus": 0.25, "command": ["x"], "dependency": [{"kind": "afterok", "job": theirs}]}))
    assert probe.status_code == 422, probe.text
    assert probe.json()["detail"][0]["field"] == "job.dependency.0.job"
    with world.store.read() as s:  # nothing of b's was stored
        assert [j.tenant for j in repo.list_jobs(s, limit=10)] == ["a"]


@pytest.mark.parametrize("planted", [
    '{"val_loss": [["x", 1.0]]}', '{"val_loss": [[1, null]]}', '{"val_loss": [[true, 1.0]]}',
    '{"val_loss": [[1e400, 1.0]]}', '[1, 2]', '{"val_loss": "x"}'])
def test_a_trials_planted_metrics_file_never_stops_the_cycle(world: World, planted: str) -> None:
    """The job's processes own their attempt directory and can replace ``metrics.json``:
    what they put there is dropped, and every other tenant's job still starts."""
    ids = world.client.post("/sweeps", json=_sweep(), headers=world.member).json()["trials"]
    world.rec.cycle()
    for j in ids[:2]:
        world.report(j, good(0.5))
    (world.dirs.attempt(ids[0], 1) / "metrics.json").write_text(planted)
    other = world.client.post("/jobs", headers=world.other,
                              json={"name": "b-job", "gpus": 1, "command": ["x"]}).json()["id"]
    world.rec.cycle()
    assert world.state_of(other) == JobState.RUNNING
    r = world.client.get(f"/sweeps/{ids[0]}", headers=world.member)
    assert r.status_code == 200, r.text
