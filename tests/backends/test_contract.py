"""One contract every backend keeps, run against each: the local one and a real Slurm.

The reconciler relies on exactly these promises, whatever executes the jobs:
launch is idempotent per attempt; poll reports an ended attempt exactly once,
with its exit code and the node that failed; cancel returns once nothing of
the attempt runs and the outcome is CANCELLED; a new backend object (a
restarted control plane) adopts an attempt from its handle alone and learns how
it ended; a handle from another backend, or for a gone attempt, is refused.

The jobs are tiny commands under the real torchrun (no training), so each
launch costs torchrun's start-up, a few seconds on 2 cores. The Slurm cases need
``.ci/slurm-up.sh`` (see conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from grace.backends.base import AttemptStatus, Backend, LaunchSpec, NodeAssignment, Observation
from grace.backends.local import LocalBackend
from grace.spec import load_cluster

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Kit:
    """What the contract needs to know about one backend."""

    name: str
    make: Callable[[], Backend]  # a fresh backend object on the same state dir: a restarted control plane
    one: tuple[NodeAssignment, ...]  # one node, one GPU
    two: tuple[NodeAssignment, ...]  # two nodes, one GPU each
    vanished: Callable[[Path], str]  # the handle of job 5 attempt 1, whose processes are long gone


def _local_vanished(attempt_dir: Path) -> str:
    dead = subprocess.Popen(["true"])
    dead.wait()
    return json.dumps({"v": 1, "backend": "local", "job_id": 5, "attempt": 1, "dir": str(attempt_dir),
                       "token": "deadbeef", "port": 1,
                       "nodes": [{"node": "a100-00", "index": 0, "gpus": [0], "pid": dead.pid,
                                  "pgid": dead.pid}]})


def _slurm_vanished(attempt_dir: Path) -> str:
    return json.dumps({"v": 1, "backend": "slurm", "job_id": 5, "attempt": 1, "dir": str(attempt_dir),
                       "slurm_job_id": "99999999", "nodes": ["n1"]})


@pytest.fixture(params=["local", "slurm"])
def kit(request: pytest.FixtureRequest, tmp_path: Path) -> Kit:
    state = tmp_path / "state"
    if request.param == "local":
        lab = load_cluster(REPO / "examples" / "clusters" / "lab.yaml")
        return Kit("local", lambda: LocalBackend(lab, state, cwd=REPO, use_nvml=False),
                   (NodeAssignment("a100-00", (0,)),),
                   (NodeAssignment("a100-00", (0,)), NodeAssignment("a100-01", (0,))), _local_vanished)
    from grace.backends.slurm import SlurmBackend

    cli = request.getfixturevalue("slurm")
    spec = SlurmBackend(state, cli=cli, cwd=REPO).inventory()  # imported once, reused by every object
    return Kit("slurm", lambda: SlurmBackend(state, cluster=spec, cli=cli, cwd=REPO),
               (NodeAssignment("n3", (0,)),),
               (NodeAssignment("n1", (0,)), NodeAssignment("n2", (0,))), _slurm_vanished)


def spec_for(tmp_path: Path, code: str, nodes: tuple[NodeAssignment, ...], job_id: int = 1) -> LaunchSpec:
    return LaunchSpec(job_id=job_id, attempt=1, name=f"contract-{job_id}", command=("python", "-c", code),
                      nodes=nodes, workdir=tmp_path / f"job-{job_id}", env={"OMP_NUM_THREADS": "1"})


def wait_until_ended(b: Backend, job_id: int, timeout: float = 90.0) -> Observation:
    """Poll like the reconciler; the end must be reported exactly once, then never again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mine = [o for o in b.poll() if o.job_id == job_id]
        assert len(mine) == 1, mine
        if mine[0].status is not AttemptStatus.RUNNING:
            assert all(o.job_id != job_id for o in b.poll()), "an ended attempt was reported twice"
            return mine[0]
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still running after {timeout}s")


def processes_of(workdir: Path, running: str = "") -> list[int]:
    """Live (not zombie) processes of a job, every backend gives them GRACE_WORKDIR;
    with ``running``, only those whose command line holds it."""
    marker = f"GRACE_WORKDIR={workdir.resolve()}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            if running.encode() not in (proc / "cmdline").read_bytes():
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


# ---------------------------------------------------------------- fast: nothing launched


def test_protocol_and_refusals(kit: Kit, tmp_path: Path) -> None:
    b = kit.make()
    assert isinstance(b, Backend) and b.name == kit.name
    assert {"launch", "cancel", "adopt", "poll"} <= b.capabilities
    assert b.poll() == []
    b.cancel(9, 1)  # an unknown attempt: nothing to do
    with pytest.raises(ValueError, match="no nodes"):
        b.launch(spec_for(tmp_path, "pass", ()))
    with pytest.raises(ValueError, match="twice"):
        b.launch(spec_for(tmp_path, "pass", (kit.one[0], kit.one[0])))
    with pytest.raises(ValueError, match="bad handle"):
        b.adopt(1, 1, "not json")
    other = "slurm" if kit.name == "local" else "local"
    with pytest.raises(ValueError, match="bad handle"):
        b.adopt(1, 1, json.dumps({"v": 1, "backend": other}))
    assert b.adopt(5, 1, kit.vanished(tmp_path / "job-5" / "attempt-1")) is False
    assert b.poll() == []


# ---------------------------------------------------------------- slow: real torchrun


@pytest.mark.slow
def test_success_is_reported_once_and_a_new_backend_adopts(kit: Kit, tmp_path: Path) -> None:
    b = kit.make()
    spec = spec_for(tmp_path, "import time; time.sleep(1); print('contract ok')", kit.two)
    handle = b.launch(spec)
    assert b.launch(spec) == handle  # the same attempt twice starts nothing new
    restarted = kit.make()  # the control plane restarts with only the stored handle
    assert restarted.adopt(1, 1, handle) is True
    assert [o.status for o in restarted.poll()] == [AttemptStatus.RUNNING]
    obs = wait_until_ended(restarted, 1)
    assert (obs.status, obs.exit_code) == (AttemptStatus.SUCCEEDED, 0), obs
    assert processes_of(spec.workdir) == []
    late = kit.make()  # adopted after the end: still learns the outcome, once
    assert late.adopt(1, 1, handle) is True
    assert [o.status for o in late.poll()] == [AttemptStatus.SUCCEEDED]
    assert late.poll() == []


@pytest.mark.slow
def test_a_failing_command_fails_with_its_exit_code_and_node(kit: Kit, tmp_path: Path) -> None:
    b = kit.make()
    spec = spec_for(tmp_path, "import sys; print('failing on purpose'); sys.exit(3)", kit.one)
    b.launch(spec)
    obs = wait_until_ended(b, 1)
    assert obs.status is AttemptStatus.FAILED, obs
    assert obs.exit_code == 3
    assert obs.failed_node == kit.one[0].node
    assert f"rank 0 on node {kit.one[0].node} exited 3" in obs.detail
    assert processes_of(spec.workdir) == []


@pytest.mark.slow
def test_cancel_leaves_no_process_and_reports_cancelled(kit: Kit, tmp_path: Path) -> None:
    b = kit.make()
    spec = spec_for(tmp_path, "import time; print('sleeping', flush=True); time.sleep(600)", kit.two)
    b.launch(spec)
    deadline = time.monotonic() + 60
    while len(processes_of(spec.workdir, running="time.sleep(600)")) < 2:
        assert time.monotonic() < deadline, "the two ranks never started"
        time.sleep(0.2)
    started = time.monotonic()
    b.cancel(1, 1, grace_s=3.0)
    assert time.monotonic() - started < 20
    assert processes_of(spec.workdir) == []
    obs = wait_until_ended(b, 1, timeout=10)
    assert obs.status is AttemptStatus.CANCELLED, obs
