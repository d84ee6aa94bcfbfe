"""The dashboard's routes: pages, the job page's series, and the files the pages load.

Pages read the store through the view modules, each with the signed-in
``Principal``, so a page shows exactly what the API would answer that token. The
JSON the pages' scripts poll is the API's own (``/jobs/N/logs``) plus one route of
ours (``/ui/api/jobs/N/series``, the curves), all reads: a session cookie
authenticates GET and HEAD only (``control.auth``). None of these routes is in the
OpenAPI document: they are for browsers, not clients.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi import Path as InPath
from fastapi.responses import JSONResponse, Response

from grace.control.api_contract import MAX_INT32
from grace.control.auth import Authenticator, Principal, requirement
from grace.control.dashboard import assets, cluster_view, job_view, tenant_view
from grace.control.dashboard.render import page
from grace.control.dashboard.session import Sessions
from grace.control.dashboard.signin import PageRefused, SignedIn, page_principal, refused, signed_in
from grace.control.store import audit
from grace.control.store.db import Store
from grace.control.store.models import Role
from grace.core.topology import Topology

JobId = Annotated[int, InPath(ge=1, le=MAX_INT32, description="a job id")]
AssetName = Annotated[str, InPath(max_length=64, description="a file name")]
#: How often the pages' scripts poll (the series and the log tail), in milliseconds.
POLL_MS = 3000


def _observability(request: Request) -> Any:
    return getattr(request.app.state, "observability", None)


def _asset(found: assets.Asset | None) -> Response:
    if found is None:
        raise HTTPException(404, detail="no such file")
    return Response(found.body, media_type=found.media_type,
                    headers={"Cache-Control": assets.CACHE_CONTROL,
                             "X-Content-Type-Options": "nosniff"})


def add_routes(app: FastAPI, store: Store, topo: Topology, state_dir: Path,
               auth: Authenticator, sessions: Sessions, clock: Callable[[], float]) -> None:
    """On the app itself, not an included router: each is then an ``APIRoute`` of the app,
    which the role matrix (``tests/control/test_roles.py``) holds to a row each."""
    person = Depends(page_principal(auth, sessions, clock))
    viewer = Depends(requirement(auth, Role.VIEWER, "read"))

    @app.get("/", include_in_schema=False)
    def cluster(who: Principal = person) -> Response:
        view = cluster_view.cluster_map(store, topo, who)
        return page("map.html.j2", who=who, current="/", map=view)

    @app.get("/ui/queue", include_in_schema=False)
    def queue(who: Principal = person) -> Response:
        jobs = cluster_view.queue(store, who)
        return page("queue.html.j2", who=who, current="/ui/queue", jobs=jobs,
                    counts=cluster_view.queue_counts(jobs), now=clock())

    @app.get("/ui/jobs/{job_id}", include_in_schema=False)
    def job(request: Request, job_id: JobId, who: Principal = person) -> Response:
        view = job_view.job_page(store, job_id, who)
        if view is None:  # another tenant's job, like one that does not exist
            raise PageRefused(404, f"no job {job_id}", who)
        data = job_view.series(_observability(request), job_id)
        return page("job.html.j2", who=who, current="", job=view, points=data["points"],
                    plotted=job_view.plotted_points(data), available=data["available"],
                    poll_ms=POLL_MS)

    @app.get("/ui/api/jobs/{job_id}/series", include_in_schema=False)
    def series(request: Request, job_id: JobId, who: Principal = viewer) -> JSONResponse:
        if not job_view.visible(store, job_id, who):
            raise HTTPException(404, detail=f"no job {job_id}")
        return JSONResponse(job_view.series(_observability(request), job_id),
                            headers={"Cache-Control": "no-store"})

    @app.get("/ui/tenants", include_in_schema=False)
    def tenants(who: Principal = person) -> Response:
        rows = tenant_view.tenants(store, topo, state_dir, clock(), who)
        return page("tenants.html.j2", who=who, current="/ui/tenants", tenants=rows,
                    showback=who.at_least(Role.OPERATOR))

    @app.get("/ui/alerts", include_in_schema=False)
    def alerts(request: Request, who: Principal = person) -> Response:
        from grace.observe.routes import alert_json

        found = tenant_view.alerts(_observability(request), who, alert_json)
        return page("alerts.html.j2", who=who, current="/ui/alerts", alerts=found)

    @app.get(f"{assets.STATIC_PREFIX}/{{name}}", include_in_schema=False)
    def static(name: AssetName) -> Response:
        return _asset(assets.own(name))

    @app.get(assets.PLOTLY_URL, include_in_schema=False)
    def plotly() -> Response:
        return _asset(assets.plotly_js())

    @app.get(f"{assets.SWAGGER_PREFIX}/{{name}}", include_in_schema=False)
    def swagger(name: AssetName) -> Response:
        return _asset(assets.swagger(name))


def install_dashboard(app: FastAPI, store: Store, topo: Topology, state_dir: Path,
                      auth: Authenticator, clock: Callable[[], float],
                      writes_allowed: Callable[[], bool] = lambda: True) -> Sessions:
    """Add the dashboard to ``app`` and let ``auth`` accept its session cookie (for reads).
    Each sign-in is audited (``session.start``, its actor the token's), where this process
    may write: a standby writes nothing, so its sign-ins are in its access log only."""
    sessions = Sessions()
    auth.sessions = sessions
    app.state.dashboard_sessions = sessions
    add_routes(app, store, topo, state_dir, auth, sessions, clock)

    async def _refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, PageRefused)
        return refused(request, exc, auth.hint)

    async def _signed_in(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SignedIn)
        who = getattr(request.state, "principal", None)
        if who is not None and writes_allowed():
            audit.record(store, who.actor, audit.AuditAction.SESSION_START,
                         audit.token_target(who.token_id), audit.AuditOutcome.OK, clock(),
                         who.token_id, {"secure": exc.secure})
        return signed_in(exc)

    app.add_exception_handler(PageRefused, _refused)
    app.add_exception_handler(SignedIn, _signed_in)
    return sessions


__all__ = ["POLL_MS", "add_routes", "install_dashboard"]
