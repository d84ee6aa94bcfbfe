"""One contract every backend keeps, run against each: the local one and a real Slurm.

The reconciler relies on exactly these promises, whatever executes the jobs:
launch is idempotent per attempt and refuses a command or env exec would
refuse; poll reports an ended attempt exactly once, with its exit code and the
node that failed; cancel returns at once, SIGKILLs what ignores SIGTERM after
the grace, and the outcome is CANCELLED once nothing of the attempt runs; a new
backend object (a restarted control plane) adopts an attempt from its handle
alone and learns how it ended; a handle from another backend, or for a gone
attempt, is refused; reap ends an attempt whose handle was never saved (a crash
mid-launch), and launch of attempt n ends what survives of attempts before it.

The jobs are tiny commands under the real torchrun (no training), so each
launch costs torchrun's start-up, a few seconds on 2 cores. The Slurm cases need
``.ci/slurm-up.sh`` (see conftest.py).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from grace.backends.base import (
    AttemptStatus,
    Backend,
    LaunchSpec,
    LaunchSpecError,
    NodeAssignment,
    Observation,
)
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


def spec_for(tmp_path: Path, code: str, nodes: tuple[NodeAssignment, ...], job_id: int = 1,
             attempt: int = 1) -> LaunchSpec:
    return LaunchSpec(job_id=job_id, attempt=attempt, name=f"contract-{job_id}",
                      command=("python", "-c", code), nodes=nodes, workdir=tmp_path / f"job-{job_id}",
                      env={"OMP_NUM_THREADS": "1"})


#: A rank that ignores SIGTERM: only the SIGKILL after the grace ends it.
STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('stubborn', flush=True); time.sleep(600)")
SLEEPER = "import time; print('sleeping', flush=True); time.sleep(600)"


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


def processes_of(workdir: Path, running: str = "", attempt: int | None = None) -> list[int]:
    """Live (not zombie) processes of a job, every backend gives them GRACE_WORKDIR;
    with ``running``, only those whose command line holds it; with ``attempt``, only
    that attempt's (GRACE_ATTEMPT)."""
    marker = f"GRACE_WORKDIR={workdir.resolve()}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            if marker not in env:
                continue
            if attempt is not None and f"GRACE_ATTEMPT={attempt}".encode() not in env:
                continue
            if running.encode() not in (proc / "cmdline").read_bytes():
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


# ---------------------------------------------------------------- fast: nothing launched


def _ignores_sigterm(pid: int) -> bool:
    """SIGTERM is set to SIG_IGN (bit 15 of /proc's SigIgn mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(x for x in status.splitlines() if x.startswith("SigIgn:")).split()[1], 16)
    return bool(mask & (1 << (signal.SIGTERM - 1)))


def ranks_of(workdir: Path, attempt: int | None = None, ignoring_term: bool = False) -> list[int]:
    """The job's own ``python -c`` processes: not the wrappers (agent, torchrun, rank shim),
    whose command lines hold the code too, but only after other arguments. With
    ``ignoring_term``, only those already ignoring SIGTERM (STUBBORN past its first line:
    before it, a SIGTERM still kills it, and the test would prove nothing)."""
    found = []
    for pid in processes_of(workdir, attempt=attempt):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if len(argv) > 2 and argv[1] == b"-c" and (not ignoring_term or _ignores_sigterm(pid)):
                found.append(pid)
        except OSError:
            continue
    return found


def wait_for_ranks(workdir: Path, count: int, attempt: int | None = None, timeout: float = 60.0,
                   ignoring_term: bool = False) -> None:
    deadline = time.monotonic() + timeout
    while len(ranks_of(workdir, attempt=attempt, ignoring_term=ignoring_term)) < count:
        assert time.monotonic() < deadline, f"the {count} ranks never started"
        time.sleep(0.2)


def forget_handle(workdir: Path, state: Path, job_id: int, attempt: int) -> None:
    """The control plane died after the launch record, before any handle was kept: neither
    ``launch.json`` nor the state dir's record exists (both backends keep these paths)."""
    (workdir / f"attempt-{attempt}" / "launch.json").unlink()
    (state / "attempts" / f"{job_id}-{attempt}.json").unlink()


def test_protocol_and_refusals(kit: Kit, tmp_path: Path) -> None:
    b = kit.make()
    assert isinstance(b, Backend) and b.name == kit.name
    assert {"launch", "cancel", "adopt", "poll", "reap"} <= b.capabilities
    assert b.poll() == []
    b.cancel(9, 1)  # an unknown attempt: nothing to do
    assert b.reap(9, 1, tmp_path / "job-9") == 0  # nothing of it anywhere
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


@pytest.mark.parametrize(("command", "env", "field"), [
    (("python", "-c", "pass"), {"A=B": "1"}, "env"),
    (("python", "-c", "pass"), {"BIG": "x" * (1 << 20)}, "env.BIG"),
    (("python", "-c", "pa\0ss"), {}, "command[2]"),
    (("python", "x" * 131072), {}, "command[1]"),
])
def test_launch_refuses_what_exec_would_refuse(kit: Kit, tmp_path: Path, command: tuple[str, ...],
                                               env: dict[str, str], field: str) -> None:
    """Input that slipped past submit fails before anything is written or submitted."""
    b = kit.make()
    spec = replace(spec_for(tmp_path, "pass", kit.one), command=command, env=env)
    with pytest.raises(LaunchSpecError, match=re.escape(field)):
        b.launch(spec)
    assert not spec.workdir.exists()
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
def test_cancel_returns_at_once_leaves_no_process_and_reports_cancelled(kit: Kit, tmp_path: Path) -> None:
    b = kit.make()
    spec = spec_for(tmp_path, SLEEPER, kit.two)
    b.launch(spec)
    wait_for_ranks(spec.workdir, 2)
    started = time.monotonic()
    b.cancel(1, 1, grace_s=30.0)  # the ranks honour SIGTERM: no need to wait for the grace
    assert time.monotonic() - started < 2.0, "cancel waited for the processes"
    b.cancel(1, 1, grace_s=30.0)  # twice: harmless
    obs = wait_until_ended(b, 1, timeout=20)
    assert obs.status is AttemptStatus.CANCELLED, obs
    assert time.monotonic() - started < 20
    assert processes_of(spec.workdir) == []
    b.cancel(1, 1)  # an ended attempt: nothing to do
    assert b.poll() == []


@pytest.mark.slow
def test_cancel_sigkills_what_ignores_sigterm_after_the_grace(kit: Kit, tmp_path: Path) -> None:
    b = kit.make()
    spec = spec_for(tmp_path, STUBBORN, kit.one)
    b.launch(spec)
    wait_for_ranks(spec.workdir, 1, ignoring_term=True)
    grace = 4.0
    started = time.monotonic()
    b.cancel(1, 1, grace_s=grace)
    assert time.monotonic() - started < 2.0, "cancel waited for the grace"
    time.sleep(grace / 2)
    assert ranks_of(spec.workdir), "SIGKILLed before the grace ended"
    assert [o.status for o in b.poll()] == [AttemptStatus.RUNNING]
    obs = wait_until_ended(b, 1, timeout=grace + 30)
    took = time.monotonic() - started
    assert obs.status is AttemptStatus.CANCELLED, obs
    assert took >= grace - 0.5, took
    assert processes_of(spec.workdir) == []


@pytest.mark.slow
def test_reap_ends_an_attempt_whose_handle_was_never_kept(kit: Kit, tmp_path: Path) -> None:
    """The control plane died between the launch record and saving the handle: a new
    backend object, with no handle at all, still finds and ends every process."""
    b = kit.make()
    spec = spec_for(tmp_path, SLEEPER, kit.two)
    b.launch(spec)
    wait_for_ranks(spec.workdir, 2)
    forget_handle(spec.workdir, tmp_path / "state", 1, 1)
    restarted = kit.make()
    assert restarted.recorded_handles() == {}  # type: ignore[attr-defined]
    ended = restarted.reap(1, 1, spec.workdir)
    assert ended >= 1
    assert processes_of(spec.workdir) == []
    assert restarted.reap(1, 1, spec.workdir) == 0  # nothing left: a no-op
    assert restarted.poll() == []


@pytest.mark.slow
def test_launching_attempt_2_first_ends_what_survives_of_attempt_1(kit: Kit, tmp_path: Path) -> None:
    """Whatever the caller believes: attempt 1, orphaned by a crash mid-launch, must be gone
    before attempt 2 holds its GPUs, so the two never run at once."""
    b = kit.make()
    first = spec_for(tmp_path, SLEEPER, kit.two)
    b.launch(first)
    wait_for_ranks(first.workdir, 2, attempt=1)
    forget_handle(first.workdir, tmp_path / "state", 1, 1)
    restarted = kit.make()
    second = spec_for(tmp_path, "import time; time.sleep(1); print('attempt 2 ok')", kit.two, attempt=2)
    restarted.launch(second)
    assert processes_of(first.workdir, attempt=1) == [], "attempt 1 still runs beside attempt 2"
    obs = wait_until_ended(restarted, 1)
    assert (obs.attempt, obs.status) == (2, AttemptStatus.SUCCEEDED), obs
    assert processes_of(first.workdir) == []
