"""The live control plane under load: where a reconcile cycle's time goes, submits, listings.

Setup, per ``--pending`` count (1,000 and 10,000 by default): a store (a SQLite
file by default, ``--db URL`` for PostgreSQL, where a fresh schema is made and
dropped) holding ``--jobs`` jobs (100,000) on the 16,384-GPU
``examples/clusters/h100-16k.yaml``: 2,000 running (8 GPUs each, 16,000 GPUs
busy), the pending ones of the Philly size mix scaled up so most wait, the rest
ended; each with its attempts and events, as the control plane writes them.

1. Reconcile: ``Reconciler.cycle`` in this process with a no-op backend double
   (every attempt "runs" forever; nothing is launched). The first cycle reads
   every live job and places what fits; the second reads back the reasons the
   first wrote (both reported apart); then ``--cycles`` steady cycles, with 50
   submissions and 10 cancels landing halfway. Each cycle's phases (observe,
   health, watches, load, decide, apply; commit overlaps them) come from the
   cycle's own report.
2. API (on the largest store): the FastAPI app served by uvicorn in a
   subprocess on loopback with an admin token. Latency, with httpx over a keep-alive
   connection: ``--requests`` sequential calls of ``GET
   /jobs?limit=200``, the same deep in the listing (``&after=ID``), ``GET
   /jobs/{id}`` and ``POST /jobs``. Throughput, with ``http.client`` (a lean client,
   so the load takes little of the cores the server shares): ``--submissions`` POSTs
   from each of ``--clients`` concurrent client counts (1, 8, 32), then as many jobs
   in ``POST /jobs:batch`` requests of 100. Afterwards every acknowledged id is
   checked against the store: each stored exactly once.

Prints one JSON object on its last line: ``store``, ``cycle_p50_ms``,
``cycle_p99_ms``, ``decide_p50_ms`` (the largest pending count), ``submits_per_s``
(the most clients), ``submits_per_s_by_clients``, ``batch_submits_per_s``,
``cpu_ms_per_submit_by_clients`` (CPU per submission of the server process, of
this client process, of PostgreSQL's processes when it runs on this machine, and of
the whole ``machine``: on a small machine they share the cores, and the server's
figure bounds what one API process can take), ``submits_per_s_all_cores_bound``
(``cores`` x 1000 over the machine's figure at the most clients: no arrangement of
processes submits faster on this machine), ``stored_exactly_once``,
``list_p99_ms``, and per pending count the phases.

Run: ``python benchmarks/control_plane.py [--db postgresql://...] [--profile]``
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import http.client
import io
import json
import os
import pstats
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import insert, select, text
from sqlalchemy.engine import make_url

from grace.backends.base import AttemptStatus, LaunchSpec, Observation
from grace.control.heap import freeze_long_lived
from grace.control.reconciler import Reconciler
from grace.control.store import repository as repo
from grace.control.store import tokens
from grace.control.store.db import Store, make_engine
from grace.control.store.models import Attempt, Job, JobEvent, Role, Tenant
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.spec.cluster import ClusterSpec
from grace.spec.job import JobSpec
from grace.spec.loader import load_cluster

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "clusters" / "h100-16k.yaml"
TENANTS = ("vision", "speech", "nlp", "research")
#: Philly's sizes (benchmarks/scheduler.py) times 8: on a full 16k cluster most of them wait.
PENDING_SIZES = {8: 76627, 16: 1818, 32: 1870, 64: 1643, 128: 199, 256: 67, 512: 6, 1024: 3}
COMMAND = ["python", "train.py"]
#: the API's Authorization header (an admin token made in the store)
AUTH: dict[str, str] = {}


# ---------------------------------------------------------------- the backend double
class NoopBackend:
    """Launches nothing; every attempt it was given runs until cancelled."""

    name = "noop"
    capabilities = frozenset({"launch", "cancel", "poll", "adopt", "reap"})

    def __init__(self, cluster: ClusterSpec) -> None:
        self.cluster = cluster
        self.live: set[tuple[int, int]] = set()
        self.launched = 0

    def inventory(self) -> ClusterSpec:
        return self.cluster

    def launch(self, spec: LaunchSpec) -> str:
        self.live.add((spec.job_id, spec.attempt))
        self.launched += 1
        return json.dumps({"job_id": spec.job_id, "attempt": spec.attempt})

    def poll(self) -> list[Observation]:
        return [Observation(j, a, AttemptStatus.RUNNING) for j, a in self.live]

    def cancel(self, job_id: int, attempt: int, grace_s: float = 10.0) -> None:
        self.live.discard((job_id, attempt))

    def adopt(self, job_id: int, attempt: int, handle: str) -> bool:
        self.live.add((job_id, attempt))
        return True

    def drain(self, node: str, reason: str) -> None:
        pass

    def reap(self, job_id: int, attempt: int, workdir: Path) -> int:
        self.live.discard((job_id, attempt))
        return 0


# ---------------------------------------------------------------- the store
@contextlib.contextmanager
def database(db: str | None, workdir: Path) -> Iterator[str]:
    """A URL to an empty database: a SQLite file in ``workdir``, or a fresh PostgreSQL schema."""
    if db is None:
        yield f"sqlite:///{workdir / 'grace.sqlite'}"
        return
    schema = f"grace_bench_{uuid.uuid4().hex[:10]}"
    admin = make_engine(db)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        url = make_url(db).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def seed(store: Store, topo: Topology, n_jobs: int, n_running: int, n_pending: int,
         rng: random.Random) -> dict[str, int]:
    """Bulk-insert jobs, attempts and events shaped like the control plane's own rows."""
    now = time.time()
    n_done = n_jobs - n_running - n_pending
    sizes, weights = zip(*PENDING_SIZES.items(), strict=True)
    jobs: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    specs: dict[tuple, dict[str, Any]] = {}

    def spec_json(gpus: int, tenant: str, priority: int, estimate: float) -> dict[str, Any]:
        key = (gpus, tenant, priority, estimate)
        if key not in specs:
            specs[key] = JobSpec.model_validate({
                "name": "bench", "tenant": tenant, "gpus": gpus, "priority": priority,
                "runtime_estimate": estimate, "command": COMMAND}).model_dump(mode="json")
        return specs[key]

    for i in range(n_jobs):
        jid = i + 1
        tenant = TENANTS[i % len(TENANTS)]
        submitted = now - 86_400 + i
        if i < n_done:
            state, gpus, node = "completed", 8, topo.nodes[i % len(topo.nodes)].name
        elif i < n_done + n_running:
            state, gpus, node = "running", 8, topo.nodes[i - n_done].name
        else:
            state, gpus, node = "pending", rng.choices(sizes, weights)[0], None
        priority = rng.choice((0, 0, 0, 1, 5))
        estimate = float(rng.choice((3600, 4 * 3600, 24 * 3600)))
        spec = dict(spec_json(gpus, tenant, priority, estimate), name=f"bench-{jid:05d}")
        started = submitted + 60 if state != "pending" else None
        ended = started + 3600 if state == "completed" else None
        jobs.append({"id": jid, "name": spec["name"], "tenant": tenant, "spec_json": spec,
                     "state": state, "priority": priority, "workload_class": "experiment",
                     "gpus": float(gpus), "submitted_at": submitted, "started_at": started,
                     "ended_at": ended, "attempts_count": 0 if node is None else 1,
                     "restarts": 0, "stalled_restarts": 0, "exclude_nodes": [],
                     "cancel_requested": False,
                     "reason": "completed" if state == "completed" else None, "version": 1})
        events.append({"job_id": jid, "at": submitted, "kind": "submitted",
                       "detail": {"gpus": float(gpus), "tenant": tenant}})
        if node is None:
            continue
        placement = [{"node": node, "gpus": list(range(8))}]
        attempts.append({"job_id": jid, "number": 1, "placement_json": placement,
                         "state": "succeeded" if state == "completed" else "running",
                         "gpus": float(gpus), "backend": "noop",
                         "handle": json.dumps({"job_id": jid, "attempt": 1}),
                         "started_at": started, "ended_at": ended,
                         "exit_code": 0 if state == "completed" else None,
                         "failure_kind": None, "failed_node": None, "detail": None,
                         "resumed_from": None})
        events.append({"job_id": jid, "at": started, "kind": "placed",
                       "detail": {"from": "pending", "to": "running", "attempt": 1,
                                  "nodes": placement, "resumed_from": None}})
        events.append({"job_id": jid, "at": started, "kind": "started", "detail": {"attempt": 1}})
        if state == "completed":
            events.append({"job_id": jid, "at": ended, "kind": "completed",
                           "detail": {"from": "running", "to": "completed", "attempt": 1}})
    with store.transaction() as s:
        s.execute(insert(Tenant), [{"name": t, "guaranteed_gpus": None, "borrow_limit_gpus": None,
                                    "weight": 1.0, "preemptions_per_hour": 20} for t in TENANTS])
        for chunk in range(0, len(jobs), 2000):
            s.execute(insert(Job), jobs[chunk:chunk + 2000])
        for chunk in range(0, len(attempts), 2000):
            s.execute(insert(Attempt), attempts[chunk:chunk + 2000])
        for chunk in range(0, len(events), 5000):
            s.execute(insert(JobEvent), events[chunk:chunk + 5000])
        if store.dialect == "postgresql":  # explicit ids: move the sequence past them
            s.execute(text("SELECT setval(pg_get_serial_sequence('jobs', 'id'), "
                           "(SELECT max(id) FROM jobs))"))
    with store.engine.connect() as conn:  # the planner's statistics, as a live store has them
        conn.execute(text("ANALYZE"))
        conn.commit()
    return {"jobs": n_jobs, "completed": n_done, "running": n_running, "pending": n_pending,
            "attempts": len(attempts), "events": len(events)}


# ---------------------------------------------------------------- reconcile
def bench_reconcile(store: Store, topo: Topology, cluster: ClusterSpec, state_dir: Path,
                    cycles: int, profile: bool,
                    rng_cycles: random.Random | None = None) -> dict[str, Any]:
    rng_cycles = rng_cycles or random.Random(0)
    backend = NoopBackend(cluster)
    rec = Reconciler(store, backend, topo, get_policy("grace"), state_dir)
    with store.read() as s:  # what a restarted control plane would adopt
        rows = s.execute(text("SELECT job_id, number FROM attempts WHERE state = 'running'"))
        backend.live.update((int(j), int(n)) for j, n in rows)
    c0, t0 = time.process_time(), time.perf_counter()
    first = rec.cycle()
    first_ms = (time.perf_counter() - t0) * 1000
    first_cpu_ms = (time.process_time() - c0) * 1000
    freeze_long_lived()  # as grace up's loop does after its first cycle (grace.control.heap)
    # the cycle after the first reads back every reason the first one wrote (each a change
    # of its job): a start-up transient, reported apart from the steady cycles
    t0 = time.perf_counter()
    rec.cycle()
    second_ms = (time.perf_counter() - t0) * 1000
    times: list[float] = []
    cpu: list[float] = []
    pending: list[int] = []
    phases: dict[str, list[float]] = {}
    profiler = cProfile.Profile() if profile else None
    for i in range(cycles):
        if i == cycles // 2:
            churn(store, rng_cycles)  # the steady state has news: submits and cancels
        if profiler:
            profiler.enable()
        c0, t0 = time.process_time(), time.perf_counter()
        report = rec.cycle()
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        if profiler:
            profiler.disable()
        pending.append(report.pending)
        for phase, seconds in report.phases.items():
            phases.setdefault(phase, []).append(seconds * 1000)
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
        print(out.getvalue(), file=sys.stderr)
    return {"p50": round(float(np.percentile(times, 50)), 1),
            "p99": round(float(np.percentile(times, 99)), 1),
            "max": round(max(times), 1), "cycles": cycles,
            "cpu_p50": round(float(np.percentile(cpu, 50)), 1),
            "pending": int(np.median(pending)), "running": report.running,
            "first_cycle_ms": round(first_ms, 1), "first_cycle_cpu_ms": round(first_cpu_ms, 1),
            "first_cycle_started": len(first.started), "second_cycle_ms": round(second_ms, 1),
            "phases_p50_ms": {k: round(float(np.percentile(v, 50)), 2) for k, v in phases.items()},
            "phases_p99_ms": {k: round(float(np.percentile(v, 99)), 2) for k, v in phases.items()}}


def churn(store: Store, rng: random.Random) -> None:
    """What a busy minute brings between two cycles: 50 submissions and 10 cancels."""
    with store.transaction() as s:
        for i in range(50):
            spec = JobSpec.model_validate({**_body(i), "name": f"churn-{i}"})
            repo.add_job(s, spec, time.time())
        for job in s.scalars(select(Job).where(Job.state == "pending").limit(10)):
            job.cancel_requested = True


# ---------------------------------------------------------------- API
def serve(url: str, port: int, state_dir: Path, with_reconciler: bool) -> None:
    """The API (``--serve``) for the parent process to drive; with the reconcile loop of
    ``grace up`` beside it (one cycle a second, no-op backend) if ``with_reconciler``."""
    import uvicorn

    from grace.control.api import create_app

    cluster = load_cluster(CLUSTER)
    topo = Topology.from_spec(cluster)
    store = Store.open(url)
    stop = threading.Event()
    if with_reconciler:
        backend = NoopBackend(cluster)
        with store.read() as s:
            rows = s.execute(text("SELECT job_id, number FROM attempts WHERE state = 'running'"))
            backend.live.update((int(j), int(n)) for j, n in rows)
        rec = Reconciler(store, backend, topo, get_policy("grace"), state_dir)
        rec.cycle()  # the first cycle (compiles every job) before the clients start

        def loop() -> None:
            while not stop.is_set():
                rec.cycle()
                stop.wait(1.0)

        threading.Thread(target=loop, daemon=True).start()
    app = create_app(store, topo, state_dir)
    freeze_long_lived()  # as grace up does before it serves (grace.control.heap)
    try:
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    finally:
        stop.set()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _timed(client: httpx.Client, method: str, path: str, **kw: Any) -> float:
    t0 = time.perf_counter()
    r = client.request(method, path, **kw)
    ms = (time.perf_counter() - t0) * 1000
    if r.status_code >= 400:
        raise RuntimeError(f"{method} {path}: {r.status_code} {r.text[:300]}")
    return ms


def _body(i: int) -> dict[str, Any]:
    return {"name": f"submitted-{i}", "tenant": TENANTS[i % len(TENANTS)], "gpus": 8,
            "runtime_estimate": "4h", "command": COMMAND}


def admin_token(store: Store) -> str:
    """An admin API token (authentication is on, as in ``grace up``)."""
    with store.transaction() as s:
        _, secret = tokens.create(s, name="bench", role=Role.ADMIN, tenant=None,
                                  created_by="bench", now=time.time())
    return secret


def bench_api(url: str, state_dir: Path, n_jobs: int, requests: int, submissions: int,
              clients: list[int], rng: random.Random, with_reconciler: bool,
              token: str) -> dict[str, Any]:
    global AUTH
    AUTH = {"Authorization": f"Bearer {token}"}
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, __file__, "--serve", "--db", url, "--port", str(port),
                             "--state-dir", str(state_dir)]
                            + (["--with-reconciler"] if with_reconciler else []),
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError("the API server exited")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the API server did not answer in 120 s")
            time.sleep(0.1)
        latency: dict[str, list[float]] = {"GET /jobs?limit=200": [], "GET /jobs/{id}": [],
                                           "POST /jobs": [], "GET /jobs?limit=200&after=ID": []}
        with httpx.Client(base_url=base, timeout=30, headers=AUTH) as client:
            for _ in range(10):  # warm-up: connections, caches
                _timed(client, "GET", "/jobs", params={"limit": 200})
                _timed(client, "GET", f"/jobs/{rng.randrange(1, n_jobs + 1)}")
            for i in range(requests):
                latency["GET /jobs?limit=200"].append(
                    _timed(client, "GET", "/jobs", params={"limit": 200}))
                latency["GET /jobs/{id}"].append(
                    _timed(client, "GET", f"/jobs/{rng.randrange(1, n_jobs + 1)}"))
                latency["POST /jobs"].append(_timed(client, "POST", "/jobs",
                                                    json={**_body(i), "name": f"latency-{i}"}))
            deep = n_jobs // 2  # a page deep in the listing costs what the first does
            for _ in range(requests):
                latency["GET /jobs?limit=200&after=ID"].append(
                    _timed(client, "GET", "/jobs", params={"limit": 200, "after": deep}))
        by_clients: dict[int, float] = {}
        cpu_ms: dict[int, dict[str, float]] = {}
        acknowledged: list[int] = []
        first = requests
        for n in clients:
            cpu0 = _cpu_now(proc.pid)
            wall, ids = _submit_concurrently(base, n, range(first, first + submissions))
            cpu_ms[n] = {k: round((v - cpu0[k]) * 1000 / submissions, 2)
                         for k, v in _cpu_now(proc.pid).items()}
            first += submissions
            by_clients[n] = round(submissions / wall, 1)
            acknowledged += ids
        wall, ids = _submit_concurrently(base, max(clients), range(first, first + submissions),
                                         batch=BATCH)
        batch_per_s = round(submissions / wall, 1)
        acknowledged += ids
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    p99 = {k: round(float(np.percentile(v, 99)), 2) for k, v in latency.items()}
    p50 = {k: round(float(np.percentile(v, 50)), 2) for k, v in latency.items()}
    return {"submissions_per_s": by_clients, "batch_submissions_per_s": batch_per_s,
            "cpu_ms_per_submit": cpu_ms,
            "p99": p99, "p50": p50, "acknowledged": acknowledged,
            "sequential_submissions_per_s": round(1000 / float(np.mean(latency["POST /jobs"])), 1)}


def _cpu_now(server_pid: int) -> dict[str, float]:
    """CPU seconds so far: the API server, this client, PostgreSQL (if it runs here) and
    the whole machine (what the cores gave every process, other tenants included)."""
    return {"server": _cpu_seconds(server_pid), "client": time.process_time(),
            "database": _postgres_seconds(), "machine": _machine_seconds()}


#: jobs per ``POST /jobs:batch`` in the batch run
BATCH = 100


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) of process ``pid`` so far, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _postgres_seconds() -> float:
    """CPU seconds so far of this machine's PostgreSQL processes (the server and its
    backends, each named ``postgres``); 0 where none runs here (SQLite, or a remote one)."""
    total = 0.0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")] == "postgres":
            fields = stat.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _machine_seconds() -> float:
    """CPU seconds every process on this machine has used so far, all cores (``/proc/stat``:
    all but idle and I/O wait). On a shared machine this includes its other tenants."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _submit_concurrently(base: str, clients: int, numbers: range,
                         batch: int = 0) -> tuple[float, list[int]]:
    """POST ``numbers`` as jobs from ``clients`` threads (one at a time, or ``batch`` per
    ``POST /jobs:batch``); (seconds, the ids the API acknowledged)."""
    todo = iter(numbers)
    lock = threading.Lock()
    ids: list[int] = []

    host, port = base.removeprefix("http://").split(":")
    headers = {**AUTH, "Content-Type": "application/json"}

    def submitter() -> None:
        # http.client, not httpx: a lean keep-alive client, so the load generator takes as
        # little as it can of the cores it shares with the server (httpx cost about 1 ms of
        # CPU a request here, a third of the server's own)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            while True:
                with lock:
                    chunk = [i for _, i in zip(range(max(batch, 1)), todo, strict=False)]
                if not chunk:
                    return
                if batch:
                    conn.request("POST", "/jobs:batch", json.dumps(
                        {"jobs": [_body(i) for i in chunk]}), headers)
                else:
                    conn.request("POST", "/jobs", json.dumps(_body(chunk[0])), headers)
                r = conn.getresponse()
                payload = r.read()
                if r.status != 201:
                    raise RuntimeError(f"submit: {r.status} {payload[:300]!r}")
                answer = json.loads(payload)
                got = [j["id"] for j in answer["jobs"]] if batch else [answer["id"]]
                with lock:
                    ids.extend(got)
        finally:
            conn.close()

    failures: list[BaseException] = []

    def guarded() -> None:  # a thread's error would otherwise only be printed, and the
        try:                # rate worked out from the submissions it never made
            submitter()
        except BaseException as e:
            with lock:
                failures.append(e)

    threads = [threading.Thread(target=guarded) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(f"{len(failures)} of {clients} clients failed") from failures[0]
    return time.perf_counter() - t0, ids


def stored_once(store: Store, acknowledged: list[int]) -> dict[str, Any]:
    """Is every acknowledged job in the store exactly once, and nothing else submitted?"""
    with store.read() as s:
        rows = s.execute(text("SELECT id, name FROM jobs WHERE name LIKE 'submitted-%'")).all()
    names = [n for _, n in rows]
    return {"acknowledged": len(acknowledged), "stored": len(rows),
            "duplicate_names": len(names) - len(set(names)),
            "ok": sorted(acknowledged) == sorted(int(i) for i, _ in rows)
            and len(names) == len(set(names))}


def _ints(text_: str) -> list[int]:
    return [int(x) for x in text_.split(",") if x.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=None, help="PostgreSQL URL (default: a SQLite file)")
    ap.add_argument("--jobs", type=int, default=100_000,
                    help="jobs in each store (the ones neither running nor pending ended)")
    ap.add_argument("--running", type=int, default=2_000)
    ap.add_argument("--pending", type=_ints, default=[1_000, 10_000],
                    help="pending jobs, one store each (comma-separated)")
    ap.add_argument("--cycles", type=int, default=20, help="steady reconcile cycles to time")
    ap.add_argument("--requests", type=int, default=200, help="sequential calls per endpoint")
    ap.add_argument("--submissions", type=int, default=2000, help="POSTs per client count")
    ap.add_argument("--clients", type=_ints, default=[1, 8, 32],
                    help="concurrent submitting clients (comma-separated)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="cProfile the steady cycles (stderr)")
    ap.add_argument("--no-loaded-api", action="store_true", help=argparse.SUPPRESS)  # kept
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--with-reconciler", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--state-dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.db, args.port, args.state_dir, args.with_reconciler)
        return

    rng = random.Random(args.seed)
    cluster = load_cluster(CLUSTER)
    topo = Topology.from_spec(cluster)
    started = time.perf_counter()
    cycles: dict[int, dict[str, Any]] = {}
    api: dict[str, Any] = {}
    once: dict[str, Any] = {}
    for n_pending in args.pending:
        workdir = Path(tempfile.mkdtemp(prefix="grace-bench-"))
        try:
            with database(args.db, workdir) as url:
                store = Store.open(url)
                t0 = time.perf_counter()
                n_jobs = max(args.jobs, args.running + n_pending)
                seeded = seed(store, topo, n_jobs, args.running, n_pending, rng)
                print(f"store ({store.dialect}): {seeded} in {time.perf_counter() - t0:.1f}s",
                      file=sys.stderr)
                t0 = time.perf_counter()
                cycles[n_pending] = bench_reconcile(store, topo, cluster, workdir / "state",
                                                    args.cycles, args.profile)
                print(f"reconcile, {n_pending} pending: {cycles[n_pending]} "
                      f"({time.perf_counter() - t0:.1f}s)", file=sys.stderr)
                if n_pending == args.pending[-1]:
                    t0 = time.perf_counter()
                    api = bench_api(url, workdir / "state", n_jobs, args.requests,
                                    args.submissions, args.clients, rng, with_reconciler=False,
                                    token=admin_token(store))
                    once = stored_once(store, api.pop("acknowledged"))
                    print(f"api: {api} {once} ({time.perf_counter() - t0:.1f}s)",
                          file=sys.stderr)
                store.close()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    big = cycles[args.pending[-1]]
    most = max(args.clients)
    out: dict[str, Any] = {
        "store": "postgresql" if args.db else "sqlite",
        "cluster_gpus": topo.total_gpus,
        "jobs_in_store": max(args.jobs, args.running + args.pending[-1]),
        "pending": args.pending[-1],
        "running": big["running"],
        "cycle_p50_ms": big["p50"],
        "cycle_p99_ms": big["p99"],
        "decide_p50_ms": big["phases_p50_ms"].get("decide"),
        "submits_per_s": api["submissions_per_s"][most],
        "submit_clients": most,
        "submits_per_s_by_clients": api["submissions_per_s"],
        "batch_submits_per_s": api["batch_submissions_per_s"],
        "cpu_ms_per_submit_by_clients": api["cpu_ms_per_submit"],
        # the rate at which this machine's cores run out, were every process to scale
        # across them perfectly: its cores over the CPU one submission took, all told
        "cores": os.cpu_count(),
        "submits_per_s_all_cores_bound": round(
            (os.cpu_count() or 1) * 1000 / max(api["cpu_ms_per_submit"][most]["machine"], 1e-3),
            1),
        "stored_exactly_once": once["ok"],
        "list_p99_ms": api["p99"]["GET /jobs?limit=200"],
        "api_p99_ms_by_endpoint": api["p99"],
        "api_p50_ms_by_endpoint": api["p50"],
        "reconcile_by_pending": cycles,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
