"""The API, fuzzed from its own OpenAPI document: no 5xx, no response outside the document.

Schemathesis (pinned in pyproject's dev extras) reads ``/openapi.json`` of a
real ``grace up`` process, on SQLite and on PostgreSQL (a fresh schema per
run, see conftest), and sends every operation generated requests: boundary
values first (its coverage phase: the largest integers, empty and long
strings, NUL bytes, wrong types), then random ones (fuzzing, at most
``MAX_EXAMPLES`` per operation) and chains of them (stateful). Every answer
must pass three checks:

* ``not_a_server_error``: no 5xx but the ones documented on purpose (503/507
  of a store that cannot be written): a crash is a bug;
* ``status_code_conformance``: the status is one the operation documents;
* ``response_schema_conformance``: the body matches the documented schema
  (every error is ``ErrorBody``, ``api_contract``).

Nothing is excluded. Destructive operations (cancel, drain, resume, quotas,
token revocation) run too: the server is thrown away afterwards. The one
operation the admin token cannot reach is ``POST /jobs/{id}/heartbeats``, which
takes only an attempt's own token (403 otherwise, documented): schemathesis
warns that it saw only 401/403 there, and the test allows that warning alone.

Run it: ``pytest -m slow tests/control/test_api_fuzz.py`` (PostgreSQL with
``GRACE_TEST_DATABASE_URL``). ``GRACE_FUZZ_SEED`` and ``GRACE_FUZZ_EXAMPLES``
change the seed (fixed, so a CI failure replays) and the examples per operation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from grace_up import LiveServer, grace_up

pytestmark = pytest.mark.slow

MAX_EXAMPLES = int(os.environ.get("GRACE_FUZZ_EXAMPLES", "20"))
SEED = os.environ.get("GRACE_FUZZ_SEED", "20261202")
CHECKS = "not_a_server_error,status_code_conformance,response_schema_conformance"
#: Warnings that say nothing is wrong: heartbeats take an attempt's token, not the admin's;
#: random job ids and node names mostly name nothing (404, documented); most random job
#: specs are refused by checks across fields that a schema cannot say (422, documented).
EXPECTED_WARNINGS = {"missing_auth", "missing_test_data", "validation_mismatch"}
HEARTBEATS = "POST /jobs/{job_id}/heartbeats"


def _seed_a_job(server: LiveServer) -> int:
    """A job for the operations on ``/jobs/{job_id}`` (its id 1 is their example)."""
    r = httpx.post(f"{server.url}/jobs", headers=server.headers, timeout=30, json={
        "name": "fuzz-target", "gpus": 1, "command": ["sleep", "60"]})
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _cancel_everything(server: LiveServer) -> None:
    """End what the fuzzer left running before the server goes, so no process outlives it."""
    jobs = httpx.get(f"{server.url}/jobs", headers=server.headers, timeout=30,
                     params={"limit": 1000}).json()
    for job in jobs:
        if job["state"] in ("pending", "running"):
            httpx.post(f"{server.url}/jobs/{job['id']}/cancel", headers=server.headers, timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [j for j in httpx.get(f"{server.url}/jobs", headers=server.headers, timeout=30,
                                     params={"state": "running"}).json()]
        if not left:
            return
        time.sleep(0.5)


def test_the_api_answers_fuzzing_with_no_5xx_and_only_what_it_documents(
        db_url: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    # --allow-inject: fault injection is an admin operation like the others, tested too
    with grace_up(state, "--db", db_url, "--admin-token-file", str(state / "admin.token"),
                  "--allow-inject") as server:
        assert _seed_a_job(server) == 1
        report = tmp_path / "schemathesis.json"
        command = [
            sys.executable, "-m", "schemathesis.cli", "run", f"{server.url}/openapi.json",
            "--checks", CHECKS, "--max-examples", str(MAX_EXAMPLES), "--seed", SEED,
            "--workers", "1", "--request-timeout", "30", "--generation-database", "none",
            "--no-color", "--report", "json", "--report-json-path", str(report),
            *(("--header", f"Authorization: Bearer {server.token}") if server.token else ()),
        ]
        started = time.monotonic()
        run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        took = time.monotonic() - started
        try:
            assert report.exists(), run.stdout[-5000:] + run.stderr[-3000:]
            result = json.loads(report.read_text())
            ops, cases = result["operations"], result["test_cases"]
            print(f"\nschemathesis on {db_url.split(':')[0]}: {ops['tested']}/{ops['total']} "
                  f"operations, {cases['generated']} test cases, "
                  f"{sum(f['count'] for f in result['failures'])} failures, {took:.0f} s")
            assert result["complete"] and result["errors"] == [], run.stdout[-5000:]
            assert result["failures"] == [], run.stdout[-20000:]
            assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-3000:]
            # every operation of the document was tested, not only the ones that loaded
            assert ops["tested"] == ops["total"] >= 20, ops
            assert cases["generated"] >= ops["total"] * MAX_EXAMPLES, cases
            warned = {kind: labels for kind, labels in result["warnings"].items() if labels}
            assert set(warned) <= EXPECTED_WARNINGS, warned
            assert warned.get("missing_auth", []) in ([], [HEARTBEATS]), warned
            assert "Traceback" not in server.output(), server.output()
        finally:
            _cancel_everything(server)
