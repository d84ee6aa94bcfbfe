"""End to end: a real ``grace up`` on the lab cluster runs sweeps and preflights of real
PyTorch training (``examples/sweep_trial.py``, gloo on CPU, one torchrun per trial).

- ``examples/jobs/sweep.yaml`` (16 trials in MIG slices, median stopping rule), submitted
  with ``grace submit``, and the same sweep without early stopping, side by side: the
  early-stopped one uses fewer GPU-seconds, and ``grace sweep ID`` at 80 columns names
  the best trial;
- a preflight whose loss turns NaN fails its job before the job's allocation (the job
  never gets an attempt); one that passes lets its job run to completion.

Slow (a minute or two on a 2-core machine): ``pytest -m slow``.
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
from grace_up import LiveServer, grace_up
from helpers import REPO

from grace.spec.loader import read_yaml

pytestmark = pytest.mark.slow

SWEEP = REPO / "examples" / "jobs" / "sweep.yaml"
TRIAL = ["python", "examples/sweep_trial.py"]
ENDED = {"completed", "failed", "cancelled", "diverged"}


def _get(server: LiveServer, path: str) -> Any:
    r = httpx.get(server.url + path, headers=server.headers, timeout=30)
    r.raise_for_status()
    return r.json()


def _cli(server: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GRACE_URL": server.url, "GRACE_TOKEN": server.token or "",
           "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-m", "grace.cli.main", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def _wait_sweep(server: LiveServer, sweep_id: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        res = _get(server, f"/sweeps/{sweep_id}")
        if res["done"]:
            return res
        assert time.monotonic() < deadline, f"sweep {sweep_id} not done: {json.dumps(res)}\n" \
                                            f"{server.output()}"
        time.sleep(1)


def test_early_stopping_saves_gpu_seconds_and_the_table_names_the_best(tmp_path: Path) -> None:
    with grace_up(tmp_path / "state") as server:
        # the example, through the CLI
        sub = _cli(server, "submit", str(SWEEP), "--json")
        assert sub.returncode == 0, sub.stderr
        stopped_id = json.loads(sub.stdout)["id"]
        # the same trials (same seed) without early stopping, beside it
        body = {k: v for k, v in read_yaml(SWEEP).items() if k not in ("kind", "early_stopping")}
        r = httpx.post(f"{server.url}/sweeps", json={**body, "name": "lr-sweep-full"},
                       headers=server.headers, timeout=30)
        assert r.status_code == 201, r.text
        full_id = r.json()["id"]

        stopped = _wait_sweep(server, stopped_id, 240)
        full = _wait_sweep(server, full_id, 120)

        assert [t["params"] for t in stopped["trials"]] == [t["params"] for t in full["trials"]]
        assert all(t["state"] == "completed" for t in full["trials"]), full["trials"]
        early = [t for t in stopped["trials"] if t["state"] == "stopped"]
        assert early, "no trial was stopped early"
        assert all(t["state"] in ("completed", "stopped") for t in stopped["trials"])
        assert all(t["reason"].startswith("early-stopped: median rule") for t in early)
        print(f"GPU-seconds: with early stopping {stopped['gpu_seconds']:.1f} "
              f"({len(early)} of 16 trials stopped), without {full['gpu_seconds']:.1f}")
        assert stopped["gpu_seconds"] < full["gpu_seconds"]
        # the best trial is one the rule let finish, and it learned: a small val_loss
        best = next(t for t in stopped["trials"] if t["id"] == stopped["best"])
        assert best["state"] == "completed" and best["best"] < 0.01 and best["steps"] == 100, \
            json.dumps(stopped["trials"])
        assert all(t["best"] >= best["best"] for t in stopped["trials"] if t["best"] is not None)

        table = _cli(server, "sweep", str(stopped_id))
        assert table.returncode == 0, table.stderr
        assert all(len(line) <= 80 for line in table.stdout.splitlines()), table.stdout
        assert f"best: job {best['id']}" in table.stdout and "stopped" in table.stdout


def test_a_nan_preflight_fails_the_job_and_a_good_one_lets_it_run(tmp_path: Path) -> None:
    def job(name: str, *flags: str) -> dict[str, Any]:
        return {"name": name, "tenant": "research", "gpus": 2, "runtime_limit": "5m",
                "command": [*TRIAL, "--steps", "30", *flags],
                "preflight": {"gpus": 1, "steps": 20}}

    with grace_up(tmp_path / "state") as server:
        ids = {}
        for name, flags in (("nan", ("--diverge-at-step", "8")), ("good", ("--lr", "0.1"))):
            r = httpx.post(f"{server.url}/jobs", json=job(name, *flags), headers=server.headers,
                           timeout=30)
            assert r.status_code == 201, r.text
            ids[name] = (r.json()["id"], r.json()["preflight"])
        deadline = time.monotonic() + 150
        while True:
            states = {n: _get(server, f"/jobs/{big}")["state"] for n, (big, _) in ids.items()}
            if set(states.values()) <= ENDED:
                break
            assert time.monotonic() < deadline, f"{states}\n{server.output()}"
            time.sleep(1)

        big, pre = ids["nan"]
        assert _get(server, f"/jobs/{pre}")["state"] == "diverged"
        failed = _get(server, f"/jobs/{big}")
        assert failed["state"] == "failed" and failed["attempts"] == []  # never allocated
        assert failed["reason"].startswith(f"preflight job {pre} diverged")
        assert "nan" in failed["reason"].lower()

        big, pre = ids["good"]
        passed = _get(server, f"/jobs/{pre}")
        assert passed["state"] == "completed"
        ran = _get(server, f"/jobs/{big}")
        assert ran["state"] == "completed", ran
        assert sum(len(n["gpus"]) for n in ran["attempts"][0]["nodes"]) == 2
        assert ran["attempts"][0]["started_at"] >= passed["attempts"][-1]["ended_at"]
