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


def load_store(location: str, now: float | None = None) -> History:
    """Read every job of the store at ``location`` (see the module docstring)."""
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.orm import selectinload

    from grace.control.store.db import Store, make_engine
    from grace.control.store.models import Job, Node

    url = store_url(location)
    at = time.time() if now is None else now
    store = Store(make_engine(url))
    try:
        with store.read() as s:
            models = {n.name: n.gpu_model for n in s.scalars(select(Node))}
            jobs = list(s.scalars(select(Job).order_by(Job.id)
                                  .options(selectinload(Job.attempts))))
            records = [_record(job, models, at) for job in jobs]
    except SQLAlchemyError as e:
        raise ValueError(f"--history {location} is not a Grace store this version can read "
                         f"({type(e).__name__}); point it at <state dir>/grace.sqlite, or "
                         "run `grace up` once on it to migrate an older store") from None
    finally:
        store.close()
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
