"""The web dashboard and /docs through TestClient: sign-in, who sees what, nothing from elsewhere.

The app is the real one (``create_app``) over a real store, with the reconciler
wired in as ``grace up`` does and a scripted backend, so the map shows jobs the
scheduler really placed. Tenants ``alpha`` and ``beta`` each run a job; a member
of beta must learn nothing of alpha's (its name, id or tenant) from any page.
The browser itself is driven in ``test_dashboard_browser.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import LAB, FakeClock, lab_reconciler, make_token

from grace.control.api import create_app
from grace.control.auth import SESSION_COOKIE
from grace.control.dashboard.session import MAX_AGE_S, Sessions
from grace.control.reconciler import Reconciler
from grace.control.store import audit
from grace.control.store.db import Store
from grace.core.decisions import NEXT_STEP, PendingReason
from grace.core.topology import Topology
from grace.observe.alerts import Alert, AlertState
from grace.observe.runbook_spec import Severity
from grace.spec.loader import load_cluster

PAGES = ("/", "/ui/queue", "/ui/jobs/{alpha}", "/ui/tenants", "/ui/alerts")
SECRET = "alpha-secret-train"  # alpha's running job: no beta page may name it
QUEUED = "alpha-queued-big"  # alpha's pending job (asks for more GPUs than are free)


@dataclass
class World:
    app: Any
    store: Store
    clock: FakeClock
    rec: Reconciler
    admin: str
    alpha: int  # alpha's running job
    beta: int  # beta's running job
    queued: int  # alpha's pending job

    def client(self, **kw: Any) -> TestClient:
        return TestClient(self.app, **kw)

    def bearer(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.admin}"}

    def signed_in(self, token: str, **kw: Any) -> TestClient:
        """A browser that opened ``/?token=...`` once (it keeps the cookie, not the token)."""
        browser = self.client(**kw)
        r = browser.get("/", params={"token": token}, follow_redirects=False)
        assert r.status_code == 303, r.text
        assert browser.cookies.get(SESSION_COOKIE)
        return browser


@pytest.fixture
def world(store: Store, tmp_path: Path) -> World:
    clock = FakeClock()
    rec = lab_reconciler(store, tmp_path / "state", clock)
    app = create_app(store, rec.topo, tmp_path / "state", rec, rec.backend, clock=clock,
                     access_log=tmp_path / "access.log")
    admin = make_token(store, "admin")
    api = TestClient(app, headers={"Authorization": f"Bearer {admin}"})
    ids = []
    for tenant, name, gpus in [("alpha", SECRET, 4), ("beta", "beta-train", 2),
                               ("alpha", QUEUED, 12)]:
        r = api.post("/jobs", json={"name": name, "tenant": tenant, "gpus": gpus,
                                    "command": ["python", "train.py"]})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    rec.cycle()  # alpha's and beta's first jobs start; the 12-GPU one waits
    return World(app, store, clock, rec, admin, *ids)


class _Refs(HTMLParser):
    """Every URL a page makes the browser load or link to, and every element id."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "action", "poster", "data") and value is not None:
                self.urls.append(value)
            if name == "id" and value:
                self.ids.add(value)


def refs(html: str) -> _Refs:
    parser = _Refs()
    parser.feed(html)
    return parser


def _external(text: str) -> list[str]:
    """URLs with a scheme that reaches a network, or protocol-relative ones in CSS."""
    return re.findall(r"\b(?:https?|wss?|ftp)://[^\s'\"<>)]*|url\(\s*['\"]?//[^)]*", text)


# ---------------------------------------------------------------- sign-in
def test_opening_a_page_with_a_token_signs_in_and_takes_the_token_out_of_the_url(
        world: World) -> None:
    token = make_token(world.store, "viewer", name="ada")
    browser = world.client()
    r = browser.get("/ui/queue", params={"token": token, "sort": "age"}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/ui/queue?sort=age"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    attrs = {p.strip().split("=")[0].lower() for p in cookie.split(";")}
    assert {"httponly", "path", "samesite"} <= attrs and "secure" not in attrs
    assert "samesite=strict" in cookie.lower() and "path=/" in cookie.lower()
    session = browser.cookies[SESSION_COOKIE]
    assert token not in cookie and len(session) >= 40  # a random id, not the token
    page = browser.get("/ui/queue")  # the cookie alone now
    assert page.status_code == 200 and "ada · viewer" in page.text
    assert token not in page.text
    with world.store.read() as s:  # the sign-in is in the audit trail, with its actor
        started = [e for e in audit.entries_json(s, None, None, "session.start", None, 10, 0)]
    assert len(started) == 1 and "ada" in started[0]["actor"], started


def test_over_https_the_session_cookie_is_secure(world: World) -> None:
    browser = world.client(base_url="https://testserver")
    r = browser.get("/", params={"token": world.admin}, follow_redirects=False)
    assert r.status_code == 303 and "secure" in r.headers["set-cookie"].lower()


def test_a_browser_without_a_session_gets_the_sign_in_page(world: World) -> None:
    browser = world.client()
    for path in [p.format(alpha=world.alpha) for p in PAGES]:
        r = browser.get(path)
        assert r.status_code == 401, path
        assert r.headers["content-type"].startswith("text/html")
        found = refs(r.text)
        assert "token" in found.ids and '<form method="get"' in r.text
        assert "Traceback" not in r.text
    bad = browser.get("/", params={"token": "grace_000000000000_" + "x" * 43},
                      follow_redirects=False)
    assert bad.status_code == 401 and "unknown token" in bad.text
    assert SESSION_COOKIE not in bad.headers.get("set-cookie", "")
    assert browser.get("/jobs").status_code == 401  # the API still answers JSON
    assert browser.get("/jobs").json()["detail"].startswith("no token")


def test_a_job_token_cannot_sign_in(world: World) -> None:
    from grace.control.store import tokens

    with world.store.transaction() as s:
        job_token = tokens.job_token(s, world.alpha, 1)
    r = world.client().get("/", params={"token": job_token}, follow_redirects=False)
    assert r.status_code == 403 and "heartbeats only" in r.text
    assert world.client().get("/", headers=world.bearer(job_token)).status_code == 403


def test_a_revoked_tokens_session_ends(world: World) -> None:
    token = make_token(world.store, "viewer", name="soon-revoked")
    browser = world.signed_in(token)
    assert browser.get("/").status_code == 200
    assert browser.get("/jobs").status_code == 200  # the JSON API reads with the cookie too
    sessions = world.app.state.dashboard_sessions
    live = len(sessions)
    token_id = token.split("_")[1]
    assert world.client().delete(f"/tokens/{token_id}", headers=world.bearer()).status_code == 200
    r = browser.get("/")
    assert r.status_code == 401 and "revoked" in r.text
    assert len(sessions) == live - 1  # ended, not merely refused
    assert browser.get("/").status_code == 401 and browser.get("/jobs").status_code == 401


def test_a_session_ends_with_its_tokens_expiry_and_after_12_hours(world: World) -> None:
    expiring = make_token(world.store, "viewer", expires_at=world.clock.now + 60)
    lasting = make_token(world.store, "viewer")
    short, long = world.signed_in(expiring), world.signed_in(lasting)
    world.clock.advance(61)
    r = short.get("/")
    assert r.status_code == 401 and "this token has expired" in r.text
    assert long.get("/").status_code == 200
    world.clock.advance(MAX_AGE_S)
    r = long.get("/")
    assert r.status_code == 401 and "session has ended" in r.text


def test_the_session_cookie_never_drives_a_write(world: World) -> None:
    browser = world.signed_in(world.admin)  # even an admin's session
    writes = [("POST", "/jobs", {"json": {"name": "x", "gpus": 1, "command": ["true"]}}),
              ("POST", f"/jobs/{world.alpha}/cancel", {}),
              ("POST", "/nodes/a100-01/drain", {"json": {"reason": "csrf"}}),
              ("PUT", "/tenants/alpha", {"json": {"guaranteed_gpus": 1}}),
              ("DELETE", f"/tokens/{world.admin.split('_')[1]}", {})]
    for method, path, kw in writes:
        r = browser.request(method, path, **kw)
        assert r.status_code == 401, (method, path, r.text)
        assert "reads only" in r.json()["detail"]
    with world.store.read() as s:
        from grace.control.store import repository as repo

        assert repo.require_node(s, "a100-01").state == "healthy"
        assert not repo.require_job(s, world.alpha).cancel_requested
    # the same admin with the bearer token may
    assert browser.post(f"/jobs/{world.alpha}/cancel", headers=world.bearer()).status_code == 200


def test_reads_with_the_cookie_name_the_actor_in_the_access_log(world: World, tmp_path: Path
                                                               ) -> None:
    token = make_token(world.store, "viewer", name="grace-hopper")
    browser = world.signed_in(token)
    assert browser.get("/jobs").status_code == 200
    assert browser.get("/ui/tenants").status_code == 200
    token_id = token.split("_")[1]
    lines = (tmp_path / "access.log").read_text().splitlines()
    assert any(f'{token_id} "GET /jobs"' in line for line in lines), lines[-5:]
    assert any(f'{token_id} "GET /ui/tenants"' in line for line in lines), lines[-5:]
    assert any(f'{token_id} "GET /"' in line and " 303 " in line for line in lines)
    assert not any(token in line for line in lines)  # the sign-in's token is not logged


# ---------------------------------------------------------------- who sees what
def test_a_member_sees_another_tenants_gpus_as_held_and_nothing_of_its_jobs(
        world: World) -> None:
    beta = world.signed_in(make_token(world.store, "member", "beta"))
    page = beta.get("/")
    assert page.status_code == 200
    for leak in (SECRET, QUEUED, "alpha", f"/ui/jobs/{world.alpha}"):
        assert leak not in page.text, leak
    held = re.findall(r'title="GPU \d+: held by another tenant"', page.text)
    assert len(held) == 4  # alpha's 4 GPUs, anonymous
    assert "beta-train" in page.text and f"/ui/jobs/{world.beta}" in page.text
    queue = beta.get("/ui/queue")
    assert QUEUED not in queue.text and "No job is waiting" in queue.text
    assert beta.get(f"/ui/jobs/{world.alpha}").status_code == 404
    assert beta.get(f"/ui/jobs/{world.alpha}").text.count("no job") >= 1
    assert beta.get(f"/ui/api/jobs/{world.alpha}/series").status_code == 404
    tenants = beta.get("/ui/tenants").text
    assert 'id="tenant-beta"' in tenants and "alpha" not in tenants
    # an operator sees both, with names and showback
    op = world.signed_in(make_token(world.store, "operator"))
    assert SECRET in op.get("/").text and QUEUED in op.get("/ui/queue").text
    assert "useful GPU-h" in op.get("/ui/tenants").text and "useful GPU-h" not in tenants


def test_the_queue_shows_each_pending_jobs_typed_reason_and_next_step(world: World) -> None:
    page = world.signed_in(world.admin).get("/ui/queue").text
    row = page[page.index(f'id="pending-{world.queued}"'):]
    row = row[:row.index("</tr>")]
    assert 'data-reason="waiting-for-capacity"' in row and QUEUED in row
    assert NEXT_STEP[PendingReason.WAITING_FOR_CAPACITY] in row


def test_the_map_shows_every_node_and_a_drained_nodes_reason(world: World) -> None:
    r = world.client().post("/nodes/a100-01/drain", headers=world.bearer(),
                            json={"reason": "fan <b>failure</b> in bay 3"})
    assert r.status_code == 200
    world.rec.cycle()
    page = world.signed_in(world.admin).get("/")
    found = refs(page.text)
    assert {f"node-{n.name}" for n in Topology.from_spec(load_cluster(LAB)).nodes} <= found.ids
    node = page.text[page.text.index('id="node-a100-01"'):]
    node = node[:node.index("</article>")]
    assert 'data-state="drained"' in node or 'data-state="draining"' in node
    assert "fan &lt;b&gt;failure&lt;/b&gt; in bay 3" in node  # escaped, never markup
    assert 'id="gpus-allocated">6<' in page.text and 'id="jobs-pending">1<' in page.text


def test_the_job_page_plots_the_heartbeat_series_and_its_count_grows(world: World) -> None:
    telemetry = world.app.state.observability.telemetry
    browser = world.signed_in(world.admin)

    def beat(step: int) -> None:
        telemetry.add(world.alpha, 1, 0, "l40s-00", [{
            "step": step, "steps": 10, "step_s": 0.2, "loss": 3.0 - step / 100, "at": 1e9 + step,
            "phases": {"data": 0.02, "forward": 0.06, "backward": 0.08, "allreduce": 0.04}}])

    for step in (10, 20, 30):
        beat(step)
    page = browser.get(f"/ui/jobs/{world.alpha}")
    assert page.status_code == 200
    assert re.search(r'id="step-time-chart"[^>]*data-points="3"', page.text)
    series = browser.get(f"/ui/api/jobs/{world.alpha}/series").json()
    assert series["points"] == 3 and series["step_s"] == [0.2, 0.2, 0.2]
    assert list(series["phases"]) == ["data", "forward", "backward", "allreduce"]
    beat(40)
    assert browser.get(f"/ui/api/jobs/{world.alpha}/series").json()["points"] == 4
    with world.store.read() as s:
        from grace.control.store import repository as repo

        placed = repo.require_job(s, world.alpha).attempts[0].placement_json[0]["node"]
    placement = page.text[page.text.index('id="placement"'):]
    assert f'href="/#node-{placed}"' in placement[:placement.index("</ul>")]


def test_alerts_are_shown_per_tenant_and_missing_observability_is_no_error(world: World
                                                                           ) -> None:
    def alert(rule: str, tenant: str) -> Alert:
        return Alert(rule=rule, severity=Severity.WARNING, labels={"tenant": tenant, "job": "1"},
                     value=0.5, active_since=world.clock.now, state=AlertState.FIRING,
                     summary=f"{rule} summary", action=f"{rule} action", reason="why")

    class Stub:
        telemetry = None

        def alerts(self) -> list[Alert]:
            return [alert("alpha-input-bound", "alpha"), alert("beta-input-bound", "beta")]

    world.app.state.observability = Stub()
    beta = world.signed_in(make_token(world.store, "member", "beta")).get("/ui/alerts").text
    assert "beta-input-bound action" in beta and "alpha-input-bound" not in beta
    admin = world.signed_in(world.admin)
    assert "alpha-input-bound" in admin.get("/ui/alerts").text
    del world.app.state.observability
    r = admin.get("/ui/alerts")
    assert r.status_code == 200 and 'id="alerts-unavailable"' in r.text
    page = admin.get(f"/ui/jobs/{world.alpha}")
    assert page.status_code == 200 and "keeps no heartbeats" in page.text


# ---------------------------------------------------------------- nothing from elsewhere
def test_no_page_loads_or_links_anything_from_another_host(world: World) -> None:
    browser = world.signed_in(world.admin)
    pages = {p.format(alpha=world.alpha): browser.get(p.format(alpha=world.alpha))
             for p in (*PAGES, "/docs")}
    pages["sign-in"] = world.client().get("/")
    assets: set[str] = set()
    for path, r in pages.items():
        assert r.status_code in (200, 401), path
        csp = r.headers["content-security-policy"]
        assert csp.startswith("default-src 'self'") and not _external(csp), (path, csp)
        assert "'unsafe-eval'" not in csp and "frame-ancestors 'none'" in csp
        assert "http://" not in r.text and "https://" not in r.text, path
        for url in refs(r.text).urls:
            assert url.startswith(("/", "#", "data:")) and not url.startswith("//"), (path, url)
            if url.startswith("/"):
                assets.add(url.split("#")[0])
    assert any("plotly" in a for a in assets) and any("swagger-ui-bundle" in a for a in assets)
    for url in sorted(assets):
        r = browser.get(url)
        assert r.status_code == 200, url
        if url.startswith("/ui/static/"):  # ours: no URL of another host, of any kind
            assert not _external(r.text), (url, _external(r.text))
        if url.endswith(".css") or ".css?" in url:  # stylesheets load url(...) and @import
            loads = re.findall(r"url\(\s*['\"]?([^'\")]+)", r.text) + \
                re.findall(r"@import\s+['\"]?([^'\";]+)", r.text)
            assert all(u.startswith(("data:", "/", "#")) or "://" not in u for u in loads), url


def test_docs_is_served_from_the_package_with_only_its_inline_script_allowed(
        world: World) -> None:
    import base64
    import hashlib

    browser = world.signed_in(world.admin)
    r = browser.get("/docs")
    assert r.status_code == 200
    urls = refs(r.text).urls
    assert sorted(u.split("?")[0] for u in urls) == [
        "/docs/assets/favicon-32x32.png", "/docs/assets/swagger-ui-bundle.js",
        "/docs/assets/swagger-ui.css"]
    types = {u.split("?")[0]: browser.get(u).headers["content-type"] for u in urls}
    assert types["/docs/assets/swagger-ui-bundle.js"].startswith("text/javascript")
    assert types["/docs/assets/swagger-ui.css"].startswith("text/css")
    assert types["/docs/assets/favicon-32x32.png"] == "image/png"
    inline = re.findall(r"<script>(.*?)</script>", r.text, re.DOTALL)
    assert len(inline) == 1 and "SwaggerUIBundle" in inline[0] and "validatorUrl" in inline[0]
    digest = base64.b64encode(hashlib.sha256(inline[0].encode()).digest()).decode()
    assert f"script-src 'self' 'sha256-{digest}'" in r.headers["content-security-policy"]
    assert browser.get("/openapi.json").json()["openapi"].startswith("3.")
    assert world.client().get("/docs/assets/nope.js").status_code == 404
    assert world.client().get("/ui/static/..%2Fsession.py").status_code == 404


# ---------------------------------------------------------------- sessions
def test_sessions_expire_are_bounded_and_unguessable() -> None:
    sessions = Sessions(max_age_s=100, max_sessions=3)
    ids = [sessions.create(f"t{i}", now=0.0) for i in range(4)]
    assert len(set(ids)) == 4 and all(len(i) >= 40 for i in ids)
    assert sessions.token_for(ids[0], 1.0) is None  # the oldest gave way to the fourth
    assert sessions.token_for(ids[3], 99.0) == "t3"
    assert sessions.token_for(ids[3], 100.0) is None and len(sessions) == 2
    sessions.end(ids[2])
    assert sessions.token_for(ids[2], 1.0) is None
    assert sessions.token_for("not-a-session", 1.0) is None
