"""Read-only views a Slurm user looks for: history (sacct), priority (sprio), shares
(sshare) and what each node holds (the allocation half of sinfo/squeue -w).

Every route here is a viewer's read: a member or a tenant's viewer sees its own tenant
only (another tenant's jobs are left out, as ``GET /jobs`` leaves them out), operators,
admins and a viewer without a tenant see every tenant. Nothing here writes, so nothing
here is audited beyond the access log.

- ``GET /history``: every job whose life overlaps ``[since, until]`` (submitted by
  ``until``, not ended before ``since``), oldest first, paged by a keyset cursor (the
  last job id of the page): a job submitted while a client pages lands after its cursor,
  so paging never loses or repeats a job, unlike an offset over a list that grows.
- ``GET /priority``: the waiting jobs in the order the engine's next cycle visits them,
  with the factors of that order (``core.queue_view``, over the same ``SchedulerState``
  the reconciler builds). Needs the reconciler (``grace up``).
- ``GET /shares``: per tenant its quota, weight, the GPUs it holds, its fair-share key
  (``core.quotas.fair_share``, what ``decide`` orders tenants by) and GPU-hours in a
  recent window.
- ``GET /nodes/allocation``: each node's allocated and free GPUs and the jobs on it.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from fastapi import FastAPI, HTTPException, Query
from sqlalchemy import func, or_, select
from sqlalchemy.orm import selectinload

from grace.control.api_contract import AUTH, READ, errors
from grace.control.auth import Principal
from grace.control.store import repository as repo
from grace.control.store.models import LIVE_ATTEMPT_STATES, Attempt, Job, JobState
from grace.core.decisions import PendingReason
from grace.core.queue_view import queue_order
from grace.core.quotas import fair_share
from grace.core.topology import Topology

#: Jobs one ``GET /history`` page holds at most.
MAX_PAGE = 1000
#: GPU-hours in ``GET /shares`` are counted over this many hours back, unless asked.
SHARES_WINDOW_H = 7 * 24.0
#: Seconds ``GET /priority`` serves one build of the queue order (a reconcile cycle is ~1 s)
PRIORITY_TTL_S = 2.0
#: Epoch seconds a query may name (year 2100): beyond is a typo, not a time.
_MAX_EPOCH = 4_102_444_800.0


def _states(text: str | None) -> list[JobState] | None:
    """``failed,cancelled`` as states; a 422 naming the field for an unknown one."""
    if text is None or not text.strip():
        return None
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    known = {s.value for s in JobState}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise HTTPException(422, detail=[{"field": "query.state", "message": (
            f"unknown state {', '.join(map(repr, unknown))}; use any of "
            f"{', '.join(sorted(known))}, comma-separated")}])
    return [JobState(n) for n in dict.fromkeys(names)]


def _scope(who: Principal, tenant: str | None) -> tuple[str | None, bool]:
    """The tenant to filter by, and False when ``who`` may not see the one asked for (the
    answer is then empty, as ``GET /jobs`` answers: another tenant's jobs do not exist)."""
    if who.all_tenants:
        return tenant, True
    if tenant is not None and tenant != who.tenant:
        return tenant, False
    return who.tenant, True


def _attempt_spans(job: Job) -> list[dict[str, Any]]:
    return [{"number": a.number, "started_at": a.started_at, "ended_at": a.ended_at}
            for a in sorted(job.attempts, key=lambda a: a.number)]


def _history_row(job: Job) -> dict[str, Any]:
    return {"id": job.id, "name": job.name, "tenant": job.tenant, "state": str(job.state),
            "workload_class": job.workload_class, "gpus": job.gpus, "priority": job.priority,
            "submitted_at": job.submitted_at, "started_at": job.started_at,
            "ended_at": job.ended_at, "attempts": job.attempts_count, "restarts": job.restarts,
            "reason": job.reason, "attempt_spans": _attempt_spans(job)}


def _allocation(placement: list[dict[str, Any]]) -> dict[str, tuple[set[int], int]]:
    """``{node: (GPU indexes with anything on them, slices)}`` of one attempt's placement."""
    out: dict[str, tuple[set[int], int]] = {}
    for entry in placement:
        gpus, slices = out.setdefault(str(entry["node"]), (set(), 0))
        shared = entry.get("slices") or ()
        gpus.update(int(g) for g in entry.get("gpus") or ())
        gpus.update(int(s["gpu"]) for s in shared)
        out[str(entry["node"])] = (gpus, slices + len(shared))
    return out


def install_views_routes(app: FastAPI, store: Any, topo: Topology, reconciler: Any,
                         viewer: Any, clock: Any) -> None:
    """Add the routes; ``reconciler`` (None without ``grace up``'s loop) builds the engine's
    state for ``/priority``; ``viewer`` is the API's read requirement."""

    @app.get("/history", responses=errors(*READ))
    def history(
            since: float = Query(0.0, ge=0, le=_MAX_EPOCH, description=(
                "epoch seconds: jobs still alive at or after this (default: every job)")),
            until: float | None = Query(None, ge=0, le=_MAX_EPOCH, description=(
                "epoch seconds: jobs submitted at or before this (default: now)")),
            tenant: str | None = Query(None, max_length=200),
            state: str | None = Query(None, max_length=200, description=(
                "one state or several, comma-separated (failed,cancelled)")),
            limit: int = Query(200, ge=1, le=MAX_PAGE, description="jobs per page"),
            after: int = Query(0, ge=0, le=2**31 - 1, description=(
                "the cursor: the last page's 'next' (a job id); 0: from the oldest")),
            who: Principal = viewer) -> dict[str, Any]:
        """Jobs whose life overlaps [since, until], oldest first, ``limit`` per page; pass
        ``next`` back as ``after`` for the following page (null: this was the last)."""
        end = clock() if until is None else until
        if end < since:
            raise HTTPException(422, detail=[{"field": "query.until", "message": (
                f"until ({end:.0f}) is before since ({since:.0f}); give a later until or "
                "an earlier since")}])
        states = _states(state)
        scoped, visible = _scope(who, tenant)
        if not visible:
            return {"jobs": [], "next": None}
        query = (select(Job).where(Job.id > after, Job.submitted_at <= end,
                                   or_(Job.ended_at.is_(None), Job.ended_at >= since))
                 .order_by(Job.id).limit(limit + 1).options(selectinload(Job.attempts)))
        if scoped is not None:
            query = query.where(Job.tenant == scoped)
        if states is not None:
            query = query.where(Job.state.in_(states))
        with store.read() as s:
            rows = list(s.scalars(query))
            page = [_history_row(j) for j in rows[:limit]]
        return {"jobs": page, "next": page[-1]["id"] if len(rows) > limit else None}

    queue_cache: list[tuple[float, Any, int, list[Any]]] = []
    queue_lock = threading.Lock()

    def _queue(rec: Any) -> tuple[float, Any, int, list[Any]]:
        """(when, policy, jobs waiting, queue order), rebuilt at most every
        ``PRIORITY_TTL_S``: a view of 20,000 waiting jobs takes seconds to build, and any
        viewer may ask; concurrent askers wait for one build, not one each."""
        from grace.control.live.view import ViewBuilder

        with queue_lock:
            now = clock()
            if queue_cache and now - queue_cache[0][0] < PRIORITY_TTL_S:
                return queue_cache[0]
            builder = ViewBuilder(rec.ctx)
            builder.demand = None  # the order reads no request mix; skip reading every job
            view = builder.build(now)
            entry = (now, view.state.policy, len(view.pending), queue_order(view.state))
            queue_cache[:] = [entry]
            return entry

    @app.get("/priority", responses=errors(*READ))
    def priority(tenant: str | None = Query(None, max_length=200),
                 who: Principal = viewer) -> dict[str, Any]:
        """Every waiting job (of the tenants ``who`` sees) in the order the engine's next
        cycle visits them, with the factors of that order; ``position`` counts every
        tenant's jobs, so a member sees how many wait ahead of its own."""
        if reconciler is None:
            raise HTTPException(503, detail=(
                "no scheduler runs in this process: the queue order is the reconciler's "
                "(start the control plane with `grace up`)"))
        now, policy, waiting, order = _queue(reconciler)
        scoped, visible = _scope(who, tenant)
        out: dict[str, Any] = {"policy": policy.name, "order": list(policy.order),
                               "fair_share": policy.fair_share, "waiting": waiting,
                               "jobs": []}
        gate = [r.value for r in (PendingReason.HELD, PendingReason.DEPENDENCY,
                                  PendingReason.ARRAY_LIMIT)]
        with store.read() as s:  # pending jobs the gate keeps from the queue (grace jobs)
            query = select(func.count()).select_from(Job).where(
                Job.state == JobState.PENDING, Job.reason.in_(gate))
            out["gated"] = int(s.scalar(query.where(Job.tenant == scoped) if scoped is not None
                                        else query) or 0) if visible else 0
        if not visible:
            return out
        entries = [e for e in order if scoped is None or e.tenant == scoped]
        with store.read() as s:
            jobs = {j.id: j for j in s.scalars(select(Job).where(
                Job.id.in_([int(e.job_id) for e in entries])))}
            for e in entries:
                job = jobs.get(int(e.job_id))
                if job is None:
                    continue
                out["jobs"].append({
                    "position": e.position, "id": int(e.job_id), "name": job.name,
                    "tenant": e.tenant, "gpus": job.gpus, "priority": job.priority,
                    "submitted_at": job.submitted_at, "wait_s": max(0.0, now - job.submitted_at),
                    "factors": {f.name: f.value for f in e.factors},
                    "fair_share": e.fair_share, "tenant_gpus": e.tenant_gpus,
                    "weight": e.weight, "attained_gpu_h": e.attained_gpu_s / 3600.0,
                    "reason": job.reason})
        return out

    @app.get("/shares", responses=errors(*READ))
    def shares(window_h: float = Query(SHARES_WINDOW_H, gt=0, le=24 * 3650, description=(
            "GPU-hours are counted over this many hours back")),
               who: Principal = viewer) -> dict[str, Any]:
        """Per tenant: quota (null: unlimited), weight and its share of all weights, GPUs
        held now, the fair-share key the engine orders tenants by, GPU-hours used in the
        window, and jobs running and waiting."""
        now = clock()
        since = now - window_h * 3600.0
        with store.read() as s:
            quotas = {t.name: (t, repo.quota_of(t)) for t in repo.tenants(s)}
            holding = dict(s.execute(select(Job.tenant, func.sum(Attempt.gpus))
                                     .select_from(Attempt).join(Attempt.job)
                                     .where(Attempt.state.in_(list(LIVE_ATTEMPT_STATES)))
                                     .group_by(Job.tenant)).all())
            used: dict[str, float] = {}  # GPU-seconds in the window, summed here: portable
            for t, start, ended, gpus in s.execute(
                    select(Job.tenant, Attempt.started_at, Attempt.ended_at, Attempt.gpus)
                    .select_from(Attempt).join(Attempt.job)
                    .where(or_(Attempt.ended_at.is_(None), Attempt.ended_at > since))):
                span = min(ended if ended is not None else now, now) - max(start, since)
                used[t] = used.get(t, 0.0) + max(0.0, span) * float(gpus or 0.0)
            counts: dict[tuple[str, str], int] = {
                (t, str(st)): n for t, st, n in s.execute(
                    select(Job.tenant, Job.state, func.count()).where(
                        Job.state.in_([JobState.PENDING, JobState.RUNNING]))
                    .group_by(Job.tenant, Job.state)).all()}
        weights = sum(q.weight for _, q in quotas.values()) or 1.0
        total = sum(n.gpus for n in topo.nodes)
        rows = []
        for name, (_row, quota) in sorted(quotas.items()):
            if not who.sees(name):
                continue
            gpus = float(holding.get(name) or 0.0)
            rows.append({
                "tenant": name, "guaranteed_gpus": _finite(quota.guaranteed_gpus),
                "borrow_limit_gpus": _finite(quota.borrow_limit_gpus), "weight": quota.weight,
                "norm_share": quota.weight / weights, "gpus_held": gpus,
                "usage_share": gpus / total if total else 0.0,
                "fair_share": fair_share(quota, gpus),
                "gpu_hours": max(0.0, float(used.get(name) or 0.0)) / 3600.0,
                "running": counts.get((name, "running"), 0),
                "pending": counts.get((name, "pending"), 0)})
        return {"total_gpus": total, "window_h": window_h, "tenants": rows}

    @app.get("/nodes/allocation", responses=errors(*AUTH, 503))
    def allocation(who: Principal = viewer) -> list[dict[str, Any]]:
        """Each node's GPUs, those allocated (a GPU holding any slice counts) and free, and
        the jobs on it; another tenant's jobs are counted, not named, for a member."""
        with store.read() as s:
            live = list(s.scalars(select(Attempt).where(
                Attempt.state.in_(list(LIVE_ATTEMPT_STATES))).options(selectinload(Attempt.job))))
            rows = {n.name: n for n in repo.nodes(s)}
            taken: dict[str, set[int]] = {}
            jobs: dict[str, list[dict[str, Any]]] = {}
            hidden: dict[str, int] = {}
            for a in live:
                for node, (gpus, slices) in _allocation(list(a.placement_json or ())).items():
                    taken.setdefault(node, set()).update(gpus)
                    if who.sees(a.job.tenant):
                        jobs.setdefault(node, []).append({
                            "id": a.job_id, "name": a.job.name, "tenant": a.job.tenant,
                            "gpus": len(gpus), "slices": slices})
                    else:
                        hidden[node] = hidden.get(node, 0) + 1
            out = []
            for n in topo.nodes:
                row = rows.get(n.name)
                allocated = len(taken.get(n.name, ()))
                out.append({"name": n.name, "gpu_model": n.gpu_model, "gpus": n.gpus,
                            "state": str(row.state) if row is not None else "unknown",
                            "allocated": allocated, "free": max(0, n.gpus - allocated),
                            "jobs": sorted(jobs.get(n.name, []), key=lambda j: j["id"]),
                            "other_jobs": hidden.get(n.name, 0)})
        return out


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else float(value)


__all__ = ["MAX_PAGE", "SHARES_WINDOW_H", "install_views_routes"]
