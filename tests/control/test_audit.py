"""The audit trail: a hash chain that holds when untouched and names the entry that was not.

Every test that needs a store runs on SQLite and on PostgreSQL (the ``store``
fixture). Tampering is done the way an intruder with database access would do
it: plain UPDATE/DELETE/INSERT statements on the tables, bypassing Grace.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import LAB, FakeClock, ScriptedBackend, add_job, job_spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from grace.backends.base import AttemptStatus
from grace.cli.main import app as cli
from grace.control.node_health import HealthConfig, load_monitor, save_monitor
from grace.control.reconciler import Reconciler
from grace.control.store import audit
from grace.control.store import repository as repo
from grace.control.store.audit import Anchor, AuditAction, AuditOutcome, BreakKind
from grace.control.store.db import Store
from grace.control.store.models import AuditEntry, AuditHead, JobEventKind, Tenant
from grace.core.health import Signal, SignalKind
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.spec.loader import load_cluster

ENTRIES = AuditEntry.__table__
HEAD = AuditHead.__table__
COLUMNS = ("at", "actor", "token_id", "action", "target", "outcome", "detail", "prev_hash",
           "hash")


def fill(store: Store, n: int = 6, start: float = 1_700_000_000.0) -> None:
    """``n`` entries: one per transaction, the last two in one transaction together."""
    for i in range(n - 2):
        with store.transaction() as s:
            audit.append(s, "alice" if i % 2 else audit.CONTROL_PLANE, AuditAction.JOB_STARTED,
                         audit.job_target(i + 1), AuditOutcome.OK, start + i,
                         token_id="3f9c0a12b4e6" if i % 2 else None,
                         detail={"attempt": 1, "nodes": [{"node": "a100-00", "gpus": [0, 1]}],
                                 "ratio": 0.1 * i})
    with store.transaction() as s:
        for i in range(n - 2, n):
            audit.append(s, "ops", AuditAction.QUOTA_SET, audit.tenant_target("vision"),
                         AuditOutcome.OK, start + i, detail={"now": {"weight": 2.0 + i}})


def verify(store: Store, anchor: Anchor | None = None) -> audit.VerifyResult:
    with store.read() as s:
        return audit.verify(s, anchor)


def tamper(store: Store, stmt: Any) -> None:
    with store.engine.begin() as conn:
        conn.execute(stmt)


def row(store: Store, seq: int) -> dict[str, Any]:
    with store.read() as s:
        return dict(s.execute(select(ENTRIES).where(ENTRIES.c.seq == seq)).mappings().one())


def assert_breaks(store: Store, seq: int, kind: BreakKind) -> audit.VerifyResult:
    res = verify(store)
    assert not res.ok and res.first_break is not None, res
    assert (res.first_break.seq, res.first_break.kind) == (seq, kind), res.describe()
    assert f"entry {seq}" in res.describe()
    return res


# ---------------------------------------------------------------- the chain as written
def test_appends_chain_in_commit_order_and_verify(store: Store) -> None:
    assert verify(store).ok and verify(store).checked == 0
    fill(store, 6)
    with store.read() as s:
        rows = list(s.scalars(select(AuditEntry).order_by(AuditEntry.seq)))
        head = audit.head(s)
    assert [r.seq for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[0].prev_hash == audit.GENESIS_HASH
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(rows))
    assert head == (6, rows[-1].hash)
    res = verify(store)
    assert res.ok and res.checked == 6 and res.describe().startswith("the audit chain holds: 6")
    # the stored row hashes to its hash: the detail came back from the database as it was hashed
    r = rows[1]
    assert r.detail == {"attempt": 1, "nodes": [{"node": "a100-00", "gpus": [0, 1]}], "ratio": 0.1}
    assert audit.entry_hash(r.seq, r.at, r.actor, r.token_id, r.action, r.target, r.outcome,
                            r.detail, r.prev_hash) == r.hash


def test_an_entry_rolls_back_with_its_transaction_and_a_read_cannot_append(store: Store) -> None:
    fill(store, 3)
    with pytest.raises(RuntimeError, match="boom"), store.transaction() as s:
        audit.append(s, "alice", AuditAction.QUOTA_SET, "tenant:x", AuditOutcome.OK, 1.0)
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="need a write"), store.read() as s:
        audit.append(s, "alice", AuditAction.QUOTA_SET, "tenant:x", AuditOutcome.OK, 1.0)
    res = verify(store)
    assert res.ok and res.checked == 3 and res.head_seq == 3


def test_closed_sets_and_what_cannot_be_hashed_are_refused_or_made_plain(store: Store) -> None:
    with store.transaction() as s:
        with pytest.raises(ValueError):
            audit.append(s, "a", "job.teleported", "job:1", AuditOutcome.OK, 1.0)
        with pytest.raises(ValueError):
            audit.append(s, "a", AuditAction.QUOTA_SET, "tenant:x", "meh", 1.0)
        e = audit.append(s, "a" * 500, AuditAction.QUOTA_SET, "t" * 900, AuditOutcome.OK, 2,
                         detail={"limit": float("inf"), "pair": (1, 2), 3: Path("/x")})
    assert len(e.actor) == 200 and len(e.target) == 400  # the columns' lengths
    assert row(store, 1)["detail"] == {"limit": "inf", "pair": [1, 2], "3": "/x"}
    assert verify(store).ok
    assert {audit.job_action(k) for k in JobEventKind} <= set(AuditAction)
    assert [audit.outcome_of_status(c) for c in (200, 204, 404, 409, 422, 401, 403, 500, 503)] == [
        "ok", "ok", "refused", "refused", "refused", "denied", "denied", "error", "error"]


def test_entries_filter_page_and_json(store: Store) -> None:
    fill(store, 6)
    with store.read() as s:
        assert [e.seq for e in audit.entries(s)] == [1, 2, 3, 4, 5, 6]
        assert [e.seq for e in audit.entries(s, limit=2)] == [5, 6]  # the newest, oldest first
        assert [e.seq for e in audit.entries(s, limit=2, offset=2)] == [3, 4]
        assert [e.seq for e in audit.entries(s, actor="alice")] == [2, 4]
        assert [e.seq for e in audit.entries(s, since=1_700_000_003.0)] == [4, 5, 6]
        assert [e.seq for e in audit.entries(s, action="quota.set")] == [5, 6]
        assert [e.seq for e in audit.entries(s, target="job:3")] == [3]
        page = audit.entries_json(s, actor="alice")
        with pytest.raises(ValueError, match=r"job\.started"):
            audit.entries_json(s, action="job.teleported")
        out = audit.verify_json(s)
        head = audit.head_json(s)
    assert json.loads(json.dumps(page)) == page
    assert set(page[0]) == {"seq", "at", "actor", "token_id", "action", "target", "outcome",
                            "detail", "prev_hash", "hash"}
    assert page[0]["token_id"] == "3f9c0a12b4e6"
    assert out["ok"] and out["checked"] == 6 and out["break"] is None
    assert head["anchor"] == f"6:{head['hash']}" and out["head"] == {"seq": 6, "hash": head["hash"]}


# ---------------------------------------------------------------- tampering, named
def test_editing_any_column_of_the_first_a_middle_or_the_last_row_names_it(store: Store) -> None:
    fill(store, 6)
    for seq in (1, 3, 6):
        for column in COLUMNS:
            old = row(store, seq)[column]
            new: Any = {"at": old + 1e-6 if isinstance(old, float) else 1.0,
                        "detail": {**old, "edited": True} if isinstance(old, dict) else {},
                        "token_id": "000000000000" if old is None else None,
                        "prev_hash": "f" * 64, "hash": "e" * 64}.get(column, f"{old}x")
            where = update(ENTRIES).where(ENTRIES.c.seq == seq)
            tamper(store, where.values({column: new}))
            res = assert_breaks(store, seq, BreakKind.EDITED)
            assert res.checked == seq - 1  # every entry before it was checked and held
            tamper(store, where.values({column: old}))
            assert verify(store).ok, (seq, column)  # put back: it holds again


def test_a_changed_seq_is_named_as_missing(store: Store) -> None:
    fill(store, 6)
    tamper(store, update(ENTRIES).where(ENTRIES.c.seq == 3).values(seq=0))
    assert_breaks(store, 3, BreakKind.MISSING)


@pytest.mark.parametrize("seq", [1, 4])
def test_deleting_a_row_names_the_missing_entry(store: Store, seq: int) -> None:
    fill(store, 6)
    tamper(store, delete(ENTRIES).where(ENTRIES.c.seq == seq))
    res = assert_breaks(store, seq, BreakKind.MISSING)
    assert f"entry {seq} missing" in res.first_break.message  # type: ignore[union-attr]


def test_deleting_the_last_rows_leaves_the_head_ahead(store: Store) -> None:
    fill(store, 6)
    tamper(store, delete(ENTRIES).where(ENTRIES.c.seq >= 5))
    res = assert_breaks(store, 5, BreakKind.HEAD_AHEAD)
    assert "entries 5 to 6 missing" in res.describe()


def test_deleting_the_last_row_and_the_head_with_it_is_caught_by_an_anchor(store: Store) -> None:
    fill(store, 6)
    with store.read() as s:
        anchor = Anchor.parse(audit.head_json(s)["anchor"])
    prev = row(store, 6)["prev_hash"]
    tamper(store, delete(ENTRIES).where(ENTRIES.c.seq == 6))
    tamper(store, update(HEAD).values(seq=5, hash=prev))
    assert verify(store).ok  # the chain alone cannot see it (store.audit says so)
    res = verify(store, anchor)
    assert not res.ok and res.first_break is not None
    assert (res.first_break.seq, res.first_break.kind) == (6, BreakKind.ANCHOR)
    assert "ends at 5" in res.first_break.message


def test_an_anchor_catches_a_chain_rewritten_before_it(store: Store) -> None:
    """An intruder who edits entry 2 and recomputes every hash after it (and the head) leaves
    a chain that holds on its own; the anchor kept elsewhere does not match any more."""
    fill(store, 6)
    anchor = Anchor(4, row(store, 4)["hash"])
    rows = [row(store, i) for i in range(1, 7)]
    rows[1]["actor"] = "mallory"
    prev = rows[0]["hash"]
    for r in rows[1:]:
        r["prev_hash"] = prev
        r["hash"] = prev = audit.entry_hash(r["seq"], r["at"], r["actor"], r["token_id"],
                                            r["action"], r["target"], r["outcome"], r["detail"],
                                            r["prev_hash"])
        tamper(store, update(ENTRIES).where(ENTRIES.c.seq == r["seq"]).values(r))
    tamper(store, update(HEAD).values(hash=prev))
    assert verify(store).ok
    res = verify(store, anchor)
    assert res.first_break is not None
    assert (res.first_break.seq, res.first_break.kind) == (4, BreakKind.ANCHOR)
    assert verify(store, Anchor(1, rows[0]["hash"])).ok  # before the rewrite it still holds


def test_swapping_two_rows_names_the_first(store: Store) -> None:
    fill(store, 6)
    a, b = row(store, 2), row(store, 5)
    tamper(store, update(ENTRIES).where(ENTRIES.c.seq == 2).values({**b, "seq": 2}))
    tamper(store, update(ENTRIES).where(ENTRIES.c.seq == 5).values({**a, "seq": 5}))
    assert_breaks(store, 2, BreakKind.EDITED)


def test_a_row_rewritten_with_a_fresh_hash_breaks_the_next_link(store: Store) -> None:
    fill(store, 6)
    r = row(store, 3)
    r["outcome"] = "denied"
    r["hash"] = audit.entry_hash(r["seq"], r["at"], r["actor"], r["token_id"], r["action"],
                                 r["target"], "denied", r["detail"], r["prev_hash"])
    tamper(store, update(ENTRIES).where(ENTRIES.c.seq == 3).values(r))
    assert_breaks(store, 4, BreakKind.RELINKED)
    # the same on the last entry: the head no longer matches it
    r = row(store, 6)
    r["hash"] = audit.entry_hash(r["seq"], r["at"] + 1, r["actor"], r["token_id"], r["action"],
                                 r["target"], r["outcome"], r["detail"], r["prev_hash"])
    tamper(store, update(ENTRIES).where(ENTRIES.c.seq == 6).values(at=r["at"] + 1, hash=r["hash"]))
    tamper(store, update(ENTRIES).where(ENTRIES.c.seq == 3).values(outcome="ok",
                                                                   hash=row(store, 4)["prev_hash"]))
    assert_breaks(store, 6, BreakKind.HEAD_MISMATCH)


def test_rows_put_in_outside_the_trail_are_named(store: Store) -> None:
    fill(store, 4)
    forged = {**row(store, 4), "seq": 5, "prev_hash": row(store, 4)["hash"], "actor": "mallory"}
    forged["hash"] = audit.entry_hash(5, forged["at"], "mallory", None, forged["action"],
                                      forged["target"], forged["outcome"], forged["detail"],
                                      forged["prev_hash"])
    forged["token_id"] = None
    tamper(store, insert(ENTRIES).values(forged))
    assert_breaks(store, 5, BreakKind.HEAD_BEHIND)
    tamper(store, delete(ENTRIES).where(ENTRIES.c.seq == 5))
    tamper(store, insert(ENTRIES).values({**forged, "seq": -1}))
    assert_breaks(store, -1, BreakKind.STRAY)
    tamper(store, delete(ENTRIES).where(ENTRIES.c.seq == -1))
    tamper(store, delete(HEAD))
    assert_breaks(store, 5, BreakKind.NO_HEAD)


def test_anchor_text_is_checked() -> None:
    digest = "ab" * 32
    assert Anchor.parse(f" 12:{digest.upper()} ") == Anchor(12, digest)
    assert str(Anchor(12, digest)) == f"12:{digest}"
    for bad in ("12", f"0:{digest}", f"x:{digest}", "12:abc", f"12:{'g' * 64}"):
        with pytest.raises(ValueError, match="seq:hash"):
            Anchor.parse(bad)


def test_any_single_edit_is_detected_and_named(tmp_path: Path) -> None:
    """Property: whatever one column of one row becomes, verify names that row."""
    store = Store.open(f"sqlite:///{tmp_path / 'grace.sqlite'}")
    fill(store, 8)
    originals = {i: row(store, i) for i in range(1, 9)}
    text = st.text(max_size=40)
    values: dict[str, st.SearchStrategy[Any]] = {
        "seq": st.integers(-10**6, 0) | st.integers(9, 10**9),
        "at": st.floats(allow_nan=False, allow_infinity=False),
        "actor": text, "action": text, "target": text, "outcome": text,
        "token_id": st.none() | st.text(max_size=32),
        "detail": st.dictionaries(st.text(max_size=6),
                                  st.none() | st.booleans() | st.integers() | st.text(max_size=6)
                                  | st.floats(allow_nan=False, allow_infinity=False), max_size=4),
        "prev_hash": st.text("0123456789abcdef", min_size=64, max_size=64),
        "hash": st.text("0123456789abcdef", min_size=64, max_size=64),
    }

    def same(column: str, a: Any, b: Any) -> bool:
        if column == "at":
            return repr(float(a)) == repr(float(b))
        if column == "detail":
            return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
        return bool(a == b)

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(seq=st.integers(1, 8), column=st.sampled_from(["seq", *COLUMNS]), data=st.data())
    def edited(seq: int, column: str, data: st.DataObject) -> None:
        old = originals[seq][column]
        new = data.draw(values[column].filter(lambda v: not same(column, v, old)))
        with store.engine.connect() as conn:
            conn.execute(update(ENTRIES).where(ENTRIES.c.seq == seq).values({column: new}))
            res = audit.verify(Session(bind=conn))
            conn.rollback()
        assert res.first_break is not None, (column, new)
        # a seq moved away leaves a gap (or, for the last entry, a head pointing past the end)
        kinds = {BreakKind.MISSING, BreakKind.HEAD_AHEAD} if column == "seq" else {BreakKind.EDITED}
        assert res.first_break.seq == seq and res.first_break.kind in kinds, res.describe()

    try:
        edited()
        assert verify(store).ok  # every edit was rolled back
    finally:
        store.close()


# ---------------------------------------------------------------- concurrent appenders
def _interleaved(store: Store) -> int:
    """How often the actor changes along the chain (1: one writer ran after the other)."""
    with store.read() as s:
        actors = [e.actor for e in s.scalars(select(AuditEntry).order_by(AuditEntry.seq))]
    return sum(a != b for a, b in itertools.pairwise(actors))


def test_two_threads_appending_at_once_keep_the_chain(store: Store) -> None:
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            start.wait()
            for i in range(40):
                with store.transaction() as s:
                    repo.ensure_tenant(s, f"{name}-{i % 3}")  # other writes in the same one
                    audit.append(s, name, AuditAction.QUOTA_SET, audit.tenant_target(name),
                                 AuditOutcome.OK, time.time(), detail={"i": i})
                time.sleep(0.005)  # a writer that never pauses would keep SQLite's lock
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    res = verify(store)
    assert res.ok and res.checked == 80, res.describe()
    assert _interleaved(store) > 1


def test_the_head_is_locked_last_so_crossed_writers_do_not_deadlock(store: Store) -> None:
    """A audits a change of row a, then needs row c; B changed row c (nothing audited yet),
    then audits. Were the head taken where ``append`` is called, A would hold it while
    waiting for c, and B would wait for it while holding c: a deadlock (PostgreSQL aborts
    one). Taken at the end, B commits first, then A."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite serializes whole write transactions: no two writers interleave")
    with store.transaction() as s:
        for name in ("a", "c"):
            repo.ensure_tenant(s, name)
    b_holds_c, a_waits = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def a() -> None:
        try:
            b_holds_c.wait(10)
            with store.transaction() as s:
                repo.set_quota(s, "a", weight=2.0, actor="A", now=1.0)
                s.flush()
                a_waits.set()
                repo.set_quota(s, "c", weight=3.0, actor="A", now=1.0)
                s.flush()  # waits for B's row c
        except BaseException as e:
            errors.append(e)

    def b() -> None:
        try:
            with store.transaction() as s:
                s.get(Tenant, "c").preemptions_per_hour = 5  # type: ignore[union-attr]
                s.flush()  # B holds row c
                b_holds_c.set()
                a_waits.wait(10)
                time.sleep(0.5)  # A is now blocked on row c
                audit.append(s, "B", AuditAction.QUOTA_SET, "tenant:c", AuditOutcome.OK, 1.0)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=f) for f in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    with store.read() as s:
        order = [(e.actor, e.target) for e in audit.entries(s)]
    assert order == [("B", "tenant:c"), ("A", "tenant:a"), ("A", "tenant:c")]
    assert verify(store).ok


_APPENDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from grace.control.store import audit
    from grace.control.store.db import Store
    url, name, ready = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    store = Store.open(url)
    (ready / name).touch()
    deadline = time.time() + 60
    while len(list(ready.iterdir())) < 2 and time.time() < deadline:  # both ready: go
        time.sleep(0.005)
    for i in range(40):
        with store.transaction() as s:
            audit.append(s, name, "quota.set", "tenant:" + name, "ok", time.time(), None, {"i": i})
        time.sleep(0.01)  # as the API and the reconciler do: no writer holds the lock for good
    store.close()
""")


@pytest.mark.slow  # two interpreters starting: ~5 s
def test_two_processes_appending_to_one_sqlite_file_keep_the_chain(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'grace.sqlite'}"
    Store.open(url).close()
    ready = tmp_path / "ready"  # each says it is ready; neither appends before both are
    ready.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, url, name, str(ready)])
             for name in ("p1", "p2")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = Store.open(url)
    try:
        res = verify(store)
        assert res.ok and res.checked == 80, res.describe()
        assert _interleaved(store) > 1
    finally:
        store.close()


# ---------------------------------------------------------------- the control plane's own
def test_the_reconciler_audits_starts_preemptions_ends_and_drains_as_grace(store: Store,
                                                                           tmp_path: Path) -> None:
    clock = FakeClock()
    spec = load_cluster(LAB)
    backend = ScriptedBackend(spec)
    rec = Reconciler(store, backend, Topology.from_spec(spec), get_policy("grace"),
                     tmp_path / "state", clock=clock)

    def cycle() -> None:
        clock.advance(1.0)
        rec.cycle()

    victims = [add_job(store, clock(), f"sweep-{i}", gpus=4, gpu_model="A100-80GB",
                       preemptible=True, tenant="research") for i in range(2)]
    cycle()
    urgent = add_job(store, clock(), "urgent", gpus=4, gpu_model="A100-80GB", priority=10,
                     tenant="prod")
    cycle()
    cycle()
    backend.finish(urgent)
    cycle()
    with store.read() as s:
        running = [a for a in repo.running_attempts(s) if a.job_id in victims]
    node = running[0].placement_json[0]["node"]
    rec.signal(Signal(node, SignalKind.XID, clock(), 79, "fell off the bus"))
    cycle()
    cycle()
    with store.read() as s:
        entries = audit.entries(s, limit=1000)
    seen = {(e.action, e.target) for e in entries}
    for jid in (*victims, urgent):
        assert ("job.submitted", f"job:{jid}") in seen
        assert ("job.started", f"job:{jid}") in seen
    assert ("job.completed", f"job:{urgent}") in seen
    assert sum(e.action == "job.preempted" for e in entries) == 1
    drains = [e for e in entries if e.action == "node.state" and e.target == f"node:{node}"]
    assert drains and drains[0].detail["to"] == "draining" and "79" in drains[0].detail["reason"]
    assert any(e.action == "node.signal" and e.target == f"node:{node}" for e in entries)
    assert {e.actor for e in entries} == {"grace"} and {e.token_id for e in entries} == {None}
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    # each job event has its entry: same count, same time, same order
    with store.read() as s:
        job_entries = [(e.target, e.action, e.at) for e in entries if e.action.startswith("job.")]
        events = [(f"job:{ev.job_id}", f"job.{ev.kind.value}", ev.at)
                  for jid in sorted({*victims, urgent}) for ev in repo.events(s, jid)]
    assert sorted(job_entries) == sorted(events)
    assert verify(store).ok


def test_operator_actions_carry_their_actor_and_token(store: Store) -> None:
    with store.transaction() as s:
        repo.upsert_node(s, "a100-00", 4, "A100-80GB")
        repo.set_quota(s, "vision", guaranteed_gpus=8, weight=2.0, actor="ops",
                       token_id="0123456789ab", now=5.0)
        jid = repo.add_job(s, job_spec("j"), 6.0, "alice", "aaaaaaaaaaaa").id
        repo.request_cancel(s, jid, 7.0, "alice", "aaaaaaaaaaaa")
        repo.request_cancel(s, jid, 7.5, "alice", "aaaaaaaaaaaa")  # asked twice: one entry
        monitor = load_monitor(s, HealthConfig(), 8.0)
        was_open = monitor.breaker_open
        monitor.drain("a100-00", "fan alarm", "ops", 8.0)
        save_monitor(s, monitor, was_open, 8.0, token_id="0123456789ab")
    with store.read() as s:
        got = [(e.actor, e.token_id, e.action, e.target) for e in audit.entries(s)]
        quota = audit.entries(s, action="quota.set")[0].detail
        event = repo.events(s, jid)[0]
    assert got == [
        ("ops", "0123456789ab", "quota.set", "tenant:vision"),
        ("alice", "aaaaaaaaaaaa", "job.submitted", f"job:{jid}"),
        ("alice", "aaaaaaaaaaaa", "job.cancel-requested", f"job:{jid}"),
        ("ops", "0123456789ab", "node.state", "node:a100-00"),
    ]
    assert quota["was"]["weight"] == 1.0 and quota["now"] == {
        "guaranteed_gpus": 8.0, "borrow_limit_gpus": None, "weight": 2.0,
        "preemptions_per_hour": 20}
    assert event.actor == "alice"
    assert verify(store).ok


def test_a_cycle_with_nothing_to_do_writes_no_entry(store: Store, tmp_path: Path) -> None:
    clock = FakeClock()
    spec = load_cluster(LAB)
    backend = ScriptedBackend(spec)
    rec = Reconciler(store, backend, Topology.from_spec(spec), get_policy("grace"),
                     tmp_path / "state", clock=clock)
    jid = add_job(store, clock(), "j", gpus=1)
    rec.cycle()
    with store.read() as s:
        before = audit.head(s)
    for _ in range(3):
        clock.advance(1.0)
        rec.cycle()
    with store.read() as s:
        assert audit.head(s) == before
    backend.finish(jid, AttemptStatus.SUCCEEDED)
    rec.cycle()
    with store.read() as s:
        assert audit.entries(s, limit=1)[0].action == "job.completed"


# ---------------------------------------------------------------- grace audit (--db)
def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli, ["audit", *args], env={"COLUMNS": "80", "NO_COLOR": "1"})


def test_cli_verify_exits_0_then_1_naming_the_entry(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'grace.sqlite'}"
    store = Store.open(url)
    fill(store, 5)
    ok = _cli("--verify", "--db", url)
    assert ok.exit_code == 0, ok.output
    assert "the audit chain holds: 5 entries" in ok.output
    head = _cli("--head", "--db", url)
    assert head.exit_code == 0 and head.output.strip() == f"5:{row(store, 5)['hash']}"
    anchored = _cli("--verify", "--anchor", head.output.strip(), "--db", url)
    assert anchored.exit_code == 0, anchored.output
    tamper(store, update(ENTRIES).where(ENTRIES.c.seq == 3).values(actor="mallory"))
    bad = _cli("--verify", "--db", url)
    assert bad.exit_code == 1
    assert "breaks at entry 3 (edited)" in " ".join(bad.output.split())
    as_json = _cli("--verify", "--json", "--db", url)
    assert as_json.exit_code == 1
    out = json.loads(as_json.stdout)
    assert out["ok"] is False and out["break"]["seq"] == 3 and out["break"]["kind"] == "edited"
    tamper(store, update(ENTRIES).where(ENTRIES.c.seq == 3).values(actor="grace"))
    tamper(store, delete(ENTRIES).where(ENTRIES.c.seq == 2))
    gone = _cli("--verify", "--db", url)
    assert gone.exit_code == 1 and "entry 2 (missing)" in " ".join(gone.output.split())
    store.close()


def test_cli_lists_entries_in_80_columns_and_as_json(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'grace.sqlite'}"
    store = Store.open(url)
    fill(store, 6)
    with store.transaction() as s:
        audit.append(s, "a-very-long-token-name-for-a-ci-robot", AuditAction.API_REQUEST,
                     "POST /jobs/12345/clear-exclusions?with=a-rather-long-query", AuditOutcome.DENIED,
                     1_700_000_100.0, "3f9c0a12b4e6")
    store.close()
    table = _cli("--db", url)
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert max(len(line) for line in lines) <= 80, table.output
    assert "job.started" in table.output and "denied" in table.output
    only = _cli("--db", url, "--actor", "alice", "--json")
    assert only.exit_code == 0 and [e["seq"] for e in json.loads(only.stdout)] == [2, 4]
    recent = _cli("--db", url, "--since", "1700000004", "--json", "--limit", "2")
    assert [e["seq"] for e in json.loads(recent.stdout)] == [6, 7]
    assert _cli("--db", url, "--action", "job.teleported").exit_code == 2
    assert _cli("--db", url, "--since", "yesterday").exit_code == 2
    assert _cli("--anchor", "5:abc", "--verify", "--db", url).exit_code == 2
    missing = _cli("--verify", "--db", f"sqlite:///{tmp_path / 'nope.sqlite'}")
    assert missing.exit_code == 2 and "no SQLite store" in missing.output
    assert not (tmp_path / "nope.sqlite").exists()  # an auditor's read creates nothing
