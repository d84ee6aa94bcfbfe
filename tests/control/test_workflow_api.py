"""Slurm's workflows through the real API and a real reconciler: arrays with %N,
dependencies, hold, release and requeue (a scripted backend, an injected clock)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import FakeClock, lab_reconciler, make_token

from grace.backends.base import AttemptStatus
from grace.control.api import create_app
from grace.control.store import repository as repo
from grace.control.store.db import Store


@dataclass
class Lab:
    api: TestClient
    rec: Any
    clock: FakeClock
    store: Store
    as_a: dict[str, str]
    as_b: dict[str, str]
    as_viewer: dict[str, str]

    def submit(self, name: str = "train", gpus: float = 1, headers: dict | None = None,
               **kw: Any) -> Any:
        return self.api.post("/jobs", json={"name": name, "gpus": gpus,
                                            "command": ["python", "train.py"], **kw},
                             headers=headers or self.as_a)

    def cycle(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)
        self.rec.cycle()

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.api.get(f"/jobs/{job_id}", headers=self.as_a)
        assert r.status_code == 200, r.text
        return r.json()

    def post(self, job_id: int, verb: str, headers: dict | None = None, **params: Any) -> Any:
        return self.api.post(f"/jobs/{job_id}/{verb}", params=params,
                             headers=headers or self.as_a)


@pytest.fixture
def lab(store: Store, tmp_path: Path) -> Lab:
    clock = FakeClock()
    rec = lab_reconciler(store, tmp_path / "state", clock)
    app = create_app(store, rec.topo, tmp_path / "state", rec, rec.backend, clock=clock)
    headers = {k: {"Authorization": f"Bearer {make_token(store, role, tenant)}"}
               for k, role, tenant in [("a", "member", "a"), ("b", "member", "b"),
                                       ("v", "viewer", "a")]}
    return Lab(TestClient(app), rec, clock, store, headers["a"], headers["b"], headers["v"])


# ---------------------------------------------------------------- arrays
def test_an_array_of_10_with_limit_2_never_runs_more_than_2(lab: Lab) -> None:
    r = lab.submit("sweep", gpus=1, array="0-9%2")
    assert r.status_code == 201, r.text
    tasks = r.json()["array"]["tasks"]
    assert len(tasks) == 10 and r.json()["array"]["id"] == tasks[0] == r.json()["id"]
    most, order = 0, []
    for _ in range(40):
        lab.cycle()
        rows = [j for j in lab.api.get("/jobs", headers=lab.as_a).json() if j["id"] in tasks]
        running = sorted(j["id"] for j in rows if j["state"] == "running")
        most = max(most, len(running))
        assert len(running) <= 2, running
        order += [j for j in running if j not in order]
        waiting = [j for j in rows if j["state"] == "pending"]
        if running:
            assert {j["reason"] for j in waiting} <= {"array-limit"}
        for j in running[:1]:  # one task ends per cycle
            lab.rec.backend.finish(j)
        if all(j["state"] == "completed" for j in rows):
            break
    assert most == 2 and order == tasks  # index order
    assert all(lab.job(t)["state"] == "completed" for t in tasks)
    env = lab.rec.backend.launches_of(tasks[3])[0].env
    assert env["GRACE_ARRAY_TASK_ID"] == env["SLURM_ARRAY_TASK_ID"] == "3"
    assert env["GRACE_ARRAY_JOB_ID"] == str(tasks[0])
    summary = lab.job(tasks[3])
    assert summary["array"] == {"id": tasks[0], "index": 3, "limit": 2, "kind": "array"}


def test_an_array_is_stored_whole_or_not_at_all(lab: Lab) -> None:
    r = lab.submit("too-big", gpus=64, array="0-3")
    assert r.status_code == 422
    assert lab.api.get("/jobs", headers=lab.as_a).json() == []
    bad = lab.submit("bad", array="0-3%0")
    assert bad.status_code == 422 and "array" in bad.text


def test_an_arrays_id_acts_on_every_task_and_id_task_on_one(lab: Lab) -> None:
    """Slurm's ``scontrol hold 12`` / ``release 12`` / ``scancel 12`` on an array's id act on
    every task that can take the action; ``12_3`` (``task=3``) on that task alone."""
    out = lab.submit("arr", gpus=1, array="0-3", hold=True).json()
    head, tasks = out["id"], out["array"]["tasks"]
    one = lab.post(head, "release", task=2)
    assert one.status_code == 200 and one.json()["id"] == tasks[2], one.text
    assert [lab.job(t)["held"] for t in tasks] == [True, True, False, True]
    rest = lab.post(head, "release", array="true")
    assert rest.json() == {"id": head, "jobs": [tasks[0], tasks[1], tasks[3]], "skipped": 1}
    assert not any(lab.job(t)["held"] for t in tasks)
    again = lab.post(head, "release", array="true")
    assert again.status_code == 409  # none is held any more
    assert lab.post(head, "hold", array="true").json()["jobs"] == tasks
    cancelled = lab.post(head, "cancel", array="true")
    assert cancelled.json()["jobs"] == tasks and cancelled.json()["cancel_requested"] is True
    lab.cycle()
    assert all(lab.job(t)["state"] == "cancelled" for t in tasks)
    assert lab.post(head, "cancel", task=9).status_code == 404
    plain = lab.submit("plain").json()["id"]
    r = lab.post(plain, "hold", array="true")
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "array"
    assert lab.post(head, "cancel", array="true", headers=lab.as_b).status_code == 404


# ---------------------------------------------------------------- dependencies
def test_afterok_waits_and_a_failed_parent_cancels_the_child_with_a_reason(lab: Lab) -> None:
    parent = lab.submit("parent").json()["id"]
    child = lab.submit("child", dependency=f"afterok:{parent}").json()["id"]
    doomed = lab.submit("doomed").json()["id"]
    orphan = lab.submit("orphan", dependency=[f"afterok:{doomed}"]).json()["id"]
    cleanup = lab.submit("cleanup", dependency=f"afternotok:{doomed}").json()["id"]
    lab.cycle()
    assert lab.job(parent)["state"] == "running"
    assert (lab.job(child)["state"], lab.job(child)["reason"]) == ("pending", "dependency")
    assert lab.job(child)["dependency"] == [{"kind": "afterok", "job": parent}]
    lab.rec.backend.finish(parent)
    lab.rec.backend.finish(doomed, AttemptStatus.FAILED, detail="exit 1")
    lab.cycle(30)  # a failure in the first minutes is the user's: failed, not retried
    assert lab.job(parent)["state"] == "completed"
    assert lab.job(doomed)["state"] == "failed"
    assert lab.job(child)["state"] == "running"
    assert lab.job(cleanup)["state"] == "running"
    cancelled = lab.job(orphan)
    assert cancelled["state"] == "cancelled"
    assert f"job {doomed}" in cancelled["reason"] and "failed" in cancelled["reason"]
    with lab.store.read() as s:
        [event] = [e for e in repo.events(s, orphan) if e.kind == "cancelled"]
        assert event.actor == "grace" and event.detail["parent"] == doomed


def test_a_dependency_on_an_array_waits_for_every_task(lab: Lab) -> None:
    tasks = lab.submit("shards", array="0-1").json()["array"]["tasks"]
    merge = lab.submit("merge", dependency=f"afterok:{tasks[0]}").json()["id"]
    lab.cycle()
    lab.rec.backend.finish(tasks[0])
    lab.cycle()
    assert (lab.job(merge)["state"], lab.job(merge)["reason"]) == ("pending", "dependency")
    lab.rec.backend.finish(tasks[1])
    lab.cycle()
    assert lab.job(merge)["state"] == "running"


def test_a_dependency_must_name_a_job_the_submitter_sees(lab: Lab) -> None:
    theirs = lab.submit("theirs", headers=lab.as_b).json()["id"]
    for dep in (f"afterok:{theirs}", "afterok:999999"):
        r = lab.submit("child", dependency=dep)
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["field"].startswith("dependency")
    r = lab.submit("child", dependency="afterwards:1")
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "dependency"
    # the internal kind is the control plane's: a mapping cannot smuggle it in
    mine = lab.submit("mine").json()["id"]
    r = lab.submit("child", dependency=[{"kind": "preflight", "job": mine}])
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "dependency.0.kind"
    assert "afterok" in r.json()["detail"][0]["message"]


# ---------------------------------------------------------------- hold, release, requeue
def test_hold_and_release_as_slurm(lab: Lab) -> None:
    held = lab.submit("held", hold=True).json()["id"]
    lab.cycle()
    assert (lab.job(held)["state"], lab.job(held)["reason"], lab.job(held)["held"]) == (
        "pending", "held", True)
    assert lab.post(held, "release").json()["held"] is False
    assert lab.post(held, "release").status_code == 409  # not held any more
    lab.cycle()
    assert lab.job(held)["state"] == "running"
    r = lab.post(held, "hold")
    assert r.status_code == 409 and "only a pending job" in r.json()["detail"]
    pending = lab.submit("later").json()["id"]
    assert lab.post(pending, "hold").status_code == 200
    lab.cycle()
    assert lab.job(pending)["state"] == "pending" and lab.job(pending)["reason"] == "held"
    kinds = [e["kind"] for e in lab.job(pending)["events"]]
    assert kinds == ["submitted", "held"]


def test_requeue_a_running_job_checkpoints_and_queues_it_without_a_failure(lab: Lab) -> None:
    job = lab.submit("long").json()["id"]
    lab.cycle()
    assert lab.post(job, "requeue").json()["requeue_requested"] is True
    lab.cycle()  # the reconciler ends the attempt with SIGTERM; the job is pending
    after = lab.job(job)
    assert after["state"] in ("pending", "running") and after["restarts"] == 0
    assert ("requeued" in [e["kind"] for e in after["events"]])
    assert (job, 1) in lab.rec.backend.cancels
    lab.cycle()
    lab.cycle()
    again = lab.job(job)
    assert again["state"] == "running" and len(again["attempts"]) == 2
    assert again["restarts"] == 0 and again["attempts"][0]["state"] == "cancelled"


def test_requeuehold_keeps_it_pending_until_released(lab: Lab) -> None:
    job = lab.submit("long").json()["id"]
    lab.cycle()
    assert lab.post(job, "requeue", hold="true").status_code == 200
    for _ in range(3):
        lab.cycle()
    assert (lab.job(job)["state"], lab.job(job)["reason"]) == ("pending", "held")
    lab.post(job, "release")
    lab.cycle()
    assert lab.job(job)["state"] == "running"


def test_requeue_an_ended_job_queues_it_again_and_a_pending_one_is_refused(lab: Lab) -> None:
    job = lab.submit("short").json()["id"]
    lab.cycle()
    lab.rec.backend.finish(job)
    lab.cycle()
    assert lab.job(job)["state"] == "completed"
    r = lab.post(job, "requeue")
    assert r.status_code == 200 and r.json()["state"] == "pending"
    assert lab.post(job, "requeue").status_code == 409  # pending: queued already
    lab.cycle()
    assert lab.job(job)["state"] == "running" and lab.job(job)["ended_at"] is None


def test_another_tenants_member_gets_404_and_a_viewer_403(lab: Lab) -> None:
    job = lab.submit("mine", hold=True).json()["id"]
    for verb in ("hold", "release", "requeue"):
        assert lab.post(job, verb, headers=lab.as_b).status_code == 404
        assert lab.post(job, verb, headers=lab.as_viewer).status_code == 403
