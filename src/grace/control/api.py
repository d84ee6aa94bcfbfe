"""The HTTP API (FastAPI; OpenAPI at /openapi.json, docs at /docs).

Input is validated with the same pydantic specs as the CLI. A bad request gets
a 4xx whose body names every bad field and its fix, and nothing is stored: the
spec is validated and compiled against the cluster before the transaction that
writes it opens.

Every route but ``/healthz`` needs a token and a role (``control.auth``): a
member sees and acts on its own tenant's jobs only (another tenant's are 404),
and the actor of every change comes from the token, never from the request.

Every error is ``{"detail": str | [{"field", "message"}]}`` and every route documents the
codes it answers (``api_contract``). Parameters and bodies are bounded to what the store
holds (ids fit a 32-bit INTEGER, names their VARCHAR(200), numbers are finite, no NUL: see
``spec.text_limits``); a body over 4 MiB is 413 (``http_limits``); a store that cannot be
written answers 507 (no space) or 503 with its reason, and ``/healthz`` says ``degraded``.

On a standby control plane (``leadership`` given and not leading) reads work and
every POST/PUT/PATCH/DELETE answers 503 naming the leader: a standby writes
nothing. A write that meets the fence (this process lost the lease meanwhile)
is rolled back and answers 503 too.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi import Path as InPath
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from grace.backends.isolation import read_job_json
from grace.backends.local_agent import write_json_atomic
from grace.control import log_reader, request_audit, sweep_metrics
from grace.control.access_log import AccessLog
from grace.control.admission import Admission, AdmissionRefused, admit
from grace.control.api_contract import (
    AUTH,
    BODY,
    MAX_INT32,
    READ,
    WRITE,
    HealthReport,
    document,
    errors,
    install_store_errors,
)
from grace.control.auth import Authenticator, Principal, job_requirement, requirement
from grace.control.dashboard import install_dashboard, swagger_page
from grace.control.http_limits import DEFAULT_MAX_BODY_BYTES, BodySizeLimit
from grace.control.live.context import JobDirs
from grace.control.live.context import job_dirs as live_job_dirs
from grace.control.node_health import HealthConfig, breaker_message, load_monitor, save_monitor
from grace.control.notify.policy import submit_problem
from grace.control.request_audit import RequestAudit
from grace.control.routes_notify import install_notify_routes
from grace.control.routes_sweep import (
    install_sweep_routes,
    submit_with_preflight,
    submitted_with_preflight,
)
from grace.control.routes_views import install_views_routes
from grace.control.routes_workflow import (
    ArrayFlag,
    TaskIndex,
    act_on,
    install_workflow_routes,
    submitted,
    targets,
)
from grace.control.routes_workflow import summary as workflow_summary
from grace.control.snapshot import JobCompiler
from grace.control.store import audit, exclusions, tokens
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.errors import Fenced, IllegalJobTransition
from grace.control.store.group_commit import AfterFlush
from grace.control.store.lease import Leadership
from grace.control.store.models import LIVE_ATTEMPT_STATES, Job, JobState, Role
from grace.control.store.writability import describe_failure, probe_write
from grace.core.health import IllegalTransition, Signal, SignalKind
from grace.core.jobs import JobCompileError
from grace.core.topology import Topology
from grace.observe.constraints import job_constraint
from grace.observe.hub import Observability
from grace.observe.routes import RequestTimer, install_observe_routes, request_observer
from grace.spec.errors import from_validation_error
from grace.spec.job import MAX_GPUS, JobSpec
from grace.spec.notify import NotifyConfig
from grace.spec.text_limits import (
    MAX_NAME_CHARS,
    MAX_TENANT_CHARS,
    MAX_TEXT_CHARS,
    TENANT_PATTERN,
    name_check,
    tenant_check,
    text_check,
)

# Path and query parameters, bounded to what the store's columns hold: ids are INTEGER
# (32-bit on PostgreSQL), names VARCHAR(200). Out of range is a 422 naming the parameter.
JobId = Annotated[int, InPath(ge=1, le=MAX_INT32, description="a job id", examples=[1])]
NodeName = Annotated[str, InPath(max_length=MAX_NAME_CHARS, description="a node name")]
TenantName = Annotated[str, InPath(max_length=MAX_TENANT_CHARS, description="a tenant name",
                                   json_schema_extra={"pattern": f"^{TENANT_PATTERN.pattern}$"}),
                       tenant_check()]
TokenId = Annotated[str, InPath(max_length=32, description="a token id, from GET /tokens")]


class DrainRequest(BaseModel):
    reason: Annotated[str, text_check("the reason")] = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, description="why; kept in the node's history")
    evict: bool = Field(default=False, description=(
        "move the node's jobs off now, each from a checkpoint taken on SIGTERM, instead of "
        "waiting for them to end"))


class QuotaRequest(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)  # unlimited is null, not Infinity

    guaranteed_gpus: float | None = Field(default=None, ge=0, le=MAX_GPUS,
                                          description="null: unlimited")
    borrow_limit_gpus: float | None = Field(default=None, ge=0, le=MAX_GPUS,
                                            description="null: unlimited")
    weight: float = Field(default=1.0, gt=0, le=1_000_000)
    preemptions_per_hour: int = Field(default=20, ge=0, le=1_000_000)


#: Jobs one ``POST /jobs:batch`` may carry (a sweep larger than this is several requests).
MAX_BATCH = 1000


def _problems(err: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    return [{"field": p.path or _field_named_in(p.message), "message": p.message}
            for p in from_validation_error("request", err, prefix).problems]


def _field_named_in(message: str) -> str:
    """A check across fields has no path of its own: name the first JobSpec field its
    message mentions ("gpus=2.5: only jobs under one GPU ..." is about ``gpus``)."""
    return next((w for w in re.findall(r"\b[a-z_]+\b", message) if w in JobSpec.model_fields), "")


class HeartbeatBatch(BaseModel):
    attempt: int = Field(ge=1, le=MAX_INT32)
    node: str = Field(default="", max_length=MAX_NAME_CHARS)
    rank: int = Field(default=0, ge=0, le=MAX_INT32)
    records: list[dict[str, Any]] = Field(default_factory=list, max_length=10_000)

    @field_validator("records")
    @classmethod
    def _finite(cls, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # the newest record is served back as JSON by GET /jobs/N, which has no NaN
        try:
            json.dumps(records, allow_nan=False)
        except ValueError as e:
            raise ValueError("records hold NaN or Infinity, which JSON cannot carry: send "
                             "null for a value that is not a number") from e
        return records


class InjectRequest(BaseModel):
    fault: str = Field(max_length=32,
                       description="kill-rank | hang-rank | straggler | node-unhealthy")
    rank: int = Field(default=0, ge=0, le=MAX_INT32)


class SignalRequest(BaseModel):
    kind: str = Field(max_length=64, description="a health signal kind, e.g. xid, nvlink-down, "
                                                 "heartbeat-missing",
                      json_schema_extra={"enum": [k.value for k in SignalKind]})
    code: int | None = Field(default=None, ge=0, le=MAX_INT32,
                             description="the Xid number, for kind xid")
    detail: Annotated[str, text_check("the detail")] = Field(default="", max_length=MAX_TEXT_CHARS)


class JobSubmission(JobSpec):
    """``JobSpec`` as ``POST /jobs`` documents it: the API requires a command (the twin's
    specs may omit it). Documentation only: the route validates ``JobSpec`` itself."""

    command: list[str] = Field(min_length=1, description="the program and its arguments")


class TokenRequest(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    name: Annotated[str, name_check("the token's name")] = Field(
        min_length=1, max_length=MAX_NAME_CHARS, description="who or what uses it")
    role: Role
    tenant: Annotated[str, tenant_check()] | None = Field(
        default=None, min_length=1, max_length=MAX_TENANT_CHARS, description=(
        "the tenant a member acts for (required for members); a viewer without one reads "
        "every tenant"))
    expires_in_s: float | None = Field(default=None, gt=0, le=10 * 365 * 86400,
                                       description="seconds until it expires; none: never")


_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: The end of each log file ``/jobs/N/logs`` reads at most (a job's log can be any size).
LOG_BYTES_PER_FILE = 8 * 1024 * 1024


def create_app(store: Store, topo: Topology, state_dir: Path,
               reconciler: Any = None, backend: Any = None,
               leadership: Leadership | None = None,
               health: HealthConfig | None = None,
               clock: Callable[[], float] = time.time,
               auth: Authenticator | None = None, allow_inject: bool = False,
               admission: Admission | None = None, status: Callable[[], dict[str, Any]] | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               access_log: Path | None = None,
               observability: Observability | None = None,
               notify: NotifyConfig | None = None,
               ) -> FastAPI:
    """The app over ``store``; ``leadership`` (from ``grace up``) adds the leader's view to
    /healthz and refuses writes while this process stands by. Without it (tests, tools)
    the app neither knows nor guards a role. Tokens are always checked (``auth``, by
    default one over ``store``); ``allow_inject`` (``grace up --allow-inject``) opens
    fault injection to admins; ``status`` adds what the backend reports to /healthz. Every
    mutating request is audited (``request_audit``) and every request access-logged
    (``access_log``: a file of its own too, mode 0600, when given). ``observability`` holds
    the heartbeats, metrics and alerts (``grace.observe``; one of its own when not given)."""
    # the document and its pages are served below, behind a token like every other route
    app = FastAPI(title="Grace", version="0.1.0", openapi_url=None, docs_url=None,
                  redoc_url=None,
                  description="Control plane of a private GPU training cluster. Every route "
                              "but /healthz needs 'Authorization: Bearer <token>'.")
    compiler = JobCompiler(topo)
    # operator actions decide with the reconciler's own health rules
    health_config = health or (reconciler.health.config if reconciler is not None
                               else HealthConfig())
    job_dirs_cache: list[JobDirs] = []
    auth = auth or Authenticator(store, clock)
    viewer = Depends(requirement(auth, Role.VIEWER, "read"))
    member = Depends(requirement(auth, Role.MEMBER, "submit or change jobs"))
    operator = Depends(requirement(auth, Role.OPERATOR, "act on nodes, quotas or others' jobs"))
    admin = Depends(requirement(auth, Role.ADMIN, "manage tokens, read the audit trail or "
                                                   "inject faults"))
    the_job = Depends(job_requirement(auth))
    obs = observability or Observability(store, topo, state_dir, clock)
    app.state.observability = obs

    def _get(s: Any, job_id: int, who: Principal) -> Job:
        """The job, if ``who`` may see it: another tenant's job is 404, like a missing one."""
        job = repo.get_job(s, job_id)
        if job is None or not who.sees(job.tenant):
            raise HTTPException(404, detail=f"no job {job_id}")
        return job

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

    @app.get("/openapi.json", include_in_schema=False)
    def openapi_document(who: Principal = viewer) -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def docs_page(who: Principal = viewer) -> HTMLResponse:
        """Swagger UI, its files served from the installed package (no CDN: it renders on a
        cluster without internet). It fetches /openapi.json, so a browser needs the token
        too: sign in to the dashboard once (``/?token=...``), and its cookie reads both."""
        return swagger_page(openapi_url="/openapi.json", title="Grace API")

    @app.get("/healthz", responses={503: {"model": HealthReport, "description": (
        "degraded: the store cannot be written (its reason in 'store')")}})
    def healthz() -> Any:
        """No token needed: a load balancer or a person checks it before anything else.
        It writes to the store (``store.writability``): a full disk or a read-only store
        is 503 ``degraded`` here, not "ok" while every submission fails."""
        report = {"status": "ok", **(leadership.health() if leadership is not None else {}),
                  **(status() if status is not None else {})}
        failure = probe_write(store, clock)
        if failure is None:
            return report
        return JSONResponse(status_code=503, content={
            **report, "status": "degraded", "store": f"unwritable: {failure.reason}"})

    @app.post("/jobs", status_code=201, responses=errors(*WRITE, *BODY))
    async def submit(body: dict[str, Any], request: Request,
                     who: Principal = member) -> dict[str, Any]:
        """A member submits for its own tenant (the body's ``tenant`` may only repeat it);
        operators and admins for any tenant (their token's, if the body names none).

        A coroutine, unlike most routes: its checks are computation (the token check, a
        dependency, runs on the thread pool as before), and it waits for its group's
        commit on the event loop, not in a pool thread (``GroupCommit.run_async``). An
        admission file means reading and hashing the job's scripts: that check goes to
        the thread pool."""
        body = _tenant_body(body, who)
        try:
            spec = JobSpec.model_validate(body)
        except ValidationError as e:
            raise HTTPException(422, detail=_problems(e)) from e
        record = _vet(spec) if admission is None else await run_in_threadpool(_vet, spec)

        def store_it(s: Session) -> AfterFlush:
            # one job, or an array's tasks; and its preflight job (routes_sweep). A single
            # job gets its id when the group's rows are flushed together (group_commit)
            jobs = submit_with_preflight(s, spec, who, clock(), _vet, numbered=False)
            for job in jobs:
                job.owner = job.owner or who.token_id
                job.admission = job.admission or record
            request_audit.stage_in(s, request.scope, 201, clock())  # the request's own entry
            return AfterFlush(lambda: submitted_with_preflight(jobs, submitted))

        # concurrent submissions share a transaction (group commit); answered once committed
        answer = await store.group_commit.run_async(store_it)
        request_audit.committed(request.scope, 201)
        return answer

    @app.post("/jobs:batch", status_code=201, responses=errors(*WRITE, *BODY))
    def submit_batch(body: dict[str, Any], request: Request,
                     who: Principal = member) -> dict[str, Any]:
        """Up to ``MAX_BATCH`` jobs in one request and one transaction, all stored or none
        (a sweep's trials, a pipeline's stages, a script's submitter): far fewer round
        trips and commits than one ``POST /jobs`` each. Each job is checked as ``POST
        /jobs`` checks it; a problem names its place (``jobs[3].gpus``). Answers
        ``{"jobs": [...]}``, each entry what ``POST /jobs`` answers, in order."""
        items = body.get("jobs")
        if not isinstance(items, list) or not items or len(items) > MAX_BATCH:
            raise HTTPException(422, detail=[{"field": "jobs", "message": (
                f"a list of 1 to {MAX_BATCH} job specs, e.g. {{\"jobs\": [{{\"name\": \"a\", "
                f"\"gpus\": 1, \"command\": [\"python\", \"train.py\"]}}]}}; split a "
                f"longer list into several requests")}])
        checked: list[tuple[JobSpec, dict[str, Any] | None]] = []
        for i, item in enumerate(items):
            where = f"jobs[{i}]"
            if not isinstance(item, dict):
                raise HTTPException(422, detail=[{"field": where, "message":
                                                  "each job is an object, as POST /jobs takes"}])
            try:
                spec = JobSpec.model_validate(_tenant_body(item, who))
                checked.append((spec, _vet(spec)))
            except ValidationError as e:
                raise HTTPException(422, detail=[
                    {"field": f"{where}.{p['field']}".rstrip("."), "message": p["message"]}
                    for p in _problems(e)]) from e
            except HTTPException as e:
                if e.status_code != 422 or not isinstance(e.detail, list):
                    raise
                raise HTTPException(422, detail=[
                    {"field": f"{where}.{p['field']}".rstrip("."), "message": p["message"]}
                    for p in e.detail]) from e
        out: list[dict[str, Any]] = []
        with store.transaction() as s:
            now = clock()
            for spec, record in checked:
                jobs = submit_with_preflight(s, spec, who, now, _vet)
                for job in jobs:
                    job.owner = job.owner or who.token_id
                    job.admission = job.admission or record
                out.append(submitted_with_preflight(jobs, submitted))
            request_audit.stage_in(s, request.scope, 201, now)
        request_audit.committed(request.scope, 201)
        return {"jobs": out}

    def _tenant_body(body: dict[str, Any], who: Principal) -> dict[str, Any]:
        """``body`` for ``who``'s tenant: a member's may only repeat it (403 otherwise)."""
        body = dict(body)
        if not who.all_tenants:
            if body.get("tenant", who.tenant) != who.tenant:
                raise HTTPException(403, detail=f"this token submits for tenant {who.tenant!r} "
                                                f"only, not {body.get('tenant')!r}; drop the "
                                                f"job's tenant, or `grace submit --tenant "
                                                f"{who.tenant}` for a file written for another")
            body["tenant"] = who.tenant
        elif "tenant" not in body and who.tenant:
            body["tenant"] = who.tenant
        return body

    def _vet(spec: JobSpec) -> dict[str, Any] | None:
        """A job's checks at submit (422 naming the field); its admission record."""
        if not spec.command:
            raise HTTPException(422, detail=[{"field": "command", "message":
                                              "a job needs a command to run, e.g. "
                                              "['python', 'train.py']"}])
        try:
            compiler.check(spec)
        except JobCompileError as e:
            raise HTTPException(422, detail=[{"field": "gpus", "message": str(e)}]) from e
        try:  # vetted code only (grace up --admission): checked again at every launch
            record = admit(admission, spec)
        except AdmissionRefused as e:
            raise HTTPException(422, detail=[{"field": e.field, "message": e.message}]) from e
        notify_problem = submit_problem(notify, spec)  # job webhooks: allowed hosts only
        if notify_problem is not None:
            raise HTTPException(422, detail=[notify_problem])
        return record

    @app.get("/jobs", responses=errors(*READ))
    def list_jobs(state: str | None = Query(None, max_length=32),
                  tenant: str | None = Query(None, max_length=MAX_NAME_CHARS),
                  limit: int = Query(200, ge=1, le=1000, description="at most this many"),
                  offset: int = Query(0, ge=0, le=MAX_INT32, description="skip this many"),
                  after: int | None = Query(None, ge=1, le=MAX_INT32, description=(
                      "only jobs older than this id: the last id of the page before "
                      "(keyset paging; cheaper and steadier than offset)")),
                  who: Principal = viewer) -> list[dict[str, Any]]:
        if state is not None and state not in {s.value for s in JobState}:
            raise HTTPException(422, detail=[{"field": "state", "message":
                                              f"unknown state; use one of "
                                              f"{[s.value for s in JobState]}"}])
        if not who.all_tenants:
            if tenant is not None and tenant != who.tenant:
                return []  # another tenant's jobs do not exist for this token
            tenant = who.tenant
        with store.read() as s:
            return [_job_summary(j) for j in repo.list_jobs(
                s, state=JobState(state) if state else None, tenant=tenant,
                limit=limit, offset=offset, after=after)]

    @app.get("/jobs/{job_id}", responses=errors(*READ, 404))
    def show(job_id: JobId, who: Principal = viewer) -> dict[str, Any]:
        with store.read() as s:
            job = _get(s, job_id, who)
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
            out["constraint"] = job_constraint(job, obs.telemetry, topo)  # live jobs; else None
            number = job.attempts_count
        adir = dirs().attempt(job_id, number)
        out["progress"] = {}
        # written by this API, in a directory the job owns: never follow what the job put there
        for f in sorted(adir.glob("progress-rank*.json")) if adir.is_dir() else []:
            record = read_job_json(f, None)
            if record is not None:
                out["progress"][f.stem.removeprefix("progress-")] = record
        return out

    @app.post("/jobs/{job_id}/clear-exclusions", responses=errors(*WRITE, 404))
    def clear_exclusions(job_id: JobId, who: Principal = operator) -> dict[str, Any]:
        """An operator lets a job use every node again (it was moved off or failed on some)."""
        with store.transaction() as s:
            nodes = exclusions.clear(s, _get(s, job_id, who), who.actor, clock(), who.token_id)
        return {"job": job_id, "cleared": nodes}

    @app.post("/jobs/{job_id}/cancel", responses=errors(*WRITE, 404, 409))
    def cancel(job_id: JobId, who: Principal = member, array: ArrayFlag = False,
               task: TaskIndex = None) -> dict[str, Any]:
        """Cancel a job; with ``array``, every task of the array it names that has not
        ended (``scancel 12``), with ``task`` one of them (``scancel 12_3``)."""
        def act(job: Job) -> None:
            if job.is_terminal:
                raise IllegalJobTransition(f"job {job.id} already ended ({job.state})")
            repo.request_cancel(s, job.id, clock(), who.actor, who.token_id)

        with store.transaction() as s:
            jobs = targets(s, _get(s, job_id, who), array, task)
            out = act_on(jobs, act)
            if len(jobs) == 1 and not array:
                return {"id": jobs[0].id, "cancel_requested": True}
            return {"id": job_id, "cancel_requested": True, **out}

    @app.get("/jobs/{job_id}/logs", response_class=PlainTextResponse,
             responses=errors(*READ, 404))
    def logs(job_id: JobId, attempt: int | None = Query(None, ge=1, le=MAX_INT32),
             node: str | None = Query(None, max_length=MAX_NAME_CHARS),
             tail: int = Query(200, ge=1, le=1_000_000, description="lines per source"),
             who: Principal = viewer) -> str:
        """The last ``tail`` lines of each node's agent and each rank, ``[node/rankN] line``
        (each line once: see ``log_reader``); ``/jobs/N/logs/follow`` reads from offsets."""
        with store.read() as s:
            job = _get(s, job_id, who)
            number = attempt or job.attempts_count
            placement = next((a.placement_json for a in job.attempts if a.number == number), [])
        adir = dirs().attempt(job_id, number)
        if not adir.is_dir():
            return ""
        owner = os.lstat(adir).st_uid  # the job's uid: a link or FIFO it planted is skipped
        lines = log_reader.tail(adir, log_reader.sources(adir, placement, node), owner, tail,
                                LOG_BYTES_PER_FILE)
        return "\n".join(lines) + ("\n" if lines else "")

    @app.get("/jobs/{job_id}/logs/follow", responses=errors(*READ, 404))
    def follow_logs(
            job_id: JobId,
            cursor: str | None = Query(None, max_length=log_reader.MAX_CURSOR_CHARS, description=(
                "the last answer's cursor; none: from the start of the attempt")),
            attempt: int | None = Query(None, ge=1, le=MAX_INT32, description=(
                "the attempt (default: the cursor's, else the latest)")),
            node: str | None = Query(None, max_length=MAX_NAME_CHARS, description="this node only"),
            who: Principal = viewer) -> dict[str, Any]:
        """An attempt's new lines since ``cursor``, each once, labelled ``node/rankN`` (or
        ``node/agent``), in order per file; ``more``: call again at once; ``ended``: the
        attempt is over and every line of it was returned. See ``log_reader``."""
        try:
            at = log_reader.Cursor.decode(cursor) if cursor is not None else None
        except log_reader.CursorError as e:
            raise HTTPException(422, detail=[{"field": "query.cursor", "message": str(e)}]) from e
        if at is not None and at.job != job_id:
            raise HTTPException(422, detail=[{"field": "query.cursor", "message": (
                f"this cursor is for job {at.job}, not {job_id}; omit it to read from the start")}])
        if at is not None and attempt is not None and at.attempt != attempt:
            raise HTTPException(422, detail=[{"field": "query.cursor", "message": (
                f"this cursor is for attempt {at.attempt}, not {attempt}; omit one of them")}])
        with store.read() as s:  # the attempt's state first: if it ended, its files are whole
            job = _get(s, job_id, who)
            number = at.attempt if at is not None else attempt or job.attempts_count
            found = next((a for a in job.attempts if a.number == number), None)
            out: dict[str, Any] = {
                "job": job_id, "job_state": str(job.state), "job_ended": job.is_terminal,
                "attempts": job.attempts_count, "attempt": number or None,
                "attempt_state": str(found.state) if found else None, "lines": []}
            placement = list(found.placement_json) if found else []
            final = found is not None and found.state not in LIVE_ATTEMPT_STATES
        if found is None and number:
            raise HTTPException(404, detail=f"job {job_id} has no attempt {number}")
        if node is not None and found is not None and node not in {e["node"] for e in placement}:
            raise HTTPException(422, detail=[{"field": "query.node", "message": (
                f"attempt {number} ran on {', '.join(e['node'] for e in placement)}, not {node}")}])
        if found is None:  # not started yet: no cursor, the next call picks the attempt then
            return out | {"cursor": None, "more": False, "ended": out["job_ended"]}
        at = at or log_reader.Cursor(job_id, number)
        adir = dirs().attempt(job_id, number)
        if not adir.is_dir():
            return out | {"cursor": at.encode(), "more": False, "ended": final}
        owner = os.lstat(adir).st_uid  # the job's uid: a link or FIFO it planted is skipped
        chunk = log_reader.follow(adir, log_reader.sources(adir, placement, node), at, owner,
                                  final=final)
        return out | {"lines": chunk.lines, "cursor": chunk.cursor.encode(), "more": chunk.more,
                      "ended": final and chunk.drained}

    @app.post("/jobs/{job_id}/heartbeats", status_code=204,
              responses=errors(*AUTH, 404, *BODY, 503, 507))
    def heartbeats(job_id: JobId, body: HeartbeatBatch, who: Principal = the_job) -> None:
        """The runtime's batched progress: the newest record per rank is kept for ``grace job``.
        Only the attempt's own token (``GRACE_TOKEN``) may post them, for its own attempt."""
        assert who.job is not None
        if body.attempt != who.job.attempt:
            raise HTTPException(403, detail=f"this token is for attempt {who.job.attempt} of "
                                            f"job {job_id}, not attempt {body.attempt}")
        if not body.records:
            return
        adir = dirs().attempt(job_id, body.attempt)
        if not adir.is_dir():
            raise HTTPException(404, detail=f"job {job_id} has no attempt {body.attempt} here")
        try:  # a fresh temp file, renamed: a link the job planted is replaced, never followed
            write_json_atomic(adir / f"progress-rank{body.rank}.json",
                              body.records[-1] | {"node": body.node})
            if body.rank == 0:  # the objective sweeps rank and stop trials by
                sweep_metrics.record(adir, body.records)
        except OSError as e:  # a full disk is the operator's to fix, not a crash
            failure = describe_failure(e)
            raise HTTPException(failure.status, detail=failure.detail) from e
        obs.telemetry.add(job_id, body.attempt, body.rank, body.node, body.records, clock())

    @app.post("/jobs/{job_id}/inject", responses=errors(*WRITE, 404, *BODY, 501))
    def inject(job_id: JobId, body: InjectRequest, who: Principal = admin) -> dict[str, Any]:
        """Cause a fault on purpose, to test recovery: kill or hang a rank, or make its node
        report a fatal Xid (79, fallen off the bus) through the health table. Only with
        ``grace up --allow-inject``, and only for admins."""
        if not allow_inject:
            raise HTTPException(403, detail="fault injection is off: start `grace up "
                                            "--allow-inject` to allow it (admins only)")
        with store.read() as s:
            job = _get(s, job_id, who)
            live = [a for a in job.attempts if str(a.state) in ("starting", "running")]
            if job.state != JobState.RUNNING or not live:
                raise HTTPException(409, detail=f"job {job_id} is {job.state}: nothing to inject into")
            attempt = live[-1].number
            nodes = [e["node"] for e in live[-1].placement_json]

        def injected(detail: dict[str, Any]) -> None:
            audit.record(store, who.actor, audit.AuditAction.JOB_INJECT, audit.job_target(job_id),
                         audit.AuditOutcome.OK, clock(), who.token_id,
                         {"fault": body.fault, "rank": body.rank, "attempt": attempt, **detail})
        if body.fault == "node-unhealthy":
            if reconciler is None:
                raise HTTPException(503, detail="no reconciler in this process")
            reconciler.signal(Signal(nodes[0], SignalKind.XID, clock(), 79,
                                     f"injected into job {job_id} by {who.actor}"))
            injected({"node": nodes[0]})
            return {"job": job_id, "fault": body.fault, "node": nodes[0]}
        if backend is None or "inject" not in getattr(backend, "capabilities", ()):
            raise HTTPException(501, detail="this backend cannot inject faults")
        try:
            pids = backend.inject(job_id, attempt, body.fault, body.rank)
        except ValueError as e:
            raise HTTPException(422, detail=[{"field": "fault", "message": str(e)}]) from e
        injected({"pids": pids})
        return {"job": job_id, "fault": body.fault, "rank": body.rank, "pids": pids}

    @app.post("/nodes/{name}/signals", status_code=202, responses=errors(*WRITE, 404, *BODY))
    def node_signal(name: NodeName, body: SignalRequest,
                    who: Principal = operator) -> dict[str, Any]:
        """A health signal for a node (from an exporter or a person); the health table acts
        on it next cycle. Kept in the store until then, so a restart loses none."""
        _node(name)
        try:
            kind = SignalKind(body.kind)
        except ValueError as e:
            raise HTTPException(422, detail=[{"field": "kind", "message": f"unknown signal; use "
                                              f"one of {[k.value for k in SignalKind]}"}]) from e
        with store.transaction() as s:
            repo.add_signal(s, name, kind.value, clock(), body.code, body.detail, who.actor,
                            token_id=who.token_id)
        return {"node": name, "signal": kind.value, "code": body.code}

    @app.get("/nodes", responses=errors(*AUTH, 503))
    def nodes(who: Principal = viewer) -> list[dict[str, Any]]:
        """Every node with its health memory and the jobs kept off it (``excluded_nodes``;
        a member or a tenant's viewer sees its own tenant's jobs there only)."""
        now = clock()
        with store.read() as s:
            kept_off: dict[str, list[dict[str, Any]]] = {}
            for job in repo.jobs_in_states(s, [JobState.PENDING, JobState.RUNNING]):
                if not who.sees(job.tenant):
                    continue
                for e in exclusions.describe(job, now):
                    kept_off.setdefault(e["node"], []).append({**e, "job": job.id})
            breaker = breaker_message(s)
            return [{"name": n.name, "state": str(n.state), "reason": n.reason,
                     "actor": n.actor, "holder": n.holder, "lemon": bool(n.lemon),
                     "gpus": n.gpus, "gpu_model": n.gpu_model,
                     "breaker_open": breaker is not None,
                     "excluded_nodes": kept_off.get(n.name, [])}
                    for n in repo.nodes(s)]

    @app.get("/health/breaker", responses=errors(*AUTH, 503))
    def breaker(who: Principal = viewer) -> dict[str, Any]:
        """Whether automatic draining is stopped, since when and why (the operator's page)."""
        with store.read() as s:
            last = breaker_message(s)
        if last is None:
            return {"open": False}
        return {"open": True, "since": last.at, "message": last.message}

    @app.post("/health/breaker/reset", responses=errors(*WRITE))
    def reset_breaker(who: Principal = operator) -> dict[str, Any]:
        """A person re-enables automatic draining after finding the common cause."""
        _with_monitor(lambda m, now: m.reset_breaker(who.actor, now), who)
        return {"open": False, "actor": who.actor}

    @app.post("/nodes/{name}/drain", responses=errors(*WRITE, 404, *BODY))
    def drain(name: NodeName, body: DrainRequest, who: Principal = operator) -> dict[str, Any]:
        """Cordon now; the node becomes drained when its running jobs have left (at once,
        from a checkpoint each, with ``evict``). The person holds it: no diagnostic returns
        it without them."""
        _node(name)

        def act(m: Any, now: float) -> None:
            m.drain(name, body.reason, who.actor, now)

        _with_monitor(act, who, evict=(name, body.reason) if body.evict else None)
        return {"name": name, "state": "draining", "reason": body.reason, "evict": body.evict}

    @app.post("/nodes/{name}/resume", responses=errors(*WRITE, 404))
    def resume(name: NodeName, diagnose: bool = False,
               who: Principal = operator) -> dict[str, Any]:
        """An operator returns a node to service: now (forced, no diagnostic in between), or
        with ``diagnose`` after it passes a level-3 diagnostic. Jobs kept off it may use it
        again once it is back."""
        _node(name)
        _with_monitor(lambda m, now: m.undrain(name, who.actor, now, force=not diagnose), who)
        with store.read() as s:
            state = str(repo.require_node(s, name).state)
        return {"name": name, "state": state}

    def _with_monitor(act: Any, who: Principal, evict: tuple[str, str] | None = None) -> None:
        """Apply an operator action through ``core.health``'s monitor, loaded from and saved
        to the store in one transaction (what the reconciler does with signals)."""
        now = clock()
        try:
            with store.transaction() as s:
                monitor = load_monitor(s, health_config, now)
                was_open = monitor.breaker_open
                act(monitor, now)
                save_monitor(s, monitor, was_open, now, token_id=who.token_id)
                if evict is not None:
                    repo.require_node(s, evict[0]).evict_reason = evict[1]
        except IllegalTransition as e:
            raise HTTPException(409, detail=str(e)) from e
        except KeyError as e:  # core.health: a node the store has not registered yet
            raise HTTPException(503, headers={"Retry-After": "1"}, detail=(
                f"{e.args[0] if e.args else e}: the control plane registers its nodes when "
                "it starts leading; retry in a moment")) from e

    @app.get("/tenants", responses=errors(*AUTH, 503))
    def tenants(who: Principal = viewer) -> list[dict[str, Any]]:
        with store.read() as s:
            hours = repo.gpu_hours_by_tenant(s, clock())
            return [{"name": t.name, "guaranteed_gpus": t.guaranteed_gpus,
                     "borrow_limit_gpus": t.borrow_limit_gpus, "weight": t.weight,
                     "preemptions_per_hour": t.preemptions_per_hour,
                     "gpu_hours": hours.get(t.name, 0.0)} for t in repo.tenants(s)
                    if who.sees(t.name)]

    @app.get("/showback", responses=errors(*READ))
    def showback(since: float | None = Query(None, ge=0, le=1e11, allow_inf_nan=False,
                                             description="epoch seconds"),
                 who: Principal = operator) -> dict[str, Any]:
        """Per tenant and job: GPU-hours allocated and useful, hours lost, cost (docs/cost.md).
        Every tenant's figures: operators and admins (a member reads its own in ``/tenants``)."""
        from grace.cost.showback_live import live_showback

        return live_showback(store, topo, state_dir, clock(), since)

    @app.put("/tenants/{name}", responses=errors(*WRITE, 404, *BODY))
    def set_quota(name: TenantName, body: QuotaRequest,
                  who: Principal = operator) -> dict[str, Any]:
        with store.transaction() as s:
            repo.set_quota(s, name, **body.model_dump(), actor=who.actor, token_id=who.token_id,
                           now=clock())
        return {"name": name, **body.model_dump()}

    @app.post("/tokens", status_code=201, responses=errors(*WRITE, *BODY))
    def create_token(body: TokenRequest, who: Principal = admin) -> dict[str, Any]:
        """A new token; its text is in this answer only (the store keeps its hash)."""
        if body.role is Role.MEMBER and body.tenant is None:
            raise HTTPException(422, detail=[{"field": "tenant", "message":
                                              "a member token needs the tenant it acts for"}])
        now = clock()
        with store.transaction() as s:
            if body.tenant is not None:
                repo.ensure_tenant(s, body.tenant)
            row, text = tokens.create(
                s, name=body.name, role=body.role, tenant=body.tenant, created_by=who.actor,
                now=now, expires_at=now + body.expires_in_s if body.expires_in_s else None)
            audit.append(s, who.actor, audit.AuditAction.TOKEN_CREATE, audit.token_target(row.id),
                         audit.AuditOutcome.OK, now, who.token_id,
                         {"role": str(row.role), "tenant": row.tenant, "name": row.name})
            return {**_token_json(row), "token": text}

    @app.get("/tokens", responses=errors(*AUTH, 503))
    def list_tokens(who: Principal = admin) -> list[dict[str, Any]]:
        with store.read() as s:
            return [_token_json(t) for t in tokens.listed(s)]

    @app.delete("/tokens/{token_id}", responses=errors(*WRITE, 404))
    def revoke_token(token_id: TokenId, who: Principal = admin) -> dict[str, Any]:
        with store.transaction() as s:
            row = tokens.revoke(s, token_id, clock())
            if row is None:
                raise HTTPException(404, detail=f"no token {token_id!r}; see GET /tokens")
            audit.append(s, who.actor, audit.AuditAction.TOKEN_REVOKE, audit.token_target(row.id),
                         audit.AuditOutcome.OK, clock(), who.token_id, {"name": row.name})
            return _token_json(row)

    @app.get("/audit", responses=errors(*READ))
    def audit_entries(since: float | None = Query(None, ge=0, le=1e11, allow_inf_nan=False,
                                                  description="epoch seconds"),
                      actor: str | None = Query(None, max_length=200),
                      action: str | None = Query(None, max_length=64),
                      target: str | None = Query(None, max_length=400),
                      limit: int = Query(200, ge=1, le=10_000),
                      offset: int = Query(0, ge=0, le=2**31 - 1),
                      who: Principal = admin) -> list[dict[str, Any]]:
        """The audit trail, oldest first: who did what to which thing, and how it went."""
        with store.read() as s:
            try:
                return audit.entries_json(s, since, actor, action, target, limit, offset)
            except ValueError as e:
                raise HTTPException(422, detail=[{"field": "action", "message": str(e)}]) from e

    @app.get("/audit/verify", responses=errors(*READ))
    def audit_verify(anchor: str | None = Query(None, max_length=200,
                                                description=audit.ANCHOR_HELP),
                     who: Principal = admin) -> dict[str, Any]:
        """Walk the hash chain: ``ok``, or the first entry where it breaks (200 either way)."""
        with store.read() as s:
            try:
                return audit.verify_json(s, anchor)
            except ValueError as e:
                raise HTTPException(422, detail=[{"field": "anchor", "message": str(e)}]) from e

    @app.get("/audit/head", responses=errors(*READ))
    def audit_head(who: Principal = admin) -> dict[str, Any]:
        """The chain's newest entry as ``seq:hash``: keep it elsewhere as an anchor."""
        with store.read() as s:
            return audit.head_json(s)

    def _node(name: str) -> None:
        if name not in topo.by_name:
            raise HTTPException(404, detail=f"no node {name!r}; see GET /nodes")

    install_observe_routes(app, obs, store, viewer, _get)
    install_notify_routes(app, store, viewer, _get)  # GET /jobs/N/notifications
    # history (sacct), priority (sprio), shares (sshare), node allocation: reads only
    install_views_routes(app, store, topo, reconciler, viewer, clock)
    install_workflow_routes(app, store, member, _get, clock)  # hold, release, requeue
    install_sweep_routes(app, store, member, viewer, _get, dirs, clock, _vet, _tenant_body)
    # the web dashboard at / (and the files /docs loads); its session cookie reads only
    install_dashboard(app, store, topo, state_dir, auth, clock,
                      writes_allowed=lambda: leadership is None or leadership.get().leading)
    install_store_errors(app)
    document(app, {("POST", "/jobs"): JobSubmission})
    app.add_middleware(RequestAudit, store=store, clock=clock,
                       writes_allowed=lambda: leadership is None or leadership.get().leading)
    # a body over the limit is refused before anything reads it
    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    app.add_middleware(RequestTimer, observe=request_observer(obs))
    app.add_middleware(AccessLog, path=access_log, clock=clock)  # outermost: it sees every answer
    return app


def _token_json(t: Any) -> dict[str, Any]:
    return {"id": t.id, "name": t.name, "role": str(t.role), "tenant": t.tenant,
            "created_at": t.created_at, "created_by": t.created_by, "expires_at": t.expires_at,
            "revoked_at": t.revoked_at, "last_used_at": t.last_used_at}


def _job_summary(job) -> dict[str, Any]:
    return {"id": job.id, "name": job.name, "tenant": job.tenant, "state": str(job.state),
            "workload_class": job.workload_class, "gpus": job.gpus, "priority": job.priority,
            "submitted_at": job.submitted_at, "started_at": job.started_at,
            "ended_at": job.ended_at, "attempts": job.attempts_count, "restarts": job.restarts,
            "reason": job.reason, **workflow_summary(job)}


def _now() -> float:
    return time.time()
