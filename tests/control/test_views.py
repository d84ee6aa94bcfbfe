"""``GET /history``, ``/priority``, ``/shares`` and ``/nodes/allocation`` (routes_views)
over a real SQLite store and the real reconciler on the lab cluster.

- history pages through 1,000 jobs inserted straight into the store, with jobs
  submitted between pages, and loses or repeats none;
- priority lists waiting jobs in the order the engine then starts them (checked by
  freeing one node at a time and letting the reconciler decide);
- shares and node allocation say what each tenant and node holds, and a member sees its
  own tenant only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import FakeClock, ScriptedBackend, job_spec, lab_reconciler, make_token

from grace.control.api import create_app
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import JobState

A100 = "A100-80GB"
START = 1_700_000_000.0


@dataclass
class Live:
    api: TestClient
    store: Store
    clock: FakeClock
    rec: Any
    backend: ScriptedBackend

    def as_(self, role: str, tenant: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {make_token(self.store, role, tenant)}"}

    def submit(self, name: str, tenant: str, gpus: float = 4, **kw: Any) -> int:
        r = self.api.post("/jobs", json={"name": name, "tenant": tenant, "gpus": gpus,
                                         "command": ["python", "train.py"], **kw})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def cycle(self, advance: float = 1.0) -> None:
        self.clock.advance(advance)
        self.rec.cycle()

    def state(self, job_id: int) -> str:
        return str(self.api.get(f"/jobs/{job_id}").json()["state"])


@pytest.fixture
def live(store: Store, tmp_path: Path) -> Live:
    clock = FakeClock(START)
    rec = lab_reconciler(store, tmp_path / "state", clock)
    app = create_app(store, rec.topo, tmp_path / "state", rec, rec.backend, clock=clock)
    api = TestClient(app, headers={"Authorization": f"Bearer {make_token(store, 'admin')}"})
    return Live(api, store, clock, rec, rec.backend)


# ------------------------------------------------------------------ history
def _page_all(api: TestClient, headers: dict[str, str] | None = None,
              between: Any = None, **params: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    after, pages = 0, 0
    while True:
        r = api.get("/history", params={**params, "after": after}, headers=headers)
        assert r.status_code == 200, r.text
        body = r.json()
        seen += body["jobs"]
        pages += 1
        if body["next"] is None:
            return seen
        assert body["next"] == body["jobs"][-1]["id"]
        after = body["next"]
        if between is not None:
            between(pages)


def test_history_pages_through_1000_jobs_without_losing_or_repeating_one(live: Live) -> None:
    with live.store.transaction() as s:
        for i in range(1000):
            tenant = ("vision", "nlp", "speech")[i % 3]
            job = repo.add_job(s, job_spec(f"bulk-{i}", tenant=tenant), START - 86400 + 60 * i)
            if i % 10 == 0:  # every tenth failed long ago, before the window below
                job.state, job.ended_at, job.reason = JobState.FAILED, START - 80000.0, "oom"
    late: list[int] = []

    def submit_meanwhile(page: int) -> None:  # new jobs land after every cursor: seen once
        if page <= 3:
            with live.store.transaction() as s:
                late.append(repo.add_job(s, job_spec(f"late-{page}", tenant="nlp"),
                                         live.clock()).id)

    got = _page_all(live.api, between=submit_meanwhile, limit=137)
    ids = [j["id"] for j in got]
    assert len(ids) == len(set(ids)) == 1000 + len(late) == 1003
    assert ids == sorted(ids) and set(late) <= set(ids)
    # the window: failed before it began is left out; --state and --tenant filter
    in_window = _page_all(live.api, since=START - 70000, limit=1000)
    assert len(in_window) == 1003 - 100
    failed = _page_all(live.api, state="failed", limit=50)
    assert len(failed) == 100 and {j["reason"] for j in failed} == {"oom"}
    nlp = _page_all(live.api, tenant="nlp", state="pending,failed", limit=999)
    assert {j["tenant"] for j in nlp} == {"nlp"} and len(nlp) == 333 + 3
    # a member pages through its own tenant only, whatever it asks for
    member = live.as_("member", "speech")
    mine = _page_all(live.api, headers=member, limit=400)
    assert {j["tenant"] for j in mine} == {"speech"} and len(mine) == 333
    assert _page_all(live.api, headers=member, tenant="nlp") == []


def test_history_names_the_field_and_the_fix_for_bad_queries(live: Live) -> None:
    r = live.api.get("/history", params={"state": "failed,exploded"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.state"
    assert "'exploded'" in r.json()["detail"][0]["message"]
    r = live.api.get("/history", params={"since": START, "until": START - 1})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.until"
    r = live.api.get("/history", params={"limit": 1001})
    assert r.status_code == 422 and "limit" in r.json()["detail"][0]["field"]


def test_history_carries_each_attempt_of_a_requeued_job(live: Live) -> None:
    job = live.submit("requeued", "vision", gpu_model=A100)
    live.cycle()
    live.clock.advance(100)
    from grace.backends.base import AttemptStatus

    [attempt] = live.api.get(f"/jobs/{job}").json()["attempts"]
    live.backend.finish(job, AttemptStatus.LOST, failed_node=attempt["nodes"][0]["node"])
    live.cycle()
    live.cycle()
    [row] = live.api.get("/history").json()["jobs"]
    assert [a["number"] for a in row["attempt_spans"]] == [1, 2]
    assert row["attempt_spans"][0]["ended_at"] is not None


# ------------------------------------------------------------------ priority, shares, nodes
def _fill(live: Live) -> list[int]:
    """Tenant ``x`` takes all 12 GPUs with three 4-GPU jobs (one per node)."""
    fillers = [live.submit(f"fill-{g}", "x", gpu_model=g) for g in (A100, A100, "L40S")]
    live.cycle()
    assert {live.state(f) for f in fillers} == {"running"}
    return fillers


def test_priority_is_the_order_the_engine_starts_waiting_jobs_in(live: Live) -> None:
    fillers = _fill(live)
    d = live.submit("d-early", "z", gpu_model=A100)
    live.clock.advance(10)
    a = live.submit("a-plain", "y", gpu_model=A100)
    b = live.submit("b-urgent-but-x", "x", gpu_model=A100, priority=5)
    c = live.submit("c-urgent", "y", gpu_model=A100, priority=5)
    live.cycle()
    body = live.api.get("/priority").json()
    assert body["policy"] == "grace" and body["order"] == ["priority", "las", "size", "submit"]
    assert body["fair_share"] is True and body["waiting"] == 4
    # y and z hold nothing (fair share 0), x holds 12: every job of y and z goes before x's,
    # then priority, then submission
    order = [j["id"] for j in body["jobs"]]
    assert order == [c, d, a, b], body["jobs"]
    assert [j["position"] for j in body["jobs"]] == [1, 2, 3, 4]
    by_id = {j["id"]: j for j in body["jobs"]}
    assert by_id[b]["fair_share"] == 12.0 and by_id[b]["tenant_gpus"] == 12.0
    assert by_id[c]["factors"] == {"priority": 5, "las": 0, "size": 4, "submit": by_id[c][
        "submitted_at"]}
    # the engine agrees: free one A100 node at a time, and the head of the list starts
    started: list[int] = []
    for filler in fillers[:2]:
        head = live.api.get("/priority").json()["jobs"][0]["id"]
        live.backend.finish(filler)
        live.cycle()
        live.cycle()
        running = [j for j in order if live.state(j) == "running" and j not in started]
        assert running == [head], (running, head)
        started += running
    assert started == [c, d]
    # a member sees its own tenant's jobs only, at their place in the whole queue
    # (x and y now hold 4 GPUs each, z too: b's priority puts it ahead of a)
    mine = live.api.get("/priority", headers=live.as_("member", "y")).json()["jobs"]
    assert [(j["id"], j["position"]) for j in mine] == [(a, 2)]
    assert live.api.get("/priority", params={"tenant": "x"},
                        headers=live.as_("member", "y")).json()["jobs"] == []


def test_priority_counts_the_jobs_the_gate_keeps_out_of_the_queue(live: Live) -> None:
    """A held job or one waiting on a dependency is pending but not in the queue yet:
    ``/priority`` says how many (``grace priority`` prints it), not "0 waiting"."""
    _fill(live)
    parent = live.submit("parent", "y", gpu_model=A100)
    live.submit("held", "y", gpu_model=A100, hold=True)
    live.submit("child", "y", gpu_model=A100, dependency=f"afterok:{parent}")
    live.submit("other", "z", gpu_model=A100, hold=True)
    live.cycle()
    body = live.api.get("/priority").json()
    assert [j["id"] for j in body["jobs"]] == [parent] and body["gated"] == 3
    mine = live.api.get("/priority", headers=live.as_("member", "y")).json()
    assert mine["gated"] == 2  # its own tenant's only


def test_priority_needs_the_engine(store: Store, tmp_path: Path) -> None:
    from helpers import LAB

    from grace.core.topology import Topology
    from grace.spec.loader import load_cluster

    app = create_app(store, Topology.from_spec(load_cluster(LAB)), tmp_path / "state")
    r = TestClient(app).get("/priority", headers={
        "Authorization": f"Bearer {make_token(store, 'admin')}"})
    assert r.status_code == 503 and "grace up" in r.json()["detail"]


def test_shares_and_node_allocation_say_what_each_tenant_and_node_holds(live: Live) -> None:
    assert live.api.put("/tenants/x", json={"guaranteed_gpus": 12, "borrow_limit_gpus": 4,
                                            "weight": 2}).status_code == 200
    fillers = _fill(live)
    waiting = live.submit("waits", "y", gpu_model=A100)
    live.cycle(1800)  # half an hour on 12 GPUs: 6 GPU-hours
    body = live.api.get("/shares").json()
    assert body["total_gpus"] == 12
    rows = {t["tenant"]: t for t in body["tenants"]}
    x, y = rows["x"], rows["y"]
    assert (x["guaranteed_gpus"], x["borrow_limit_gpus"], x["weight"]) == (12, 4, 2)
    assert y["guaranteed_gpus"] is None  # unlimited
    assert x["gpus_held"] == 12 and x["fair_share"] == 6.0 and x["usage_share"] == 1.0
    assert x["gpu_hours"] == pytest.approx(6.0, rel=0.01) and x["running"] == 3
    assert y["gpus_held"] == 0 and y["fair_share"] == 0 and y["pending"] == 1
    assert x["norm_share"] == pytest.approx(2 / 3)
    assert [t["tenant"] for t in live.api.get(
        "/shares", headers=live.as_("member", "y")).json()["tenants"]] == ["y"]

    nodes = live.api.get("/nodes/allocation").json()
    assert len(nodes) == 3 and all(n["allocated"] == 4 and n["free"] == 0 for n in nodes)
    assert sorted(j["id"] for n in nodes for j in n["jobs"]) == sorted(fillers)
    seen_by_y = live.api.get("/nodes/allocation", headers=live.as_("member", "y")).json()
    assert all(n["jobs"] == [] and n["other_jobs"] == 1 for n in seen_by_y)
    live.backend.finish(fillers[0])
    live.cycle()
    live.cycle()
    assert live.state(waiting) == "running"
    after = {n["name"]: n for n in live.api.get("/nodes/allocation").json()}
    assert sum(n["free"] for n in after.values()) == 0
    assert waiting in {j["id"] for n in after.values() for j in n["jobs"]}
