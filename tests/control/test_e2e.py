"""End to end: ``grace up`` as a real process, real torchrun gangs, HTTP and the CLI.

Each scenario starts ``python -m grace.cli.main up`` on the lab cluster with a
state directory of its own, talks to it over HTTP (httpx) or through the
``grace`` CLI, and checks what the processes on this machine did. The control
plane runs in a session of its own and every job agent in another one, so
SIGKILL of the server's pid leaves the jobs running, as a crash would.

Slow (tens of seconds each): ``pytest -m slow``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import REPO, job_dir

from grace.spec.loader import load_jobs

pytestmark = pytest.mark.slow

ENDED = {"completed", "failed", "cancelled", "diverged"}
TRAIN = ["python", "examples/train_ddp.py"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One ``grace up`` process on a state directory; restartable on the same directory."""

    def __init__(self, state_dir: Path, extra_args: tuple[str, ...] = (),
                 cluster: Path = Path("examples/clusters/lab.yaml"),
                 token_file: Path | None = None) -> None:
        self.state_dir = state_dir
        self.extra_args = extra_args
        # the admin token grace up writes on its first start (secure by default)
        self.token_file = token_file or state_dir / "admin.token"
        self.cluster = cluster
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.starts = 0

    def start(self) -> Server:
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.starts += 1
        log = open(self.state_dir.parent / f"server-{self.starts}.log", "wb")  # noqa: SIM115
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grace.cli.main", "up", "--cluster",
             str(self.cluster), "--port", str(port), "--state-dir", str(self.state_dir),
             "--admin-token-file", str(self.token_file), "--allow-inject", *self.extra_args],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"grace up exited: {self.server_log()}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            time.sleep(0.1)
        raise AssertionError(f"grace up did not answer in 60 s: {self.server_log()}")

    def server_log(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:]
                         for p in sorted(self.state_dir.parent.glob("server-*.log")))

    def kill9(self) -> None:
        """A crash: SIGKILL to the server's pid only (its jobs live in sessions of their own)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    # ------------------------------------------------------------------ API
    @property
    def headers(self) -> dict[str, str]:
        """The admin's bearer token, as the CLI sends it."""
        return {"Authorization": f"Bearer {self.token_file.read_text().strip()}"}

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """As the admin, unless ``headers`` names another token."""
        kw.setdefault("timeout", 30)
        headers = {**self.headers, **kw.pop("headers", {})}
        return httpx.request(method, self.url + path, headers=headers, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("POST", path, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        r = self.request("GET", path, **kw)
        r.raise_for_status()
        return r.json() if "json" in r.headers.get("content-type", "") else r.text

    def submit(self, body: dict[str, Any]) -> int:
        r = self.post("/jobs", json=body)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def wait(self, job_id: int, states: set[str], timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = self.get(f"/jobs/{job_id}")
            if job["state"] in states:
                return job
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} still {job.get('state')} after {timeout:.0f}s: "
                             f"{json.dumps(job)[:2000]}\n{self.server_log()}")

    def wait_log(self, job_id: int, text: str, timeout: float = 60) -> None:
        """Until the job's logs show ``text`` (e.g. a training step: it really runs)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.get(f"/jobs/{job_id}/logs", params={"tail": 100000}):
                return
            state = self.get(f"/jobs/{job_id}")["state"]
            assert state in ("pending", "running"), f"job {job_id} ended {state} early"
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} never logged {text!r}\n{self.server_log()}")


# ------------------------------------------------------------------ processes on this machine
def _proc_pgid_and_state(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[2]), fields[0]


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def job_processes(workdir: Path) -> list[int]:
    """Live (not zombie) processes of a job: their environment names its directory."""
    needle = f"GRACE_WORKDIR={workdir.resolve()}".encode()
    found = []
    for pid in _pids():
        info = _proc_pgid_and_state(pid)
        if info and info[1] != "Z" and needle in _environ(pid).split(b"\0"):
            found.append(pid)
    return found


def group_members(pgids: set[int]) -> list[int]:
    """Live (not zombie) processes in any of these process groups."""
    out = []
    for pid in _pids():
        info = _proc_pgid_and_state(pid)
        if info and info[0] in pgids and info[1] != "Z":
            out.append(pid)
    return out


def launch_record(state_dir: Path, job_id: int, attempt: int = 1) -> dict[str, Any]:
    return json.loads((job_dir(state_dir, job_id) / f"attempt-{attempt}" /
                       "launch.json").read_text())


def _kill_leftovers(state_dir: Path) -> None:
    """Teardown: SIGKILL what this test's jobs left running (found by their workdir)."""
    jobs = state_dir / "jobs"
    if not jobs.is_dir():
        return
    for workdir in jobs.iterdir():
        for pid in job_processes(workdir):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Any]:
    servers: list[Server] = []

    def make() -> Server:
        s = Server(tmp_path / "state")
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()
    _kill_leftovers(tmp_path / "state")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the scenarios that do not restart it."""
    state = tmp_path_factory.mktemp("lab") / "state"
    server = Server(state).start()
    yield server
    server.stop()
    _kill_leftovers(state)


def grace_cli(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GRACE_URL=server.url, GRACE_TOKEN_FILE=str(server.token_file),
               COLUMNS="200", NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "grace.cli.main", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------ (a) a DDP gang end to end
def test_a_two_node_ddp_job_is_placed_run_and_completed(lab: Server) -> None:
    [spec] = load_jobs(REPO / "examples" / "jobs" / "train-ddp.yaml")
    t0 = time.monotonic()
    jid = lab.submit(spec.model_dump(mode="json", exclude_none=True))
    job = lab.wait(jid, ENDED, timeout=120)
    took = time.monotonic() - t0
    assert job["state"] == "completed", f"{json.dumps(job)[:3000]}\n{lab.server_log()}"
    [attempt] = job["attempts"]
    assert attempt["state"] == "succeeded" and attempt["exit_code"] == 0
    nodes = {n["node"]: n["gpus"] for n in attempt["nodes"]}
    assert len(nodes) == 2 and all(len(g) == 2 for g in nodes.values())
    assert [e["kind"] for e in job["events"]] == ["submitted", "placed", "started", "completed"]

    logs = lab.get(f"/jobs/{jid}/logs", params={"tail": 100000})
    for rank in range(4):  # every rank of the gang, from its own log file, once
        assert logs.count(f"rank {rank}/4 ") == 1, logs
    labels = {line.split("]")[0] + "]" for line in logs.splitlines() if "/rank" in line.split("]")[0]}
    assert len(labels) == 4, labels
    assert "step 60/60 loss" in logs and "done" in logs
    for node, gpus in nodes.items():
        own = lab.get(f"/jobs/{jid}/logs", params={"node": node, "tail": 100000})
        assert own and all(line.startswith(f"[{node}/") for line in own.splitlines())
        assert f"node {node} CUDA_VISIBLE_DEVICES={','.join(map(str, gpus))}" in own
    print(f"\n(a) 2x2 DDP job: submitted -> completed in {took:.1f}s")


# ------------------------------------------------------------------ (b) cancel mid-run
def test_a_job_cancelled_mid_run_ends_cancelled_and_leaves_no_process(lab: Server) -> None:
    jid = lab.submit({"name": "long", "tenant": "demo", "nodes": 2, "gpus_per_node": 1,
                      "gpu_model": "A100-80GB", "command": [*TRAIN, "--steps", "100000"]})
    lab.wait_log(jid, "step 10/100000")
    workdir = job_dir(lab.state_dir, jid)
    pgids = {n["pgid"] for n in launch_record(lab.state_dir, jid)["nodes"]}
    assert len(pgids) == 2 and group_members(pgids) and job_processes(workdir)
    t0 = time.monotonic()
    r = lab.post(f"/jobs/{jid}/cancel")
    assert r.status_code == 200
    job = lab.wait(jid, ENDED, timeout=60)
    took = time.monotonic() - t0
    assert job["state"] == "cancelled"
    assert job["attempts"][0]["state"] == "cancelled"
    assert job["events"][-1]["kind"] == "cancelled"
    assert group_members(pgids) == []
    assert job_processes(workdir) == []
    assert lab.post(f"/jobs/{jid}/cancel").status_code == 409
    print(f"\n(b) cancel -> cancelled, no process left, in {took:.1f}s")


# ------------------------------------------------------------------ (c) control-plane crash
def _short_job(name: str, steps: int = 150) -> dict[str, Any]:
    return {"name": name, "tenant": "demo", "gpus": 2, "gpu_model": "A100-80GB",
            "command": [*TRAIN, "--steps", str(steps), "--sleep-per-step", "0.05",
                        "--batch-size", "4"]}


def test_a_sigkilled_control_plane_adopts_live_jobs_and_requeues_dead_ones(
        server_factory: Any) -> None:
    """Two jobs run when the control plane is SIGKILLed; while it is down, the second one's
    node "reboots" (its agent's process group is SIGKILLed). After ``grace up`` restarts on
    the same state directory, the first is adopted and completes on its one attempt (never
    launched twice); the second is found dead, requeued, and completes on attempt 2."""
    server = server_factory().start()
    survivor = server.submit(_short_job("survivor", steps=150))
    orphan = server.submit(_short_job("orphan", steps=60))
    server.wait_log(survivor, "step 10/150")
    server.wait_log(orphan, "step 10/60")
    survivor_dir = job_dir(server.state_dir, survivor)
    orphan_dir = job_dir(server.state_dir, orphan)
    first = launch_record(server.state_dir, orphan)
    t0 = time.monotonic()
    server.kill9()
    for n in first["nodes"]:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(n["pgid"], signal.SIGKILL)
    time.sleep(0.5)
    assert job_processes(survivor_dir), "the job died with the control plane"
    agents = [n["pid"] for n in launch_record(server.state_dir, survivor)["nodes"]]
    assert all((_proc_pgid_and_state(p) or (0, "Z"))[1] != "Z" for p in agents)
    server.start()
    restarted = time.monotonic() - t0

    job = server.wait(survivor, ENDED, timeout=90)
    assert job["state"] == "completed", f"{json.dumps(job)[:3000]}\n{server.server_log()}"
    assert [a["state"] for a in job["attempts"]] == ["succeeded"]
    kinds = [e["kind"] for e in job["events"]]
    assert kinds.count("adopted") == 1 and kinds.count("completed") == 1
    assert kinds.count("started") == 1 and "requeued" not in kinds
    assert sorted(p.name for p in survivor_dir.iterdir() if p.name.startswith("attempt")) == [
        "attempt-1"]
    assert job_processes(survivor_dir) == []

    job = server.wait(orphan, ENDED, timeout=120)
    assert job["state"] == "completed", f"{json.dumps(job)[:3000]}\n{server.server_log()}"
    assert [(a["number"], a["state"]) for a in job["attempts"]] == [(1, "lost"), (2, "succeeded")]
    kinds = [e["kind"] for e in job["events"]]
    assert kinds.count("requeued") == 1 and kinds.count("completed") == 1
    assert kinds.count("placed") == 2 and "adopted" not in kinds
    assert sorted(p.name for p in orphan_dir.iterdir() if p.name.startswith("attempt")) == [
        "attempt-1", "attempt-2"]
    assert group_members({n["pgid"] for n in first["nodes"]}) == []
    assert job_processes(orphan_dir) == []
    print(f"\n(c) SIGKILL + restart: up again {restarted:.1f}s after the kill; both jobs done "
          f"{time.monotonic() - t0:.1f}s after it")


# ------------------------------------------------------------------ (d), (e) the CLI
def test_the_cli_refuses_a_malformed_spec_naming_the_field(lab: Server, tmp_path: Path) -> None:
    before = len(lab.get("/jobs", params={"limit": 1000}))
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: job\nname: bad\ngpus: 2\ngpus_per_nod: 2\n"
                   "command: [python, examples/train_ddp.py]\n")
    out = grace_cli(lab, "submit", str(bad))
    assert out.returncode != 0
    assert "gpus_per_nod" in out.stdout + out.stderr
    # valid YAML, but not for this cluster: refused by the server, still naming the field
    elsewhere = tmp_path / "h100.yaml"
    elsewhere.write_text("kind: job\nname: h100\ngpus: 8\ngpu_model: H100-SXM\n"
                         "command: [python, examples/train_ddp.py]\n")
    out = grace_cli(lab, "submit", str(elsewhere))
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "gpus" in text and "H100-SXM" in text
    assert len(lab.get("/jobs", params={"limit": 1000})) == before


def test_the_cli_speaks_json(lab: Server, tmp_path: Path) -> None:
    hello = tmp_path / "hello.yaml"
    hello.write_text("kind: job\nname: hello\ntenant: cli\ngpus: 1\n"
                     "command: [python, -c, \"print('hello from grace')\"]\n")
    out = grace_cli(lab, "submit", str(hello), "--json")
    assert out.returncode == 0, out.stderr
    jid = json.loads(out.stdout)["id"]
    assert isinstance(jid, int)
    out = grace_cli(lab, "jobs", "--json", "--tenant", "cli")
    assert out.returncode == 0, out.stderr
    assert [j["id"] for j in json.loads(out.stdout)] == [jid]
    lab.wait(jid, ENDED, timeout=60)
    out = grace_cli(lab, "job", str(jid), "--json")
    assert out.returncode == 0, out.stderr
    job = json.loads(out.stdout)
    assert job["state"] == "completed" and job["id"] == jid
    assert "hello from grace" in lab.get(f"/jobs/{jid}/logs")
    out = grace_cli(lab, "job", "424242", "--json")
    assert out.returncode != 0


# ------------------------------------------------------------------ the audit trail afterwards
def test_the_audit_chain_holds_after_the_scenarios_and_names_an_edited_entry(
        lab: Server, tmp_path: Path) -> None:
    """Last in this file: the store ``lab``'s scenarios wrote verifies with ``grace audit
    --verify --db`` (an auditor's path: no server, no token); a copy with one row edited,
    or one deleted, fails naming that entry."""
    import sqlite3

    db = lab.state_dir / "grace.sqlite"
    out = grace_cli(lab, "audit", "--verify", "--db", f"sqlite:///{db}")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "the audit chain holds" in out.stdout
    listed = json.loads(grace_cli(lab, "audit", "--db", f"sqlite:///{db}", "--json",
                                  "--limit", "10000").stdout)
    actions = {(e["actor"], e["action"]) for e in listed}
    assert {("grace", "job.started"), ("grace", "job.completed")} <= actions
    assert any(a == "job.submitted" for _, a in actions)
    n = len(listed)
    for change, seq in (("UPDATE audit_entries SET outcome = 'denied' WHERE seq = ?", n // 2),
                        ("DELETE FROM audit_entries WHERE seq = ?", n - 1)):
        copy = tmp_path / f"copy-{seq}.sqlite"
        with sqlite3.connect(db) as src, sqlite3.connect(copy) as dst:
            src.backup(dst)  # a consistent copy, the WAL's pages included
            dst.execute(change, (seq,))
        out = grace_cli(lab, "audit", "--verify", "--db", f"sqlite:///{copy}")
        assert out.returncode == 1, out.stdout + out.stderr
        assert f"breaks at entry {seq}" in " ".join(out.stderr.split())
