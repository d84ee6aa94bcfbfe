"""The API's observability routes: ``/metrics``, ``/alerts``, ``/jobs/N/why``, and request timing.

``/metrics`` takes the same bearer tokens as every route (a ``viewer`` is enough,
as the issue asks: Prometheus scrapes with a viewer token from a file). A token
that sees every tenant gets the cached rendering as is; a tenant's member or
viewer gets the same families with other tenants' series left out, so a team
cannot read another team's job names, losses or GPU holdings off /metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Request
from fastapi import Path as InPath
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grace.control.api_contract import AUTH, MAX_INT32, errors
from grace.control.auth import Principal
from grace.control.store import repository as repo
from grace.observe.hub import Observability
from grace.observe.why import explain

#: labels that say whose a series is: a tenant-scoped token sees only its own
_OWNER_LABELS = ("tenant",)


class _Filtered(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def visible_families(families: list[Metric], who: Principal) -> list[Metric]:
    """``families`` less the samples of tenants ``who`` may not see."""
    if who.all_tenants:
        return families
    out = []
    for fam in families:
        kept = Metric(fam.name, fam.documentation, fam.type, fam.unit)
        kept.samples = [s for s in fam.samples
                        if all(s.labels.get(k) in (None, "", who.tenant) for k in _OWNER_LABELS)]
        out.append(kept)
    return out


def install_observe_routes(app: FastAPI, obs: Observability, store: Any, viewer: Any,
                           get_job: Callable[[Any, int, Principal], Any]) -> None:
    """Add the routes; ``get_job`` is the API's visibility check (404 for another tenant's)."""

    @app.get("/metrics", response_class=Response, responses=errors(*AUTH, 503))
    def metrics(request: Request, who: Principal = viewer) -> Response:
        """Prometheus' text format (prometheus-client); see docs/observability.md for each name."""
        if who.all_tenants:
            rendered = obs.metrics.scrape()
            if "gzip" in request.headers.get("accept-encoding", ""):
                return Response(rendered.gzipped, media_type=CONTENT_TYPE_LATEST,
                                headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
            body = rendered.text
        else:
            from prometheus_client import CollectorRegistry

            registry = CollectorRegistry(auto_describe=False)
            registry.register(_Filtered(visible_families(obs.families(), who)))
            body = generate_latest(registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @app.get("/alerts", responses=errors(*AUTH, 503))
    def alerts(who: Principal = viewer) -> list[dict[str, Any]]:
        """The runbook's alerts now (pending and firing), each with its action and reason."""
        return [alert_json(a) for a in obs.alerts()
                if who.all_tenants or a.labels.get("tenant") in (None, "", who.tenant)]

    @app.get("/jobs/{job_id}/why", responses=errors(*AUTH, 404, 422, 503))
    def why(job_id: Annotated[int, InPath(ge=1, le=MAX_INT32, description="a job id")],
            who: Principal = viewer) -> dict[str, Any]:
        """Why a job waits (its reason and what would let it start), or, running, what bounds
        it (input, communication, checkpoints or compute) with the runbook's action."""
        with store.read() as s:
            job = get_job(s, job_id, who)
            return explain(s, job, obs, repo.live_attempt(s, job)).to_json()


def alert_json(alert: Any) -> dict[str, Any]:
    """An alert as ``GET /alerts`` answers it (a non-finite value as null)."""
    return dict(alert.to_dict())


class RequestTimer:
    """ASGI middleware: ``grace_api_request_duration_seconds`` by method, route template and
    status code (the template, ``/jobs/{job_id}``, not the path: bounded labels)."""

    def __init__(self, app: ASGIApp, observe: Callable[[str, str, str, float], None]) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        code = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                code[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.observe(scope.get("method", ""), template, str(code[0]), time.perf_counter() - t0)


def request_observer(obs: Observability) -> Callable[[str, str, str, float], None]:
    def observe(method: str, route: str, code: str, seconds: float) -> None:
        obs.metrics.api_seconds.labels(method, route, code).observe(seconds)
    return observe


__all__ = ["RequestTimer", "alert_json", "install_observe_routes", "request_observer", "visible_families"]
