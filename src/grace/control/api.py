"""The HTTP API (FastAPI; OpenAPI at /openapi.json, docs at /docs).

Input is validated with the same pydantic specs as the CLI. A bad request gets
a 4xx whose body names every bad field and its fix, and nothing is stored: the
spec is validated and compiled against the cluster before the transaction that
writes it opens.

On a standby control plane (``leadership`` given and not leading) reads work and
every POST/PUT/PATCH/DELETE answers 503 naming the leader: a standby writes
nothing. A write that meets the fence (this process lost the lease meanwhile)
is rolled back and answers 503 too.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field, ValidationError

from grace.control.live.context import JobDirs
from grace.control.live.context import job_dirs as live_job_dirs
from grace.control.node_health import HealthConfig, breaker_message, load_monitor, save_monitor
from grace.control.snapshot import JobCompiler
from grace.control.store import exclusions
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.errors import Fenced
from grace.control.store.lease import Leadership
from grace.control.store.models import JobState
from grace.core.health import IllegalTransition, Signal, SignalKind
from grace.core.jobs import JobCompileError
from grace.core.topology import Topology
from grace.spec.errors import from_validation_error
from grace.spec.job import JobSpec


class DrainRequest(BaseModel):
    reason: str = Field(min_length=1, description="why; kept in the node's history")
    actor: str = "api"
    evict: bool = Field(default=False, description=(
        "move the node's jobs off now, each from a checkpoint taken on SIGTERM, instead of "
        "waiting for them to end"))


class QuotaRequest(BaseModel):
    guaranteed_gpus: float | None = Field(default=None, ge=0)
    borrow_limit_gpus: float | None = Field(default=None, ge=0)
    weight: float = Field(default=1.0, gt=0)
    preemptions_per_hour: int = Field(default=20, ge=0)


def _problems(err: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    return [{"field": p.path or _field_named_in(p.message), "message": p.message}
            for p in from_validation_error("request", err, prefix).problems]


def _field_named_in(message: str) -> str:
    """A check across fields has no path of its own: name the first JobSpec field its
    message mentions ("gpus=2.5: only jobs under one GPU ..." is about ``gpus``)."""
    return next((w for w in re.findall(r"\b[a-z_]+\b", message) if w in JobSpec.model_fields), "")


class HeartbeatBatch(BaseModel):
    attempt: int = Field(ge=1)
    node: str = ""
    rank: int = Field(default=0, ge=0)
    records: list[dict[str, Any]] = Field(default_factory=list, max_length=10_000)


class InjectRequest(BaseModel):
    fault: str = Field(description="kill-rank | hang-rank | straggler | node-unhealthy")
    rank: int = Field(default=0, ge=0)


class SignalRequest(BaseModel):
    kind: str = Field(description="a health signal kind, e.g. xid, nvlink-down, heartbeat-missing")
    code: int | None = Field(default=None, description="the Xid number, for kind xid")
    detail: str = ""


_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def create_app(store: Store, topo: Topology, state_dir: Path,
               reconciler: Any = None, backend: Any = None,
               leadership: Leadership | None = None,
               health: HealthConfig | None = None,
               clock: Callable[[], float] = time.time) -> FastAPI:
    """The app over ``store``; ``leadership`` (from ``grace up``) adds the leader's view to
    /healthz and refuses writes while this process stands by. Without it (tests, tools)
    the app neither knows nor guards a role."""
    app = FastAPI(title="Grace", version="0.1.0",
                  description="Control plane of a private GPU training cluster")
    compiler = JobCompiler(topo)
    # operator actions decide with the reconciler's own health rules
    health_config = health or (reconciler.health.config if reconciler is not None
                               else HealthConfig())
    job_dirs_cache: list[JobDirs] = []

    def dirs() -> JobDirs:
        """Where the store's jobs keep their files (``<state_dir>/jobs/<store id>-<job id>``)."""
        if not job_dirs_cache:
            job_dirs_cache.append(live_job_dirs(store, state_dir))
        return job_dirs_cache[0]

    if leadership is not None:
        @app.middleware("http")
        async def _standby_is_read_only(request: Request, call_next: Any) -> Any:
            role = leadership.get()
            if request.method in _WRITES and not role.leading:
                return JSONResponse(status_code=503, headers={"Retry-After": "1"}, content={
                    "detail": f"this control plane is a standby and writes nothing; the leader "
                              f"is {role.leader or 'not known yet'}: send writes to it"})
            return await call_next(request)

    @app.exception_handler(Fenced)
    async def _fenced(_: Request, exc: Fenced) -> JSONResponse:
        return JSONResponse(status_code=503, content={"detail": str(exc)})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [{"field": ".".join(str(p) for p in e["loc"] if p != "body"),
                     "message": e["msg"]} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": problems})

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", **(leadership.health() if leadership is not None else {})}

    @app.post("/jobs", status_code=201)
    def submit(body: dict[str, Any]) -> dict[str, Any]:
        try:
            spec = JobSpec.model_validate(body)
        except ValidationError as e:
            raise HTTPException(422, detail=_problems(e)) from e
        if not spec.command:
            raise HTTPException(422, detail=[{"field": "command", "message":
                                              "a job needs a command to run, e.g. "
                                              "['python', 'train.py']"}])
        try:
            compiler.check(spec)
        except JobCompileError as e:
            raise HTTPException(422, detail=[{"field": "gpus", "message": str(e)}]) from e
        with store.transaction() as s:
            job = repo.add_job(s, spec, clock())
            return {"id": job.id, "state": str(job.state)}

    @app.get("/jobs")
    def list_jobs(state: str | None = None, tenant: str | None = None,
                  limit: int = 200, offset: int = 0) -> list[dict[str, Any]]:
        if state is not None and state not in {s.value for s in JobState}:
            raise HTTPException(422, detail=[{"field": "state", "message":
                                              f"unknown state; use one of "
                                              f"{[s.value for s in JobState]}"}])
        with store.transaction() as s:
            return [_job_summary(j) for j in repo.list_jobs(
                s, state=JobState(state) if state else None, tenant=tenant,
                limit=min(limit, 1000), offset=offset)]

    @app.get("/jobs/{job_id}")
    def show(job_id: int) -> dict[str, Any]:
        with store.transaction() as s:
            job = _get(s, job_id)
            out = _job_summary(job)
            out["spec"] = job.spec_json
            out["attempts"] = [{
                "number": a.number, "state": str(a.state), "nodes": a.placement_json,
                "started_at": a.started_at, "ended_at": a.ended_at, "exit_code": a.exit_code,
                "failure_kind": a.failure_kind, "failed_node": a.failed_node,
                "detail": a.detail, "resumed_from": a.resumed_from} for a in job.attempts]
            out["events"] = [{"at": e.at, "kind": str(e.kind), "detail": e.detail}
                             for e in repo.events(s, job_id)]
            out["excluded_nodes"] = exclusions.describe(job, clock())
            out["launch_failures"] = job.launch_failures
            number = job.attempts_count
        adir = dirs().attempt(job_id, number)
        out["progress"] = {}
        for f in sorted(adir.glob("progress-rank*.json")) if adir.is_dir() else []:
            try:
                out["progress"][f.stem.removeprefix("progress-")] = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
        return out

    @app.post("/jobs/{job_id}/clear-exclusions")
    def clear_exclusions(job_id: int, actor: str = "api") -> dict[str, Any]:
        """An operator lets a job use every node again (it was moved off or failed on some)."""
        with store.transaction() as s:
            nodes = exclusions.clear(s, _get(s, job_id), actor, clock())
        return {"job": job_id, "cleared": nodes}

    @app.post("/jobs/{job_id}/cancel")
    def cancel(job_id: int) -> dict[str, Any]:
        with store.transaction() as s:
            job = _get(s, job_id)
            if job.state in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED,
                             JobState.DIVERGED):
                raise HTTPException(409, detail=f"job {job_id} already ended ({job.state})")
            repo.request_cancel(s, job_id, clock())
            return {"id": job_id, "cancel_requested": True}

    @app.get("/jobs/{job_id}/logs", response_class=PlainTextResponse)
    def logs(job_id: int, attempt: int | None = None, node: str | None = None,
             tail: int = 200) -> str:
        with store.transaction() as s:
            job = _get(s, job_id)
            number = attempt or job.attempts_count
        adir = dirs().attempt(job_id, number)
        if not adir.is_dir():
            return ""
        files = sorted(p for p in adir.rglob("*.log") if node is None or node in p.name)
        lines: list[str] = []
        for f in files:
            text = f.read_text(errors="replace").splitlines()
            lines += [f"[{f.relative_to(adir)}] {line}" for line in text[-tail:]]
        return "\n".join(lines[-tail * max(1, len(files)):]) + ("\n" if lines else "")

    @app.post("/jobs/{job_id}/heartbeats", status_code=204)
    def heartbeats(job_id: int, body: HeartbeatBatch) -> None:
        """The runtime's batched progress: the newest record per rank is kept for ``grace job``."""
        if not body.records:
            return
        adir = dirs().attempt(job_id, body.attempt)
        if not adir.is_dir():
            raise HTTPException(404, detail=f"job {job_id} has no attempt {body.attempt} here")
        latest = adir / f"progress-rank{body.rank}.json"
        tmp = latest.with_suffix(".tmp")
        tmp.write_text(json.dumps(body.records[-1] | {"node": body.node}))
        tmp.replace(latest)

    @app.post("/jobs/{job_id}/inject")
    def inject(job_id: int, body: InjectRequest) -> dict[str, Any]:
        """Cause a fault on purpose, to test recovery: kill or hang a rank, or make its node
        report a fatal Xid (79, fallen off the bus) through the health table."""
        with store.transaction() as s:
            job = _get(s, job_id)
            live = [a for a in job.attempts if str(a.state) in ("starting", "running")]
            if job.state != JobState.RUNNING or not live:
                raise HTTPException(409, detail=f"job {job_id} is {job.state}: nothing to inject into")
            attempt = live[-1].number
            nodes = [e["node"] for e in live[-1].placement_json]
        if body.fault == "node-unhealthy":
            if reconciler is None:
                raise HTTPException(503, detail="no reconciler in this process")
            reconciler.signal(Signal(nodes[0], SignalKind.XID, clock(), 79,
                                     f"injected into job {job_id}"))
            return {"job": job_id, "fault": body.fault, "node": nodes[0]}
        if backend is None or "inject" not in getattr(backend, "capabilities", ()):
            raise HTTPException(501, detail="this backend cannot inject faults")
        try:
            pids = backend.inject(job_id, attempt, body.fault, body.rank)
        except ValueError as e:
            raise HTTPException(422, detail=[{"field": "fault", "message": str(e)}]) from e
        return {"job": job_id, "fault": body.fault, "rank": body.rank, "pids": pids}

    @app.post("/nodes/{name}/signals", status_code=202)
    def node_signal(name: str, body: SignalRequest) -> dict[str, Any]:
        """A health signal for a node (from an exporter or a person); the health table acts
        on it next cycle. Kept in the store until then, so a restart loses none."""
        _node(name)
        try:
            kind = SignalKind(body.kind)
        except ValueError as e:
            raise HTTPException(422, detail=[{"field": "kind", "message": f"unknown signal; use "
                                              f"one of {[k.value for k in SignalKind]}"}]) from e
        with store.transaction() as s:
            repo.add_signal(s, name, kind.value, clock(), body.code, body.detail, "api")
        return {"node": name, "signal": kind.value, "code": body.code}

    @app.get("/nodes")
    def nodes() -> list[dict[str, Any]]:
        """Every node with its health memory and the jobs kept off it (``excluded_nodes``)."""
        now = clock()
        with store.read() as s:
            kept_off: dict[str, list[dict[str, Any]]] = {}
            for job in repo.jobs_in_states(s, [JobState.PENDING, JobState.RUNNING]):
                for e in exclusions.describe(job, now):
                    kept_off.setdefault(e["node"], []).append({**e, "job": job.id})
            breaker = breaker_message(s)
            return [{"name": n.name, "state": str(n.state), "reason": n.reason,
                     "actor": n.actor, "holder": n.holder, "lemon": bool(n.lemon),
                     "gpus": n.gpus, "gpu_model": n.gpu_model,
                     "breaker_open": breaker is not None,
                     "excluded_nodes": kept_off.get(n.name, [])}
                    for n in repo.nodes(s)]

    @app.get("/health/breaker")
    def breaker() -> dict[str, Any]:
        """Whether automatic draining is stopped, since when and why (the operator's page)."""
        with store.read() as s:
            last = breaker_message(s)
        if last is None:
            return {"open": False}
        return {"open": True, "since": last.at, "message": last.message}

    @app.post("/health/breaker/reset")
    def reset_breaker(actor: str = "api") -> dict[str, Any]:
        """A person re-enables automatic draining after finding the common cause."""
        _with_monitor(lambda m, now: m.reset_breaker(actor, now))
        return {"open": False, "actor": actor}

    @app.post("/nodes/{name}/drain")
    def drain(name: str, body: DrainRequest) -> dict[str, Any]:
        """Cordon now; the node becomes drained when its running jobs have left (at once,
        from a checkpoint each, with ``evict``). The person holds it: no diagnostic returns
        it without them."""
        _node(name)

        def act(m: Any, now: float) -> None:
            m.drain(name, body.reason, body.actor, now)

        _with_monitor(act, evict=(name, body.reason) if body.evict else None)
        return {"name": name, "state": "draining", "reason": body.reason, "evict": body.evict}

    @app.post("/nodes/{name}/resume")
    def resume(name: str, actor: str = "api", diagnose: bool = False) -> dict[str, Any]:
        """An operator returns a node to service: now (forced, no diagnostic in between), or
        with ``diagnose`` after it passes a level-3 diagnostic. Jobs kept off it may use it
        again once it is back."""
        _node(name)
        _with_monitor(lambda m, now: m.undrain(name, actor, now, force=not diagnose))
        with store.read() as s:
            state = str(repo.require_node(s, name).state)
        return {"name": name, "state": state}

    def _with_monitor(act: Any, evict: tuple[str, str] | None = None) -> None:
        """Apply an operator action through ``core.health``'s monitor, loaded from and saved
        to the store in one transaction (what the reconciler does with signals)."""
        now = clock()
        try:
            with store.transaction() as s:
                monitor = load_monitor(s, health_config, now)
                was_open = monitor.breaker_open
                act(monitor, now)
                save_monitor(s, monitor, was_open, now)
                if evict is not None:
                    repo.require_node(s, evict[0]).evict_reason = evict[1]
        except IllegalTransition as e:
            raise HTTPException(409, detail=str(e)) from e

    @app.get("/tenants")
    def tenants() -> list[dict[str, Any]]:
        with store.transaction() as s:
            hours = repo.gpu_hours_by_tenant(s, clock())
            return [{"name": t.name, "guaranteed_gpus": t.guaranteed_gpus,
                     "borrow_limit_gpus": t.borrow_limit_gpus, "weight": t.weight,
                     "preemptions_per_hour": t.preemptions_per_hour,
                     "gpu_hours": hours.get(t.name, 0.0)} for t in repo.tenants(s)]

    @app.get("/showback")
    def showback(since: float | None = None) -> dict[str, Any]:
        """Per tenant and job: GPU-hours allocated and useful, hours lost, cost (docs/cost.md)."""
        from grace.cost.showback_live import live_showback

        return live_showback(store, topo, state_dir, clock(), since)

    @app.put("/tenants/{name}")
    def set_quota(name: str, body: QuotaRequest) -> dict[str, Any]:
        with store.transaction() as s:
            repo.set_quota(s, name, **body.model_dump())
        return {"name": name, **body.model_dump()}

    def _node(name: str) -> None:
        if name not in topo.by_name:
            raise HTTPException(404, detail=f"no node {name!r}; see GET /nodes")

    return app


def _get(s, job_id: int):
    job = repo.get_job(s, job_id)
    if job is None:
        raise HTTPException(404, detail=f"no job {job_id}")
    return job


def _job_summary(job) -> dict[str, Any]:
    return {"id": job.id, "name": job.name, "tenant": job.tenant, "state": str(job.state),
            "workload_class": job.workload_class, "gpus": job.gpus, "priority": job.priority,
            "submitted_at": job.submitted_at, "started_at": job.started_at,
            "ended_at": job.ended_at, "attempts": job.attempts_count, "restarts": job.restarts,
            "reason": job.reason}


def _now() -> float:
    return time.time()
