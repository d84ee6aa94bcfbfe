"""``grace demo``: the README's first command; the live control plane on its embedded default.

It starts ``grace up`` (SQLite, local backend, the lab cluster) on a free port,
submits ``examples/jobs/demo.yaml`` (a 2-node x 2-GPU DDP job, a sweep, a
fine-tune) with one member token per tenant, made with the admin token ``grace up``
wrote on its first start, and only the vetted code ``examples/admission.yaml``
allows, shows their progress live, and ends with a summary: jobs, wait and
run times, GPU-hours per tenant. Every job is real PyTorch distributed training
(gloo on CPU). The server is stopped at the end; its state stays in --state-dir.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.console import Console, RenderableType
from rich.live import Live

from grace.cli.fit import Column, duration, fit_table
from grace.cli.jobs_view import jobs_table, requeued_attempts, wait_run
from grace.spec.loader import load_jobs

console = Console()
REPO = Path(__file__).resolve().parents[3]
ENDED = {"completed", "failed", "cancelled", "diverged"}
ADMISSION = REPO / "examples/admission.yaml"  # the demo's jobs run vetted code only
#: research's three 1-GPU sweeps share two GPUs: the third waits, over its quota
#: Seconds the demo waits for one answer of its own server
HTTP_TIMEOUT_S = 30.0
DEMO_QUOTA = {"guaranteed_gpus": 2, "borrow_limit_gpus": 0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def demo(
    state_dir: Path = typer.Option(Path("out/demo"), "--state-dir",
                                   help="where the demo's SQLite file, logs and checkpoints go"),
    cluster: Path = typer.Option(REPO / "examples/clusters/lab.yaml", "--cluster"),
    workload: Path = typer.Option(REPO / "examples/jobs/demo.yaml", "--jobs"),
    timeout_s: float = typer.Option(170.0, "--timeout"),
) -> None:
    """Bring up Grace on SQLite with the local backend, run a sample workload, summarise it."""
    if state_dir.exists():
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, GRACE_URL=url)
    log = (state_dir / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "grace.cli.main", "up", "--cluster", str(cluster), "--port",
         str(port), "--state-dir", str(state_dir), "--admission", str(ADMISSION)],
        cwd=REPO, env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_up(url, server)
        console.print(f"[bold]Grace[/bold] is up at {url} (SQLite in {state_dir}, cluster "
                      f"{cluster.name}); admin token in {state_dir / 'admin.token'}")
        admin = {"Authorization": f"Bearer {(state_dir / 'admin.token').read_text().strip()}"}
        specs = load_jobs(workload)
        members = _member_tokens(url, admin, sorted({s.tenant for s in specs}))
        # a quota, so one sweep waits its turn with a typed reason (`grace why` explains it)
        httpx.put(f"{url}/tenants/research", headers=admin, timeout=HTTP_TIMEOUT_S,
                  json=DEMO_QUOTA).raise_for_status()
        ids = []
        for spec in specs:  # each job as a member of its tenant: the tenant is the token's
            body = spec.model_dump(mode="json", exclude_none=True, exclude={"tenant"})
            r = httpx.post(f"{url}/jobs", json=body, headers=members[spec.tenant],
                           timeout=HTTP_TIMEOUT_S)
            r.raise_for_status()
            ids.append(r.json()["id"])
        console.print(f"submitted {len(ids)} jobs from {workload.name}, each with a member "
                      f"token of its tenant ({', '.join(members)}); tenant research may hold "
                      f"{DEMO_QUOTA['guaranteed_gpus']:g} GPUs. Dashboard: {url}/ (sign in "
                      f"with the admin token)")
        whys: dict[str, dict] = {}
        rows = _follow(url, timeout_s, admin, whys)
        _summary(rows, requeued_attempts(rows, lambda jid: _get(f"{url}/jobs/{jid}", admin)))
        _explain(whys)
        failed = [r for r in rows if r["state"] != "completed"]
        if failed:
            console.print(f"[red]{len(failed)} job(s) did not complete[/red]; see "
                          f"`grace logs ID` with GRACE_URL={url}, or {state_dir}/jobs/")
            raise typer.Exit(code=1)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


def _member_tokens(url: str, admin: dict[str, str],
                   tenants: list[str]) -> dict[str, dict[str, str]]:
    """One member token per tenant, made with the admin token (``grace token create``)."""
    out = {}
    for tenant in tenants:
        r = httpx.post(f"{url}/tokens", headers=admin, json={
            "name": f"demo {tenant}", "role": "member", "tenant": tenant}, timeout=HTTP_TIMEOUT_S)
        r.raise_for_status()
        out[tenant] = {"Authorization": f"Bearer {r.json()['token']}"}
    return out


def _wait_up(url: str, server: subprocess.Popen) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        if server.poll() is not None:
            raise typer.Exit(code=1)
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("grace up did not answer within 60 s")


def _follow(url: str, timeout_s: float, headers: dict[str, str],
            whys: dict[str, dict]) -> list[dict]:
    """The jobs table, live, until every job ended; meanwhile ``GET /jobs/N/why`` of the
    first job seen waiting with a reason and of the first running one whose heartbeats
    name a bottleneck (what ``grace why N`` prints), kept in ``whys`` by state."""
    deadline = time.time() + timeout_s
    rows: list[dict] = []
    table: RenderableType = ""
    # live in a terminal; through a pipe (CI, `| tee`) only the last table, on lines of
    # its own: a Live display there ends without its newline
    live = Live(console=console, refresh_per_second=2) if console.is_terminal else None
    with live or nullcontext():
        while time.time() < deadline:
            try:  # a busy 2-core laptop may answer slowly; the deadline decides, not one read
                rows = _get(f"{url}/jobs", headers)
                attempts = requeued_attempts(rows, lambda jid: _get(f"{url}/jobs/{jid}", headers))
            except httpx.HTTPError:
                time.sleep(1.0)
                continue
            table = jobs_table(rows, console.width, attempts=attempts)
            if live is not None:
                live.update(table)
            if rows and all(r["state"] in ENDED for r in rows):
                break
            for r in rows:
                if r["state"] in ("pending", "running") and r["state"] not in whys and (
                        r["state"] == "running" or r.get("reason")):
                    try:  # an aside: a slow answer on a busy laptop must not stop the demo
                        why = httpx.get(f"{url}/jobs/{r['id']}/why", headers=headers,
                                        timeout=30).json()
                    except httpx.HTTPError:
                        continue
                    # the job may have moved on between the list and this read
                    if why.get("state") == r["state"] and why.get("reason") not in (
                            None, "no-heartbeats-yet"):
                        whys[r["state"]] = why | {"name": r["name"]}
            time.sleep(1.0)
    if live is None:
        console.print(table)
    return rows


def _get(url: str, headers: dict[str, str]) -> Any:
    """One read of the demo's own server, with room for a slow answer (httpx's default
    5 s is too little for a 2-core machine starting five trainings at once)."""
    r = httpx.get(url, headers=headers, timeout=HTTP_TIMEOUT_S)
    r.raise_for_status()
    return r.json()


def _explain(whys: dict[str, dict]) -> None:
    """What ``grace why`` said during the run, for one waiting and one running job."""
    for state in ("pending", "running"):
        why = whys.get(state)
        if why is not None:
            console.print(f"[bold]grace why {why['job']}[/bold] ({why['name']}, {state}): "
                          f"[bold]{why['reason']}[/bold]: {why['action']}")


def _summary(rows: list[dict], attempts: dict[int, list] | None = None) -> None:
    """Jobs by state, wait and run times (people's units, totals over each job's attempts
    as ``grace jobs`` shows them) and GPU-hours per tenant, each line within the console."""
    by_tenant: dict[str, float] = defaultdict(float)
    waits, runs = [], []
    now = time.time()
    for r in rows:
        if r["started_at"]:
            wait, run = wait_run(r, (attempts or {}).get(r["id"]), now)
            waits.append(wait)
            runs.append(run)
            by_tenant[r["tenant"]] += r["gpus"] * run / 3600
    states: dict[str, int] = defaultdict(int)
    for r in rows:
        states[r["state"]] += 1
    console.print(f"jobs: {len(rows)} ({', '.join(f'{n} {s}' for s, n in states.items())})")
    if waits:
        console.print(f"wait: avg {duration(sum(waits) / len(waits))}, max {duration(max(waits))}; "
                      f"run: avg {duration(sum(runs) / len(runs))}, max {duration(max(runs))}")
    console.print(fit_table([Column("tenant"), Column("GPU-hours", justify="right")],
                            [[t, f"{gh:.4f}"] for t, gh in sorted(by_tenant.items())],
                            console.width, title="GPU-hours per tenant"))
