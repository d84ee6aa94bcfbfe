"""Notifications: a job's webhook and mail on end, failure, preemption and move.

Over real sockets: an HTTP receiver and an SMTP sink on 127.0.0.1
(``notify_sinks``), the real store, the reconciler with a scripted backend and
a fake clock for the job moves, the real FastAPI app for submit and listing,
and a real ``grace up --notify`` for the end-to-end case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from grace_up import grace_up
from helpers import LAB, REPO, FakeClock, add_job, authed
from notify_sinks import dripping_receiver, smtp_sink, webhook_receiver
from test_reconciler import A100, Rig

from grace.control.api import create_app
from grace.control.notify import outbox
from grace.control.notify.signing import KEY_FILE, load_or_create_key, verify
from grace.control.notify.worker import Deliverer, backoff_s
from grace.control.server import ServerConfig, assemble
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import JobState
from grace.control.store.notifications import DeliveryStatus
from grace.core.topology import Topology
from grace.spec.errors import SpecError
from grace.spec.job import JobSpec
from grace.spec.loader import load_cluster
from grace.spec.notify import (
    DeliverySpec,
    NotifyConfig,
    NotifyEvent,
    SmtpSpec,
    TenantNotify,
    host_allowed,
    parse_notify_config,
)

BASE = "http://grace.test"
LOCAL = NotifyConfig(allow_hosts=["127.0.0.1"])
SECRET = "hunter2-never-leaves"


def deliverer(store: Store, tmp_path: Path, clock: Any = time.time,
              config: NotifyConfig = LOCAL) -> Deliverer:
    return Deliverer(store, config, load_or_create_key(tmp_path / "keys"), BASE, clock=clock)


def rows(store: Store, job_id: int) -> list[Any]:
    with store.read() as s:
        return outbox.of_job(s, job_id)


def cancel_pending(store: Store, job_id: int, now: float) -> None:
    """A pending job's cancel: the simplest move to an end (``ended``)."""
    with store.transaction() as s:
        repo.set_job_state(s, repo.require_job(s, job_id), JobState.CANCELLED, now, "cancelled")


def posts(rx: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(r.path, json.loads(r.body)) for r in rx.got]


# ---------------------------------------------------------------- the spec and the file
@pytest.mark.parametrize(("notify", "says"), [
    ({"webhook": "ftp://hooks.example.com/x"}, "http:// or https://"),
    ({"webhook": "https://me:pw@hooks.example.com/x"}, "no credentials"),
    ({"webhook": "https:///path"}, "names no host"),
    ({"webhook": "https://hooks.example.com/" + "a" * 2001}, "at most 2000"),
    ({"webhook": "https://hooks.example.com/a b"}, "percent-encode"),
    ({"webhook": "https://hooks.example.com:99999/"}, "port"),
    ({"mail": "me@example.com\r\nBcc: all@example.com"}, "one plain address"),
    ({"mail": "Me <me@example.com>"}, "one plain address"),
    ({"webhook": "https://h.example.com", "events": ["finished"]}, "ended"),
    ({}, "a webhook URL or a mail address"),
])
def test_a_bad_notify_names_the_field_and_the_fix(notify: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match="notify") as e:
        JobSpec.model_validate({"name": "j", "gpus": 1, "notify": notify})
    assert says in str(e.value)


def test_notify_defaults_to_slurms_end_and_fail_plus_preemption_and_moves() -> None:
    spec = JobSpec.model_validate({"name": "j", "gpus": 1,
                                   "notify": {"mail": "me@example.com"}})
    assert spec.notify is not None
    assert spec.notify.events == [NotifyEvent.ENDED, NotifyEvent.FAILED, NotifyEvent.PREEMPTED,
                                  NotifyEvent.MOVED]


def test_the_allow_list_matches_hosts_ports_and_subdomains() -> None:
    allow = ["hooks.example.com", "ci.example.com:8443", "*.lab.internal", "[::1]:9000"]
    assert host_allowed("https://HOOKS.example.com/x", allow)
    assert host_allowed("http://hooks.example.com:8080/x", allow)  # no port: any port
    assert host_allowed("https://ci.example.com:8443/", allow)
    assert not host_allowed("https://ci.example.com/", allow)  # 443 is not 8443
    assert host_allowed("http://chat.lab.internal/", allow)
    assert not host_allowed("http://lab.internal/", allow)  # *. is subdomains only
    assert not host_allowed("http://hooks.example.com.evil.net/", allow)
    assert not host_allowed("http://169.254.169.254/latest/meta-data", allow)
    assert host_allowed("http://[::1]:9000/", allow)


def test_the_servers_file_is_checked_whole_with_each_field_and_fix() -> None:
    with pytest.raises(SpecError) as e:
        parse_notify_config({"kind": "notify", "allow_hosts": ["https://x.com/path"],
                             "smtp": {"host": "relay", "from": "not an address"},
                             "tenants": {"vision": {"webhooks": ["gopher://x"]}}})
    text = str(e.value)
    assert "allow_hosts" in text and "no scheme or path" in text
    assert "smtp.from" in text and "tenants.vision.webhooks" in text
    with pytest.raises(SpecError, match="expected kind 'notify'"):
        parse_notify_config({"kind": "cluster"})
    ok = parse_notify_config({"kind": "notify", "allow_hosts": ["hooks.example.com"],
                              "smtp": {"host": "relay", "port": 587, "from": "grace@lab.org"}})
    assert ok.smtp is not None and ok.smtp.sender == "grace@lab.org" and ok.smtp.starttls


def test_the_signing_key_is_made_once_mode_0600_and_refused_when_others_can_read_it(
        tmp_path: Path) -> None:
    key = load_or_create_key(tmp_path)
    path = tmp_path / KEY_FILE
    assert len(key) == 32 and path.stat().st_mode & 0o777 == 0o600
    assert load_or_create_key(tmp_path) == key
    path.chmod(0o644)
    with pytest.raises(SpecError, match="chmod 600"):
        load_or_create_key(tmp_path)


# ---------------------------------------------------------------- submit: the SSRF guard
def _submit(client: Any, notify: dict[str, Any]) -> httpx.Response:
    return client.post("/jobs", json={"name": "j", "gpus": 1, "command": ["python", "t.py"],
                                      "notify": notify})


def test_job_webhooks_are_refused_at_submit_unless_the_host_is_allowed(
        store: Store, tmp_path: Path) -> None:
    topo = Topology.from_spec(load_cluster(LAB))
    bare = authed(create_app(store, topo, tmp_path), store, "member", "vision")
    r = _submit(bare, {"webhook": "https://hooks.example.com/grace"})
    assert r.status_code == 422
    [problem] = r.json()["detail"]
    assert problem["field"] == "notify.webhook" and "grace up --notify FILE" in problem["message"]
    config = NotifyConfig(allow_hosts=["hooks.example.com"])
    client = authed(create_app(store, topo, tmp_path, notify=config), store, "member", "vision")
    assert _submit(client, {"webhook": "https://hooks.example.com/grace"}).status_code == 201
    for url in ("http://169.254.169.254/latest/meta-data", "http://localhost:5432/",
                "https://hooks.example.com.evil.net/"):
        r = _submit(client, {"webhook": url})
        assert r.status_code == 422, url
        [problem] = r.json()["detail"]
        assert problem["field"] == "notify.webhook" and "allow list" in problem["message"]
    r = _submit(client, {"webhook": "https://user:pw@hooks.example.com/"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "notify.webhook"
    assert "no credentials" in r.json()["detail"][0]["message"]
    r = _submit(client, {"mail": "me@example.com"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "notify.mail"
    assert "smtp" in r.json()["detail"][0]["message"]


# ---------------------------------------------------------------- the outbox, with the move
def test_the_outbox_row_commits_with_the_move_and_a_rolled_back_move_leaves_none(
        store: Store) -> None:
    jid = add_job(store, 10.0, notify={"webhook": "http://127.0.0.1:9/x"})
    with pytest.raises(RuntimeError), store.transaction() as s:
        repo.set_job_state(s, repo.require_job(s, jid), JobState.CANCELLED, 11.0, "cancelled")
        raise RuntimeError("the process dies before the commit")
    assert rows(store, jid) == []
    cancel_pending(store, jid, 12.0)
    [row] = rows(store, jid)
    assert (row.event, row.status, row.tries) == (NotifyEvent.ENDED, DeliveryStatus.PENDING, 0)
    assert row.payload["job"]["state"] == "cancelled" and row.payload["at"] == 12.0


def test_each_end_failure_and_preemption_is_one_signed_post(store: Store, tmp_path: Path) -> None:
    rig = Rig(store, tmp_path / "state")
    with webhook_receiver() as rx:
        outbox.install_routes(store.session_info, {"research": TenantNotify(
            webhooks=[f"{rx.url}/team"], events=[NotifyEvent.PREEMPTED])})
        hook = {"webhook": f"{rx.url}/hook"}
        env = {"API_TOKEN": SECRET}
        victims = [rig.submit(f"sweep-{i}", gpus=4, gpu_model=A100, preemptible=True,
                              tenant="research", notify=hook, env=env) for i in range(2)]
        done = rig.submit("done", gpus=1, gpu_model="L40S", notify=hook, env=env)
        timed = rig.submit("timed", gpus=1, gpu_model="L40S", runtime_limit="10s", notify=hook)
        rig.cycle()
        assert all(rig.job(j).state is JobState.RUNNING for j in [*victims, done, timed])
        rig.submit("urgent", gpus=4, gpu_model=A100, priority=10, tenant="prod")
        rig.backend.finish(done)
        for _ in range(15):
            rig.cycle()
        [victim] = [v for v in victims if (v, 1) in rig.backend.cancels]
        assert rig.job(done).state is JobState.COMPLETED
        assert rig.job(timed).state is JobState.FAILED
        assert rig.job(victim).state is JobState.PENDING
        sender = deliverer(store, tmp_path, rig.clock)
        assert sender.run_once() == 4
        assert sender.run_once() == 0  # delivered once: nothing is due any more
    key = load_or_create_key(tmp_path / "keys")
    got = sorted((p, b["job"]["id"], b["event"]) for p, b in posts(rx))
    assert got == sorted([("/hook", done, "ended"), ("/hook", timed, "failed"),
                          ("/hook", victim, "preempted"), ("/team", victim, "preempted")])
    for r in rx.got:
        body = json.loads(r.body)
        assert verify(key, r.body, r.headers["Grace-Signature"])
        assert r.headers["Grace-Notification-Id"] == body["notification_id"]
        assert r.headers["Grace-Event"] == body["event"]
        assert body["url"] == f"{BASE}/jobs/{body['job']['id']}"
        assert SECRET.encode() not in r.body and b"env" not in r.body
    [ended] = [json.loads(r.body) for r in rx.got if json.loads(r.body)["job"]["id"] == done]
    assert ended["job"]["state"] == "completed" and ended["job"]["attempt"] == 1
    assert ended["job"]["ended_at"] is not None
    # the listing: the tenant's viewer sees both deliveries, URLs cut to their host
    topo = Topology.from_spec(load_cluster(LAB))
    app = create_app(store, topo, tmp_path / "state", notify=LOCAL)
    listed = authed(app, store, "viewer", "research").get(f"/jobs/{victim}/notifications")
    assert listed.status_code == 200
    assert [(d["event"], d["origin"], d["status"], d["tries"]) for d in listed.json()] == [
        ("preempted", "job", "delivered", 1), ("preempted", "tenant", "delivered", 1)]
    assert {d["destination"] for d in listed.json()} == {f"{rx.url}/…"}
    assert authed(app, store, "viewer", "prod").get(
        f"/jobs/{victim}/notifications").status_code == 404


def test_a_straggler_move_notifies_moved(store: Store, tmp_path: Path) -> None:
    with webhook_receiver() as rx:
        jid = add_job(store, 10.0, notify={"webhook": f"{rx.url}/m"})
        with store.transaction() as s:
            job = repo.require_job(s, jid)
            repo.start_attempt(s, job, [{"node": "a100-00", "gpus": [0]}], "scripted", "h", 11.0)
        with store.transaction() as s:
            repo.requeue_moved(s, repo.require_job(s, jid), 20.0, "moved off a straggler",
                               "a100-00", {"cause": "straggler"})
        assert deliverer(store, tmp_path, lambda: 30.0).run_once() == 1
    [(_, body)] = posts(rx)
    assert (body["event"], body["job"]["state"]) == ("moved", "pending")


# ---------------------------------------------------------------- delivery
def test_a_receiver_failing_twice_gets_it_on_the_third_try_with_backoff(
        store: Store, tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    config = NotifyConfig(allow_hosts=["127.0.0.1"],
                          delivery=DeliverySpec(first_retry_s=2, max_retry_s=60))
    with webhook_receiver(statuses=[500, 500]) as rx:
        jid = add_job(store, clock(), notify={"webhook": f"{rx.url}/flaky"})
        cancel_pending(store, jid, clock())
        sender = deliverer(store, tmp_path, clock, config)
        assert sender.run_once() == 1
        [row] = rows(store, jid)
        assert (row.status, row.tries, row.next_try_at) == (DeliveryStatus.PENDING, 1, 1002.0)
        assert row.last_error is not None and row.last_error.startswith("HTTP 500")
        clock.advance(1)
        assert sender.run_once() == 0  # not due yet
        clock.advance(1)
        assert sender.run_once() == 1
        assert rows(store, jid)[0].next_try_at == clock() + 4  # doubled
        clock.advance(4)
        assert sender.run_once() == 1
        clock.advance(600)
        assert sender.run_once() == 0
    [row] = rows(store, jid)
    assert (row.status, row.tries, row.last_error) == (DeliveryStatus.DELIVERED, 3, None)
    assert len(rx.got) == 3
    assert len({r.headers["Grace-Notification-Id"] for r in rx.got}) == 1  # one id to dedupe by
    assert len({r.body for r in rx.got}) == 1  # the same signed bytes on every try


@pytest.mark.parametrize(("statuses", "tries", "error"), [
    ([503] * 5, 3, "HTTP 503"),  # retryable: until max_tries
    ([404], 1, "HTTP 404"),  # another try cannot help
    ([302], 1, "redirects are not followed"),
])
def test_a_delivery_gives_up_and_is_marked_failed(store: Store, tmp_path: Path,
                                                  statuses: list[int], tries: int,
                                                  error: str) -> None:
    clock = FakeClock(1000.0)
    config = NotifyConfig(allow_hosts=["127.0.0.1"],
                          delivery=DeliverySpec(max_tries=3, first_retry_s=1))
    with webhook_receiver(statuses=statuses) as rx:
        jid = add_job(store, clock(), notify={"webhook": f"{rx.url}/x"})
        cancel_pending(store, jid, clock())
        sender = deliverer(store, tmp_path, clock, config)
        for _ in range(6):
            sender.run_once()
            clock.advance(100)
    [row] = rows(store, jid)
    assert (row.status, row.tries, len(rx.got)) == (DeliveryStatus.FAILED, tries, tries)
    assert row.last_error is not None and error in row.last_error


def test_a_host_dropped_from_the_allow_list_is_not_called(store: Store, tmp_path: Path) -> None:
    with webhook_receiver() as rx:
        jid = add_job(store, 10.0, notify={"webhook": f"{rx.url}/x"})
        cancel_pending(store, jid, 11.0)
        deliverer(store, tmp_path, lambda: 20.0, NotifyConfig(allow_hosts=["x.org"])).run_once()
    [row] = rows(store, jid)
    assert row.status is DeliveryStatus.FAILED and "allow_hosts" in (row.last_error or "")
    assert rx.got == []


def test_a_row_that_cannot_be_sent_fails_without_holding_up_the_others(
        store: Store, tmp_path: Path) -> None:
    with webhook_receiver() as rx:
        bad = add_job(store, 10.0, notify={"webhook": f"{rx.url}/bad"})
        good = add_job(store, 10.0, notify={"webhook": f"{rx.url}/good"})
        cancel_pending(store, bad, 11.0)
        cancel_pending(store, good, 11.0)
        with store.transaction() as s:  # a URL written before today's checks existed
            outbox.of_job(s, bad)[0].destination = "http://127.0.0.1:99999999/"
        assert deliverer(store, tmp_path, lambda: 20.0).run_once() == 2
    assert [p for p, _ in posts(rx)] == ["/good"]
    [row] = rows(store, bad)
    assert row.status is DeliveryStatus.FAILED and row.tries == 1


def test_a_slow_dripping_receiver_is_cut_off_and_holds_up_no_other_tenant(
        store: Store, tmp_path: Path) -> None:
    config = NotifyConfig(allow_hosts=["127.0.0.1"], delivery=DeliverySpec(timeout_s=1))
    with dripping_receiver() as slow_url, webhook_receiver() as rx:
        slow = [add_job(store, 10.0, tenant="slowpoke", notify={"webhook": f"{slow_url}/s{i}"})
                for i in range(3)]
        fast = add_job(store, 10.0, tenant="vision", notify={"webhook": f"{rx.url}/fast"})
        for jid in [*slow, fast]:
            cancel_pending(store, jid, 11.0)
        sender = deliverer(store, tmp_path, lambda: 20.0, config)
        started = time.monotonic()
        assert sender.run_once(limit=2) == 2  # round-robin: one of each tenant's
        took = time.monotonic() - started
        sender.close()
    assert took < 3, took  # one slow receiver: about timeout_s, not its 30 s answer
    assert [p for p, _ in posts(rx)] == ["/fast"]
    [row] = rows(store, fast)
    assert row.status is DeliveryStatus.DELIVERED
    tried = [r for jid in slow for r in rows(store, jid) if r.tries]
    assert len(tried) == 1 and (tried[0].last_error or "").startswith("HTTP 500")


def test_a_name_resolving_to_a_private_address_is_refused_at_send(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    real = socket.getaddrinfo
    with webhook_receiver() as rx:
        port = int(rx.url.rsplit(":", 1)[1])

        def fake(host: Any, *args: Any, **kw: Any) -> Any:
            if host == "hooks.example.com":  # an allowed name whose DNS points inside
                return real("127.0.0.1", *args, **kw)
            return real(host, *args, **kw)

        monkeypatch.setattr(socket, "getaddrinfo", fake)
        url = f"http://hooks.example.com:{port}/x"
        jid = add_job(store, 10.0, notify={"webhook": url})
        cancel_pending(store, jid, 11.0)
        by_name = NotifyConfig(allow_hosts=["hooks.example.com"])
        deliverer(store, tmp_path, lambda: 20.0, by_name).run_once()
        [row] = rows(store, jid)
        assert row.status is DeliveryStatus.FAILED and rx.got == []
        assert "resolves to 127.0.0.1" in (row.last_error or "")
        # the operator names the literal address too: then it may be called, and the
        # request goes to the checked address with the name kept in the Host header
        ok = add_job(store, 10.0, notify={"webhook": url})
        cancel_pending(store, ok, 11.0)
        both = NotifyConfig(allow_hosts=["hooks.example.com", f"127.0.0.1:{port}"])
        deliverer(store, tmp_path, lambda: 20.0, both).run_once()
        [row] = rows(store, ok)
        assert row.status is DeliveryStatus.DELIVERED
        assert [r.headers["Host"] for r in rx.got] == [f"hooks.example.com:{port}"]


def test_backoff_doubles_up_to_its_cap() -> None:
    d = DeliverySpec(first_retry_s=5, max_retry_s=30)
    assert [backoff_s(d, n) for n in (1, 2, 3, 4, 5)] == [5, 10, 20, 30, 30]


def test_mail_goes_through_the_smtp_relay_once(store: Store, tmp_path: Path) -> None:
    with smtp_sink() as sink:
        config = NotifyConfig(smtp=SmtpSpec.model_validate(
            {"host": "127.0.0.1", "port": sink.port, "from": "grace@lab.org",
             "starttls": False}))
        jid = add_job(store, 10.0, name="train-7b", notify={"mail": "me@lab.org"})
        cancel_pending(store, jid, 11.0)
        sender = deliverer(store, tmp_path, lambda: 20.0, config)
        assert sender.run_once() == 1
        assert sender.run_once() == 0
    [(frm, rcpts, msg)] = sink.messages
    assert (frm, rcpts, msg["To"]) == ("grace@lab.org", ["me@lab.org"], "me@lab.org")
    assert msg["Subject"] == f"Grace job {jid} (train-7b) ended: cancelled"
    text = msg.get_payload(decode=True).decode()
    assert f"link: {BASE}/jobs/{jid}" in text and "state: cancelled" in text
    assert rows(store, jid)[0].status is DeliveryStatus.DELIVERED


# ---------------------------------------------------------------- crash safety
def test_a_row_left_undelivered_by_a_closed_store_is_delivered_after_reopening(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'grace.sqlite'}"
    first = Store.open(url)
    jid = add_job(first, 10.0, notify={"webhook": "http://127.0.0.1:9/gone"})
    cancel_pending(first, jid, 11.0)
    first.close()  # the process stops with the row committed and nothing sent
    with webhook_receiver() as rx:
        again = Store.open(url)
        try:
            with again.transaction() as s:  # the receiver moved: same row, new port
                [row] = outbox.of_job(s, jid)
                row.destination = f"{rx.url}/later"
            assert deliverer(again, tmp_path, lambda: 20.0).run_once() == 1
        finally:
            again.close()
    assert [(p, b["job"]["id"]) for p, b in posts(rx)] == [("/later", jid)]


@pytest.mark.slow
def test_a_row_written_before_the_process_died_is_delivered_by_the_next(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'grace.sqlite'}"
    with webhook_receiver() as rx:
        script = f"""
import os, signal
from grace.control.store.db import Store
from grace.control.store import repository as repo
from grace.control.store.models import JobState
from grace.spec.job import JobSpec
store = Store.open({url!r})
spec = JobSpec.model_validate({{"name": "doomed", "gpus": 1, "command": ["true"],
                               "notify": {{"webhook": "{rx.url}/after-crash"}}}})
with store.transaction() as s:
    job = repo.add_job(s, spec, 10.0)
    repo.set_job_state(s, job, JobState.CANCELLED, 11.0, "cancelled")
os.kill(os.getpid(), signal.SIGKILL)  # dies with the row committed and nothing sent
"""
        child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120,
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
        assert child.returncode == -9, child.stderr.decode()
        assert rx.got == []
        store = Store.open(url)  # the next control plane
        try:
            assert deliverer(store, tmp_path, lambda: 20.0).run_once() == 1
        finally:
            store.close()
    [(path, body)] = posts(rx)
    assert (path, body["event"], body["job"]["name"]) == ("/after-crash", "ended", "doomed")


# ---------------------------------------------------------------- grace up
def test_grace_up_checks_the_file_and_the_key_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "notify.yaml"
    bad.write_text("kind: notify\nallow_hosts: ['https://hooks.example.com/x']\n")
    cfg = ServerConfig(LAB, None, 0, tmp_path / "state", notify=bad)
    with pytest.raises(SpecError) as info:
        assemble(cfg)
    assert [p.path for p in info.value.problems] == ["allow_hosts"]
    assert not (cfg.state_dir / "grace.sqlite").exists()
    cfg.notify = REPO / "examples" / "notify.yaml"
    plane = assemble(cfg)
    try:
        assert plane.notify is not None and plane.notify.smtp is not None
        # the tenants' webhooks ride on every write session of the store
        vision = plane.store.session_info[outbox.ROUTES_KEY]["vision"]
        assert vision.events == [NotifyEvent.FAILED, NotifyEvent.PREEMPTED]
        sender = Deliverer.for_server(plane.store, plane.notify, cfg.state_dir,
                                      "http://127.0.0.1:8470")
        assert sender.base_url == "https://grace.lab.internal"  # the file's link_url
        sender.close()
    finally:
        plane.store.close()
        if plane.lock is not None:
            plane.lock.release()
    (cfg.state_dir / KEY_FILE).chmod(0o640)
    with pytest.raises(SpecError, match="chmod 600"):
        assemble(cfg)


# ---------------------------------------------------------------- grace up, end to end
@pytest.mark.slow
def test_grace_up_with_notify_posts_a_signed_webhook_when_a_job_completes(tmp_path: Path) -> None:
    with webhook_receiver() as rx:
        config = tmp_path / "notify.yaml"
        config.write_text("kind: notify\nallow_hosts: ['127.0.0.1']\n"
                          "delivery: {first_retry_s: 1}\n")
        state = tmp_path / "state"
        with grace_up(state, "--notify", str(config), "--isolation", "none") as server:
            client = httpx.Client(base_url=server.url, headers=server.headers, timeout=10)
            job = {"name": "hello", "gpus": 1, "command": [sys.executable, "-c", "print(1)"],
                   "notify": {"webhook": f"{rx.url}/e2e"}}
            refused = client.post("/jobs", json={**job, "notify": {
                "webhook": "http://169.254.169.254/latest"}})
            assert refused.status_code == 422
            assert refused.json()["detail"][0]["field"] == "notify.webhook"
            r = client.post("/jobs", json=job)
            assert r.status_code == 201, r.text
            jid = r.json()["id"]
            deadline = time.monotonic() + 90
            while not rx.got:
                assert time.monotonic() < deadline, server.output()
                time.sleep(0.2)
            # the receiver has the request before the deliverer has its answer and marks
            # the notification delivered: wait for that mark, not only for the request
            while (listed := client.get(f"/jobs/{jid}/notifications").json()) and \
                    listed[0]["status"] == "pending" and time.monotonic() < deadline:
                time.sleep(0.2)
            assert [(d["event"], d["status"]) for d in listed] == [("ended", "delivered")]
        key_file = state / KEY_FILE
        assert key_file.stat().st_mode & 0o777 == 0o600
        key = bytes.fromhex(key_file.read_text().strip())
    [r] = rx.got
    assert verify(key, r.body, r.headers["Grace-Signature"])
    body = json.loads(r.body)
    assert (body["event"], body["job"]["id"], body["job"]["state"]) == ("ended", jid, "completed")
