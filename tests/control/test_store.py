"""The store keeps the control plane's state whole: nothing half-written, nothing run twice.

Every test taking ``store`` or ``db_url`` runs on SQLite and on PostgreSQL
(see conftest.py).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, inspect, select, text
from sqlalchemy.exc import IntegrityError, StatementError

import grace
from grace.control.store import repository as repo
from grace.control.store.db import Store, default_url, make_engine, migrate
from grace.control.store.errors import IllegalJobTransition, NotFound, StaleWrite
from grace.control.store.models import (
    Attempt,
    AttemptState,
    Base,
    Job,
    JobEvent,
    JobEventKind,
    JobState,
    Node,
    Tenant,
)
from grace.core.health import IllegalTransition, NodeState
from grace.spec.job import JobSpec

TABLES = {"tenants", "jobs", "attempts", "nodes", "node_events", "job_events", "alembic_version"}
GANG = [{"node": "n1", "gpus": [0, 1, 2, 3]}, {"node": "n2", "gpus": [0, 1, 2, 3]}]


def spec(name: str = "train", tenant: str = "vision", gpus: float | None = 8, **kw: Any) -> JobSpec:
    return JobSpec.model_validate({"name": name, "tenant": tenant, "gpus": gpus,
                                   "command": ["python", "train.py"], **kw})


def submit(store: Store, now: float = 100.0, **kw: Any) -> int:
    with store.transaction() as s:
        return repo.add_job(s, spec(**kw), now).id


def kinds(store: Store, job_id: int) -> list[str]:
    with store.read() as s:
        return [e.kind.value for e in repo.events(s, job_id)]


def start(store: Store, job_id: int, now: float = 200.0, handle: str | None = "h-1") -> int:
    with store.transaction() as s:
        return repo.start_attempt(s, repo.require_job(s, job_id), GANG, "local", handle, now).number


# ---------------------------------------------------------------- schema and migrations
def test_migrating_twice_is_a_no_op(db_url: str) -> None:
    migrate(db_url)
    migrate(db_url)
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            assert set(inspect(conn).get_table_names()) >= TABLES
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == ["0008"]
    finally:
        engine.dispose()


def test_migrated_schema_matches_the_models(store: Store) -> None:
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, Base.metadata) == []
        # and the comparison would notice a difference
        other = MetaData()
        for table in Base.metadata.tables.values():
            table.to_metadata(other)
        other.tables["jobs"].append_column(Column("extra", Integer))
        assert [d[0] for d in compare_metadata(ctx, other)] == ["add_column"]


def test_reopening_keeps_everything(db_url: str) -> None:
    first = Store.open(db_url)
    job_id = submit(first)
    start(first, job_id)
    first.close()
    again = Store.open(db_url)  # a restarted control plane
    try:
        with again.read() as s:
            [attempt] = repo.running_attempts(s)
            assert (attempt.job_id, attempt.number, attempt.handle) == (job_id, 1, "h-1")
            assert attempt.job.state is JobState.RUNNING
    finally:
        again.close()


def test_default_url_is_a_sqlite_file_in_the_state_dir(tmp_path: Path) -> None:
    url = default_url(tmp_path / "state")
    assert url == f"sqlite:///{(tmp_path / 'state' / 'grace.sqlite').resolve()}"
    store = Store.open(url)
    try:
        assert (tmp_path / "state" / "grace.sqlite").exists()
        with store.engine.connect() as conn:
            pragmas = {p: conn.exec_driver_sql(f"PRAGMA {p}").scalar()
                       for p in ("journal_mode", "foreign_keys", "busy_timeout")}
        assert pragmas == {"journal_mode": "wal", "foreign_keys": 1, "busy_timeout": 30_000}
    finally:
        store.close()


def test_postgres_urls_get_the_psycopg_driver() -> None:
    for url in ("postgresql://u:p@db:5432/grace", "postgres://u:p@db/grace"):
        engine = make_engine(url)
        assert (engine.dialect.name, engine.dialect.driver) == ("postgresql", "psycopg")
        engine.dispose()


# ---------------------------------------------------------------- jobs
def test_add_get_and_list_jobs(store: Store) -> None:
    a = submit(store, 1.0, name="a", tenant="vision")
    b = submit(store, 2.0, name="b", tenant="nlp", gpus=0.25)
    c = submit(store, 3.0, name="c", tenant="vision", nodes=2, gpus_per_node=8, gpus=None)
    with store.transaction() as s:
        job = repo.get_job(s, c)
        assert job is not None
        assert (job.name, job.tenant, job.gpus, job.state, job.version) == ("c", "vision", 16.0,
                                                                            JobState.PENDING, 1)
        assert job.spec == spec(name="c", nodes=2, gpus_per_node=8, gpus=None)
        assert repo.get_job(s, 999) is None
        with pytest.raises(NotFound):
            repo.require_job(s, 999)
        assert [j.id for j in repo.list_jobs(s)] == [c, b, a]  # newest first
        assert [j.id for j in repo.list_jobs(s, tenant="vision")] == [c, a]
        assert [j.id for j in repo.list_jobs(s, state=JobState.PENDING, limit=1, offset=1)] == [b]
        assert repo.list_jobs(s, state=JobState.RUNNING) == []
        assert [j.id for j in repo.jobs_in_states(s, [JobState.PENDING])] == [a, b, c]
        assert [t.name for t in repo.tenants(s)] == ["nlp", "vision"]  # created on first job
    assert kinds(store, a) == ["submitted"]


def test_two_first_jobs_of_a_new_tenant_both_get_in(store: Store) -> None:
    done: list[int] = []

    def second_submission() -> None:  # waits on the first one's tenant row (or SQLite's lock)
        with store.transaction() as s:
            done.append(repo.add_job(s, spec(name="second", tenant="newcomer"), 2.0).id)

    with store.transaction() as s:
        repo.add_job(s, spec(name="first", tenant="newcomer"), 1.0)
        s.flush()
        thread = threading.Thread(target=second_submission)
        thread.start()
        time.sleep(0.3)
    thread.join(timeout=30)
    with store.read() as s:
        assert sorted(j.name for j in repo.list_jobs(s, tenant="newcomer")) == ["first", "second"]
        assert [t.name for t in repo.tenants(s)] == ["newcomer"]
    assert len(done) == 1


def test_a_failed_transaction_leaves_nothing_behind(store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction() as s:
        job = repo.add_job(s, spec(tenant="new-tenant"), 1.0)
        repo.upsert_node(s, "n1", 8, "H100")
        assert job.id is not None  # it was flushed: the database had it
        raise RuntimeError("the control plane dies mid-transaction")
    with store.read() as s:
        assert s.scalar(select(Job).limit(1)) is None
        assert s.scalar(select(JobEvent).limit(1)) is None
        assert s.get(Tenant, "new-tenant") is None
        assert repo.nodes(s) == []


def test_a_killed_control_plane_loses_only_its_open_transaction(db_url: str) -> None:
    child = (
        "import sys\n"
        "from grace.control.store import Store, repository as repo\n"
        "from grace.spec.job import JobSpec\n"
        "store = Store.open(sys.argv[1])\n"
        "with store.transaction() as s:\n"
        "    repo.add_job(s, JobSpec(name='committed', gpus=1), 1.0)\n"
        "with store.transaction() as s:\n"
        "    repo.add_job(s, JobSpec(name='in-flight', gpus=1), 2.0)\n"
        "    s.flush()\n"
        "    print('ready', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(grace.__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", child, db_url], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    store = Store.open(db_url)
    try:
        with store.transaction() as s:  # a writer gets the lock the dead one held
            assert [j.name for j in repo.list_jobs(s)] == ["committed"]
            assert len(repo.events(s, repo.list_jobs(s)[0].id)) == 1
    finally:
        store.close()


# ---------------------------------------------------------------- job state machine
def test_transition_table() -> None:
    assert {
        JobState.PENDING: {JobState.RUNNING, JobState.CANCELLED, JobState.FAILED},
        JobState.RUNNING: {JobState.PENDING, JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED,
                           JobState.DIVERGED},
        JobState.COMPLETED: set(), JobState.FAILED: set(), JobState.CANCELLED: set(),
        JobState.DIVERGED: set(),
    } == repo.JOB_TRANSITIONS
    for frm in JobState:
        for to in JobState:
            if to in repo.JOB_TRANSITIONS[frm]:
                repo.check_job_transition(1, frm, to)
            else:
                with pytest.raises(IllegalJobTransition, match=f"{frm} -> {to}"):
                    repo.check_job_transition(1, frm, to)


def test_an_illegal_transition_raises_and_changes_nothing(store: Store) -> None:
    job_id = submit(store)
    with store.transaction() as s:
        job = repo.require_job(s, job_id)
        repo.set_job_state(s, job, JobState.CANCELLED, 150.0, "cancelled by a user")
    before = kinds(store, job_id)
    for to in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETED, JobState.CANCELLED):
        with pytest.raises(IllegalJobTransition, match="cancelled -> "), store.transaction() as s:
            repo.set_job_state(s, repo.require_job(s, job_id), to, 160.0, "nope")
    with store.read() as s:
        job = repo.require_job(s, job_id)
        assert (job.state, job.reason, job.ended_at, job.version) == (
            JobState.CANCELLED, "cancelled by a user", 150.0, 2)
    assert kinds(store, job_id) == before == ["submitted", "cancelled"]


def test_running_is_entered_only_through_an_attempt(store: Store) -> None:
    job_id = submit(store)
    with pytest.raises(IllegalJobTransition, match="start_attempt"), store.transaction() as s:
        repo.set_job_state(s, repo.require_job(s, job_id), JobState.RUNNING, 1.0)
    with store.read() as s:
        assert repo.require_job(s, job_id).state is JobState.PENDING


def test_every_update_bumps_the_version(store: Store) -> None:
    job_id = submit(store)
    start(store, job_id, handle=None)  # attempts_count + RUNNING: one UPDATE
    versions = []
    with store.transaction() as s:
        versions.append(repo.require_job(s, job_id).version)
    with store.transaction() as s:
        job = repo.require_job(s, job_id)
        repo.end_attempt(s, job.attempts[0], AttemptState.FAILED, 300.0, 1, "application")
        repo.note_failure_and_requeue(s, job, 300.0, "application failure", {"attempt": 1})
    with store.transaction() as s:
        versions.append(repo.require_job(s, job_id).version)
        repo.set_pending_reason(s, job_id, "waiting for 8 GPUs")
    with store.transaction() as s:
        versions.append(repo.require_job(s, job_id).version)
        repo.set_pending_reason(s, job_id, "waiting for 8 GPUs")  # unchanged: no write
    with store.transaction() as s:
        versions.append(repo.require_job(s, job_id).version)
    assert versions == [2, 3, 4, 4]


def test_a_stale_expected_version_is_refused(store: Store) -> None:
    job_id = submit(store)
    with store.transaction() as s:
        job = repo.update_job_checked(s, job_id, 1, priority=5, exclude_nodes=("n3",))
        assert (job.priority, job.exclude_nodes, job.version) == (5, ["n3"], 2)
    with pytest.raises(StaleWrite, match="version 2, not 1"), store.transaction() as s:
        repo.update_job_checked(s, job_id, 1, priority=9)
    with pytest.raises(ValueError, match="cannot update"), store.transaction() as s:
        repo.update_job_checked(s, job_id, 2, state=JobState.COMPLETED)
    with store.read() as s:
        job = repo.require_job(s, job_id)
        assert (job.priority, job.state, job.version) == (5, JobState.PENDING, 2)


def test_concurrent_writers_never_lose_an_update(store: Store) -> None:
    job_id = submit(store)
    if store.dialect == "postgresql":
        # both read version 1; the second to write finds the row changed and is refused
        with pytest.raises(StaleWrite), store.transaction() as first:
            job = repo.require_job(first, job_id)
            with store.transaction() as second:
                repo.require_job(second, job_id).priority = 5
            job.priority = 7
        expected = (5, 2)
    else:
        # SQLite: BEGIN IMMEDIATE makes the second writer wait, then read the first one's result
        order: list[str] = []

        def second_writer() -> None:
            with store.transaction() as s:
                job = repo.require_job(s, job_id)  # the first statement: BEGIN IMMEDIATE waits
                order.append("second reads")
                job.priority = job.priority + 5

        with store.transaction() as first:
            repo.require_job(first, job_id).priority = 7
            thread = threading.Thread(target=second_writer)
            thread.start()
            time.sleep(0.3)
            order.append("first commits")
        thread.join(timeout=30)
        assert order == ["first commits", "second reads"]
        expected = (12, 3)
    with store.read() as s:
        job = repo.require_job(s, job_id)
        assert (job.priority, job.version) == expected


def test_readers_do_not_wait_for_writers_nor_see_their_uncommitted_rows(store: Store) -> None:
    job_id = submit(store)
    with store.transaction() as w:
        repo.require_job(w, job_id).priority = 3
        repo.add_job(w, spec(name="uncommitted"), 5.0)
        w.flush()
        with store.read() as r:
            assert [(j.name, j.priority) for j in repo.list_jobs(r)] == [("train", 0)]


def test_read_sessions_refuse_to_write(store: Store) -> None:
    job_id = submit(store)
    with pytest.raises(RuntimeError, match="read-only"), store.read() as s:
        repo.require_job(s, job_id).priority = 9
        s.flush()
    with store.read() as s:
        assert repo.require_job(s, job_id).priority == 0


def test_request_cancel(store: Store) -> None:
    pending, done = submit(store, name="p"), submit(store, name="d")
    with store.transaction() as s:
        repo.set_job_state(s, repo.require_job(s, done), JobState.CANCELLED, 2.0)
    with store.transaction() as s:
        repo.request_cancel(s, pending, 3.0)
        repo.request_cancel(s, pending, 4.0)  # twice is harmless
        with pytest.raises(IllegalJobTransition, match="already ended"):
            repo.request_cancel(s, done, 3.0)
        with pytest.raises(NotFound):
            repo.request_cancel(s, 999, 3.0)
        assert [j.id for j in repo.cancel_requested(s)] == [pending]
    with pytest.raises(IllegalJobTransition, match="cancel requested"), store.transaction() as s:
        repo.start_attempt(s, repo.require_job(s, pending), GANG, "local", None, 5.0)


# ---------------------------------------------------------------- attempts
def test_attempt_lifecycle_and_job_history(store: Store) -> None:
    job_id = submit(store, 100.0)
    with store.transaction() as s:
        job = repo.require_job(s, job_id)
        a1 = repo.start_attempt(s, job, GANG, "local", None, 200.0)
        assert (a1.number, a1.state, job.state, job.started_at, job.attempts_count) == (
            1, AttemptState.STARTING, JobState.RUNNING, 200.0, 1)
    with store.transaction() as s:
        [a1] = repo.running_attempts(s)
        repo.set_attempt_running(s, a1, "pid:4242", 201.0)
    with store.transaction() as s:
        job = repo.require_job(s, job_id)
        attempt = repo.live_attempt(s, job)
        assert attempt is not None and (attempt.state, attempt.handle) == (AttemptState.RUNNING,
                                                                           "pid:4242")
        repo.end_attempt(s, attempt, AttemptState.FAILED, 500.0, 137, "node", "n2", "Xid 79")
        repo.note_failure_and_requeue(s, job, 500.0, "node failure; resuming", {"attempt": 1},
                                      exclude_node="n2", stalled_restarts=0)
        assert (job.state, job.restarts, [e["node"] for e in job.exclude_nodes]) == (
            JobState.PENDING, 1, ["n2"])
    with store.transaction() as s:
        job = repo.require_job(s, job_id)
        a2 = repo.start_attempt(s, job, GANG[:1], "local", "pid:5555", 600.0,
                                resumed_from="/ckpt/step-100")
        assert (a2.number, a2.state, a2.resumed_from) == (2, AttemptState.RUNNING, "/ckpt/step-100")
    with store.transaction() as s:
        job = repo.require_job(s, job_id)
        repo.end_attempt(s, job.attempts[1], AttemptState.SUCCEEDED, 900.0, 0)
        repo.set_job_state(s, job, JobState.COMPLETED, 900.0, "completed", detail={"attempt": 2})
    with store.read() as s:
        job = repo.require_job(s, job_id)
        assert (job.state, job.started_at, job.ended_at, job.attempts_count) == (
            JobState.COMPLETED, 200.0, 900.0, 2)
        assert [(a.number, a.state, a.exit_code, a.failed_node) for a in job.attempts] == [
            (1, AttemptState.FAILED, 137, "n2"), (2, AttemptState.SUCCEEDED, 0, None)]
        history = repo.events(s, job_id)
        assert [e.at for e in history] == sorted(e.at for e in history)
        assert history[1].detail["nodes"] == GANG
        assert repo.running_attempts(s) == []
    assert kinds(store, job_id) == ["submitted", "placed", "started", "failed", "restarted",
                                    "placed", "started", "completed"]


def test_a_job_never_has_two_live_attempts(store: Store) -> None:
    job_id = submit(store)
    start(store, job_id)
    with store.transaction() as s:  # preempted: the decision is committed before the stop
        repo.set_job_state(s, repo.require_job(s, job_id), JobState.PENDING, 300.0, "preempted",
                           JobEventKind.PREEMPTED)
    with store.read() as s:
        assert [(a.job_id, a.number) for a in repo.orphaned_attempts(s)] == [(job_id, 1)]
    with pytest.raises(IllegalJobTransition, match="still running"), store.transaction() as s:
        repo.start_attempt(s, repo.require_job(s, job_id), GANG, "local", None, 301.0)
    # the database refuses it too, whoever writes
    with pytest.raises(IntegrityError), store.transaction() as s:
        s.add(Attempt(job_id=job_id, number=2, state=AttemptState.STARTING, placement_json=GANG,
                      gpus=8.0, backend="local", started_at=301.0))
    with store.transaction() as s:
        job = repo.require_job(s, job_id)
        repo.end_attempt(s, job.attempts[0], AttemptState.CANCELLED, 302.0)
        assert repo.orphaned_attempts(s) == []
        assert repo.start_attempt(s, job, GANG, "local", None, 303.0).number == 2


def test_attempt_numbers_are_unique_per_job(store: Store) -> None:
    job_id = submit(store)
    start(store, job_id)
    with store.transaction() as s:
        job = repo.require_job(s, job_id)
        repo.end_attempt(s, job.attempts[0], AttemptState.LOST, 300.0)
        repo.set_job_state(s, job, JobState.PENDING, 300.0, "processes gone")
    with pytest.raises(IntegrityError), store.transaction() as s:
        s.add(Attempt(job_id=job_id, number=1, state=AttemptState.FAILED, placement_json=[],
                      gpus=8.0, backend="local", started_at=301.0))
    with pytest.raises(IntegrityError), store.transaction() as s:  # foreign keys are enforced
        s.add(Attempt(job_id=999, number=1, state=AttemptState.FAILED, placement_json=[],
                      gpus=8.0, backend="local", started_at=301.0))
    assert kinds(store, job_id) == ["submitted", "placed", "started", "requeued"]


def test_ending_an_attempt_twice_or_into_a_live_state_is_refused(store: Store) -> None:
    job_id = submit(store)
    start(store, job_id)
    with store.transaction() as s:
        attempt = repo.require_job(s, job_id).attempts[0]
        with pytest.raises(ValueError, match="not an end state"):
            repo.end_attempt(s, attempt, AttemptState.RUNNING, 300.0)
        repo.end_attempt(s, attempt, AttemptState.FAILED, 300.0, 1, "application",
                         event_kind=JobEventKind.FAILED)
        with pytest.raises(IllegalJobTransition, match="already ended"):
            repo.end_attempt(s, attempt, AttemptState.SUCCEEDED, 301.0)
        with pytest.raises(IllegalJobTransition, match="not starting"):
            repo.set_attempt_running(s, attempt, "late-handle")
    with pytest.raises(IllegalJobTransition), store.transaction() as s:  # the job is not running
        repo.set_job_state(s, repo.require_job(s, job_id), JobState.PENDING, 302.0)
        repo.note_failure_and_requeue(s, repo.require_job(s, job_id), 302.0, "again?")
    with store.read() as s:
        [*_, failed] = repo.events(s, job_id)
        assert (failed.kind, failed.detail["exit_code"], failed.detail["failure_kind"]) == (
            JobEventKind.FAILED, 1, "application")


def test_unknown_enum_values_never_reach_the_database(store: Store) -> None:
    job_id = submit(store)
    with pytest.raises(StatementError), store.transaction() as s:
        repo.require_job(s, job_id).state = "exploded"  # type: ignore[assignment]
    with pytest.raises(IntegrityError), store.transaction() as s:  # the CHECK, for raw SQL
        s.execute(text("UPDATE jobs SET state = 'exploded'"))


# ---------------------------------------------------------------- nodes
def test_node_state_history(store: Store) -> None:
    with store.transaction() as s:
        repo.upsert_node(s, "n1", 8, "H100")
        repo.upsert_node(s, "n2", 8, "H100")
    moves = [(NodeState.DRAINING, "xid:79: reboot", "grace"), (NodeState.DRAINED, "no jobs", "grace"),
             (NodeState.DIAGNOSING, "level 2", "grace"), (NodeState.RETURNED, "passed level 3", "grace"),
             ("degraded", "thermal throttle", "grace")]
    for i, (to, why, who) in enumerate(moves):
        with store.transaction() as s:
            repo.set_node_state(s, "n1", to, why, who, 10.0 + i)
    with pytest.raises(IllegalTransition, match="healthy -> drained"), store.transaction() as s:
        repo.set_node_state(s, "n2", NodeState.DRAINED, "skipping draining", "alice", 20.0)
    with pytest.raises(NotFound), store.transaction() as s:
        repo.set_node_state(s, "n9", NodeState.DRAINING, "who?", "alice", 20.0)
    with store.transaction() as s:
        repo.set_node_state(s, "n2", NodeState.HEALTHY, "alice took it over", "alice", 21.0)  # a note
        repo.upsert_node(s, "n1", 4, "H200")  # inventory changes; health state stays
    with store.read() as s:
        assert [(n.name, n.state, n.gpus, n.gpu_model) for n in repo.nodes(s)] == [
            ("n1", NodeState.DEGRADED, 4, "H200"), ("n2", NodeState.HEALTHY, 8, "H100")]
        history = repo.node_events(s, "n1")
        assert [(e.from_state, e.to_state, e.at) for e in history] == [
            (NodeState.HEALTHY, NodeState.DRAINING, 10.0), (NodeState.DRAINING, NodeState.DRAINED, 11.0),
            (NodeState.DRAINED, NodeState.DIAGNOSING, 12.0),
            (NodeState.DIAGNOSING, NodeState.RETURNED, 13.0),
            (NodeState.RETURNED, NodeState.DEGRADED, 14.0)]
        assert [(e.reason, e.actor) for e in repo.node_events(s, "n2")] == [("alice took it over",
                                                                             "alice")]
        n1 = s.get(Node, "n1")
        assert n1 is not None and (n1.reason, n1.actor, n1.updated_at) == ("thermal throttle",
                                                                           "grace", 14.0)


# ---------------------------------------------------------------- tenants
def test_quotas_and_gpu_hours(store: Store) -> None:
    with store.transaction() as s:
        repo.set_quota(s, "vision", guaranteed_gpus=16, borrow_limit_gpus=8, weight=2.0,
                       preemptions_per_hour=5)
        repo.set_quota(s, "nlp", guaranteed_gpus=None, borrow_limit_gpus=math.inf)
        with pytest.raises(ValueError, match="weight"):
            repo.set_quota(s, "bad", weight=0)
    with store.read() as s:
        q = repo.quotas(s)
        assert (q["vision"].guaranteed_gpus, q["vision"].max_gpus, q["vision"].weight,
                q["vision"].preemptions_per_hour) == (16, 24, 2.0, 5)
        assert math.isinf(q["nlp"].guaranteed_gpus) and math.isinf(q["nlp"].borrow_limit_gpus)
        assert repo.gpu_hours_by_tenant(s, 0.0) == {}
    ended, live = submit(store, tenant="vision", gpus=8), submit(store, tenant="nlp", gpus=0.5)
    start(store, ended, now=0.0)
    start(store, live, now=3600.0)
    with store.transaction() as s:
        job = repo.require_job(s, ended)
        repo.end_attempt(s, job.attempts[0], AttemptState.SUCCEEDED, 1800.0, 0)
        repo.set_job_state(s, job, JobState.COMPLETED, 1800.0)
    with store.read() as s:
        hours = repo.gpu_hours_by_tenant(s, 3 * 3600.0)
    assert hours == pytest.approx({"vision": 4.0, "nlp": 1.0})
