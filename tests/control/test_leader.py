"""One leader per store: the lease, the fence, the standby and the takeover.

Fast tests run on SQLite and PostgreSQL (the ``db_url``/``store`` fixtures of
conftest.py; PostgreSQL ones skip without GRACE_TEST_DATABASE_URL): acquire,
renew, expiry, takeover, a race for the lease, fencing (a deposed leader's write
raises ``Fenced`` and writes nothing), the lease keeper of ``grace up`` with
short timings and a scripted backend, the API's read-only standby, and SQLite's
refusal of a second control plane.

Slow (``pytest -m slow``): two real ``grace up`` on one PostgreSQL store and one
state directory with a real training job; the leader is SIGKILLed mid-run and
the standby takes over (the takeover time is printed), adopting the job, which
completes on its first attempt. And a second ``grace up`` on a SQLite store
exits 1. To measure the takeover alone::

    export "$(bash .ci/postgres-up.sh)"; export GRACE_TEST_DATABASE_URL=$DATABASE_URL
    .venv/bin/pytest -s -m slow tests/control/test_leader.py -k takes_over
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import LAB, REPO, ScriptedBackend, add_job, authed, job_spec
from sqlalchemy import func, select
from test_e2e import ENDED, TRAIN, _free_port, _kill_leftovers, job_processes
from typer.testing import CliRunner

from grace.cli.main import app as cli
from grace.control.api import create_app
from grace.control.reconciler import Reconciler
from grace.control.server import LeaseKeeper, ServerConfig, assemble
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.errors import Fenced
from grace.control.store.lease import LeaderLease, Leadership, this_holder
from grace.control.store.models import Job, JobState, Lease
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.spec.loader import load_cluster

T0 = 1_700_000_000.0
ISO_SECONDS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"


def jobs_in(store: Store) -> int:
    with store.read() as s:
        return int(s.execute(select(func.count()).select_from(Job)).scalar_one())


@pytest.fixture
def second(db_url: str, store: Store) -> Iterator[Store]:
    """Another control plane's connection to the same store (``store`` migrated it)."""
    other = Store.open(db_url)
    try:
        yield other
    finally:
        other.close()


# ---------------------------------------------------------------- the lease
def test_the_first_control_plane_takes_the_lease_at_epoch_1(store: Store) -> None:
    lease = LeaderLease(store, "host-a:1")
    assert lease.current() is None
    assert lease.try_acquire(T0)
    info = lease.current()
    assert info is not None
    assert (info.holder, info.epoch, info.acquired_at, info.expires_at) == ("host-a:1", 1, T0,
                                                                           T0 + 10)
    assert lease.fence == ("host-a:1", 1) and info.live(T0 + 10) and not info.live(T0 + 10.1)
    with store.read() as s:  # the same answer inside a caller's session
        assert lease.current(s) == info


def test_a_live_lease_is_refused_and_an_expired_one_taken_with_the_next_epoch(
        store: Store, second: Store) -> None:
    a, b = LeaderLease(store, "host-a:1"), LeaderLease(second, "host-b:2")
    assert a.try_acquire(T0)
    assert not b.try_acquire(T0 + 5) and not b.held
    assert not b.try_acquire(T0 + 10)  # expires_at itself is still held
    assert b.try_acquire(T0 + 10.5)
    assert b.fence == ("host-b:2", 2)
    assert not a.renew(T0 + 11)  # the old leader learns it lost the lease
    assert not a.held
    info = b.current()
    assert info is not None and (info.holder, info.epoch, info.acquired_at) == ("host-b:2", 2,
                                                                                T0 + 10.5)


def test_renewal_keeps_the_lease_and_extends_it_by_a_ttl(store: Store, second: Store) -> None:
    a, b = LeaderLease(store, "host-a:1"), LeaderLease(second, "host-b:2")
    assert a.try_acquire(T0)
    for t in (2, 4, 6, 8, 10, 12):
        assert a.renew(T0 + t)
        assert not b.try_acquire(T0 + t + 1)
    info = a.current()
    assert info is not None and (info.epoch, info.renewed_at, info.expires_at) == (
        1, T0 + 12, T0 + 22)
    assert a.renew(T0 + 30)  # expired, but nobody took it: still ours, same term
    assert a.fence == ("host-a:1", 1)


def test_release_lets_a_standby_take_over_at_its_next_poll(store: Store, second: Store) -> None:
    a, b = LeaderLease(store, "host-a:1"), LeaderLease(second, "host-b:2")
    assert a.try_acquire(T0)
    assert a.release(T0 + 3)
    assert not a.held
    assert b.try_acquire(T0 + 3.01)  # not T0 + 10: a clean shutdown hands over at once
    assert b.fence == ("host-b:2", 2)
    assert not a.release(T0 + 4)  # not ours any more


def test_two_standbys_racing_for_an_expired_lease_cannot_both_win(
        db_url: str, store: Store) -> None:
    assert LeaderLease(store, "dead:1").try_acquire(T0)
    stores = [Store.open(db_url) for _ in range(6)]
    try:
        leases = [LeaderLease(s, f"standby:{i}") for i, s in enumerate(stores)]
        start = threading.Barrier(len(leases))
        won: list[bool] = [False] * len(leases)

        def race(i: int) -> None:
            start.wait()
            won[i] = leases[i].try_acquire(T0 + 11)

        threads = [threading.Thread(target=race, args=(i,)) for i in range(len(leases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sum(won) == 1, won
        winner = leases[won.index(True)]
        info = winner.current()
        assert info is not None and (info.holder, info.epoch) == (winner.holder, 2)
    finally:
        for s in stores:
            s.close()


def test_the_store_id_is_the_uuid_made_with_the_store_and_is_cached(store: Store,
                                                                     second: Store) -> None:
    assert re.fullmatch(r"[0-9a-f]{32}", store.store_id)
    assert second.store_id == store.store_id
    store.close()  # cached: no query after the first
    assert store.store_id == second.store_id


# ---------------------------------------------------------------- fencing
def test_a_fenced_store_write_raises_fenced_and_writes_nothing(store: Store,
                                                               second: Store) -> None:
    a, b = LeaderLease(store, "host-a:1"), LeaderLease(second, "host-b:2")
    now = time.time()
    assert a.try_acquire(now)
    store.fence = a.fence
    add_job(store, now, "while-leading")  # the fence matches: committed
    assert jobs_in(second) == 1
    assert b.try_acquire(now + 11)  # a's lease expired (a was paused, say): b takes over
    second.fence = b.fence
    with pytest.raises(Fenced, match="another control plane took over"):
        add_job(store, now, "after-the-takeover")
    assert jobs_in(second) == 1  # nothing of it landed
    # a transaction that only reads is refused as well
    with pytest.raises(Fenced), store.transaction() as s:
        repo.list_jobs(s)
    with store.read() as s:  # reads are unaffected
        assert [j.name for j in repo.list_jobs(s)] == ["while-leading"]
    add_job(second, now, "new-leader")  # the new leader writes
    assert jobs_in(second) == 2
    store.fence = None  # an unfenced store (a tool, a test) writes as before
    add_job(store, now, "unfenced")
    assert jobs_in(second) == 3


def test_a_write_in_flight_during_a_takeover_lands_wholly_before_it_or_not_at_all(
        store: Store, second: Store) -> None:
    a, b = LeaderLease(store, "host-a:1"), LeaderLease(second, "host-b:2")
    now = time.time()
    assert a.try_acquire(now)
    store.fence = a.fence
    if store.dialect == "postgresql":
        # the takeover commits while a's transaction is open (it has not touched the lease
        # row yet): a's commit then finds another epoch and rolls everything back
        with pytest.raises(Fenced), store.transaction() as s:
            repo.add_job(s, job_spec("in-flight"), now)
            s.flush()
            assert b.try_acquire(now + 11)
        assert jobs_in(second) == 0
        return
    # SQLite serialises writers: the takeover waits for a's transaction, which commits first
    took: list[bool] = []
    with store.transaction() as s:
        repo.add_job(s, job_spec("in-flight"), now)
        s.flush()
        t = threading.Thread(target=lambda: took.append(b.try_acquire(now + 11)))
        t.start()
        time.sleep(0.3)
        assert took == []  # still waiting for the write lock
    t.join(timeout=30)
    assert took == [True] and jobs_in(second) == 1
    with pytest.raises(Fenced):
        add_job(store, now, "after")


# ---------------------------------------------------------------- the keeper (grace up's part)
class Plane:
    """One control plane in this process, as ``grace up`` wires it, with short lease timings:
    TTL 2 s, renewal every 0.2 s, a standby polling every 0.1 s. (A 1 s TTL lapsed now and
    then on a loaded 2-core machine, when a renewal waited on SQLite's write lock behind a
    cycle: the standby then rightly took over, and the test that expects it not to failed.)"""

    TTL = 2.0

    def __init__(self, db_url: str, state_dir: Path, name: str) -> None:
        spec = load_cluster(LAB)
        self.store = Store.open(db_url)
        self.backend = ScriptedBackend(spec)
        self.reconciler = Reconciler(self.store, self.backend, Topology.from_spec(spec),
                                     get_policy("grace"), state_dir, defer_writes=True)
        self.lease = LeaderLease(self.store, name, ttl_s=self.TTL)
        self.leadership = Leadership()
        self.said: list[str] = []
        self.keeper = LeaseKeeper(self.store, self.reconciler, self.lease, self.leadership,
                                  interval_s=0.05, renew_s=0.2, poll_s=0.1,
                                  say=self.said.append)

    def start(self) -> bool:
        leading = self.keeper.start_up()
        self.keeper.start()
        return leading

    def crash(self) -> None:
        """As SIGKILL would: the keeper and loop just stop; the lease is not released."""
        self.keeper.stopping.set()
        self.keeper.join(timeout=5)
        if self.keeper.loop is not None:
            self.keeper.loop.stopping.set()
            self.keeper.loop.join(timeout=5)

    def close(self) -> None:
        self.keeper.shutdown()
        self.store.close()


def wait_for(what: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout}s: {what}")


@pytest.fixture
def planes(db_url: str, store: Store, tmp_path: Path) -> Iterator[Callable[[str], Plane]]:
    made: list[Plane] = []

    def make(name: str) -> Plane:
        p = Plane(db_url, tmp_path / "state", name)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def attempts_of(store: Store, job_id: int) -> list[tuple[int, str, str | None]]:
    with store.read() as s:
        return [(a.number, str(a.state), a.handle) for a in repo.get_job(s, job_id).attempts]


def test_a_standby_writes_nothing_then_takes_over_and_adopts_the_running_job(
        store: Store, planes: Callable[[str], Plane]) -> None:
    a = planes("host-a:1")
    assert a.start() and a.leadership.get().role == "leader"
    job = add_job(store, time.time(), "train", 2)
    wait_for(lambda: attempts_of(store, job) and attempts_of(store, job)[0][1] == "running")
    [(_, _, handle)] = attempts_of(store, job)

    b = planes("host-b:2")
    assert not b.start()
    assert b.said == [f"standby: leader is host-a:1 since {a.lease.current().since}"]  # type: ignore[union-attr]
    assert re.fullmatch(f"standby: leader is host-a:1 since {ISO_SECONDS}", b.said[0])
    assert b.leadership.health() == {"role": "standby", "leader": "host-a:1", "epoch": 1}
    time.sleep(0.5)
    assert (b.backend.polls, b.backend.launches, b.backend.adopts) == (0, [], [])
    assert b.store.fence is None and b.keeper.loop is None

    a.crash()
    t0 = time.monotonic()
    wait_for(lambda: b.leadership.leading, timeout=Plane.TTL + 3)
    took = time.monotonic() - t0
    assert took <= Plane.TTL + 1.0, took  # TTL plus a poll, plus slack for a slow machine
    assert b.leadership.health() == {"role": "leader", "leader": "host-b:2", "epoch": 2}
    assert b.store.fence == ("host-b:2", 2)
    wait_for(lambda: b.backend.adopts)
    assert b.backend.adopts == [(job, 1, handle)] and b.backend.launches == []
    b.backend.finish(job)
    wait_for(lambda: attempts_of(store, job)[0][1] == "succeeded")
    with store.read() as s:
        j = repo.get_job(s, job)
        assert j.state == JobState.COMPLETED and j.attempts_count == 1
    print(f"\nin-process takeover with a {Plane.TTL:.0f} s TTL: {took:.2f}s")


def test_a_leader_that_lost_its_lease_stops_its_loop_at_once_and_stands_by(
        store: Store, second: Store, planes: Callable[[str], Plane]) -> None:
    a = planes("host-a:1")
    assert a.start()
    wait_for(lambda: a.backend.polls > 2)  # its loop is cycling
    # another control plane takes the lease from under it (a was paused past its TTL, say)
    usurper = LeaderLease(second, "host-c:3")
    assert usurper.try_acquire(time.time(), force=True)
    standby = {"role": "standby", "leader": "host-c:3", "epoch": 2}
    wait_for(lambda: a.leadership.health() == standby, timeout=2)  # standby first, then who
    assert a.keeper.loop is None and a.store.fence is None
    assert a.said[-1].startswith("standby: leader is host-c:3 since ")
    polls = a.backend.polls
    time.sleep(0.5)
    assert a.backend.polls == polls  # no cycle since
    # and once that leader goes away, a leads again, in a new term
    assert usurper.release(time.time())
    wait_for(lambda: a.leadership.health() == {"role": "leader", "leader": "host-a:1",
                                               "epoch": 3}, timeout=2)


def test_a_fenced_cycle_stops_the_loop_without_waiting_for_the_next_renewal(
        store: Store, second: Store, planes: Callable[[str], Plane]) -> None:
    a = planes("host-a:1")
    a.keeper.renew_s = 30.0  # the renewal would notice only much later
    assert a.start()
    wait_for(lambda: a.backend.polls > 0)
    assert LeaderLease(second, "host-c:3").try_acquire(time.time(), force=True)
    add_job(second, time.time(), "needs-a-start")  # the next cycle's start is a fenced write
    wait_for(lambda: not a.leadership.leading, timeout=5)
    assert a.backend.launches == []
    with second.read() as s:
        assert [j.state for j in repo.list_jobs(s)] == [JobState.PENDING]


def test_shutdown_stops_the_loop_and_releases_the_lease(store: Store,
                                                        planes: Callable[[str], Plane]) -> None:
    a = planes("host-a:1")
    assert a.start()
    a.keeper.shutdown()
    assert not a.lease.held and a.keeper.loop is None and not a.keeper.is_alive()
    info = LeaderLease(store).current()
    assert info is not None and info.holder == "host-a:1" and not info.live(time.time() + 0.01)


# ---------------------------------------------------------------- the API of a standby
def test_a_standby_serves_reads_and_refuses_writes_naming_the_leader(store: Store,
                                                                     tmp_path: Path) -> None:
    topo = Topology.from_spec(load_cluster(LAB))
    leadership = Leadership()
    leadership.set("standby", "host-a:1", 4, T0)
    client = authed(create_app(store, topo, tmp_path, leadership=leadership), store)
    body = {"name": "train", "tenant": "vision", "gpus": 2, "command": ["python", "train.py"]}
    assert client.get("/healthz").json() == {"status": "ok", "role": "standby",
                                             "leader": "host-a:1", "epoch": 4}
    assert client.get("/jobs").status_code == 200
    for method, path in [("POST", "/jobs"), ("PUT", "/tenants/vision"),
                         ("POST", "/nodes/a100-00/drain"), ("DELETE", "/jobs/1")]:
        r = client.request(method, path, json=body)
        assert r.status_code == 503, (method, path, r.text)
        assert "standby" in r.json()["detail"] and "host-a:1" in r.json()["detail"]
    assert jobs_in(store) == 0
    leadership.set("leader", "host-b:2", 5, T0)
    assert client.post("/jobs", json=body).status_code == 201
    assert client.get("/healthz").json()["role"] == "leader"


def test_a_write_that_meets_the_fence_answers_503_and_stores_nothing(
        store: Store, second: Store, tmp_path: Path) -> None:
    a = LeaderLease(store, "host-a:1")
    assert a.try_acquire(time.time())
    store.fence = a.fence
    leadership = Leadership()
    leadership.set("leader", "host-a:1", 1, T0)  # it has not noticed yet
    client = authed(create_app(store, Topology.from_spec(load_cluster(LAB)), tmp_path,
                               leadership=leadership), store)
    assert LeaderLease(second, "host-b:2").try_acquire(time.time(), force=True)
    r = client.post("/jobs", json={"name": "x", "gpus": 1, "command": ["true"]})
    assert r.status_code == 503 and "another control plane took over" in r.json()["detail"]
    assert jobs_in(second) == 0


# ---------------------------------------------------------------- SQLite: one control plane
def _files(state: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(state.glob("grace.sqlite*"))
            if not p.name.endswith("-shm")}


def test_a_second_grace_up_on_a_sqlite_store_is_refused_and_writes_nothing(
        tmp_path: Path) -> None:
    cfg = ServerConfig(LAB, None, 0, tmp_path / "state")
    first = assemble(cfg)
    try:
        assert first.lock is not None
        assert LeaderLease(first.store).try_acquire(time.time())
        before = _files(cfg.state_dir)
        r = CliRunner().invoke(cli, ["up", "--cluster", str(LAB), "--state-dir",
                                     str(cfg.state_dir), "--port", "0"])
        assert r.exit_code == 1, r.output
        text = " ".join(r.output.split())
        assert f"is in use by {this_holder()} since " in text
        assert re.search(f"since {ISO_SECONDS}", text)
        assert "SQLite allows one control plane" in text and "PostgreSQL" in text
        assert "standby" in text and "nothing was written" in text
        assert _files(cfg.state_dir) == before
    finally:
        first.store.close()
        if first.lock is not None:
            first.lock.release()


def test_grace_up_restarted_on_sqlite_after_a_crash_takes_over_at_once(tmp_path: Path) -> None:
    """The dead holder's lease is still live by its TTL, but the file lock is free: a
    restart must not wait for (or be refused by) the lease of a process that is gone."""
    cfg = ServerConfig(LAB, None, 0, tmp_path / "state")
    crashed = assemble(cfg)
    assert LeaderLease(crashed.store, "this-host:999999").try_acquire(time.time())
    assert crashed.lock is not None
    crashed.lock.release()  # what the kernel does when a process dies
    crashed.store.close()
    plane = assemble(cfg)
    keeper = LeaseKeeper(plane.store, plane.reconciler, LeaderLease(plane.store), Leadership(),
                         say=lambda line: None)
    try:
        assert keeper.start_up(force=plane.lock is not None)
        assert keeper.leadership.health() == {"role": "leader", "leader": this_holder(),
                                              "epoch": 2}
    finally:
        keeper.shutdown()
        plane.store.close()
        if plane.lock is not None:
            plane.lock.release()


# ---------------------------------------------------------------- slow: real processes
class Up:
    """One ``grace up`` process (its own session, so a SIGKILL leaves the jobs running)."""

    def __init__(self, name: str, state_dir: Path, db: str | None) -> None:
        self.name = name
        self.state_dir = state_dir
        self.db = db
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state_dir.parent / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        # one admin token per store: the first grace up writes it, the others find it there
        self.token_file = state_dir.parent / "admin.token"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token_file.read_text().strip()}"}

    def start(self, wait: bool = True) -> Up:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grace.cli.main", "up", "--cluster",
                 "examples/clusters/lab.yaml", "--port", str(self.port), "--state-dir",
                 str(self.state_dir), "--admin-token-file", str(self.token_file),
                 *(["--db", self.db] if self.db else [])],
                cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        if wait:
            wait_for(self._answers, timeout=60)
        return self

    def _answers(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, self.output()
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        return False

    @property
    def holder(self) -> str:
        assert self.proc is not None
        return f"{socket.gethostname()}:{self.proc.pid}"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def health(self) -> dict[str, Any]:
        """/healthz without the backend's isolation report (the role is what these pin)."""
        body = httpx.get(f"{self.url}/healthz", timeout=2).json()
        body.pop("isolation", None)
        return dict(body)

    def get(self, path: str) -> Any:
        r = httpx.get(self.url + path, timeout=30, headers=self.headers)
        r.raise_for_status()
        return r.json()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def ups(tmp_path: Path) -> Iterator[Callable[[str, str | None], Up]]:
    made: list[Up] = []

    def make(name: str, db: str | None) -> Up:
        u = Up(name, tmp_path / "state", db)
        made.append(u)
        return u

    yield make
    for u in made:
        u.stop()
    _kill_leftovers(tmp_path / "state")


def _wait_job(up: Up, job_id: int, states: set[str], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = up.get(f"/jobs/{job_id}")
        if job["state"] in states:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still {job.get('state')}: {job}\n{up.output()[-3000:]}")


def _wait_log(up: Up, job_id: int, text: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = httpx.get(f"{up.url}/jobs/{job_id}/logs", params={"tail": 100000}, timeout=30,
                      headers=up.headers)
        if text in r.text:
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} never logged {text!r}\n{up.output()[-3000:]}")


def _workdir(state_dir: Path, job_id: int) -> Path:
    """The job's directory: ``jobs/<id>``, or ``jobs/<store id>-<id>`` where it is keyed by
    the store too."""
    found = [p for p in (state_dir / "jobs").iterdir()
             if p.name == str(job_id) or p.name.endswith(f"-{job_id}")]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_standby_takes_over_a_sigkilled_leader_and_the_running_job_completes_once(
        db_url: str, ups: Callable[[str, str | None], Up]) -> None:
    leader = ups("leader", db_url).start()
    assert leader.health() == {"status": "ok", "role": "leader", "leader": leader.holder,
                               "epoch": 1}
    standby = ups("standby", db_url).start()
    line = wait_for(lambda: re.search(r"^standby: leader is \S+ since \S+$", standby.output(),
                                      re.MULTILINE), timeout=10)
    assert re.fullmatch(f"standby: leader is {re.escape(leader.holder)} since {ISO_SECONDS}",
                        line.group(0)), standby.output()
    assert standby.health() == {"status": "ok", "role": "standby", "leader": leader.holder,
                                "epoch": 1}

    job = {"name": "survivor", "tenant": "demo", "gpus": 2, "gpu_model": "A100-80GB",
           "command": [*TRAIN, "--steps", "300", "--sleep-per-step", "0.05",
                       "--batch-size", "4"]}
    refused = httpx.post(f"{standby.url}/jobs", json=job, timeout=30, headers=leader.headers)
    assert refused.status_code == 503 and leader.holder in refused.json()["detail"]
    r = httpx.post(f"{leader.url}/jobs", json=job, timeout=30, headers=leader.headers)
    assert r.status_code == 201, r.text
    jid = int(r.json()["id"])
    _wait_log(leader, jid, "step 10/300")
    assert standby.get(f"/jobs/{jid}")["state"] == "running"  # reads work on the standby
    workdir = _workdir(leader.state_dir, jid)

    assert leader.proc is not None
    t0 = time.monotonic()
    os.kill(leader.proc.pid, signal.SIGKILL)
    wait_for(lambda: standby.health()["role"] == "leader", timeout=20)
    took = time.monotonic() - t0
    print(f"\ntakeover: the standby led {took:.1f}s after SIGKILL of the leader "
          f"(TTL 10 s, standby poll 1 s)")
    assert took <= 15, took
    assert standby.health() == {"status": "ok", "role": "leader", "leader": standby.holder,
                                "epoch": 2}
    assert job_processes(workdir), "the job died with its control plane"

    done = _wait_job(standby, jid, ENDED, timeout=120)
    assert done["state"] == "completed", f"{done}\n{standby.output()[-3000:]}"
    assert [(a["number"], a["state"]) for a in done["attempts"]] == [(1, "succeeded")]
    [summary] = [j for j in standby.get("/jobs") if j["id"] == jid]
    assert summary["attempts"] == 1 and summary["restarts"] == 0
    kinds = [e["kind"] for e in done["events"]]
    assert kinds.count("started") == 1 and kinds.count("adopted") == 1, kinds
    assert "requeued" not in kinds
    assert job_processes(workdir) == []
    assert [j["id"] for j in standby.get("/jobs") if j["state"] == "running"] == []

    # a clean stop (SIGTERM) releases the lease: a standby then leads at its next poll
    third = ups("third", db_url).start()
    wait_for(lambda: third.health()["role"] == "standby")
    assert standby.proc is not None
    t1 = time.monotonic()
    standby.proc.terminate()
    wait_for(lambda: third.health()["role"] == "leader", timeout=15)
    handover = time.monotonic() - t1
    assert standby.proc.wait(timeout=20) == 0
    print(f"handover after SIGTERM of the leader: {handover:.1f}s")
    assert handover < 5, handover
    assert third.health()["epoch"] == 3


@pytest.mark.slow
def test_a_second_grace_up_on_one_sqlite_store_exits_1_saying_who_has_it(
        ups: Callable[[str, str | None], Up]) -> None:
    first = ups("first", None).start()
    assert first.health()["role"] == "leader"
    second = ups("second", None).start(wait=False)
    assert second.proc is not None
    assert second.proc.wait(timeout=60) == 1, second.output()
    text = " ".join(second.output().split())
    assert f"is in use by {first.holder} since " in text, text
    assert "SQLite allows one control plane" in text and "PostgreSQL" in text
    assert "standby: leader" not in text
    health = first.health()
    assert health["role"] == "leader" and health["leader"] == first.holder
    assert health["epoch"] == 1
    store = Store.open(f"sqlite:///{first.state_dir / 'grace.sqlite'}")
    try:
        with store.read() as s:
            rows = s.execute(select(Lease.holder, Lease.epoch)).all()
        assert [tuple(r) for r in rows] == [(first.holder, 1)]
    finally:
        store.close()
