"""/metrics at scale: scrape cost at 16,384 GPUs and 1,000 running jobs, and the reconcile
cycle with the metrics refresher on and off.

Setup: a SQLite store seeded like ``benchmarks/control_plane.py`` (its ``seed``) on
``examples/clusters/h100-16k.yaml`` (2,048 nodes x 8 H100): 3,000 jobs, 1,000 of
them running (8 GPUs each, 8,000 GPUs held), 500 pending. Every running job has
sent heartbeats from 8 ranks (phases, step time, loss), so every per-job family
is full: the exposition is what a real scrape of such a cluster would get.

1. Render: ``GraceMetrics.refresh`` (read the store, fold heartbeats, render the
   text with prometheus-client), ``--renders`` times. This is the refresher
   thread's work, every ``refresh_s`` (5 s), off the request path.
2. Scrape: ``GET /metrics`` with an admin token over loopback HTTP to uvicorn (in
   a thread), as Prometheus asks (gzip accepted, body read as sent), ``--scrapes``
   times, interleaved with a small authenticated read (``/health/breaker``) as the
   baseline every request pays (token check, routing, middleware); and in process
   through ``TestClient`` (whose own overhead is several ms).
3. Cycle: ``Reconciler.cycle`` (no-op backend, as control_plane.py), in blocks
   alternating refresher off / on (``refresh_s`` = 5 s, the default, and the
   refresher and cycle histogram wired as ``grace up`` wires them), so machine
   noise falls on both; the ratio of medians is the figure.

Prints one JSON object on its last line: ``scrape_ms`` {p50, p99} (HTTP; target < 5),
``baseline_request_ms``, ``scrape_in_process_ms``, ``render_ms``, ``exposition_bytes``,
``gzip_bytes``, ``series``, ``showback_ms``,
``cycle_ms_off``/``cycle_ms_on`` {p50} and ``cycle_ratio_on_off``.

Run: ``python benchmarks/metrics_scrape.py [--scrapes 300] [--cycles 12]``
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from control_plane import CLUSTER, NoopBackend, seed
from grace.control.api import create_app
from grace.control.reconciler import Reconciler
from grace.control.store import tokens
from grace.control.store.db import Store
from grace.control.store.models import Role
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.observe.gpu import GpuTelemetry
from grace.observe.hub import Observability
from grace.spec.loader import load_cluster

RANKS = 8


def _no_nvml() -> Any:
    raise ImportError("no NVML in the benchmark: the 16k GPUs are other hosts'")


def feed_heartbeats(obs: Observability, store: Store) -> int:
    """Rank records for every running job, as the runtime would send them."""
    with store.read() as s:
        live = [(int(j), int(n)) for j, n in s.execute(
            text("SELECT job_id, number FROM attempts WHERE state = 'running'"))]
    now = time.time()
    rng = random.Random(1)
    for job, attempt in live:
        for rank in range(RANKS):
            data = rng.uniform(0.01, 0.3)
            obs.telemetry.add(job, attempt, rank, f"node-{rank}", [{
                "step": 1000, "loss": 2.0, "tokens_per_s": 5e4, "step_s": 1.0, "steps": 50,
                "phases": {"data": data, "h2d": 0.01, "forward": 0.3, "backward": 0.4,
                           "allreduce": 0.2, "optimizer": 0.05, "sync": 0.01}, "at": now}])
    return len(live)


def percentiles(values: list[float]) -> dict[str, float]:
    return {"p50": round(float(np.percentile(values, 50)), 3),
            "p99": round(float(np.percentile(values, 99)), 3)}


def bench_scrape(app: Any, token: str, n: int) -> list[float]:
    from fastapi.testclient import TestClient

    # as Prometheus asks: it always accepts gzip
    client = TestClient(app, headers={"Authorization": f"Bearer {token}", "Accept-Encoding": "gzip"})
    for _ in range(5):
        client.get("/metrics")
    return [_raw_get(client, "/metrics") for _ in range(n)]


def _raw_get(client: Any, path: str) -> float:
    """Milliseconds to GET ``path`` and read its body as sent (gzip is the scraper's to
    inflate: Prometheus does that on its own CPU, not Grace's)."""
    t0 = time.perf_counter()
    with client.stream("GET", path) as r:
        size = sum(len(chunk) for chunk in r.iter_raw())
        assert r.status_code == 200 and size > 0, r.status_code
    return (time.perf_counter() - t0) * 1000


def bench_http(app: Any, token: str, n: int) -> tuple[list[float], list[float]]:
    """/metrics and, as a baseline, a small authenticated read, over loopback HTTP."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error",
                                           access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    while not server.started:
        time.sleep(0.05)
    out: list[float] = []
    baseline: list[float] = []
    try:
        with httpx.Client(base_url=base, timeout=30, headers={
                "Authorization": f"Bearer {token}", "Accept-Encoding": "gzip"}) as client:
            for _ in range(5):
                client.get("/metrics")
            for _ in range(n):  # interleaved, so noise falls on both alike
                out.append(_raw_get(client, "/metrics"))
                baseline.append(_raw_get(client, "/health/breaker"))
    finally:
        server.should_exit = True
        thread.join(10)
    return out, baseline


def bench_cycles(store: Store, topo: Topology, state_dir: Path, obs: Observability, token: str,
                 app: Any, cycles: int, blocks: int,
                 scrape_every_s: float) -> tuple[list[float], list[float]]:
    """Cycle times in blocks alternating off (no metrics at all) and on (``grace up``'s
    wiring: the refresher, the cycle histogram, and a Prometheus scraping every
    ``scrape_every_s`` through the API, which renders in the background)."""
    from fastapi.testclient import TestClient

    backend = NoopBackend(load_cluster(CLUSTER))
    with store.read() as s:
        rows = s.execute(text("SELECT job_id, number FROM attempts WHERE state = 'running'"))
        backend.live.update((int(j), int(n)) for j, n in rows)
    rec = Reconciler(store, backend, topo, get_policy("grace"), state_dir)
    rec.cycle()  # compiles every job once
    off: list[float] = []
    on: list[float] = []
    client = TestClient(app, headers={"Authorization": f"Bearer {token}",
                                      "Accept-Encoding": "gzip"})
    for block in range(blocks * 2):
        enabled = block % 2 == 1
        stop = threading.Event()

        def scrape_until_stopped(stop: threading.Event = stop) -> None:
            while True:
                client.get("/metrics")
                if stop.wait(scrape_every_s):
                    return

        scraper = threading.Thread(target=scrape_until_stopped, daemon=True)
        if enabled:
            rec.on_cycle = obs.metrics.cycle_seconds.observe
            obs.start()
            scraper.start()
        for _ in range(cycles):
            t0 = time.perf_counter()
            rec.cycle()
            (on if enabled else off).append((time.perf_counter() - t0) * 1000)
        if enabled:
            stop.set()
            scraper.join(30)
            obs.stop()
            rec.on_cycle = None
    return off, on


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--renders", type=int, default=10)
    ap.add_argument("--cycles", type=int, default=12, help="cycles per block")
    ap.add_argument("--blocks", type=int, default=3, help="off/on block pairs")
    ap.add_argument("--scrape-every", type=float, default=15.0,
                    help="seconds between Prometheus scrapes in the 'on' blocks (its default: 15)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="grace-metrics-bench-"))
    store = Store.open(f"sqlite:///{work / 'grace.sqlite'}")
    topo = Topology.from_spec(load_cluster(CLUSTER))
    seeded = seed(store, topo, n_jobs=3000, n_running=1000, n_pending=500, rng=random.Random(0))
    with store.transaction() as s:
        _, token = tokens.create(s, name="bench", role=Role.ADMIN, tenant=None, created_by="bench",
                                 now=time.time())
    obs = Observability(store, topo, work / "state", gpus=GpuTelemetry(_no_nvml, "bench"))
    running = feed_heartbeats(obs, store)
    renders = []
    t0 = time.perf_counter()
    obs.showback()  # the first, full read of history; later ones read only live jobs
    showback_first_ms = (time.perf_counter() - t0) * 1000
    for _ in range(args.renders):
        t0 = time.perf_counter()
        rendered = obs.metrics.refresh()
        renders.append((time.perf_counter() - t0) * 1000)
    body = rendered.text
    obs._showback_at = -1e18
    t0 = time.perf_counter()
    obs.showback()
    showback_ms = (time.perf_counter() - t0) * 1000
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    obs.metrics.refresh_s = 3600.0  # the refresher's rendering stands during the scrapes
    app = create_app(store, topo, work / "state", observability=obs)
    scrape = bench_scrape(app, token, args.scrapes)
    http, baseline = bench_http(app, token, args.scrapes)
    obs.metrics.refresh_s = 10.0
    off, on = bench_cycles(store, topo, work / "state", obs, token, app, args.cycles, args.blocks,
                           args.scrape_every)
    result = {
        "gpus": topo.total_gpus, "running_jobs": running, "seeded": seeded,
        "series": series, "exposition_bytes": len(body), "gzip_bytes": len(rendered.gzipped),
        "showback_first_ms": round(showback_first_ms, 1), "showback_ms": round(showback_ms, 1),
        "render_ms": percentiles(renders),
        "scrape_ms": percentiles(http), "baseline_request_ms": percentiles(baseline),
        "scrape_in_process_ms": percentiles(scrape),
        "scrape_target_ms": 5.0, "scrape_ok": percentiles(http)["p50"] < 5.0,
        "cycle_ms_off": percentiles(off), "cycle_ms_on": percentiles(on),
        "cycle_ratio_on_off": round(float(np.median(on)) / float(np.median(off)), 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
