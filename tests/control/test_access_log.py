"""The access log: one line per request, with who, what, how it went, how long and how big.

A tiny FastAPI app stands in for Grace's API: a route that identifies its
caller the way ``control.auth`` does (``request.state.principal``), one that
fails, one that streams; ``AccessLog`` wraps it as ``create_app`` does.
"""

from __future__ import annotations

import logging
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient

from grace.control.access_log import AccessLog, format_line

LINE = re.compile(r"^(\S+Z) (\S+) (\S+) \"(\S+) (\S+)\" (\d{3}) (\d+\.\d)ms (\d+)B$")


@dataclass(frozen=True)
class Caller:
    token_id: str
    name: str


def tiny_app() -> FastAPI:
    app = FastAPI()

    @app.post("/jobs", status_code=201)
    def submit(request: Request) -> dict[str, int]:
        request.state.principal = Caller("3f9c0a12b4e6", "alice")
        return {"id": 7}

    @app.get("/jobs/{job_id}")
    def show(job_id: int, request: Request) -> dict[str, int]:
        request.state.principal = Caller("3f9c0a12b4e6", "alice")
        raise HTTPException(404, detail=f"no job {job_id}")

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("the route failed")

    @app.get("/stream")
    def stream() -> StreamingResponse:
        return StreamingResponse(iter([b"a" * 1000, b"b" * 24]), media_type="text/plain")

    return app


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_one_line_per_request_with_token_status_time_and_bytes(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture
                                                                 ) -> None:
    path = tmp_path / "state" / "access.log"
    logged = AccessLog(tiny_app(), path)
    client = TestClient(logged, raise_server_exceptions=False)
    caplog.set_level(logging.INFO, logger="grace.access")
    r1 = client.post("/jobs?token=not-logged", json={})
    r2 = client.get("/jobs/12")
    r3 = client.get("/boom")
    r4 = client.get("/stream")
    r5 = client.get("/nowhere")
    logged.close()
    assert [r.status_code for r in (r1, r2, r3, r4, r5)] == [201, 404, 500, 200, 404]
    lines = lines_of(path)
    assert len(lines) == 5 and [rec.getMessage() for rec in caplog.records
                                if rec.name == "grace.access"] == lines
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    fields = [(m[2], m[3], m[4], m[5], int(m[6]), int(m[8])) for m in parsed if m]
    assert fields == [
        ("testclient:50000", "3f9c0a12b4e6", "POST", "/jobs", 201, len(r1.content)),
        ("testclient:50000", "3f9c0a12b4e6", "GET", "/jobs/12", 404, len(r2.content)),
        ("testclient:50000", "-", "GET", "/boom", 500, len(r3.content)),
        ("testclient:50000", "-", "GET", "/stream", 200, 1024),
        ("testclient:50000", "-", "GET", "/nowhere", 404, len(r5.content)),
    ]
    assert "not-logged" not in path.read_text()  # no query strings
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_request_cannot_forge_a_line() -> None:
    line = format_line(1_700_000_000.25, ("10.0.0.7", 5), 'x" 200', "GET",
                       '/jobs/1" 200 1ms 1B\n2026-01-01T00:00:00.000Z 1.2.3.4:1 admin "GET /', 200,
                       0.0012, 3)
    assert "\n" not in line and line.count('"') == 2
    m = LINE.match(line)
    assert m and m[1] == "2023-11-14T22:13:20.250Z" and m[6] == "200" and m[7] == "1.2"


def test_every_generation_of_the_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "access.log"
    path.write_text("left by an earlier run\n")
    path.chmod(0o644)
    logged = AccessLog(tiny_app(), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # tightened on open
    handler = logged._file.handlers[0]  # type: ignore[union-attr]
    handler.maxBytes = 300  # type: ignore[attr-defined]
    client = TestClient(logged)
    for _ in range(12):
        client.post("/jobs", json={})
    logged.close()
    rotated = sorted(tmp_path.glob("access.log*"))
    assert len(rotated) > 2
    assert {stat.S_IMODE(p.stat().st_mode) for p in rotated} == {0o600}
    assert sum(len(lines_of(p)) for p in rotated) == 13


def test_without_a_path_it_only_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="grace.access")
    client = TestClient(AccessLog(tiny_app(), None))
    client.post("/jobs", json={})
    assert [r.getMessage().split(" ", 3)[2] for r in caplog.records] == ["3f9c0a12b4e6"]
    assert list(tmp_path.iterdir()) == []


def test_installed_with_add_middleware_it_sees_what_a_dependency_identified(
        tmp_path: Path) -> None:
    """``create_app`` may install it as ``app.add_middleware(AccessLog, path=...)``: the
    caller a dependency put in ``request.state`` still reaches the line (401s included)."""
    from fastapi import Depends

    def caller(request: Request) -> Caller:
        if request.headers.get("authorization") != "Bearer good":
            raise HTTPException(401, detail="no token")
        who = Caller("0123456789ab", "ops")
        request.state.principal = who
        return who

    app = FastAPI()

    @app.put("/tenants/{name}")
    def put(name: str, who: Caller = Depends(caller)) -> dict[str, str]:
        return {"name": name, "by": who.name}

    path = tmp_path / "access.log"
    app.add_middleware(AccessLog, path=path)
    client = TestClient(app)
    assert client.put("/tenants/vision", headers={"Authorization": "Bearer good"}).status_code == 200
    assert client.put("/tenants/vision").status_code == 401
    got = [(m[3], m[4], m[5], m[6]) for m in map(LINE.match, lines_of(path)) if m]
    assert got == [("0123456789ab", "PUT", "/tenants/vision", "200"),
                   ("-", "PUT", "/tenants/vision", "401")]
