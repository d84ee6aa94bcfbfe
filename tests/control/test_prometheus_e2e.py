"""A real Prometheus (Debian's ``prometheus``) scrapes a live ``grace up`` running a real job.

What the issue asks to see, through Prometheus' own HTTP API and PromQL:

- the cluster's GPU count (``sum(grace_gpus)`` is lab.yaml's 12);
- the running 2-node DDP job's all-reduce seconds rising between two queries;
- the runbook's ``NodeDrained`` alert firing (``ALERTS{alertstate="firing"}``) after
  a node is drained, from the rules ``grace runbooks --prometheus`` generates, and
  Grace's own evaluation (``/alerts``) agreeing;
- ``grace why`` on the running job naming its bottleneck and the action, at 80 columns.

Prometheus scrapes with a viewer token from a file, as deploy/prometheus/prometheus.yml
does. Skipped without the ``prometheus`` binary, except under ``GRACE_TEST_PROMETHEUS=1``
(``.ci/run`` installs it and sets that): then a missing one fails.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from grace_up import free_port, grace_up
from helpers import REPO

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
REQUIRED = os.environ.get("GRACE_TEST_PROMETHEUS", "").strip() not in ("", "0")

pytestmark = pytest.mark.slow


def _need_prometheus() -> None:
    if not Path(PROMETHEUS).exists():
        if REQUIRED:
            pytest.fail("GRACE_TEST_PROMETHEUS=1 but no prometheus binary (apt-get install "
                        "prometheus)")
        pytest.skip("no prometheus binary (apt-get install prometheus)")


@contextlib.contextmanager
def prometheus(workdir: Path, target: str, token: str) -> Iterator[str]:
    """Prometheus on a free port scraping ``target`` every second with Grace's runbook rules."""
    workdir.mkdir(parents=True, exist_ok=True)
    token_file = workdir / "grace.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    rules = workdir / "grace-rules.yml"
    out = subprocess.run([sys.executable, "-m", "grace.cli.main", "runbooks", "--prometheus"],
                         cwd=REPO, capture_output=True, text=True, check=True)
    rules.write_text(out.stdout)
    config = workdir / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [{rules}]
scrape_configs:
  - job_name: grace
    metrics_path: /metrics
    honor_labels: true  # Grace's `job` label is the job id (deploy/prometheus/prometheus.yml)
    authorization:
      type: Bearer
      credentials_file: {token_file}
    static_configs:
      - targets: ["{target}"]
""")
    port = free_port()
    log = workdir / "prometheus.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"prometheus exited: {log.read_text()[-3000:]}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"prometheus not ready: {log.read_text()[-3000:]}"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def wait_for(url: str, promql: str, ok: Any, timeout_s: float, what: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    last: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        last = query(url, promql)
        if ok(last):
            return last
        time.sleep(1.0)
    raise AssertionError(f"{what}: {promql} gave {last} for {timeout_s:.0f} s")


def test_prometheus_scrapes_a_live_grace_and_fires_a_runbook_alert(tmp_path: Path) -> None:
    _need_prometheus()
    with grace_up(tmp_path / "grace", "--metrics-refresh-s", "1") as server:
        admin = {"Authorization": f"Bearer {server.token}"}
        viewer = httpx.post(f"{server.url}/tokens", headers=admin, timeout=10,
                            json={"name": "prometheus", "role": "viewer"})
        assert viewer.status_code == 201, viewer.text
        job = httpx.post(f"{server.url}/jobs", headers=admin, timeout=10, json={
            "name": "ddp", "tenant": "demo", "nodes": 2, "gpus_per_node": 2,
            "gpu_model": "A100-80GB", "runtime_limit": "10m",
            "command": ["python", "examples/train_ddp.py", "--steps", "2000",
                        "--sleep-per-step", "0.05"]})
        assert job.status_code == 201, job.text
        jid = str(job.json()["id"])
        target = server.url.removeprefix("http://")
        with prometheus(tmp_path / "prom", target, viewer.json()["token"]) as prom:
            up = wait_for(prom, 'up{job="grace"}', lambda r: r and r[0]["value"][1] == "1", 60,
                          "Prometheus never scraped Grace")
            assert up
            total = wait_for(prom, "sum(grace_gpus)", lambda r: bool(r), 30, "no grace_gpus")
            assert float(total[0]["value"][1]) == 12  # lab.yaml: 3 nodes x 4 GPUs
            allreduce = f'grace_job_phase_seconds_total{{job="{jid}",phase="allreduce"}}'
            first = wait_for(prom, allreduce, lambda r: bool(r) and float(r[0]["value"][1]) > 0,
                             120, "the job's all-reduce seconds never appeared")
            before = float(first[0]["value"][1])
            later = wait_for(prom, allreduce, lambda r: bool(r) and float(r[0]["value"][1]) > before,
                             60, "the job's all-reduce seconds did not rise")
            assert float(later[0]["value"][1]) > before
            why = subprocess.run([sys.executable, "-m", "grace.cli.main", "why", jid], cwd=REPO,
                                 capture_output=True, text=True, timeout=60, env={
                                     **os.environ, "GRACE_URL": server.url,
                                     "GRACE_TOKEN": server.token or "", "COLUMNS": "80"})
            assert why.returncode == 0, why.stderr
            assert "is running:" in why.stdout and "-bound" in why.stdout, why.stdout
            assert "what to do" in why.stdout
            assert max(len(line) for line in why.stdout.splitlines()) <= 80, why.stdout
            drained = httpx.post(f"{server.url}/nodes/l40s-00/drain", headers=admin, timeout=10,
                                 json={"reason": "fan failure: e2e"})
            assert drained.status_code == 200, drained.text
            firing = wait_for(prom, 'ALERTS{alertname="NodeDrained",alertstate="firing"}',
                              lambda r: any(s["metric"].get("node") == "l40s-00" for s in r), 90,
                              "NodeDrained never fired")
            assert firing[0]["metric"]["severity"]
            rules = httpx.get(f"{prom}/api/v1/rules", timeout=10).json()["data"]["groups"]
            names = {r["name"] for g in rules for r in g["rules"]}
            assert {"NodeDrained", "DataWaitHigh", "AllReduceMultiLeaf"} <= names
        # Grace's own evaluation of the same rule agrees
        deadline = time.monotonic() + 30
        while True:
            ours = httpx.get(f"{server.url}/alerts", headers=admin, timeout=10).json()
            if any(a["rule"] == "NodeDrained" and a["labels"].get("node") == "l40s-00"
                   and a["state"] == "firing" for a in ours):
                break
            assert time.monotonic() < deadline, ours
            time.sleep(1.0)
        httpx.post(f"{server.url}/jobs/{jid}/cancel", headers=admin, timeout=10)
