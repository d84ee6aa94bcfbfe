"""The API's edges, on SQLite and PostgreSQL: what an API fuzzer found as 500s is a 4xx
naming the field, a store that cannot be written is 503/507 with its reason (and so is
/healthz), a body over the limit is 413, and the OpenAPI document says all of it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from helpers import LAB, FakeClock, ScriptedBackend, authed
from test_store_writability import tiny_tmpfs

from grace.control.api import create_app
from grace.control.reconciler import Reconciler
from grace.control.snapshot import JobCompiler
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.spec.job import JobSpec
from grace.spec.loader import load_cluster
from grace.spec.text_limits import STORED

TOPO = Topology.from_spec(load_cluster(LAB))
GOOD: dict[str, Any] = {"name": "train", "tenant": "vision", "gpus": 1,
                        "command": ["python", "train.py"]}
BIG = [2**31, 2**63, 2**64 + 1, 10**30]


@pytest.fixture
def client(store: Store, tmp_path: Path) -> Any:
    # the reconciler registers the cluster's nodes, as grace up's does when it leads
    Reconciler(store, ScriptedBackend(load_cluster(LAB)), TOPO, get_policy("grace"),
               tmp_path / "state", clock=FakeClock())
    return authed(create_app(store, TOPO, tmp_path / "state"), store)


def _field_problems(r: Any) -> list[str]:
    assert r.status_code == 422, (r.status_code, r.text)
    detail = r.json()["detail"]
    assert isinstance(detail, list) and all(set(p) == {"field", "message"} for p in detail)
    return [p["field"] for p in detail]


# One store per test, many cases in each: a store is migrated for every test.

def test_job_ids_past_the_id_column_are_422_on_every_job_route(client: Any) -> None:
    for job_id in BIG:
        for method, path in [("GET", ""), ("GET", "/logs"), ("POST", "/cancel"),
                             ("POST", "/clear-exclusions")]:
            r = client.request(method, f"/jobs/{job_id}{path}")
            assert _field_problems(r) == ["path.job_id"], (job_id, path, r.text)


LIMITS = [({"limit": -1}, "query.limit"), ({"limit": 0}, "query.limit"),
          ({"limit": 1001}, "query.limit"), ({"limit": 2**63}, "query.limit"),
          ({"offset": -1}, "query.offset"), ({"offset": 2**63}, "query.offset"),
          ({"state": "x" * 10_000}, "query.state")]


def test_limit_and_offset_are_bounded(client: Any) -> None:
    for params, field in LIMITS:
        assert _field_problems(client.get("/jobs", params=params)) == [field], params


def test_limit_and_offset_within_bounds_page_through_jobs(client: Any) -> None:
    ids = [client.post("/jobs", json={**GOOD, "name": f"j{i}"}).json()["id"] for i in range(3)]
    page = client.get("/jobs", params={"limit": 2, "offset": 1}).json()
    assert len(page) == 2 and {j["id"] for j in page} <= set(ids)


def test_logs_parameters_are_bounded(client: Any) -> None:
    job = client.post("/jobs", json=GOOD).json()["id"]
    assert _field_problems(client.get(f"/jobs/{job}/logs", params={"tail": 0})) == ["query.tail"]
    assert _field_problems(client.get(f"/jobs/{job}/logs", params={"tail": 2**63})) == ["query.tail"]
    assert _field_problems(client.get(f"/jobs/{job}/logs", params={"attempt": 2**40})) == [
        "query.attempt"]
    assert client.get(f"/jobs/{job}/logs", params={"tail": 10}).status_code == 200


UNSTORABLE_JOBS = [
    ('{"name": "j", "gpus": Infinity, "command": ["python"]}', "gpus"),
    ('{"name": "j", "gpus": NaN, "command": ["python"]}', "gpus"),
    ('{"name": "j", "gpus": 1e400, "command": ["python"]}', "gpus"),
    ('{"name": "j", "gpus": 1, "priority": 99999999999999999999, "command": ["python"]}',
     "priority"),
    ('{"name": "j\\u0000", "gpus": 1, "command": ["python"]}', "name"),
    ('{"name": "j", "tenant": "a\\u0000", "gpus": 1, "command": ["python"]}', "tenant"),
    ('{"name": "' + "x" * 201 + '", "gpus": 1, "command": ["python"]}', "name"),
    ('{"name": "j", "gpus": 1, "command": ["python", "a\\u0000"]}', "command"),
    ('{"name": "j", "gpus": 1, "command": ["python"], "env": {"A": "\\u0000"}}', "env"),
]


def test_a_job_the_store_cannot_hold_is_422_naming_the_field(client: Any) -> None:
    for raw, field in UNSTORABLE_JOBS:
        r = client.post("/jobs", content=raw, headers={"content-type": "application/json"})
        assert _field_problems(r) == [field], (raw[:80], r.text)
    assert client.get("/jobs").json() == []  # nothing stored


def test_quotas_are_finite_and_fit_their_columns(client: Any) -> None:
    for body, field in [('{"weight": Infinity}', "weight"),
                        ('{"guaranteed_gpus": NaN}', "guaranteed_gpus"),
                        ('{"preemptions_per_hour": 9223372036854775808}', "preemptions_per_hour"),
                        ('{"borrow_limit_gpus": 1e309}', "borrow_limit_gpus")]:
        r = client.put("/tenants/research", content=body,
                       headers={"content-type": "application/json"})
        assert _field_problems(r) == [field], body


def test_a_tenant_name_outside_the_character_set_is_422(client: Any) -> None:
    assert _field_problems(client.put("/tenants/a%20b", json={})) == ["path.name"]
    assert _field_problems(client.put("/tenants/" + "x" * 64, json={})) == ["path.name"]
    assert client.put("/tenants/research", json={"weight": 2}).status_code == 200


def test_signals_are_bounded(client: Any) -> None:
    for body, field in [({"kind": "xid", "code": 2**63}, "code"),
                        ({"kind": "xid", "code": -1}, "code"),
                        ({"kind": "xid", "detail": "a\0b"}, "detail"),
                        ({"kind": "xid", "detail": "x" * 2001}, "detail"),
                        ({"kind": "x" * 100}, "kind")]:
        assert _field_problems(client.post("/nodes/a100-00/signals", json=body)) == [field], body
    assert client.post("/nodes/a100-00/signals", json={"kind": "xid", "code": 79,
                                                       "detail": "seen\ttwice"}).status_code == 202


def test_a_drain_reason_is_bounded_text(client: Any) -> None:
    assert _field_problems(client.post("/nodes/a100-00/drain",
                                       json={"reason": "x" * 2001})) == ["reason"]
    assert _field_problems(client.post("/nodes/a100-00/drain",
                                       json={"reason": "bad\0"})) == ["reason"]
    r = client.post("/nodes/a100-00/drain", json={"reason": "line one\nline two"})
    assert r.status_code == 200, r.text


def test_a_drain_before_the_nodes_are_registered_is_503_not_a_crash(store: Store,
                                                                    tmp_path: Path) -> None:
    client = authed(create_app(store, TOPO, tmp_path / "state"), store)
    r = client.post("/nodes/a100-00/drain", json={"reason": "early"})
    assert r.status_code == 503, r.text
    assert "retry in a moment" in r.json()["detail"]


def test_a_job_stored_before_the_edge_checks_still_reads_and_compiles(client: Any,
                                                                      store: Store) -> None:
    old = JobSpec.model_validate({**GOOD, "tenant": "my team"}, context=STORED)
    with store.transaction() as s:
        job_id = repo.add_job(s, old, 1.0).id
    with store.read() as s:
        job = repo.get_job(s, job_id)
        assert job is not None and job.spec.tenant == "my team"
        JobCompiler(TOPO).compile(job_id, job.version, job.spec_json, job.submitted_at)
    assert client.get(f"/jobs/{job_id}").json()["tenant"] == "my team"


def test_a_body_over_the_limit_is_413_with_a_json_detail(store: Store, tmp_path: Path) -> None:
    client = authed(create_app(store, TOPO, tmp_path / "state", max_body_bytes=4096), store)
    r = client.post("/jobs", json={**GOOD, "env": {"PAD": "x" * 5000}})
    assert r.status_code == 413
    assert "at most 4 KiB" in r.json()["detail"]
    assert client.post("/jobs", json=GOOD).status_code == 201


def test_the_openapi_document_says_what_the_api_sends(client: Any) -> None:
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    assert set(schemas["ErrorBody"]["properties"]) == {"detail"}
    assert set(schemas["FieldProblem"]["properties"]) == {"field", "message"}
    error = {"$ref": "#/components/schemas/ErrorBody"}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for code, answer in op["responses"].items():
                if code.startswith(("4", "5")) and path != "/healthz":
                    assert answer["content"]["application/json"]["schema"] == error, (
                        method, path, code)
            if path != "/healthz":
                assert {"401", "403"} <= set(op["responses"]), (method, path)
    submit = doc["paths"]["/jobs"]["post"]
    assert submit["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobSubmission"}
    assert {"400", "413", "422", "503", "507"} <= set(submit["responses"])
    job_id = doc["paths"]["/jobs/{job_id}"]["get"]["parameters"][0]["schema"]
    assert (job_id["minimum"], job_id["maximum"]) == (1, 2**31 - 1)


# -- a store that cannot be written: a real full disk (a SQLite file on a tiny tmpfs) --------

def test_a_full_disk_is_507_on_writes_and_degraded_on_healthz(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "disk", "2m") as disk:
        store = Store.open(f"sqlite:///{disk / 'grace.sqlite'}")
        try:
            client = authed(create_app(store, TOPO, tmp_path / "state"), store)
            assert client.get("/healthz").json() == {"status": "ok"}
            filler = disk / "filler"
            with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 4096)
            r = client.post("/jobs", json=GOOD)
            assert r.status_code == 507, r.text
            assert "database or disk is full" in r.json()["detail"]
            assert "nothing was saved" in r.json()["detail"]
            health = client.get("/healthz")
            assert health.status_code == 503
            assert health.json() == {"status": "degraded",
                                     "store": "unwritable: database or disk is full"}
            assert client.get("/jobs").status_code == 200  # reads still work
            filler.unlink()
            assert client.get("/healthz").json() == {"status": "ok"}
            assert client.post("/jobs", json=GOOD).status_code == 201
        finally:
            store.close()
