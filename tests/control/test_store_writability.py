"""probe_write says whether the store takes a write, in the database's own words: a real
full disk (a SQLite file on a tiny tmpfs), a read-only file, a read-only PostgreSQL."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from grace.control.store import repository as repo
from grace.control.store.db import Store, _sqlite_begin, _sqlite_connect, make_engine
from grace.control.store.writability import PROBE_KEY, describe_failure, probe_write
from grace.spec.job import JobSpec

JOB = JobSpec(name="j", gpus=1, command=["python", "train.py"])


def _probe_row(store: Store) -> str | None:
    with store.read() as s:
        return s.execute(text("SELECT value FROM store_meta WHERE key = :k"),
                         {"k": PROBE_KEY}).scalar_one_or_none()


def test_a_healthy_store_takes_the_probe(store: Store) -> None:
    assert probe_write(store, clock=lambda: 12.5) is None
    # SQLite commits the probe (its failures show only at commit); PostgreSQL rolls it back
    assert _probe_row(store) == ("12.5" if store.dialect == "sqlite" else None)
    assert probe_write(store, clock=lambda: 13.0) is None  # again: an upsert, not a second row


@contextlib.contextmanager
def tiny_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    return filler


def test_a_full_disk_is_reported_as_no_space_and_heals_when_freed(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "disk", "2m") as disk:
        store = Store.open(f"sqlite:///{disk / 'grace.sqlite'}")
        try:
            assert probe_write(store) is None
            filler = _fill(disk)
            failure = probe_write(store)
            assert failure is not None
            assert failure.status == 507
            assert failure.reason == "database or disk is full"
            assert "free space" in failure.detail
            # the probe speaks for real writes: a submission fails the same way
            with pytest.raises(OperationalError) as e, store.transaction() as s:
                repo.add_job(s, JOB, 1.0)
            assert describe_failure(e.value) == failure
            filler.unlink()
            assert probe_write(store) is None
            with store.transaction() as s:
                repo.add_job(s, JOB, 1.0)
        finally:
            store.close()


def test_a_read_only_sqlite_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "grace.sqlite"
    Store.open(f"sqlite:///{path}").close()
    engine = create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    store = Store(engine)
    try:
        failure = probe_write(store)
        assert failure is not None
        assert (failure.status, failure.reason) == (503, "attempt to write a readonly database")
        with store.read() as s:  # it still reads: only writes are refused
            assert s.execute(text("SELECT count(*) FROM store_meta")).scalar_one() >= 1
    finally:
        store.close()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_read_only_postgresql_is_reported(db_url: str) -> None:
    Store.open(db_url).close()
    url = make_url(db_url)
    options = f"{url.query.get('options', '')} -cdefault_transaction_read_only=on".strip()
    store = Store(make_engine(url.update_query_dict({"options": options})
                              .render_as_string(hide_password=False)))
    try:
        failure = probe_write(store)
        assert failure is not None
        assert failure.status == 503
        assert "read-only transaction" in failure.reason
    finally:
        store.close()


def test_the_sqlite_store_and_its_wal_are_the_owners_alone(tmp_path: Path) -> None:
    """Jobs run as other users on the same host: the store's file, its WAL and its
    shared memory (every job's spec and environment) are 0600 from the first write."""
    db = tmp_path / "state" / "grace.sqlite"
    store = Store.open(f"sqlite:///{db}")
    with store.transaction() as s:
        repo.ensure_tenant(s, "vision")
    files = [db, db.with_name("grace.sqlite-wal"), db.with_name("grace.sqlite-shm")]
    assert all(f.exists() for f in files)
    assert [oct(f.stat().st_mode & 0o777) for f in files] == [oct(0o600)] * 3
