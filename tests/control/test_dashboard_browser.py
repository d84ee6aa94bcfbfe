"""The dashboard in a real headless Chromium, during a real DDP job on a real ``grace up``.

Debian's ``chromium`` and ``chromium-driver`` (``/usr/bin/chromium``,
``/usr/bin/chromedriver``), driven by selenium. The browser signs in once with
``/?token=``, and the test reads what a person would see: the cluster map with
every node of ``lab.yaml`` and a drained node's reason, and the running job's
step-time curve, whose point count must grow between two looks. Every request the
browser made (Chrome's performance log, ``Network.requestWillBeSent``) must have
gone to this machine: the test fails on any other host, and on any refusal by the
pages' Content-Security-Policy (a page that needed something the policy blocks).

Skipped without the browser, unless ``GRACE_TEST_BROWSER=1`` (CI sets it): then
a missing browser fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from grace_up import LiveServer, grace_up
from helpers import LAB
from test_e2e import _kill_leftovers

from grace.core.topology import Topology
from grace.spec.loader import load_cluster

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--window-size=1024,900")
#: Where a request may go: this machine. Schemes that never reach a network are ignored.
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
INTERNAL_SCHEMES = frozenset({"data", "blob", "about", "chrome", "chrome-untrusted",
                              "chrome-extension", "devtools"})
#: ~40 s of training: long enough to look twice while it runs (steps of 0.1 s and up)
TRAIN = ["python", "examples/train_ddp.py", "--steps", "400", "--sleep-per-step", "0.1"]


def _browser_or_skip() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if not missing:
        return
    why = (f"the browser test needs {', '.join(missing)} (apt-get install chromium "
           "chromium-driver; pip install -e '.[dev]')")
    if os.environ.get("GRACE_TEST_BROWSER", "").strip() == "1":
        pytest.fail(f"GRACE_TEST_BROWSER=1 but {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Any]:
    _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.get("about:blank")
        driver.get_log("performance")  # the browser's own start-up pages, before ours
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)


def _api(server: LiveServer, method: str, path: str, **kw: Any) -> Any:
    r = httpx.request(method, server.url + path, headers=server.headers, timeout=30, **kw)
    assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text}\n{server.output()}"
    return r.json() if "json" in r.headers.get("content-type", "") else r.text


def _wait(what: str, check: Any, server: LiveServer, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"{what} not within {timeout:.0f} s\n{server.output()}")


def _requests(driver: Any) -> list[str]:
    """URLs the browser asked for since the last call (Chrome's performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] in ("Network.requestWillBeSent", "Network.webSocketCreated"):
            params = message["params"]
            urls.append(params["request"]["url"] if "request" in params else params["url"])
    return urls


def _leaving(urls: list[str]) -> list[str]:
    out = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme in INTERNAL_SCHEMES:
            continue
        if parts.hostname not in LOCAL_HOSTS:
            out.append(url)
    return out


def _points(driver: Any) -> int:
    value = driver.find_element("id", "step-time-chart").get_attribute("data-points")
    return int(value or 0)


def test_the_dashboard_in_chromium_shows_the_cluster_and_a_growing_curve(
        tmp_path: Path, chromium: Any) -> None:
    state = tmp_path / "state"
    try:
        with grace_up(state) as server:
            assert server.token is not None
            job = _api(server, "POST", "/jobs", json={
                "name": "train-ddp", "tenant": "demo", "workload_class": "experiment",
                "nodes": 2, "gpus_per_node": 2, "runtime_limit": "10m", "command": TRAIN})["id"]
            shown = _wait("the job running", lambda: (lambda j: j if j["state"] == "running"
                                                      and j["attempts"] else None)(
                _api(server, "GET", f"/jobs/{job}")), server)
            used = {n["node"] for n in shown["attempts"][-1]["nodes"]}
            every = [n.name for n in Topology.from_spec(load_cluster(LAB)).nodes]
            idle = next(n for n in every if n not in used)
            reason = "PSU fan noise: vendor ticket 4411"
            _api(server, "POST", f"/nodes/{idle}/drain", json={"reason": reason})
            _wait("a heartbeat", lambda: _api(server, "GET", f"/ui/api/jobs/{job}/series")
                  ["points"] > 0, server)

            chromium.get(f"{server.url}/?token={server.token}")
            assert "token=" not in chromium.current_url  # signed in, the token taken out
            nodes = chromium.execute_script(
                "return Array.from(document.querySelectorAll('article.node'))"
                ".map(e => [e.id, e.dataset.state, e.innerText])")
            assert sorted(n[0] for n in nodes) == sorted(f"node-{n}" for n in every)
            drained = next(n for n in nodes if n[0] == f"node-{idle}")
            assert drained[1] in ("draining", "drained") and reason in drained[2], drained
            assert chromium.execute_script(
                "return document.documentElement.scrollWidth") <= 1024  # fits at 1024 px

            chromium.get(f"{server.url}/ui/jobs/{job}")
            first = _wait("the step-time curve", lambda: _points(chromium), server, 30)
            # plotly draws after the points arrive (data-points is set first): on a loaded
            # machine that can take a moment, so wait for the trace, do not sample it once
            _wait("plotly's step-time trace", lambda: chromium.execute_script(
                "return document.querySelectorAll('#step-time-chart .scatterlayer .trace')"
                ".length") >= 1, server, 20)
            time.sleep(6)  # heartbeats are sent every 5 s
            second = _wait("more points", lambda: (lambda n: n if n > first else None)(
                _points(chromium)), server, 20)
            assert second > first
            assert _api(server, "GET", f"/jobs/{job}")["state"] == "running"
            log = _wait("the log tail", lambda: (lambda t: t if "step" in t else None)(
                chromium.find_element("id", "log-tail").text), server, 20)
            assert "rank" in log or "step" in log

            chromium.get(f"{server.url}/docs")
            _wait("Swagger UI", lambda: chromium.execute_script(
                "return document.querySelectorAll('.opblock').length"), server, 20)

            leaving = _leaving(_requests(chromium))
            assert leaving == [], f"requests to other hosts: {leaving}"
            refused = [e["message"] for e in chromium.get_log("browser")
                       if "Content Security Policy" in e["message"]]
            assert refused == [], refused
            _api(server, "POST", f"/jobs/{job}/cancel")
    finally:
        _kill_leftovers(state)
