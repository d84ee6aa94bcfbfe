"""Heartbeats: batched POSTs to a tiny local server, the jsonl copy, and an unreachable control plane."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from grace.runtime.heartbeat import HeartbeatSender, StepWindow

from .conftest import free_port


class _Server:
    def __init__(self, status: int = 200, delay_s: float = 0.0) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.auth: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(delay_s)
                server.paths.append(self.path)
                server.auth.add(self.headers.get("Authorization", ""))
                server.payloads.append(json.loads(body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def records(self) -> list[dict[str, Any]]:
        return [r for p in self.payloads for r in p["records"]]


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    yield s
    s.httpd.shutdown()


def _record(step: int) -> dict[str, Any]:
    return {"step": step, "loss": 1.0 / step, "tokens_per_s": 100.0, "phases": {"forward": 0.01}, "at": 0.0}


def sender(tmp_path: Path, url: str | None, **kw: Any) -> HeartbeatSender:
    return HeartbeatSender(
        jsonl_path=tmp_path / "attempt-2" / "heartbeats-rank1.jsonl",
        url=url, job_id="7", attempt=2, node="a100-00", rank=1, **kw,
    )  # fmt: skip


def test_batches_reach_the_server_and_the_jsonl(tmp_path: Path, server: _Server) -> None:
    hb = sender(tmp_path, server.url, flush_s=60.0, max_batch=4)
    for step in range(1, 11):
        hb.add(_record(step))
    assert hb.flush(timeout=10)
    hb.close()
    assert set(server.paths) == {"/jobs/7/heartbeats"}
    assert all(p.keys() == {"attempt", "node", "rank", "records"} for p in server.payloads)
    assert {(p["attempt"], p["node"], p["rank"]) for p in server.payloads} == {(2, "a100-00", 1)}
    assert [r["step"] for r in server.records] == list(range(1, 11))
    assert len(server.payloads) < 10  # batched: at most max_batch records per POST
    assert all(len(p["records"]) <= 4 for p in server.payloads)
    lines = (tmp_path / "attempt-2" / "heartbeats-rank1.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, 11))
    assert hb.sent == 10 and hb.dropped == 0


def test_unreachable_control_plane_never_blocks_and_the_buffer_is_bounded(tmp_path: Path) -> None:
    hb = sender(tmp_path, f"http://127.0.0.1:{free_port()}", flush_s=0.01, max_buffer=100, timeout_s=0.2)
    start = time.perf_counter()
    for step in range(1, 1001):
        hb.add(_record(step))
    assert time.perf_counter() - start < 0.5  # adding is a list append, whatever the network does
    assert hb.flush(timeout=5)
    assert hb.buffered <= 100
    assert hb.dropped >= 900
    assert hb.failures >= 1
    t0 = time.perf_counter()
    hb.close(timeout=2)
    assert time.perf_counter() - t0 < 3
    lines = (tmp_path / "attempt-2" / "heartbeats-rank1.jsonl").read_text().splitlines()
    assert len(lines) == 1000  # the local copy keeps everything


def test_a_slow_control_plane_times_out_without_holding_training(tmp_path: Path) -> None:
    slow = _Server(delay_s=2.0)
    try:
        hb = sender(tmp_path, slow.url, flush_s=0.01, timeout_s=0.1)
        hb.add(_record(1))
        time.sleep(0.3)  # the thread is now stuck in (or past) a POST that will time out
        t0 = time.perf_counter()
        for step in range(2, 200):
            hb.add(_record(step))
        assert time.perf_counter() - t0 < 0.2
        assert hb.flush(timeout=5)
        assert hb.failures >= 1 and hb.buffered > 0  # kept for a later try
        hb.close(timeout=1)
    finally:
        slow.httpd.shutdown()


def test_a_refusing_control_plane_drops_the_batch(tmp_path: Path) -> None:
    refusing = _Server(status=404)
    try:
        hb = sender(tmp_path, refusing.url, flush_s=60.0)
        hb.add(_record(1))
        assert hb.flush(timeout=5)
        assert hb.buffered == 0 and hb.dropped == 1
        hb.close()
    finally:
        refusing.httpd.shutdown()


def test_step_window_folds_steps_into_records() -> None:
    w = StepWindow(record_s=1.0)
    first = w.add(1, 5.0, 100, 0.1, {"forward": 0.05}, now=10.0)
    assert first is not None and first["step"] == 1 and first["steps"] == 1  # the first at once
    assert w.add(2, 4.0, 100, 0.1, {"forward": 0.04}, now=10.4) is None
    rec = w.add(3, float("nan"), 100, 0.3, {"forward": 0.06, "data": 0.02}, now=11.0)
    assert rec is not None
    assert rec["step"] == 3 and rec["steps"] == 2 and rec["loss"] is None  # NaN is sent as null
    assert rec["step_s"] == pytest.approx(0.2)
    assert rec["phases"] == pytest.approx({"forward": 0.05, "data": 0.01})
    assert rec["tokens_per_s"] == pytest.approx(200.0)
    assert w.flush(now=11.5) is None
    w.add(4, 3.0, 0, 0.1, {}, now=11.6)
    assert w.flush(now=11.7)["step"] == 4


def test_a_nan_loss_is_sent_as_null_and_the_sender_lives_on(tmp_path: Path,
                                                            server: _Server) -> None:
    hb = sender(tmp_path, server.url, flush_s=60.0, token="gjob_7_2_" + "a" * 64)
    hb.add({**_record(1), "loss": float("nan")})
    hb.add(_record(2))
    assert hb.flush(timeout=10)
    hb.add(_record(3))  # the thread survived the NaN: later records still go out
    assert hb.flush(timeout=10)
    hb.close()
    assert [(r["step"], r["loss"]) for r in server.records][:2] == [(1, None), (2, 0.5)]
    assert [r["step"] for r in server.records] == [1, 2, 3]
    assert server.auth == {"Bearer gjob_7_2_" + "a" * 64}


def test_the_last_cycle_waits_out_a_slow_control_plane_so_the_last_records_arrive(
        tmp_path: Path) -> None:
    """The last records carry what only they carry (a sweep trial's final metric): a busy
    control plane answering in 3 s, past the 2 s read of a normal cycle, still gets them."""
    slow = _Server(delay_s=3.0)
    try:
        hb = sender(tmp_path, slow.url, flush_s=60.0, timeout_s=2.0)
        hb.add(_record(1) | {"metrics": {"val_loss": [[60, 0.004]]}})
        t0 = time.perf_counter()
        hb.close(timeout=10)
        assert time.perf_counter() - t0 < 10.5
        assert [r["metrics"] for r in slow.records if "metrics" in r] == [
            {"val_loss": [[60, 0.004]]}]
    finally:
        slow.httpd.shutdown()


def test_the_last_cycle_does_not_wait_for_a_control_plane_that_is_down(tmp_path: Path) -> None:
    hb = sender(tmp_path, f"http://127.0.0.1:{free_port()}", flush_s=60.0)
    hb.add(_record(1))
    t0 = time.perf_counter()
    hb.close(timeout=10)
    assert time.perf_counter() - t0 < 2  # connection refused: nothing to wait for
