"""What one submission costs the web framework alone on this machine: the floor under
``POST /jobs``, beside Grace's own figure from ``benchmarks/control_plane.py``.

A bare FastAPI app served by uvicorn as ``grace up`` serves its own (one process,
h11, asyncio; no access log), with one route: ``POST /jobs`` taking Grace's
``JobSpec`` through a synchronous route and a synchronous bearer-token dependency
that only reads the header, as Grace's route does. It stores nothing: no token
lookup, no audit entry, no job row, no commit. ``--clients`` threads (32) post
``--submissions`` jobs with the very client ``control_plane.py`` uses.

The point is arithmetic. At ``--target`` submissions per second (1,000, issue 19's
PostgreSQL figure) the machine's cores give each submission ``cores x 1000 /
target`` ms of CPU in all (``cpu_budget_ms_per_submit``; 2.0 ms on 2 cores), for the
client, the framework, Grace's work and the database together. The framework's
share is ``floor_cpu_ms_per_submit.server``; what is left is ``budget_left_ms``.

Prints one JSON object on its last line: ``cores``, ``target_submits_per_s``,
``cpu_budget_ms_per_submit``, ``floor_submits_per_s``, ``floor_cpu_ms_per_submit``
(``server``, ``client``, ``machine``), ``budget_left_ms``.

Run: ``python benchmarks/api_floor.py [--clients 32] [--submissions 6000]``
"""

import argparse
import contextlib
import json
import multiprocessing
import os
import socket
import sys
import time
from typing import Any

import control_plane as cp  # beside this file: the benchmark's client and CPU counters


def serve(port: int) -> None:
    """The bare app: Grace's job body and a header-reading dependency, nothing stored."""
    import uvicorn
    from fastapi import Depends, FastAPI, HTTPException, Request

    from grace.spec import JobSpec

    # (no ``from __future__ import annotations`` in this file: FastAPI reads the route's
    # annotations, and names imported here would not resolve from strings)
    app = FastAPI()

    def bearer(request: Request) -> str:
        header = request.headers.get("authorization", "")
        if not header.startswith("Bearer "):
            raise HTTPException(401, "a bearer token is needed")
        return header.removeprefix("Bearer ")

    counter = iter(range(1, 1 << 62))

    @app.post("/jobs", status_code=201)
    def submit(spec: JobSpec, token: str = Depends(bearer)) -> dict[str, Any]:
        return {"id": next(counter), "name": spec.name, "tenant": spec.tenant,
                "state": "pending"}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _wait_for(port: int, proc: multiprocessing.process.BaseProcess) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not proc.is_alive():
            raise RuntimeError("the bare server exited")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    raise RuntimeError("the bare server did not listen in 60 s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--submissions", type=int, default=6000)
    ap.add_argument("--target", type=float, default=1000.0,
                    help="submissions per second the budget is worked out for")
    args = ap.parse_args()
    port = cp._free_port()
    proc = multiprocessing.get_context("spawn").Process(target=serve, args=(port,))
    proc.start()
    try:
        _wait_for(port, proc)
        cp.AUTH = {"Authorization": "Bearer floor"}
        base = f"http://127.0.0.1:{port}"
        cp._submit_concurrently(base, args.clients, range(500))  # warm-up
        pid = proc.pid
        assert pid is not None
        cpu0 = cp._cpu_now(pid)
        wall, ids = cp._submit_concurrently(base, args.clients, range(args.submissions))
        cpu1 = cp._cpu_now(pid)
    finally:
        proc.terminate()
        proc.join(10)
    if len(ids) != args.submissions:
        raise RuntimeError(f"{len(ids)} of {args.submissions} submissions answered")
    cpu = {k: round((cpu1[k] - cpu0[k]) * 1000 / args.submissions, 3)
           for k in ("server", "client", "machine")}
    cores = os.cpu_count() or 1
    budget = cores * 1000 / args.target
    out = {"cores": cores, "clients": args.clients, "target_submits_per_s": args.target,
           "cpu_budget_ms_per_submit": round(budget, 3),
           "floor_submits_per_s": round(args.submissions / wall, 1),
           "floor_cpu_ms_per_submit": cpu,
           "budget_left_ms": round(budget - cpu["server"] - cpu["client"], 3)}
    print(f"bare FastAPI POST /jobs: {out['floor_submits_per_s']}/s, {cpu} ms of CPU each; "
          f"at {args.target:.0f}/s on {cores} cores each may take {budget:.2f} ms in all",
          file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
