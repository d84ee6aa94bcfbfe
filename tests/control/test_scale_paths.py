"""The control plane's paths for scale: the change feed, batch submits, keyset listings.

On both stores (SQLite, and PostgreSQL where GRACE_TEST_DATABASE_URL is set):

- every commit that writes a job or its attempt stamps the job with a larger
  clock value, and a mirror kept by the feed equals one read from scratch, under
  concurrent writers too (the clock row orders the commits);
- ``POST /jobs:batch`` stores all its jobs or none, and names a bad job's place;
- ``GET /jobs?after=ID`` pages newest first with no job twice or missed, and
  ``grace jobs --json --all`` lists every job.
"""

from __future__ import annotations

import gc
import json
import threading
from pathlib import Path
from typing import Any, cast

import pytest
from helpers import LAB, authed, make_token
from sqlalchemy import event, select

from grace.control.api import MAX_BATCH, create_app
from grace.control.heap import freeze_long_lived
from grace.control.live.mirror import StoreMirror
from grace.control.server import ReconcileLoop
from grace.control.store import audit, changes, tokens
from grace.control.store import repository as repo
from grace.control.store import workflow as flows
from grace.control.store.db import API_THREADS, Store
from grace.control.store.group_commit import AfterFlush
from grace.control.store.models import Job, JobState, Role
from grace.core.topology import Topology
from grace.spec.job import JobSpec
from grace.spec.loader import load_cluster

GOOD: dict[str, Any] = {"name": "t", "tenant": "vision", "gpus": 1,
                        "command": ["python", "train.py"]}


def _submit(store: Store, n: int, name: str = "job") -> list[int]:
    spec = JobSpec.model_validate({**GOOD, "name": name})
    with store.transaction() as s:
        jobs = [repo.add_job(s, spec, 1.0) for _ in range(n)]
        s.flush()
        return [j.id for j in jobs]


def _seqs(store: Store) -> dict[int, int]:
    with store.read() as s:
        return {int(i): int(c) for i, c in s.execute(select(Job.id, Job.change_seq))}


# ---------------------------------------------------------------- the change feed
def test_each_commit_stamps_the_jobs_it_wrote_with_a_larger_number(store: Store) -> None:
    first = _submit(store, 2)
    seqs = _seqs(store)
    assert seqs[first[0]] == seqs[first[1]] > 0  # one commit, one number
    [third] = _submit(store, 1)
    assert _seqs(store)[third] > seqs[first[0]]
    with store.transaction() as s:  # a write to one job stamps that job only
        repo.set_pending_reason(s, first[1], "waiting for 1 GPU")
    after = _seqs(store)
    assert after[first[1]] > after[third] and after[first[0]] == seqs[first[0]]
    with store.read() as s:
        assert changes.current(s) == after[first[1]]


def test_a_transaction_that_writes_no_job_takes_no_number(store: Store) -> None:
    _submit(store, 1)
    with store.read() as s:
        before = changes.current(s)
    with store.transaction() as s:
        repo.upsert_node(s, "n-extra", 8, "H100-SXM")
    with store.read() as s:
        assert changes.current(s) == before


def test_a_mirror_kept_by_the_feed_equals_one_read_from_scratch(store: Store) -> None:
    kept = StoreMirror()
    ids = _submit(store, 5)
    with store.read() as s:
        assert kept.refresh(s) == set(ids)  # never loaded: read whole
    with store.transaction() as s:
        repo.set_job_state(s, repo.require_job(s, ids[0]), JobState.CANCELLED, 2.0,
                           "cancelled", None, {})
        repo.set_pending_reason(s, ids[1], "quota")
    more = _submit(store, 2)
    with store.read() as s:
        assert kept.refresh(s) == {ids[0], ids[1], *more}
        assert kept.refresh(s) == set()  # nothing new: nothing read
        fresh = StoreMirror()
        fresh.reload(s)
    assert kept.jobs == fresh.jobs and kept.attempts == fresh.attempts
    assert ids[0] not in kept.jobs and kept.jobs[ids[1]].reason == "quota"


def test_concurrent_writers_never_hide_a_change_from_the_feed(store: Store) -> None:
    """Eight threads submit and re-reason jobs while a reader follows the feed; at the
    end the followed mirror equals a fresh read (a number committed out of order would
    leave a job behind for good)."""
    kept = StoreMirror()
    ids = _submit(store, 8)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(15):
                _submit(store, 1, f"w{k}-{i}")
                with store.transaction() as s:
                    repo.set_pending_reason(s, ids[k], f"round {i}")
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def reader() -> None:  # a reconciler that never rests (a short wait lets writers run)
        while not stop.wait(0.001):
            with store.read() as s:
                kept.refresh(s)

    follow = threading.Thread(target=reader)
    follow.start()
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    follow.join()
    assert not errors, errors
    with store.read() as s:
        kept.refresh(s)
        fresh = StoreMirror()
        fresh.reload(s)
    assert len(fresh.jobs) == 8 + 8 * 15
    assert kept.jobs == fresh.jobs


# ---------------------------------------------------------------- POST /jobs:batch
@pytest.fixture
def client(store: Store, tmp_path: Path) -> Any:
    topo = Topology.from_spec(load_cluster(LAB))
    with store.transaction() as s:
        for n in topo.nodes:
            repo.upsert_node(s, n.name, n.gpus, n.gpu_model)
    return authed(create_app(store, topo, tmp_path / "state"), store)


def _count(store: Store) -> int:
    with store.read() as s:
        return len(repo.list_jobs(s, limit=100_000))


def test_a_batch_stores_every_job_once_in_order(client: Any, store: Store) -> None:
    r = client.post("/jobs:batch", json={"jobs": [{**GOOD, "name": f"b{i}"} for i in range(50)]})
    assert r.status_code == 201, r.text
    answered = [j["id"] for j in r.json()["jobs"]]
    assert len(set(answered)) == 50 and answered == sorted(answered)
    with store.read() as s:
        names = {j.id: j.name for j in repo.list_jobs(s, limit=1000)}
    assert [names[i] for i in answered] == [f"b{i}" for i in range(50)]


@pytest.mark.parametrize(("jobs", "field", "words"), [
    ([GOOD, {**GOOD, "gpus": 2.5}], "jobs[1].gpus", "fractional"),
    ([GOOD, {**GOOD, "command": []}], "jobs[1].command", "command"),
    ([GOOD, "train.py"], "jobs[1]", "object"),
    ([], "jobs", "list of 1 to"),
    ([GOOD] * (MAX_BATCH + 1), "jobs", "split"),
])
def test_a_bad_job_names_its_place_and_nothing_is_stored(
        client: Any, store: Store, jobs: list[Any], field: str, words: str) -> None:
    r = client.post("/jobs:batch", json={"jobs": jobs})
    assert r.status_code == 422, r.text
    problem = r.json()["detail"][0]
    assert problem["field"] == field and words in problem["message"]
    assert _count(store) == 0


# ---------------------------------------------------------------- keyset listings
def test_pages_by_id_list_every_job_once_while_jobs_end_between_pages(
        client: Any, store: Store) -> None:
    ids = _submit(store, 25)
    seen: list[int] = []
    after: dict[str, int] = {}
    while True:
        page = client.get("/jobs", params={"state": "pending", "limit": 10, **after}).json()
        if not page:
            break
        seen += [j["id"] for j in page]
        after = {"after": page[-1]["id"]}
        with store.transaction() as s:  # the newest job ends: offset paging would skip one
            newest = repo.require_job(s, max(ids))
            if newest.state is JobState.PENDING:
                repo.set_job_state(s, newest, JobState.CANCELLED, 2.0, "gone", None, {})
    assert seen == sorted(ids, reverse=True)


def test_grace_jobs_all_lists_every_job(client: Any, store: Store, monkeypatch: Any,
                                        capsys: Any) -> None:
    from grace.cli import client as cli

    ids = _submit(store, 2 * 7 + 3)
    monkeypatch.setattr(cli, "PAGE", 7)
    monkeypatch.setattr(cli, "_call", lambda method, path, **kw: client.request(
        method, path, **kw).json())
    cli.jobs(state=None, tenant=None, as_json=True, fmt=None, limit=5, every=True)
    listed = [j["id"] for j in json.loads(capsys.readouterr().out)]
    assert listed == sorted(ids, reverse=True)


# ---------------------------------------------------------------- group commit
def _units_at_once(store: Store, n: int, work: Any) -> dict[int, Any]:
    """``work(k, session)`` for k in range(n), from n threads released together through
    the group commit: each unit's answer, or the ValueError it raised."""
    results: dict[int, Any] = {}
    gate = threading.Barrier(n)

    def unit(k: int) -> None:
        gate.wait()
        try:
            results[k] = store.group_commit.run(lambda s: work(k, s))
        except ValueError as e:
            results[k] = e

    threads = [threading.Thread(target=unit, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_units_share_transactions_and_a_failing_one_takes_only_itself(
        store: Store) -> None:
    """32 threads submit at once through the group commit; every third unit fails after
    writing its job and staging an audit entry. The others are stored once each; the
    failed ones left nothing, not even their audit entries; fewer commits than units."""
    spec = JobSpec.model_validate({**GOOD, "name": "grouped"})

    def work(k: int, s: Any) -> int:
        job = repo.add_job(s, spec.model_copy(update={"name": f"g{k}"}), 1.0)
        audit.append(s, "test", audit.AuditAction.API_REQUEST, f"unit {k}",
                     audit.AuditOutcome.OK, 1.0)
        s.flush()
        if k % 3 == 0:
            raise ValueError(f"unit {k} refuses")
        return job.id

    results = _units_at_once(store, 32, work)
    failed = {k for k in range(32) if k % 3 == 0}
    assert all(isinstance(results[k], ValueError) for k in failed)
    with store.read() as s:
        names = sorted(j.name for j in repo.list_jobs(s, limit=1000))
        targets = [e.target for e in audit.entries(s) if e.target.startswith("unit ")]
    assert names == sorted(f"g{k}" for k in range(32) if k not in failed)
    assert sorted(targets) == sorted(f"unit {k}" for k in range(32) if k not in failed)
    assert {results[k] for k in range(32) if k not in failed} == {
        j for j in _seqs(store)}  # every acknowledged id is stored, once
    assert store.group_commit.groups < store.group_commit.units == 32
    with store.read() as s:
        assert audit.verify(s).ok  # the chain holds across grouped transactions


def test_jobs_numbered_at_the_groups_flush_get_their_own_event_entry_and_answer(
        store: Store) -> None:
    """The ``POST /jobs`` path: each unit adds its job without flushing
    (``numbered=False``) and answers its id after the group's one flush
    (``AfterFlush``); every third unit fails after adding its job. Each stored job has
    exactly its own submitted event and audit entry (targets filled in after the flush),
    each caller got its own job's id, and the failed ones left nothing."""
    spec = JobSpec.model_validate({**GOOD, "name": "grouped"})

    def work(k: int, s: Any) -> AfterFlush[tuple[int, str]]:
        job = repo.add_job(s, spec.model_copy(update={"name": f"n{k}"}), 1.0, "t",
                           numbered=False)
        assert job.id is None  # numbered by the group's flush, not here
        if k % 3 == 0:
            raise ValueError(f"unit {k} refuses")
        return AfterFlush(lambda: (job.id, job.name))

    results = _units_at_once(store, 24, work)
    kept = [k for k in range(24) if k % 3]
    assert all(isinstance(results[k], ValueError) for k in range(24) if k % 3 == 0)
    assert [results[k][1] for k in kept] == [f"n{k}" for k in kept]  # each its own job
    ids = {results[k][0] for k in kept}
    with store.read() as s:
        jobs = {j.id: j.name for j in repo.list_jobs(s, limit=1000)}
        events = [(e.job_id, str(e.kind)) for i in ids for e in repo.events(s, i)]
        entries = [e.target for e in audit.entries(s, limit=1000)
                   if str(e.action) == "job.submitted"]
        assert audit.verify(s).ok
    assert jobs == {results[k][0]: f"n{k}" for k in kept}
    assert sorted(events) == sorted((i, "submitted") for i in ids)
    assert sorted(entries) == sorted(audit.job_target(i) for i in ids)


# ---------------------------------------------------------------- cycle reads by index
def test_the_cycles_flag_queries_read_the_partial_indexes_not_the_table(
        store: Store) -> None:
    """The cancel and requeue flags are looked up each cycle one is set: SQLite's plan
    for each query names its partial index (migration 0008), where it walked 100,000
    rows before, and the queries still find exactly the flagged jobs."""
    if store.dialect != "sqlite":
        pytest.skip("the plan is checked on SQLite; PostgreSQL picks by table statistics")
    ids = _submit(store, 4)
    with store.transaction() as s:
        repo.request_cancel(s, ids[1], 2.0)
        repo.require_job(s, ids[2]).requeue_requested = True
    sent: list[tuple[str, Any]] = []

    def seen(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        sent.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        with store.read() as s:
            assert [j.id for j in repo.cancel_requested(s)] == [ids[1]]
            assert [j.id for j in flows.requeue_requested(s)] == [ids[2]]
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    plans = []
    with store.engine.connect() as conn:
        for statement, params in sent:
            if statement.lstrip().upper().startswith("SELECT"):
                rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params).all()
                plans.append(" ".join(str(r[-1]) for r in rows))
    assert any("ix_jobs_cancel_requested" in p for p in plans), plans
    assert any("ix_jobs_requeue_requested" in p for p in plans), plans


# ---------------------------------------------------------------- the heap
def test_the_loop_settles_the_heap_once_after_its_first_good_cycle() -> None:
    """``grace up`` freezes the long-lived heap after the first cycle that succeeded
    (``grace.control.heap``): not before it (a failed cycle built nothing), not again."""
    calls: list[str] = []

    class Rec:
        cycles = 0

        def recover(self) -> list[int]:
            return []

        def cycle(self) -> None:
            self.cycles += 1
            calls.append(f"cycle {self.cycles}")
            if self.cycles == 1:
                raise RuntimeError("the backend is down")
            if self.cycles == 4:
                loop.stopping.set()

    loop = ReconcileLoop(cast(Any, Rec()), 0.0, on_first_cycle=lambda: calls.append("settle"))
    loop.run()
    assert calls == ["cycle 1", "cycle 2", "settle", "cycle 3", "cycle 4"]
    before = gc.get_freeze_count()
    try:
        assert freeze_long_lived() >= before
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # the test process's heap stays collectable


def test_a_group_unit_asked_for_inside_a_write_transaction_is_refused_not_hung(
        store: Store) -> None:
    """The writer thread would wait for the caller's write lock (SQLite) while the
    caller waits for the writer: a clear error instead of a hang, and nothing stored."""
    spec = JobSpec.model_validate({**GOOD, "name": "nested"})
    with pytest.raises(RuntimeError, match="would wait on itself"), store.transaction() as s:
        repo.add_job(s, spec, 1.0)
        store.group_commit.run(lambda s2: repo.add_job(s2, spec, 1.0))
    with pytest.raises(RuntimeError, match="would wait on itself"):
        store.group_commit.run(lambda s2: store.group_commit.run(lambda s3: None))
    assert store.writes_open() == 0
    with store.read() as s:
        assert [j.name for j in repo.list_jobs(s, limit=10)] == []
    assert store.group_commit.run(lambda s2: repo.add_job(s2, spec, 1.0).name) == "nested"


# ---------------------------------------------------------------- the view check
def test_the_view_check_tells_a_write_between_its_builds_from_a_wrong_snapshot(
        store: Store, tmp_path: Path, monkeypatch: Any) -> None:
    """The suite's check (``GRACE_VERIFY_VIEWS``) builds a fresh snapshot after the kept
    one. A quota changed by an API request between the two builds (the fuzz test's
    PostgreSQL run, in CI) is not a fault of the kept snapshot; a kept snapshot that lost
    a waiting job is."""
    from helpers import FakeClock, lab_reconciler

    from grace.control.live.view import ViewBuilder
    from grace.core.jobs import JobId

    monkeypatch.setattr(ViewBuilder, "verify", True)
    rec = lab_reconciler(store, tmp_path / "state", FakeClock(1000.0))
    spec = JobSpec.model_validate({**GOOD, "gpus": 4})
    with store.transaction() as s:  # four whole nodes asked of the lab's three: one waits
        for _ in range(4):
            repo.add_job(s, spec, 1.0)
    rec.cycle()
    check = ViewBuilder._check

    def write_then_check(self: ViewBuilder, *args: Any) -> None:
        with store.transaction() as s:
            repo.set_quota(s, "vision", weight=7.0)
        check(self, *args)

    monkeypatch.setattr(ViewBuilder, "_check", write_then_check)
    rec.cycle()  # the kept build read weight 1, the fresh one 7: no alarm
    monkeypatch.setattr(ViewBuilder, "_check", check)
    rec.cycle()
    state = rec.views.state
    assert state is not None and len(state.pending) == 1
    [waiting] = state.pending
    state.withdraw(JobId(waiting))  # the kept snapshot goes wrong with no write
    with pytest.raises(AssertionError, match="kept snapshot differs"):
        rec.cycle()


def test_as_many_concurrent_requests_as_api_threads_reuse_their_connections(
        store: Store) -> None:
    """A pool smaller than the request threads that use it at once churns: a connection
    opened beyond its size is closed when returned, and on PostgreSQL each new one is a
    forked server process and a password exchange (1.4 ms of the machine's CPU a submission
    under 32 clients when the pool kept 10). Two rounds of 32 token checks held at once: the
    second opens no connection."""
    with store.transaction() as s:
        _, secret = tokens.create(s, name="pool", role=Role.MEMBER, tenant="a",
                                  created_by="t", now=0.0)
    opened: list[int] = []
    event.listen(store.engine, "connect", lambda *_: opened.append(1))
    clients = 32  # benchmarks/control_plane.py's most
    assert clients <= API_THREADS
    together = threading.Barrier(clients, timeout=30)
    failures: list[BaseException] = []

    def check() -> None:
        try:
            with store.lookup() as conn:
                tokens.authenticate(conn, secret, 1.0)
                together.wait()  # every thread holds its connection at once
        except BaseException as e:
            failures.append(e)

    for round_ in range(2):
        before = len(opened)
        threads = [threading.Thread(target=check) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures
        if round_ == 1:
            assert len(opened) == before, f"{len(opened) - before} connections reopened"
    assert len(opened) <= clients


def test_submissions_waiting_for_their_commit_hold_no_pool_thread(
        store: Store, tmp_path: Path) -> None:
    """``POST /jobs`` waits for its group's commit on the event loop
    (``GroupCommit.run_async``), not in one of AnyIO's pool threads. With the pool cut to
    3 threads and the writer held by a slow unit, 12 concurrent submissions all reach
    the writer's queue (a route blocking its thread there would leave 9 waiting for a
    thread), then commit in one group and are each stored once."""
    import anyio
    import httpx

    topo = Topology.from_spec(load_cluster(LAB))
    app = create_app(store, topo, tmp_path / "state")
    headers = {"Authorization": f"Bearer {make_token(store, 'admin', None, None)}"}
    from fastapi.testclient import TestClient

    # the token's first use notes it (a write, which would queue behind the slow unit too)
    assert TestClient(app, headers=headers).get("/jobs").status_code == 200
    release = threading.Event()
    gc_ = store.group_commit
    blocker = gc_.submit(lambda s: release.wait(30))
    n = 12

    async def main() -> list[httpx.Response]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 3
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://grace",
                                     headers=headers) as client:
            answers: list[httpx.Response] = []

            async def one(k: int) -> None:
                answers.append(await client.post("/jobs", json={**GOOD, "name": f"w{k}"}))

            async with anyio.create_task_group() as tg:
                for k in range(n):
                    tg.start_soon(one, k)
                with anyio.fail_after(20):  # every submission queued behind the slow unit
                    while gc_.waiting() < n:
                        await anyio.sleep(0.01)
                groups = gc_.groups
                release.set()
        assert gc_.groups == groups + 2  # the slow unit's group, then all 12 in one
        return answers

    try:
        answers = anyio.run(main)
    finally:
        release.set()
    blocker.result(10)
    assert sorted(r.status_code for r in answers) == [201] * n
    with store.read() as s:
        stored = {j.id: j.name for j in repo.list_jobs(s, limit=100)}
    assert sorted(stored.values()) == sorted(f"w{k}" for k in range(n))  # each once
    assert sorted(r.json()["id"] for r in answers) == sorted(stored)  # each acknowledged
