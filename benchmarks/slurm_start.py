"""What Grace adds to a job's start on Slurm, against a bare ``sbatch`` of the same script.

Three ways to start the same 2-node x 8-GPU attempt, each timed from "submit"
to the first line the batch script prints (it prints before anything else, so
this is Slurm's scheduling and launch plus whatever came before it):

- ``bare``: ``sbatch`` run by hand with the exact options and script Grace writes;
- ``backend``: ``SlurmBackend.launch`` (idempotence check, scripts, sbatch, records);
- ``control_plane``: the job stored as the API stores it, then one reconcile
  cycle (snapshot, ``decide``, persist, launch). A running ``grace up`` starts
  that cycle on its next tick, up to ``interval_s`` (1 s) later: reported apart.

The three kinds alternate within each repeat so the scheduler's 1 s tick hits
them alike (it dominates: single figures move by up to a second either way),
and their order rotates so none always follows the same one.
``launch_call_median_s`` is the time inside ``launch`` alone, sbatch included.
Each job is cancelled once it has printed. Needs a Slurm (``.ci/slurm-up.sh``);
prints one JSON object last.

    python benchmarks/slurm_start.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from grace.backends.base import LaunchSpec, NodeAssignment
from grace.backends.slurm import SlurmBackend
from grace.backends.slurm_cli import SlurmCli
from grace.control.reconciler import Reconciler
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.spec.job import JobSpec

REPO = Path(__file__).resolve().parents[1]
COMMAND = ("python", "-c", "import time; time.sleep(600)")
CALLS: list[float] = []  # seconds inside SlurmBackend.launch: Grace's own work, sbatch included


def first_line(out: Path, timeout_s: float = 60.0) -> float:
    """perf_counter() when ``out`` first holds a complete line."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        try:
            if b"\n" in out.read_bytes():
                return time.perf_counter()
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    raise TimeoutError(f"no output in {out} after {timeout_s:.0f}s")


def end(cli: SlurmCli, slurm_id: str) -> None:
    """Cancel the job and wait until its nodes are free for the next measurement."""
    cli.run("scancel", "--full", "--signal=KILL", slurm_id, check=False)
    cli.run("scancel", slurm_id, check=False)
    while cli.run("squeue", "-h", "-j", slurm_id, "-o", "%T", check=False).strip():
        time.sleep(0.05)


def bare(cli: SlurmCli, backend: SlurmBackend, work: Path, n: int) -> float:
    spec = LaunchSpec(job_id=10_000 + n, attempt=1, name="bare", command=COMMAND,
                      nodes=(NodeAssignment("n1", tuple(range(8))), NodeAssignment("n2", tuple(range(8)))),
                      workdir=work / f"bare-{n}")
    adir = spec.workdir / "attempt-1"
    (adir / "ranks").mkdir(parents=True)
    job_sh, node_sh = backend._scripts(spec, adir)  # the very script Grace would submit
    (adir / "job.sh").write_text(job_sh)
    (adir / "node.sh").write_text(node_sh)
    args = backend.sbatch_args(spec, adir)
    t0 = time.perf_counter()
    slurm_id = subprocess.run(args, capture_output=True, text=True, check=True,
                              env=cli.env()).stdout.strip().split(";")[0]
    took = first_line(adir / f"slurm-{slurm_id}.out") - t0
    end(cli, slurm_id)
    return took


def via_backend(cli: SlurmCli, backend: SlurmBackend, work: Path, n: int) -> float:
    spec = LaunchSpec(job_id=20_000 + n, attempt=1, name="backend", command=COMMAND,
                      nodes=(NodeAssignment("n1", tuple(range(8))), NodeAssignment("n2", tuple(range(8)))),
                      workdir=work / f"backend-{n}")
    t0 = time.perf_counter()
    handle = json.loads(backend.launch(spec))
    CALLS.append(time.perf_counter() - t0)
    took = first_line(spec.workdir / "attempt-1" / f"slurm-{handle['slurm_job_id']}.out") - t0
    end(cli, handle["slurm_job_id"])
    backend.poll()  # forget it, as the reconciler would
    return took


def via_control_plane(cli: SlurmCli, reconciler: Reconciler, store: Store, state: Path, n: int) -> float:
    spec = JobSpec.model_validate({"name": f"cp-{n}", "nodes": 2, "gpus_per_node": 8,
                                   "command": list(COMMAND)})
    t0 = time.perf_counter()
    with store.transaction() as s:
        job_id = repo.add_job(s, spec, time.time()).id
    reconciler.cycle()
    launch = json.loads((reconciler.ctx.dirs.attempt(job_id, 1) / "launch.json").read_text())
    took = first_line(Path(launch["dir"]) / f"slurm-{launch['slurm_job_id']}.out") - t0
    with store.transaction() as s:  # cancelled as the API does: the next cycle scancels it
        repo.request_cancel(s, job_id, time.time())
    reconciler.cycle()
    end(cli, launch["slurm_job_id"])
    reconciler.cycle()  # records the end
    return took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    cli = SlurmCli()
    if not cli.available():
        print(json.dumps({"skipped": "no Slurm answers; start one: export \"$(bash .ci/slurm-up.sh)\""}))
        return
    with tempfile.TemporaryDirectory(prefix="grace-slurm-bench-") as tmp:
        work = Path(tmp)
        backend = SlurmBackend(work / "backend-state", cli=cli, cwd=REPO)
        state = work / "cp-state"
        state.mkdir()
        store = Store.open(f"sqlite:///{state / 'grace.sqlite'}")
        cp_backend = SlurmBackend(state, cluster=backend.inventory(), cli=cli, cwd=REPO)
        reconciler = Reconciler(store, cp_backend, Topology.from_spec(backend.inventory()),
                                get_policy("grace"), state)
        times: dict[str, list[float]] = {"bare": [], "backend": [], "control_plane": []}
        runs = {"bare": lambda n: bare(cli, backend, work, n),
                "backend": lambda n: via_backend(cli, backend, work, n),
                "control_plane": lambda n: via_control_plane(cli, reconciler, store, state, n)}
        kinds = list(runs)
        for n in range(args.repeats):
            for kind in kinds[n % 3:] + kinds[:n % 3]:
                times[kind].append(runs[kind](n))
            print(f"repeat {n + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()),
                  file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    out: dict[str, Any] = {
        "benchmark": "slurm_start",
        "repeats": args.repeats,
        "gang": "2 nodes x 8 GPUs",
        "median_s": {k: round(v, 3) for k, v in med.items()},
        "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "added_by_backend_s": round(med["backend"] - med["bare"], 3),
        "added_by_control_plane_s": round(med["control_plane"] - med["bare"], 3),
        "launch_call_median_s": round(statistics.median(CALLS), 4),
        "plus_loop_tick_up_to_s": 1.0,
        "target_added_s": 2.0,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
