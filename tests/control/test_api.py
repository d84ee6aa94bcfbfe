"""The HTTP API over a real store (SQLite and PostgreSQL), through FastAPI's TestClient.

A bad request must get a 4xx naming the bad field, and leave the store as it
was; a good one must be stored and visible. The reconciler is wired in as
``grace up`` does (it registers the cluster's nodes), with a scripted backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import LAB, FakeClock, ScriptedBackend, authed

from grace.control.api import create_app
from grace.control.reconciler import Reconciler
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.spec.loader import load_cluster

GOOD: dict[str, Any] = {"name": "train", "tenant": "vision", "gpus": 2,
                        "command": ["python", "train.py"], "runtime_limit": "1h"}


class Api:
    def __init__(self, store: Store, state_dir: Path) -> None:
        spec = load_cluster(LAB)
        self.topo = Topology.from_spec(spec)
        self.store = store
        self.state_dir = state_dir
        self.backend = ScriptedBackend(spec)
        self.clock = FakeClock()
        self.rec = Reconciler(store, self.backend, self.topo, get_policy("grace"), state_dir,
                              clock=self.clock)
        self.client = authed(create_app(store, self.topo, state_dir), store)

    def submit(self, **overrides: Any) -> int:
        r = self.client.post("/jobs", json={**GOOD, **overrides})
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def stored(self) -> tuple[int, int, int]:
        """(jobs, job events, tenants) in the store."""
        with self.store.read() as s:
            jobs = repo.list_jobs(s, limit=10_000)
            events = sum(len(repo.events(s, j.id)) for j in jobs)
            return len(jobs), events, len(repo.tenants(s))


@pytest.fixture
def api(store: Store, tmp_path: Path) -> Api:
    return Api(store, tmp_path / "state")


# ---------------------------------------------------------------- submit
def test_a_valid_job_is_stored_pending_and_returns_its_id(api: Api) -> None:
    r = api.client.post("/jobs", json=GOOD)
    assert r.status_code == 201
    body = r.json()
    assert isinstance(body["id"], int) and body["state"] == "pending"
    shown = api.client.get(f"/jobs/{body['id']}").json()
    assert (shown["name"], shown["tenant"], shown["state"], shown["gpus"]) == (
        "train", "vision", "pending", 2.0)
    assert shown["spec"]["command"] == ["python", "train.py"]
    assert shown["spec"]["runtime_limit"] == 3600
    assert api.stored() == (1, 1, 1)
    assert api.submit(name="second") == body["id"] + 1


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"gpus_per_nod": 2}, "gpus_per_nod", "unknown field"),
    ({"gpus": 2.5}, "gpus", "fractional"),
    ({"runtime_limit": "2 weeks"}, "runtime_limit", "duration"),
    ({"command": None}, "command", "command"),
    ({"command": []}, "command", "command"),
    ({"gpu_model": "H100-PCIe"}, "gpus", "H100-PCIe"),
    ({"gpus": 0}, "gpus", "greater than 0"),
    ({"name": ""}, "name", "at least 1"),
    ({"priority": "high"}, "priority", "whole number"),
    ({"nodes": 2}, "nodes", "together"),
    ({"runtime_estimate": "2h"}, "runtime_estimate", "longer than runtime_limit"),
    ({"gpus": 64}, "gpus", "lower gpus"),
    # what a backend would refuse at every launch is refused at submit (issue 12)
    ({"env": {"A=B": "1"}}, "env", "A=B"),
    ({"env": {"BIG": "x" * 2**20}}, "env", "BIG"),
    ({"command": ["python", "a\0b"]}, "command", "NUL"),
])
def test_a_malformed_spec_is_refused_naming_the_field_and_nothing_is_stored(
        api: Api, change: dict[str, Any], field: str, words: str) -> None:
    api.submit(name="already-there")
    before = api.stored()
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    r = api.client.post("/jobs", json=body)
    assert r.status_code == 422, r.text
    problems = r.json()["detail"]
    assert isinstance(problems, list) and problems
    assert field in [p["field"] for p in problems], problems
    assert any(words in p["message"] for p in problems), problems
    assert api.stored() == before
    assert [j["name"] for j in api.client.get("/jobs").json()] == ["already-there"]


def test_a_body_that_is_no_object_is_refused(api: Api) -> None:
    for body in ([GOOD], "train", 3):
        assert api.client.post("/jobs", json=body).status_code == 422
    r = api.client.post("/jobs", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert api.stored() == (0, 0, 0)
    assert api.client.get("/jobs").json() == []


def test_a_refused_job_of_a_new_tenant_creates_no_tenant(api: Api) -> None:
    r = api.client.post("/jobs", json={**GOOD, "tenant": "newcomer", "gpu_model": "H100-SXM"})
    assert r.status_code == 422
    assert api.client.get("/tenants").json() == []


# ---------------------------------------------------------------- list and show
def test_list_filters_by_state_and_tenant_newest_first(api: Api) -> None:
    a = api.submit(name="a", tenant="vision")
    b = api.submit(name="b", tenant="speech")
    c = api.submit(name="c", tenant="vision", gpus=None, nodes=2, gpus_per_node=4,
                   gpu_model="A100-80GB")
    api.rec.cycle()  # some run, maybe not all: the filters must agree with the states
    states = {j["id"]: j["state"] for j in api.client.get("/jobs").json()}
    assert list(states) == [c, b, a]
    running = {j["id"] for j in api.client.get("/jobs", params={"state": "running"}).json()}
    pending = {j["id"] for j in api.client.get("/jobs", params={"state": "pending"}).json()}
    assert running == {j for j, s in states.items() if s == "running"} and running
    assert running | pending == {a, b, c} and not running & pending
    vision = [j["id"] for j in api.client.get("/jobs", params={"tenant": "vision"}).json()]
    assert vision == [c, a]
    both = api.client.get("/jobs", params={"tenant": "speech", "state": states[b]}).json()
    assert [j["id"] for j in both] == [b]
    assert api.client.get("/jobs", params={"tenant": "nobody"}).json() == []
    assert api.client.get("/jobs", params={"state": "completed"}).json() == []
    assert [j["id"] for j in api.client.get("/jobs", params={"limit": 1, "offset": 1}).json()] == [b]


def test_an_unknown_state_filter_is_refused(api: Api) -> None:
    r = api.client.get("/jobs", params={"state": "finished"})
    assert r.status_code == 422
    [problem] = r.json()["detail"]
    assert problem["field"] == "state" and "pending" in problem["message"]
    assert api.client.get("/jobs", params={"limit": "many"}).status_code == 422


def test_show_has_attempts_and_events(api: Api) -> None:
    jid = api.submit(gpus=None, nodes=2, gpus_per_node=2, gpu_model="A100-80GB")
    api.rec.cycle()
    job = api.client.get(f"/jobs/{jid}").json()
    assert job["state"] == "running"
    [attempt] = job["attempts"]
    assert attempt["number"] == 1 and attempt["state"] == "running"
    assert sorted(n["node"] for n in attempt["nodes"]) == ["a100-00", "a100-01"]
    assert all(len(n["gpus"]) == 2 for n in attempt["nodes"])
    assert [e["kind"] for e in job["events"]] == ["submitted", "placed", "started"]
    assert job["events"][1]["detail"]["attempt"] == 1
    api.backend.finish(jid)
    api.rec.cycle()
    job = api.client.get(f"/jobs/{jid}").json()
    assert job["state"] == "completed" and job["attempts"][0]["exit_code"] == 0
    assert job["events"][-1]["kind"] == "completed"
    assert api.client.get("/jobs/999").status_code == 404
    assert api.client.get("/jobs/not-a-number").status_code == 422


def test_logs_are_served_per_node_and_attempt(api: Api) -> None:
    jid = api.submit(nodes=2, gpus_per_node=2, gpus=None, gpu_model="A100-80GB")
    assert api.client.get(f"/jobs/{jid}/logs").text == ""
    api.rec.cycle()
    first, second = (n["node"] for n in api.client.get(f"/jobs/{jid}").json()["attempts"][0]["nodes"])
    adir = api.rec.ctx.dirs.attempt(jid, 1)
    rank = adir / "ranks" / second / "1-1_x" / "attempt_0" / "0"
    rank.mkdir(parents=True)
    (rank / "stdout.log").write_text("rank 2 ready\n")
    (adir / f"{first}.log").write_text("step 10 loss 4.1\nstep 20 loss 3.2\n")
    (adir / f"{second}.log").write_text("[default0]:rank 2 ready\n")  # torchrun's copy of it
    text = api.client.get(f"/jobs/{jid}/logs", params={"attempt": 1}).text
    assert text == (f"[{first}/agent] step 10 loss 4.1\n[{first}/agent] step 20 loss 3.2\n"
                    f"[{second}/rank2] rank 2 ready\n")  # once, labelled node/rank
    only = api.client.get(f"/jobs/{jid}/logs", params={"attempt": 1, "node": second}).text
    assert only == f"[{second}/rank2] rank 2 ready\n"
    tail = api.client.get(f"/jobs/{jid}/logs", params={"attempt": 1, "node": first,
                                                        "tail": 1}).text
    assert tail == f"[{first}/agent] step 20 loss 3.2\n"


# ---------------------------------------------------------------- cancel
def test_cancel_is_accepted_until_the_job_ends_then_refused(api: Api) -> None:
    jid = api.submit()
    r = api.client.post(f"/jobs/{jid}/cancel")
    assert r.status_code == 200 and r.json() == {"id": jid, "cancel_requested": True}
    assert api.client.post(f"/jobs/{jid}/cancel").status_code == 200  # asking twice is fine
    api.rec.cycle()
    assert api.client.get(f"/jobs/{jid}").json()["state"] == "cancelled"
    r = api.client.post(f"/jobs/{jid}/cancel")
    assert r.status_code == 409 and "already ended" in r.json()["detail"]
    done = api.submit(name="done")
    api.rec.cycle()
    api.backend.finish(done)
    api.rec.cycle()
    assert api.client.post(f"/jobs/{done}/cancel").status_code == 409
    assert api.client.post("/jobs/12345/cancel").status_code == 404


# ---------------------------------------------------------------- nodes
def test_nodes_are_listed_with_their_inventory(api: Api) -> None:
    nodes = api.client.get("/nodes").json()
    assert [(n["name"], n["gpu_model"], n["gpus"], n["state"]) for n in nodes] == [
        ("a100-00", "A100-80GB", 4, "healthy"), ("a100-01", "A100-80GB", 4, "healthy"),
        ("l40s-00", "L40S", 4, "healthy")]


def test_drain_keeps_the_reason_in_the_history_and_resume_returns_the_node(api: Api) -> None:
    alice = authed(api.client.app, api.store, "operator", name="alice")
    bob = authed(api.client.app, api.store, "operator", name="bob")
    # the actor is the token's name; what the body claims is not read
    r = alice.post("/nodes/a100-01/drain", json={"reason": "Xid 79 seen twice",
                                                 "actor": "mallory"})
    assert r.status_code == 200
    assert r.json() == {"name": "a100-01", "state": "draining", "reason": "Xid 79 seen twice",
                        "evict": False}
    node = {n["name"]: n for n in api.client.get("/nodes").json()}["a100-01"]
    assert (node["state"], node["reason"], node["actor"], node["holder"]) == (
        "draining", "drained by alice: Xid 79 seen twice", "alice", "alice")
    api.rec.cycle()  # nothing runs there: drained at once
    assert {n["name"]: n["state"] for n in api.client.get("/nodes").json()}["a100-01"] == "drained"
    r = bob.post("/nodes/a100-01/resume", params={"actor": "mallory"})
    assert r.status_code == 200 and r.json()["state"] == "returned"
    with api.store.read() as s:
        history = [(e.from_state.value, e.to_state.value, e.reason, e.actor)
                   for e in repo.node_events(s, "a100-01")]
    assert history == [("healthy", "draining", "drained by alice: Xid 79 seen twice", "alice"),
                       ("draining", "drained",
                        "drained by alice: Xid 79 seen twice (its last job left)", "grace"),
                       ("drained", "returned", "forced back by bob without diagnostics", "bob")]


def test_bad_node_requests_are_refused(api: Api) -> None:
    assert api.client.post("/nodes/gpu-99/drain", json={"reason": "x"}).status_code == 404
    r = api.client.post("/nodes/a100-00/drain", json={})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "reason"
    assert api.client.post("/nodes/a100-00/drain", json={"reason": ""}).status_code == 422
    r = api.client.post("/nodes/a100-00/resume")  # healthy: nothing to resume from
    assert r.status_code == 409 and "nothing to undrain" in r.json()["detail"]
    with api.store.read() as s:
        assert repo.node_events(s, "a100-00") == []


# ---------------------------------------------------------------- tenants
def test_quota_put_then_get(api: Api) -> None:
    r = api.client.put("/tenants/vision", json={"guaranteed_gpus": 8, "borrow_limit_gpus": 4,
                                                "weight": 2, "preemptions_per_hour": 5})
    assert r.status_code == 200 and r.json()["guaranteed_gpus"] == 8
    api.client.put("/tenants/speech", json={})
    tenants = {t["name"]: t for t in api.client.get("/tenants").json()}
    assert set(tenants) == {"speech", "vision"}
    v = tenants["vision"]
    assert (v["guaranteed_gpus"], v["borrow_limit_gpus"], v["weight"],
            v["preemptions_per_hour"], v["gpu_hours"]) == (8, 4, 2, 5, 0.0)
    assert (tenants["speech"]["guaranteed_gpus"], tenants["speech"]["weight"]) == (None, 1.0)
    api.client.put("/tenants/vision", json={"guaranteed_gpus": 2})
    v = {t["name"]: t for t in api.client.get("/tenants").json()}["vision"]
    assert (v["guaranteed_gpus"], v["borrow_limit_gpus"], v["weight"]) == (2, None, 1.0)


def test_a_bad_quota_is_refused_naming_the_field(api: Api) -> None:
    for body, field in (({"weight": 0}, "weight"), ({"guaranteed_gpus": -1}, "guaranteed_gpus"),
                        ({"preemptions_per_hour": 1.5}, "preemptions_per_hour")):
        r = api.client.put("/tenants/vision", json=body)
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == field, r.text
    assert api.client.get("/tenants").json() == []


def test_gpu_hours_are_counted_per_tenant(api: Api) -> None:
    jid = api.submit(gpus=4, tenant="vision")
    api.rec.cycle()
    with api.store.transaction() as s:  # the attempt ran for 30 minutes
        attempt = repo.require_job(s, jid).attempts[0]
        attempt.started_at -= 1800
    api.backend.finish(jid)
    api.rec.cycle()
    with api.store.transaction() as s:
        attempt = repo.require_job(s, jid).attempts[0]
        attempt.ended_at = attempt.started_at + 1800
    v = {t["name"]: t for t in api.client.get("/tenants").json()}["vision"]
    assert v["gpu_hours"] == pytest.approx(2.0)


# ---------------------------------------------------------------- the contract
def test_openapi_is_published_with_every_path(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()
    assert doc["info"]["title"] == "Grace"
    assert {"/healthz", "/jobs", "/jobs/{job_id}", "/jobs/{job_id}/cancel", "/jobs/{job_id}/logs",
            "/nodes", "/nodes/{name}/drain", "/nodes/{name}/resume", "/tenants",
            "/tenants/{name}"} <= set(doc["paths"])
    assert {"get", "post"} <= set(doc["paths"]["/jobs"])
    assert "put" in doc["paths"]["/tenants/{name}"]
    assert api.client.get("/healthz").json() == {"status": "ok"}
