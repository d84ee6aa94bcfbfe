"""The role matrix: every endpoint x every kind of caller x own/other tenant.

Each route of the real app is called by each caller: no token, an admin, an
operator, a member and a viewer of the job's tenant (A) and of another (B), a
viewer of every tenant, the job's own attempt token and another job's. The
expected answer is written per route; the test fails for a route the matrix
does not list, so a new endpoint cannot ship without its row. ``ok`` means the
caller got past authentication and authorization (a 2xx, or the 409 of an
action that already happened); 404 for another tenant's job is the same answer
a job that does not exist gets, so a member learns nothing of other tenants.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from helpers import LAB, FakeClock, lab_reconciler, make_token

from grace.control.api import create_app
from grace.control.live.context import job_dirs
from grace.control.store import audit, tokens
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.core.topology import Topology
from grace.spec.loader import load_cluster

CALLERS = ("anonymous", "admin", "operator", "member_a", "member_b", "viewer_a", "viewer_b",
           "viewer_all", "job_a", "job_b")
OK = "ok"


@dataclass
class World:
    client: TestClient
    headers: dict[str, dict[str, str]]
    job_a: int
    job_b: int
    cancel_a: int
    app: Any
    store: Store


def _job(tenant: str, name: str) -> dict[str, Any]:
    return {"name": name, "tenant": tenant, "gpus": 1, "command": ["python", "train.py"]}


@pytest.fixture
def world(store: Store, tmp_path: Path) -> World:
    clock = FakeClock()
    rec = lab_reconciler(store, tmp_path / "state", clock)
    app = create_app(store, rec.topo, tmp_path / "state", rec, rec.backend, clock=clock,
                     allow_inject=True)
    headers = {"anonymous": {}}
    for caller, role, tenant in [("admin", "admin", None), ("operator", "operator", None),
                                 ("member_a", "member", "a"), ("member_b", "member", "b"),
                                 ("viewer_a", "viewer", "a"), ("viewer_b", "viewer", "b"),
                                 ("viewer_all", "viewer", None)]:
        headers[caller] = {"Authorization": f"Bearer {make_token(store, role, tenant)}"}
    client = TestClient(app)
    ids = [client.post("/jobs", json=_job(t, n), headers=headers["admin"]).json()["id"]
           for t, n in [("a", "a-train"), ("b", "b-train"), ("a", "a-to-cancel")]]
    rec.cycle()  # the jobs start: each has attempt 1
    dirs = job_dirs(store, tmp_path / "state")
    for job in ids[:2]:
        dirs.attempt(job, 1).mkdir(parents=True)  # where the backend would have made it
    with store.transaction() as s:
        for caller, job in (("job_a", ids[0]), ("job_b", ids[1])):
            headers[caller] = {"Authorization": f"Bearer {tokens.job_token(s, job, 1)}"}
    return World(client, headers, ids[0], ids[1], ids[2], app, store)


def _row(default: str | int, **overrides: str | int) -> dict[str, str | int]:
    return {c: overrides.get(c, default) for c in CALLERS} | {"anonymous": 401}


USERS_READ = _row(OK, job_a=403, job_b=403)
TENANT_A_READ = _row(OK, member_b=404, viewer_b=404, job_a=403, job_b=403)
MEMBERS_OF_A = _row(403, admin=OK, operator=OK, member_a=OK, member_b=404)
OPERATORS = _row(403, admin=OK, operator=OK)
ADMINS = _row(403, admin=OK)

# (method, route path) -> (concrete path, request kwargs, expected per caller)
MATRIX: dict[tuple[str, str], tuple[str, dict[str, Any], dict[str, str | int]]] = {
    ("GET", "/healthz"): ("/healthz", {}, {c: OK for c in CALLERS}),
    ("GET", "/openapi.json"): ("/openapi.json", {}, USERS_READ),
    ("GET", "/docs"): ("/docs", {}, USERS_READ),
    # a member of B may submit for B, not for A: the body's tenant may only repeat the token's
    ("POST", "/jobs"): ("/jobs", {"json": _job("a", "new")},
                        _row(403, admin=OK, operator=OK, member_a=OK)),
    ("POST", "/jobs:batch"): ("/jobs:batch", {"json": {"jobs": [_job("a", "new")]}},
                              _row(403, admin=OK, operator=OK, member_a=OK)),
    ("GET", "/jobs"): ("/jobs", {}, USERS_READ),
    ("GET", "/jobs/{job_id}"): ("/jobs/{a}", {}, TENANT_A_READ),
    ("GET", "/jobs/{job_id}/logs"): ("/jobs/{a}/logs", {}, TENANT_A_READ),
    ("GET", "/jobs/{job_id}/notifications"): ("/jobs/{a}/notifications", {}, TENANT_A_READ),
    ("GET", "/jobs/{job_id}/logs/follow"): ("/jobs/{a}/logs/follow", {}, TENANT_A_READ),
    ("POST", "/jobs/{job_id}/cancel"): ("/jobs/{cancel}/cancel", {}, MEMBERS_OF_A),
    ("POST", "/jobs/{job_id}/clear-exclusions"): ("/jobs/{a}/clear-exclusions", {}, OPERATORS),
    # Slurm's workflow verbs (test_workflow_api.py): job_a runs, so hold and release are 409
    ("POST", "/jobs/{job_id}/hold"): ("/jobs/{a}/hold", {}, MEMBERS_OF_A),
    ("POST", "/jobs/{job_id}/release"): ("/jobs/{a}/release", {}, MEMBERS_OF_A),
    ("POST", "/jobs/{job_id}/requeue"): ("/jobs/{a}/requeue", {}, MEMBERS_OF_A),
    ("POST", "/jobs/{job_id}/heartbeats"): (
        "/jobs/{a}/heartbeats", {"json": {"attempt": 1, "records": [{"step": 1}]}},
        _row(403, job_a=OK, job_b=404)),
    ("POST", "/jobs/{job_id}/inject"): ("/jobs/{a}/inject", {"json": {"fault": "node-unhealthy"}},
                                        ADMINS),
    # sweeps (routes_sweep; tests/control/test_sweeps.py): submitted like a job; job_a is
    # no sweep, so a reader who may see it gets the 404 that names it so
    ("POST", "/sweeps"): ("/sweeps", {"json": {"name": "s", "tenant": "a", "job": _job("a", "s"),
                                               "parameters": {"lr": [0.1]}}},
                          _row(403, admin=OK, operator=OK, member_a=OK)),
    ("GET", "/sweeps/{sweep_id}"): ("/sweeps/{a}", {}, _row(404, job_a=403, job_b=403)),
    ("GET", "/nodes"): ("/nodes", {}, USERS_READ),
    ("POST", "/nodes/{name}/signals"): ("/nodes/l40s-00/signals",
                                        {"json": {"kind": "thermal-throttle"}}, OPERATORS),
    ("POST", "/nodes/{name}/drain"): ("/nodes/a100-01/drain", {"json": {"reason": "fan"}},
                                      OPERATORS),
    ("POST", "/nodes/{name}/resume"): ("/nodes/a100-01/resume", {}, OPERATORS),
    ("GET", "/health/breaker"): ("/health/breaker", {}, USERS_READ),
    ("POST", "/health/breaker/reset"): ("/health/breaker/reset", {}, OPERATORS),
    ("GET", "/tenants"): ("/tenants", {}, USERS_READ),
    ("PUT", "/tenants/{name}"): ("/tenants/a", {"json": {"guaranteed_gpus": 4}}, OPERATORS),
    ("GET", "/showback"): ("/showback", {"params": {"since": 0}}, OPERATORS),
    ("POST", "/tokens"): ("/tokens", {"json": {"name": "x", "role": "viewer"}}, ADMINS),
    ("GET", "/tokens"): ("/tokens", {}, ADMINS),
    ("DELETE", "/tokens/{token_id}"): ("/tokens/{spare}", {}, ADMINS),
    ("GET", "/audit"): ("/audit", {}, ADMINS),
    ("GET", "/audit/verify"): ("/audit/verify", {}, ADMINS),
    ("GET", "/audit/head"): ("/audit/head", {}, ADMINS),
    # a tenant's token reads its own tenant's series only (tests/control/test_metrics.py)
    ("GET", "/metrics"): ("/metrics", {}, USERS_READ),
    ("GET", "/alerts"): ("/alerts", {}, USERS_READ),
    ("GET", "/jobs/{job_id}/why"): ("/jobs/{a}/why", {}, TENANT_A_READ),
    # history, priority, shares, node allocation (routes_views): every reader, each scoped
    # to its tenant (tests/control/test_views.py checks what a member sees)
    ("GET", "/history"): ("/history", {}, USERS_READ),
    ("GET", "/priority"): ("/priority", {}, USERS_READ),
    ("GET", "/shares"): ("/shares", {}, USERS_READ),
    ("GET", "/nodes/allocation"): ("/nodes/allocation", {}, USERS_READ),
    # the dashboard (tests/control/test_dashboard.py): pages answer 401 with the sign-in page
    ("GET", "/"): ("/", {}, USERS_READ),
    ("GET", "/ui/queue"): ("/ui/queue", {}, USERS_READ),
    ("GET", "/ui/jobs/{job_id}"): ("/ui/jobs/{a}", {}, TENANT_A_READ),
    ("GET", "/ui/api/jobs/{job_id}/series"): ("/ui/api/jobs/{a}/series", {}, TENANT_A_READ),
    ("GET", "/ui/tenants"): ("/ui/tenants", {}, USERS_READ),
    ("GET", "/ui/alerts"): ("/ui/alerts", {}, USERS_READ),
    # the files pages load hold no data: public, like /healthz (the sign-in page needs its CSS)
    ("GET", "/ui/static/{name}"): ("/ui/static/grace.css", {}, {c: OK for c in CALLERS}),
    ("GET", "/ui/vendor/plotly.min.js"): ("/ui/vendor/plotly.min.js", {}, {c: OK for c in CALLERS}),
    ("GET", "/docs/assets/{name}"): ("/docs/assets/swagger-ui.css", {}, {c: OK for c in CALLERS}),
}


def _routes(app: Any) -> set[tuple[str, str]]:
    found = set()
    for r in app.routes:
        if isinstance(r, APIRoute):
            found.update((m, r.path) for m in r.methods if m != "HEAD")
    return found


def test_every_route_has_a_row_in_the_matrix(world: World) -> None:
    routes = _routes(world.app)
    assert routes - set(MATRIX) == set(), "a route without a role row: add it to MATRIX"
    assert set(MATRIX) - routes == set(), "a row for a route that does not exist"


def _passes(status: int, expected: str | int) -> bool:
    if expected == OK:
        return status < 400 or status == 409
    return status == expected


def test_every_route_answers_every_caller_as_the_matrix_says(world: World) -> None:
    wrong = []
    for (method, _), (template, kw, expected) in MATRIX.items():
        for caller in CALLERS:
            spare = make_token(world.store, "viewer").split("_")[1] if "{spare}" in template \
                else ""
            path = template.format(a=world.job_a, cancel=world.cancel_a, spare=spare)
            r = world.client.request(method, path, headers=world.headers[caller], **kw)
            if not _passes(r.status_code, expected[caller]):
                wrong.append(f"{method} {path} as {caller}: {r.status_code}, expected "
                             f"{expected[caller]} ({r.text[:120]})")
    assert wrong == [], "\n".join(wrong)


def test_a_member_sees_only_its_own_tenants_jobs_and_quota(world: World) -> None:
    as_b = world.headers["member_b"]
    listed = world.client.get("/jobs", headers=as_b).json()
    assert {j["tenant"] for j in listed} == {"b"} and world.job_a not in {j["id"] for j in listed}
    assert world.client.get("/jobs", params={"tenant": "a"}, headers=as_b).json() == []
    assert {t["name"] for t in world.client.get("/tenants", headers=as_b).json()} == {"b"}
    # another tenant's job and a job that does not exist answer alike
    other = world.client.get(f"/jobs/{world.job_a}", headers=as_b)
    missing = world.client.get("/jobs/999999", headers=as_b)
    assert (other.status_code, missing.status_code) == (404, 404)
    assert other.json()["detail"].replace(str(world.job_a), "N") == \
        missing.json()["detail"].replace("999999", "N")


def test_the_tenant_and_the_actor_come_from_the_token(world: World) -> None:
    r = world.client.post("/jobs", json={"name": "mine", "gpus": 1, "command": ["true"]},
                          headers=world.headers["member_a"])
    assert r.status_code == 201 and r.json()["tenant"] == "a"
    with world.store.read() as s:
        job = repo.require_job(s, r.json()["id"])
        owner = s.get(tokens.ApiToken, job.owner)
        assert owner is not None and (owner.role, owner.tenant) == ("member", "a")
    refused = world.client.post("/jobs", json=_job("b", "theirs"),
                                headers=world.headers["member_a"])
    assert refused.status_code == 403 and "tenant 'a' only" in refused.json()["detail"]


def test_a_job_token_posts_its_own_attempts_heartbeats_only(world: World) -> None:
    as_a = world.headers["job_a"]
    beat = {"attempt": 1, "records": [{"step": 999999}]}
    assert world.client.post(f"/jobs/{world.job_b}/heartbeats", json=beat,
                             headers=as_a).status_code == 404
    assert world.client.post(f"/jobs/{world.job_a}/heartbeats", json={**beat, "attempt": 2},
                             headers=as_a).status_code == 403
    assert world.client.post(f"/jobs/{world.job_a}/cancel", headers=as_a).status_code == 403
    forged = f"gjob_{world.job_a}_1_{'0' * 64}"
    r = world.client.post(f"/jobs/{world.job_a}/heartbeats", json=beat,
                          headers={"Authorization": f"Bearer {forged}"})
    assert r.status_code == 401


def test_expired_revoked_and_forged_tokens_get_401_saying_how_to_get_one(world: World) -> None:
    expired = make_token(world.store, "admin", expires_at=2.0)  # the clock is far past 2.0
    revoked = make_token(world.store, "admin")
    assert world.client.delete(f"/tokens/{revoked.split('_')[1]}",
                               headers=world.headers["admin"]).status_code == 200
    forged = revoked[:-4] + ("AAAA" if not revoked.endswith("AAAA") else "BBBB")
    for token, why in [(expired, "expired"), (revoked, "revoked"), (forged, "unknown token"),
                       ("hunter2", "not a Grace token"), (None, "no token")]:
        r = world.client.get("/jobs", headers={"Authorization": f"Bearer {token}"} if token
                             else {})
        assert r.status_code == 401, (token, r.text)
        assert why in r.json()["detail"] and "grace token create" in r.json()["detail"]
        assert r.headers["www-authenticate"] == "Bearer"


def test_fault_injection_is_refused_without_allow_inject(world: World, tmp_path: Path) -> None:
    topo = Topology.from_spec(load_cluster(LAB))
    app = create_app(world.store, topo, tmp_path / "other")
    r = TestClient(app).post(f"/jobs/{world.job_a}/inject", json={"fault": "kill-rank"},
                             headers=world.headers["admin"])
    assert r.status_code == 403 and "--allow-inject" in r.json()["detail"]


def test_refused_requests_are_audited_accepted_heartbeats_are_not(world: World) -> None:
    beat = {"attempt": 1, "records": [{"step": 7}]}
    assert world.client.post(f"/jobs/{world.job_a}/heartbeats", json=beat,
                             headers=world.headers["job_a"]).status_code == 204
    assert world.client.post(f"/jobs/{world.job_a}/heartbeats", json=beat,
                             headers=world.headers["job_b"]).status_code == 404
    assert world.client.post("/nodes/a100-01/drain", json={"reason": "x"}).status_code == 401
    with world.store.read() as s:
        rows = [(e.actor, e.target, str(e.outcome)) for e in audit.entries(s, limit=10_000)
                if str(e.action) == "api.request"]
    beats = [r for r in rows if r[1].endswith("/heartbeats")]
    assert beats == [("job 2 attempt 1", f"POST /jobs/{world.job_a}/heartbeats", "refused")]
    assert ("anonymous", "POST /nodes/a100-01/drain", "denied") in rows


def test_each_submission_is_audited_once_with_its_job_refused_ones_too(world: World) -> None:
    """``POST /jobs`` and ``POST /jobs:batch`` stage their request's entry in the job's own
    transaction (``request_audit.stage_in``): one entry each, right after the job's, and a
    refused submission still gets its entry from the middleware."""
    with world.store.read() as s:
        before = audit.head(s)[0]
    member = world.headers["member_a"]
    ok = world.client.post("/jobs", json=_job("a", "one"), headers=member)
    batch = world.client.post("/jobs:batch", json={"jobs": [_job("a", "x"), _job("a", "y")]},
                              headers=member)
    other_tenant = world.client.post("/jobs", json=_job("b", "not-mine"), headers=member)
    invalid = world.client.post("/jobs", json={**_job("a", "bad"), "gpus": -1}, headers=member)
    assert (ok.status_code, batch.status_code, other_tenant.status_code,
            invalid.status_code) == (201, 201, 403, 422)
    with world.store.read() as s:
        rows = [(str(e.action), e.target, str(e.outcome), e.detail.get("status"))
                for e in audit.entries(s, limit=10_000) if e.seq > before]
    job = ok.json()["id"]
    x, y = (j["id"] for j in batch.json()["jobs"])
    assert rows == [
        ("job.submitted", f"job:{job}", "ok", None),
        ("api.request", "POST /jobs", "ok", 201),
        ("job.submitted", f"job:{x}", "ok", None),
        ("job.submitted", f"job:{y}", "ok", None),
        ("api.request", "POST /jobs:batch", "ok", 201),
        ("api.request", "POST /jobs", "denied", 403),
        ("api.request", "POST /jobs", "refused", 422),
    ]
