"""``grace logs ID -f`` against a real ``grace up`` and a real 2-node x 2-GPU torchrun gang.

The follower starts while the job is still pending and runs until it exits by itself;
afterwards every rank's own files are read from each attempt directory, and every line
a rank wrote must be in the follower's output exactly once, labelled ``node/rankN`` by
the attempt's placement, in the order the rank wrote it (its stdout and its stderr each in
order; the two files carry no common clock, so any interleaving of them is accepted).
A rank is killed mid-run: the job restarts, and the follower says so and follows the new
attempt too. Slow: real processes, a real server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from grace_up import grace_up
from helpers import REPO, job_dir

from grace.backends.local import rank_logs

pytestmark = pytest.mark.slow

TRAIN = ["python", "examples/train_ddp.py", "--steps", "120", "--log-every", "1",
         "--sleep-per-step", "0.05", "--checkpoint-every", "10"]


def _interleaves(merged: list[str], a: list[str], b: list[str]) -> bool:
    """``merged`` is ``a`` and ``b`` interleaved, each in its own order, nothing else."""
    if len(merged) != len(a) + len(b):
        return False
    can = [[False] * (len(b) + 1) for _ in range(len(a) + 1)]  # can[i][j]: a[:i], b[:j] fit
    can[0][0] = True
    for i in range(len(a) + 1):
        for j in range(len(b) + 1):
            k = i + j - 1
            if i and can[i - 1][j] and a[i - 1] == merged[k]:
                can[i][j] = True
            if j and can[i][j - 1] and b[j - 1] == merged[k]:
                can[i][j] = True
    return can[len(a)][len(b)]


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").split("\n")[:-1] if path.exists() else []


def test_logs_follow_prints_each_line_of_a_2x2_job_once_in_order_across_a_restart(
        tmp_path: Path) -> None:
    with grace_up(tmp_path / "state", "--allow-inject") as server:
        assert server.token
        http = httpx.Client(base_url=server.url, headers=server.headers, timeout=30)
        r = http.post("/jobs", json={"name": "follow-me", "tenant": "demo", "nodes": 2,
                                     "gpus_per_node": 2, "gpu_model": "A100-80GB",
                                     "runtime_limit": "10m", "command": TRAIN})
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        env = dict(os.environ, GRACE_URL=server.url, GRACE_TOKEN=server.token)
        env.pop("GRACE_TOKEN_FILE", None)
        out_path = tmp_path / "follow.out"
        with open(out_path, "w") as out:
            follower = subprocess.Popen(
                [sys.executable, "-m", "grace.cli.main", "logs", str(jid), "-f"], cwd=REPO,
                env=env, stdout=out, stderr=subprocess.PIPE, text=True)
            try:
                # once a checkpoint is committed, kill a rank: attempt 2 resumes from it
                deadline = time.monotonic() + 180
                root = None
                while time.monotonic() < deadline:
                    root = job_dir(server.state_dir, jid) / "checkpoints"
                    if root.is_dir() and any((p / "MANIFEST.json").exists() for p in root.iterdir()):
                        break
                    time.sleep(0.3)
                else:
                    raise AssertionError(f"no checkpoint in {root}\n{server.output()}")
                r = http.post(f"/jobs/{jid}/inject", json={"fault": "kill-rank", "rank": 1})
                assert r.status_code == 200, r.text
                _, stderr = follower.communicate(timeout=300)
            finally:
                if follower.poll() is None:
                    follower.kill()
                    follower.wait()
        job = http.get(f"/jobs/{jid}").json()
    assert follower.returncode == 0, stderr
    assert job["state"] == "completed", json.dumps(job)[:3000]
    assert len(job["attempts"]) == 2, json.dumps(job["attempts"])

    printed = out_path.read_text().split("\n")[:-1]
    notice = [i for i, line in enumerate(printed) if line.startswith("[grace] ")]
    assert len(notice) == 1 and "following attempt 2 (restart)" in printed[notice[0]], notice
    parts = {1: printed[:notice[0]], 2: printed[notice[0] + 1:]}
    for attempt in job["attempts"]:
        number = attempt["number"]
        adir = job_dir(server.state_dir, jid) / f"attempt-{number}"
        by_label: dict[str, list[str]] = {}
        for line in parts[number]:
            label, _, text = line.partition("] ")
            by_label.setdefault(label.removeprefix("["), []).append(text)
        files = rank_logs(adir)
        placement = [n["node"] for n in attempt["nodes"]]
        assert sorted(files) == sorted(placement)
        expected = set()
        for i, node in enumerate(placement):
            assert sorted(files[node]) == [0, 1]
            for local, (out_log, err_log) in files[node].items():
                label = f"{node}/rank{2 * i + local}"
                expected.add(label)
                stdout, stderr_lines = _lines(out_log), _lines(err_log)
                assert stdout, f"{label} wrote nothing to {out_log}"
                assert _interleaves(by_label.get(label, []), stdout, stderr_lines), (
                    f"attempt {number} {label}: printed {by_label.get(label)}\n"
                    f"stdout {stdout}\nstderr {stderr_lines}")
            agent = by_label.get(f"{node}/agent", [])
            assert not any(t.startswith("[default") for t in agent), agent  # no teed copy
        assert set(by_label) - expected <= {f"{n}/agent" for n in placement}, set(by_label)
    steps = [t for t in parts[2] if "step " in t and " loss " in t]
    assert steps and steps[-1].split("] ", 1)[1].startswith("step 120/120 loss"), steps[-3:]
