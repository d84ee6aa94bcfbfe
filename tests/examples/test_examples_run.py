"""Every example job file runs to completion on the cluster it names, for real.

For each example cluster the job files name (see ``test_example_jobs.cluster_for``;
today all of them name ``lab.yaml``) this starts ``grace up`` as a real process
(SQLite, the local backend, ``--admission examples/admission.yaml`` so only the
vetted example scripts may run, as in ``grace demo``), submits every file with
the ``grace submit`` CLI, all together (the cluster queues what does not fit
yet), and waits for each job to reach ``completed``. Each job runs its script
under torchrun: PyTorch on CPU with gloo, through ``grace.runtime``. Beyond the
state, it checks what each example is for: the full run committed its
checkpoints, the fine-tune was right-sized onto the L40S node and trained only
its adapters, the inference job ran on a MIG slice, every rank printed ``done``.

Slow (about a minute on 2 cores): ``pytest -m slow tests/examples``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_example_jobs import JOB_FILES, REPO, cluster_for

sys.path.insert(0, str(REPO / "tests" / "control"))
from grace_up import LiveServer, grace_up

pytestmark = pytest.mark.slow

ENDED = {"completed", "failed", "cancelled", "diverged"}
ADMISSION = REPO / "examples" / "admission.yaml"
BY_CLUSTER: dict[Path, list[Path]] = defaultdict(list)
for _f in JOB_FILES:
    BY_CLUSTER[cluster_for(_f)].append(_f)
CLUSTERS = sorted(BY_CLUSTER)
#: every job of every file on a cluster, queued together, must end within this
TIMEOUT_S = 240


def cli(server: LiveServer, *args: str) -> str:
    env = dict(os.environ, GRACE_URL=server.url,
               GRACE_TOKEN_FILE=str(server.state_dir / "admin.token"), NO_COLOR="1")
    done = subprocess.run([sys.executable, "-m", "grace.cli.main", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"grace {' '.join(args)}: {done.stderr}\n{done.stdout}"
    return done.stdout


def api(server: LiveServer, method: str, path: str, **kw: Any) -> Any:
    r = httpx.request(method, server.url + path, headers=server.headers, timeout=30, **kw)
    r.raise_for_status()
    return r.json() if "json" in r.headers.get("content-type", "") else r.text


def submit(server: LiveServer, job_file: Path) -> list[int]:
    out = json.loads(cli(server, "submit", str(job_file.relative_to(REPO)), "--json"))
    return [int(o["id"]) for o in (out if isinstance(out, list) else [out])]


def wait_all(server: LiveServer, ids: list[int]) -> dict[int, dict[str, Any]]:
    deadline = time.monotonic() + TIMEOUT_S
    ended: dict[int, dict[str, Any]] = {}
    while len(ended) < len(ids) and time.monotonic() < deadline:
        for jid in ids:
            if jid not in ended:
                job = api(server, "GET", f"/jobs/{jid}")
                if job["state"] in ENDED:
                    ended[jid] = job
        time.sleep(0.5)
    return ended


def placed_on(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["attempts"][-1]["nodes"])


@pytest.mark.parametrize("cluster", CLUSTERS, ids=[c.stem for c in CLUSTERS])
def test_every_example_job_completes_on_its_cluster(cluster: Path, tmp_path: Path) -> None:
    files = BY_CLUSTER[cluster]
    with grace_up(tmp_path / "state", "--admission", str(ADMISSION), cluster=cluster) as server:
        t0 = time.monotonic()
        ids: dict[int, Path] = {}
        try:
            for f in files:
                ids.update((jid, f) for jid in submit(server, f))
            ended = wait_all(server, list(ids))
        finally:  # nothing outlives the test: job agents live in sessions of their own
            for jid in ids:
                httpx.post(f"{server.url}/jobs/{jid}/cancel", headers=server.headers, timeout=30)
        took = time.monotonic() - t0
        jobs = {jid: ended.get(jid) or api(server, "GET", f"/jobs/{jid}") for jid in ids}
        logs = {jid: api(server, "GET", f"/jobs/{jid}/logs", params={"tail": 100000})
                for jid in ids}
        bad = [f"{ids[j].name} {job['name']}: {job['state']} {json.dumps(job)[:1500]}\n"
               f"{logs[j][-2000:]}" for j, job in jobs.items() if job["state"] != "completed"]
        assert not bad, f"after {took:.0f}s:\n" + "\n".join(bad) + f"\n{server.output()}"
        print(f"{len(ids)} jobs of {len(files)} files completed on {cluster.name} "
              f"in {took:.1f}s")

        by_name = {job["name"]: (jid, job) for jid, job in jobs.items()}
        for jid, job in jobs.items():
            assert job["attempts"][-1]["exit_code"] == 0
            assert "done" in logs[jid], f"{job['name']} never printed done: {logs[jid][-2000:]}"
        if cluster.stem != "lab":
            return

        jid, full = by_name["base-pretrain"]  # full-run.yaml: FSDP gang that checkpoints
        assert sorted(len(n["gpus"]) for n in placed_on(full)) == [2, 2]
        assert all(n["node"].startswith("a100-") for n in placed_on(full))
        committed = sorted(p.parent.name for p in
                           (tmp_path / "state" / "jobs").glob(f"*-{jid}/checkpoints/*/MANIFEST.json"))
        assert committed == ["step-000000030", "step-000000040"], committed  # --keep 2

        jid, tune = by_name["llama-7b-lora"]  # fine-tune.yaml: right-sized, adapters only
        # the cheapest GPU that fits: the L40S node, unless the 1-GPU jobs that take any
        # model (cheapest first too) held it when this one started; then an A100 will do
        where = [n["node"] for n in placed_on(tune)]
        if where != ["l40s-00"]:
            # held in the 10 s before its launch (the decision comes a cycle before it)
            at = tune["attempts"][-1]["started_at"]
            held = sum(len(n["gpus"]) for job in jobs.values() if job is not tune
                       for a in job["attempts"] for n in a["nodes"]
                       if n["node"] == "l40s-00" and a["started_at"] is not None
                       and a["started_at"] <= at
                       and (a["ended_at"] is None or a["ended_at"] > at - 10))
            assert held > 2 and all(w.startswith("a100-") for w in where), (
                f"llama-7b-lora on {where} while l40s-00 had {4 - held} GPUs free")
        assert "training 8,704 of 110,720 parameters" in logs[jid]

        jid, infer = by_name["lm-eval"]  # mig-inference.yaml: a slice, forward passes
        [node] = placed_on(infer)
        assert node["node"].startswith("a100-") and node.get("slices"), node
        assert "answered 50 batches of 8" in logs[jid]
