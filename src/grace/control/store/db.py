"""Engines, migrations and transactions: the only place that knows which database it is.

SQLite is the default because the control plane must run with nothing else
installed: one file in the state directory. PostgreSQL is for a control plane
that wants a server (backups, replicas, several readers). The rest of Grace
sees neither: it gets a ``Store`` and opens transactions on it.

Why the SQLite settings:

- WAL lets the API read while the reconciler writes;
- ``foreign_keys=ON`` because SQLite ignores declared foreign keys otherwise;
- ``busy_timeout`` makes a writer wait for the lock instead of failing at once;
- ``synchronous=FULL`` because an acknowledged submission must survive power loss;
- write transactions start with ``BEGIN IMMEDIATE``: the write lock is taken
  before the first read, so a transaction never reads a row, decides, and then
  fails to upgrade its lock (or writes on a stale read). Writers are
  serialized; readers (``Store.read``) use a plain deferred BEGIN and never wait.

On PostgreSQL (READ COMMITTED) writers run concurrently; ``Job.version``
(optimistic concurrency) turns a lost update into ``StaleWrite`` instead.

Fencing: the control plane that holds the leader lease (``store.lease``) sets
``Store.fence = (holder, epoch)``. From then on every write transaction ends,
before its commit and in the same transaction, with an UPDATE of the lease row
that matches only while holder and epoch are still ours; no match, and the
whole transaction is rolled back as ``Fenced``. A takeover changes the epoch in
one committed UPDATE of that row, so each write commits either wholly before
the takeover (PostgreSQL: the takeover waits for the row lock) or not at all.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from grace.control.store import changes
from grace.control.store.audit import has_staged, write_staged
from grace.control.store.errors import Fenced, StaleWrite
from grace.control.store.group_commit import GroupCommit

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
DB_FILE = "grace.sqlite"
SQLITE_BUSY_TIMEOUT_MS = 30_000
#: Connections an engine keeps open, and how many more it opens under a burst. The API
#: runs its sync routes on AnyIO's thread pool (40 threads by default), each holding at
#: most one connection at a time (its token check, its read); beside them the reconciler,
#: the lease keeper, metrics and the group-commit writer. A pool smaller than the threads
#: that use it at once churns: a connection opened beyond the pool's size is closed when
#: it is returned, and on PostgreSQL each new one is a server process forked and a
#: password exchange (SCRAM) on both sides. With 10 kept, 6,000 submissions from 32
#: clients opened 1,158 connections: 4.7 ms of the machine's CPU per submission against
#: 3.3 with 40 kept (benchmarks/control_plane.py, ``machine``). 40 covers the request
#: threads, 8 more the background ones: a leader and a standby at their peak (96) stay
#: inside PostgreSQL's default max_connections of 100. Connections are opened as needed,
#: then kept.
API_THREADS = 40
PG_POOL_SIZE = API_THREADS
PG_MAX_OVERFLOW = 8
#: SQLite's pool: SQLAlchemy's default 5 + 10 overflowed under 32 API clients, and each
#: overflow connection was opened, given its PRAGMAs and closed again per request.
SQLITE_POOL_SIZE = API_THREADS
SQLITE_MAX_OVERFLOW = 40
_READ_ONLY = "grace_read_only"  # execution option: this connection's transactions only read
#: the fence check: a no-op update that matches only while the lease is still ours. An UPDATE,
#: not a SELECT, so that on PostgreSQL it takes the row lock a takeover must wait for.
#: preserve_rowcount: SQLAlchemy does not know a text() statement is an UPDATE
_FENCE = text("UPDATE leases SET renewed_at = renewed_at "
              "WHERE name = 'leader' AND holder = :holder AND epoch = :epoch"
              ).execution_options(preserve_rowcount=True)


def default_url(state_dir: Path) -> str:
    """The embedded default: ``sqlite:///<state_dir>/grace.sqlite``."""
    return f"sqlite:///{Path(state_dir).resolve() / DB_FILE}"


def normalize_url(url: str) -> str:
    """Pick the psycopg (v3) driver for plain ``postgresql://``/``postgres://`` URLs.

    SQLAlchemy's default PostgreSQL driver is psycopg2, which Grace does not
    install; an explicit driver (``postgresql+...://``) is left alone.
    """
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def make_engine(url: str) -> Engine:
    """An engine for ``url`` with the settings above; creates a SQLite file's directory."""
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, pool_size=PG_POOL_SIZE,
                             max_overflow=PG_MAX_OVERFLOW)
    if parsed.database and parsed.database != ":memory:":
        _private_sqlite(Path(parsed.database))
    engine = create_engine(url, pool_size=SQLITE_POOL_SIZE, max_overflow=SQLITE_MAX_OVERFLOW)
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _private_sqlite(path: Path) -> None:
    """The store's file, its WAL and shared-memory files, readable by the control plane's
    user alone: they hold every job's spec and environment, and jobs run as other users on
    the same host. SQLite creates ``-wal`` and ``-shm`` with the database file's mode, so
    the file is made 0600 before SQLite first opens it (a umask of 022 made them 0644)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError, PermissionError):
            mode = p.stat().st_mode
            if mode & 0o077:
                p.chmod(mode & 0o700)  # one an earlier version left wider: the owner's bits stay


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (see _sqlite_begin)
    cur = dbapi_conn.cursor()
    for pragma in ("foreign_keys=ON", f"busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
                   "journal_mode=WAL", "synchronous=FULL"):
        cur.execute(f"PRAGMA {pragma}")
    cur.close()


def _sqlite_begin(conn: Any) -> None:
    deferred = conn.get_execution_options().get(_READ_ONLY, False)
    conn.exec_driver_sql("BEGIN" if deferred else "BEGIN IMMEDIATE")


def alembic_config(url: str | None = None) -> Config:
    """Alembic's config built in code: the scripts ship inside the package, no alembic.ini."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return cfg


def migrate(url_or_engine: str | Engine) -> None:
    """Upgrade the database to the newest schema; a no-op when it is already there.

    Safe to run from several processes at once: on PostgreSQL ``env.py`` takes
    an advisory lock, on SQLite ``BEGIN IMMEDIATE`` serializes the upgrades.
    """
    owned = isinstance(url_or_engine, str)
    engine = make_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    try:
        with engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    finally:
        if owned:
            engine.dispose()


def _refuse_writes(session: Session, _ctx: Any, _instances: Any) -> None:
    if session.new or session.dirty or session.deleted:
        raise RuntimeError("Store.read() is read-only: write in Store.transaction()")


class Store:
    """The database, as transactions. Every state change happens inside one ``transaction()``.

    Objects stay usable after their transaction ends (``expire_on_commit=False``)
    so the API can render what it just wrote; they are snapshots, not live rows.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        #: (holder, epoch) of the leader lease this process holds; None: writes are not
        #: fenced (tests, tools, a standby that writes nothing). Set by ``grace up``.
        self.fence: tuple[str, int] | None = None
        self._store_id: str | None = None
        #: seconds spent in COMMIT (and the flush before it) since the store was opened:
        #: the reconcile cycle's ``commit`` phase (benchmarks/control_plane.py)
        self.commit_seconds = 0.0
        #: what the repository's hooks read from the server's config, in every write
        #: session's ``info`` (the per-tenant webhooks: grace.control.notify.outbox)
        self.session_info: dict[str, Any] = {}
        self._writer = sessionmaker(engine, expire_on_commit=False, info=self.session_info)
        self._reader = sessionmaker(engine.execution_options(**{_READ_ONLY: True}),
                                    expire_on_commit=False)
        event.listen(self._reader, "before_flush", _refuse_writes)
        changes.track(self._writer)
        #: small writes of concurrent requests, grouped into shared transactions
        self.group_commit = GroupCommit(self)
        #: SQLite has one writer at a time anyway; its busy handler polls with a growing
        #: sleep, so a thread of this process could lose the lock for the whole busy
        #: timeout to its siblings (seen: 8 writers and a busy reader, 30 s). Writers of
        #: this process queue on this lock instead; other processes still meet the busy
        #: timeout. Reentrant: a nested write fails on SQLite's timeout as it did, not hang.
        self._write_turn: AbstractContextManager[Any] = (
            threading.RLock() if engine.dialect.name == "sqlite" else nullcontext())
        self._writing = threading.local()  # .depth: this thread's open write transactions

    @classmethod
    def open(cls, url: str) -> Store:
        """Connect to ``url`` and migrate it to the newest schema first."""
        engine = make_engine(url)
        migrate(engine)
        return cls(engine)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def store_id(self) -> str:
        """The UUID made when the store was created (``store_meta``): names what belongs to
        this store, unlike a job id, which another store reuses. Read once, then cached."""
        if self._store_id is None:
            with self.read() as s:
                value = s.execute(text("SELECT value FROM store_meta WHERE key = 'store_id'")
                                  ).scalar_one_or_none()
            if value is None:
                raise LookupError("store_meta has no store_id; was the store migrated?")
            self._store_id = str(value)
        return self._store_id

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """All or nothing: commit when the block ends, roll back everything if it raises.

        A concurrent update of a job read here surfaces as ``StaleWrite``; with a ``fence``
        set, a lease another control plane took over surfaces as ``Fenced``, nothing written.
        """
        session = self._writer()
        self._writing.depth = self.writes_open() + 1
        try:
            with self._write_turn, session.begin():
                yield session
                # the audit entries last, before the fence: see store.audit for why
                write_staged(session)
                changes.stamp(session)  # the change feed's number: last, it orders commits
                fence = self.fence
                if fence is not None:
                    session.flush()  # the changes first: the lease row stays locked for less
                    self._check_fence(session, *fence)
                t0 = time.perf_counter()
            self.commit_seconds += time.perf_counter() - t0
        except StaleDataError as e:
            raise StaleWrite(f"the job changed since it was read; read it again ({e})") from e
        finally:
            self._writing.depth -= 1
            session.close()

    def writes_open(self) -> int:
        """How many write transactions this thread has open (``group_commit`` refuses to
        wait from inside one: its writer would wait for this thread's lock)."""
        return int(getattr(self._writing, "depth", 0))

    @staticmethod
    def _check_fence(session: Session, holder: str, epoch: int) -> None:
        result: Any = session.execute(_FENCE, {"holder": holder, "epoch": epoch})
        if result.rowcount != 1:
            raise Fenced(f"another control plane took over this store: the leader lease is no "
                         f"longer held by {holder} at epoch {epoch}; this write was rolled back")

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only transaction (flushing a change raises); never blocks or waits for writers."""
        with self._reader() as session:  # closing rolls back: nothing it did is kept
            yield session
            if has_staged(session):
                raise RuntimeError("audit entries need a write: append them in Store.transaction()")

    @contextmanager
    def lookup(self) -> Iterator[Connection]:
        """A connection for one read statement (a token check on every request).

        PostgreSQL: in autocommit, so the read is one round trip, not four (the pool's
        ping aside: ``BEGIN``, the statement, ``ROLLBACK``); a single statement sees one
        snapshot on its own. SQLite: the read transaction ``read`` opens (a statement
        there is a call in process, and a transaction left open would hold the WAL)."""
        if self.engine.dialect.name == "postgresql":
            with self.engine.connect() as conn:
                yield conn.execution_options(isolation_level="AUTOCOMMIT")
            return
        with self.read() as session:
            yield session.connection()

    def close(self) -> None:
        self.engine.dispose()


__all__ = ["Store", "alembic_config", "default_url", "make_engine", "migrate", "normalize_url"]
