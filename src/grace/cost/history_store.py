"""Grace's own store as a history: every job it ran, read through the store's ORM.

``--history`` is a database URL (``sqlite:///path``, ``postgresql://...``) or the
path of a SQLite file (``<state dir>/grace.sqlite``). The store is opened
read-only (``Store.read``) and *not* migrated: assessing a cluster must not change
its database, so a store of another schema version is refused with the fix.

Per job: submitted at ``submitted_at``; started at its first attempt's start (the
queue wait); ran for the sum of its attempts' spans, the time it held GPUs (a
job requeued after a failure waits between attempts, and that wait is not GPU
time); on the GPUs and nodes of its first attempt's placement; GPU model from
its spec or, failing that, from the nodes it ran on; tenant, name, workload
class, requested limit, state and ``sensitive_data`` from the job and its spec.
An attempt still running counts up to ``now``. Jobs that never started are
skipped ("never started").
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from grace.cost.history import History, HistoryFormat, HistoryJob
from grace.spec.job import WorkloadClass


def store_url(location: str) -> str:
    """A database URL for ``location``: a URL as given, a path as ``sqlite:///<abs path>``.

    A path (or SQLite URL) must name an existing file: opening a missing one would
    create an empty store, and an empty history says nothing.
    """
    if "://" in location:
        if location.startswith("sqlite:///"):
            db = Path(location.removeprefix("sqlite:///"))
            if not db.is_file():
                raise ValueError(f"--history {location}: no SQLite file at {db}; give the "
                                 "store's file (<state dir>/grace.sqlite) or its URL")
        return location
    path = Path(location)
    if not path.is_file():
        raise ValueError(f"--history {location}: no such file; with --format grace give a "
                         "database URL (sqlite:///..., postgresql://...) or the store's "
                         "SQLite file (<state dir>/grace.sqlite)")
    return f"sqlite:///{path.resolve()}"


#: The first 16 bytes of every SQLite 3 database file (sqlite.org/fileformat.html).
SQLITE_HEADER = b"SQLite format 3\x00"


def _read_only_engine(url: str, location: str) -> Any:
    """An engine that cannot change what it reads. Not ``Store``/``make_engine``: those
    create a missing file, tighten its mode and switch it to WAL, right for the control
    plane and wrong for a look at someone's database. SQLite opens with ``mode=ro``
    (a live store in WAL mode still reads); PostgreSQL sessions are read-only."""
    import sqlite3

    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    from grace.control.store.db import normalize_url

    try:
        parsed = make_url(normalize_url(url))
    except ArgumentError:
        raise ValueError(f"--history {location}: not a database URL; give sqlite:///PATH, "
                         "postgresql://... or the store's SQLite file") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        path = Path(parsed.database or "")
        with open(path, "rb") as f:
            if f.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                raise ValueError(f"--history {location} is not a SQLite database, so not a "
                                 "Grace store; give <state dir>/grace.sqlite, or pick the "
                                 "--format the file is in")
        uri = f"{path.resolve().as_uri().replace('file://', 'file:', 1)}?mode=ro"
        return create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True))
    if backend != "postgresql":
        raise ValueError(f"--history {location}: unsupported database URL ({backend}); "
                         "use sqlite:///PATH or postgresql://...")
    try:
        return create_engine(parsed, execution_options={"postgresql_readonly": True})
    except (NoSuchModuleError, ImportError) as e:
        raise ValueError(f"--history {location}: cannot load the PostgreSQL driver ({e})") \
            from None


def load_store(location: str, now: float | None = None) -> History:
    """Read every job of the store at ``location`` (see the module docstring), changing
    nothing in it: not its contents, its journal mode or its file's permissions."""
    from sqlalchemy import inspect, select
    from sqlalchemy.exc import OperationalError, SQLAlchemyError
    from sqlalchemy.orm import Session, selectinload

    from grace.control.store.models import Job, Node

    url = store_url(location)
    at = time.time() if now is None else now
    engine = _read_only_engine(url, location)
    try:
        try:
            tables = set(inspect(engine).get_table_names())
        except OperationalError as e:
            raise ValueError(f"--history {location}: cannot open the database "
                             f"({str(e.orig).strip() or type(e.orig).__name__}); check the URL, "
                             "that the server is up and that you may read it") from None
        missing = {Job.__tablename__, Node.__tablename__} - tables
        if missing:
            raise ValueError(f"--history {location} is not a Grace store (no "
                             f"{', '.join(sorted(missing))} table); give <state dir>/"
                             "grace.sqlite or the URL `grace up --db` uses")
        with Session(engine) as s:
            models = {n.name: n.gpu_model for n in s.scalars(select(Node))}
            jobs = list(s.scalars(select(Job).order_by(Job.id)
                                  .options(selectinload(Job.attempts))))
            records = [_record(job, models, at) for job in jobs]
    except SQLAlchemyError as e:
        raise ValueError(f"--history {location}: a Grace store this version cannot read "
                         f"({type(e).__name__}); assess it with the Grace version that "
                         "wrote it") from None
    finally:
        engine.dispose()
    history = History(source=location, format=HistoryFormat.GRACE, rows=len(records))
    kept = [r for r in records if isinstance(r, dict)]
    for r in records:
        if isinstance(r, str):
            history.skipped[r] = history.skipped.get(r, 0) + 1
    if kept:
        t0 = min(r["submit_s"] for r in kept)
        history.origin_epoch_s = t0
        history.jobs = [HistoryJob(**{**r, "submit_s": r["submit_s"] - t0,
                                      "start_s": r["start_s"] - t0}) for r in kept]
    return history


def _record(job: Any, models: dict[str, str | None], now: float) -> dict[str, Any] | str:
    """One job's HistoryJob fields (times absolute), or the reason it is skipped."""
    attempts = list(job.attempts)
    if not attempts:
        return "never started"
    held = sum(max(0.0, (a.ended_at if a.ended_at is not None else now) - a.started_at)
               for a in attempts)
    if held <= 0:
        return "zero duration"
    spec: dict[str, Any] = job.spec_json or {}
    placed = [str(p["node"]) for p in attempts[0].placement_json or []
              if isinstance(p, dict) and p.get("node")]
    nodes = len(set(placed)) or spec.get("nodes")
    model = spec.get("gpu_model") or next((models[n] for n in placed if models.get(n)), None)
    try:
        wclass: WorkloadClass | None = WorkloadClass(job.workload_class)
    except ValueError:
        wclass = None
    limit = spec.get("runtime_limit")
    return {"job_id": str(job.id), "tenant": job.tenant, "submit_s": job.submitted_at,
            "start_s": max(attempts[0].started_at, job.submitted_at), "run_s": held,
            "gpus": float(job.gpus), "nodes": nodes, "gpu_model": model, "name": job.name,
            "workload_class": wclass,
            "limit_s": float(limit) if isinstance(limit, int | float) else None,
            "state": str(job.state.value), "sensitive_data": bool(spec.get("sensitive_data"))}


__all__ = ["load_store", "store_url"]
