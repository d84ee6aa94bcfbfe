"""``grace up`` as a real process for tests that talk to it over the network (TLS, fuzzing).

Started the way an operator starts it (``python -m grace.cli.main up``) on the
lab cluster with a state directory of its own; ``token`` is the admin token it
wrote on first start (``<state_dir>/admin.token``), None if it writes none.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from helpers import LAB, REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveServer:
    url: str
    state_dir: Path
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def token(self) -> str | None:
        path = self.state_dir / "admin.token"
        return path.read_text().strip() if path.exists() else None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-5000:]


@contextlib.contextmanager
def grace_up(state_dir: Path, *args: str, scheme: str = "http",
             verify: ssl.SSLContext | bool = True, env: dict[str, str] | None = None,
             timeout_s: float = 60, cluster: Path = LAB) -> Iterator[LiveServer]:
    """Run ``grace up`` until the block ends; waits until /healthz answers (any status)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = state_dir.parent / f"{state_dir.name}-server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "grace.cli.main", "up", "--cluster", str(cluster),
             "--port", str(port), "--state-dir", str(state_dir), *args],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, start_new_session=True)
    server = LiveServer(f"{scheme}://127.0.0.1:{port}", state_dir, proc, log)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            assert proc.poll() is None, f"grace up exited ({proc.returncode}): {server.output()}"
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"{server.url}/healthz", timeout=1, verify=verify)
                break
            assert time.monotonic() < deadline, f"grace up did not answer: {server.output()}"
            time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
