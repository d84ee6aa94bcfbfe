"""A live control plane for the CLI's output tests: the real API on uvicorn over a real
SQLite store, its jobs placed by the real reconciler on the lab cluster, with outcomes
scripted (``ScriptedBackend``) so the store holds what a day of use leaves: sweep trials
with long names that differ only in the middle, a failure with a long multi-line
reason, a job requeued after its node was lost that waited for GPUs between attempts,
a job cancelled while running (no exit code), one still running, a drained node and two
8-GPU gangs that wait for it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from helpers import REPO, FakeClock, lab_reconciler, make_token, served

from grace.backends.base import AttemptStatus
from grace.control.api import create_app
from grace.control.store.db import Store

A100 = "A100-80GB"
LONG_SWEEP = "llama-7b-lora-sweep-seed-{}-lr-3e-4-warmup-2000-cosine"
SHORT_SWEEP = "sweep-seed-{}"
REQUEUED = "resnet50-imagenet-requeued-after-node-loss"
PENDING = "llama-70b-pretrain-{}-needs-both-a100-nodes"
DRAIN_REASON = ("ECC double-bit errors on GPU 2 reported by DCGM diag level 3; RMA ticket "
                "opened with the vendor, replace the baseboard before returning it")


@dataclass
class World:
    url: str
    token: str
    ids: dict[str, int] = field(default_factory=dict)

    def grace(self, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
        """The real ``grace`` CLI in a subprocess, stdout a pipe, at ``columns``."""
        env = {k: v for k, v in os.environ.items() if k != "GRACE_TOKEN_FILE"}
        env |= {"GRACE_URL": self.url, "GRACE_TOKEN": self.token, "COLUMNS": str(columns)}
        return subprocess.run([sys.executable, "-m", "grace.cli.main", *args], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=120)


@contextlib.contextmanager
def live_world(tmp: Path) -> Iterator[World]:
    store = Store.open(f"sqlite:///{tmp / 'grace.sqlite'}")
    clock = FakeClock(time.time() - 3600)
    rec = lab_reconciler(store, tmp / "state", clock)
    backend = rec.backend
    app = create_app(store, rec.topo, tmp / "state", rec, backend, clock=clock)
    token = make_token(store, "admin")
    api = TestClient(app, headers={"Authorization": f"Bearer {token}"})
    ids: dict[str, int] = {}

    def submit(key: str, name: str, gpus: float, tenant: str = "research", **kw: Any) -> int:
        r = api.post("/jobs", json={"name": name, "gpus": gpus, "tenant": tenant,
                                    "command": ["python", "train.py"], **kw})
        assert r.status_code == 201, r.text
        ids[key] = r.json()["id"]
        return ids[key]

    def cycle(advance: float = 1.0) -> None:
        clock.advance(advance)
        rec.cycle()

    def node_of(job_id: int) -> str:
        [node] = {n["node"] for n in api.get(f"/jobs/{job_id}").json()["attempts"][-1]["nodes"]}
        return node

    requeued = submit("requeued", REQUEUED, 4, tenant="computer-vision", gpu_model=A100)
    blocker = submit("blocker", "blocker", 4, gpu_model=A100)
    for i in (1, 2, 3):
        submit(f"long{i}", LONG_SWEEP.format(i), 1, gpu_model="L40S")
    failed = submit("failed", "tokenizer-typo", 1, gpu_model="L40S")
    cycle()
    assert {j["state"] for j in api.get("/jobs").json()} == {"running"}
    clock.advance(5)  # an application error in its first seconds: not retried
    backend.finish(failed, AttemptStatus.FAILED, exit_code=1, failed_node=node_of(failed),
                   detail="rank 0 exited 1\nTraceback (most recent call last):\n  File "
                          "\"train.py\", line 3\nModuleNotFoundError: No module named 'tokenizerz'")
    cycle()
    clock.advance(95)  # the requeued job's node is lost; the other A100 node is busy
    backend.finish(requeued, AttemptStatus.LOST, failed_node=node_of(requeued),
                   detail="agent disappeared without an exit record")
    for i in (1, 2, 3):
        backend.finish(ids[f"long{i}"])
    cycle()
    assert api.get(f"/jobs/{requeued}").json()["state"] == "pending"
    clock.advance(200)
    backend.finish(blocker)
    cycle()
    cycle()
    assert api.get(f"/jobs/{requeued}").json()["attempts"][-1]["number"] == 2
    clock.advance(300)
    backend.finish(requeued)
    cycle()
    cancelled = submit("cancelled", "checkpoint-writer", 1)
    submit("running", "still-running-eval", 1)
    for i in (1, 2, 3):
        submit(f"short{i}", SHORT_SWEEP.format(i), 1)
    cycle()
    assert api.post(f"/jobs/{cancelled}/cancel").status_code == 200
    for i in (1, 2, 3):
        backend.finish(ids[f"short{i}"])
    cycle(30)
    cycle()
    r = api.post("/nodes/a100-00/drain", json={"reason": DRAIN_REASON})
    assert r.status_code == 200, r.text
    # two 8-GPU gangs that wait (one A100 node is draining): what `grace priority` lists
    submit("waiting1", PENDING.format(1), 8, gpu_model=A100, priority=3)
    submit("waiting2", PENDING.format(2), 8, tenant="computer-vision", gpu_model=A100)
    cycle()
    states = {j["name"]: j["state"] for j in api.get("/jobs").json()}
    assert states[REQUEUED] == "completed" and states["tokenizer-typo"] == "failed", states
    assert states["checkpoint-writer"] == "cancelled" and states["still-running-eval"] == "running"
    assert states[PENDING.format(1)] == states[PENDING.format(2)] == "pending"
    try:
        with served(app) as url:
            yield World(url, token, ids)
    finally:
        store.close()
