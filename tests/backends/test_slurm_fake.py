"""The Slurm backend's cancel and reap against a scripted Slurm: which commands, in what
order, and that nothing waits in the caller. Fast, no Slurm needed; the same promises
run against a real Slurm in test_contract.py.

``FakeSlurm`` answers the handful of commands the backend sends (sbatch, squeue,
scontrol show job, scancel, sacct) from a table of jobs; ``scancel --signal=TERM``
ends a job only if the test says its ranks honour SIGTERM.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grace.backends.base import AttemptStatus, LaunchSpec, NodeAssignment, ReapError
from grace.backends.slurm import SlurmBackend, job_name
from grace.backends.slurm_cli import SlurmError
from grace.spec import load_cluster

REPO = Path(__file__).resolve().parents[2]
LIVE = {"PENDING", "RUNNING", "COMPLETING"}


@dataclass
class FakeJob:
    name: str
    comment: str
    state: str = "RUNNING"
    honours_term: bool = True


@dataclass
class FakeSlurm:
    jobs: dict[str, FakeJob] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    next_id: int = 100
    stuck: set[str] = field(default_factory=set)  # jobs that stay live whatever is sent
    envs: dict[str, dict[str, str]] = field(default_factory=dict)  # each sbatch's environment

    def add(self, name: str, comment: str, state: str = "RUNNING", honours_term: bool = True) -> str:
        sid = str(self.next_id)
        self.next_id += 1
        self.jobs[sid] = FakeJob(name, comment, state, honours_term)
        return sid

    def _end(self, sid: str) -> None:
        if sid in self.jobs and sid not in self.stuck and self.jobs[sid].state in LIVE:
            self.jobs[sid].state = "CANCELLED"

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def run(self, *args: str, check: bool = True, stdin: str | None = None,
            env: dict[str, str] | None = None) -> str:
        self.calls.append(args)
        cmd, rest = args[0], list(args[1:])
        opt = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in rest if a.startswith("--") and "=" in a}
        if cmd == "sbatch":
            sid = self.add(opt['--job-name'], opt['--comment'])
            self.envs[sid] = dict(env if env is not None else self.env())
            return f"{sid}\n"
        if cmd == "scancel":
            sid = rest[-1]
            if "--signal=TERM" in rest:
                if sid in self.jobs and self.jobs[sid].honours_term:
                    self._end(sid)
            else:
                self._end(sid)
            return ""
        if cmd == "squeue":
            fmt = rest[rest.index("-o") + 1]
            if "--name" in opt:
                names = set(opt["--name"].split(","))
                rows = [(sid, j) for sid, j in self.jobs.items() if j.name in names and j.state in LIVE]
            else:
                ids = rest[rest.index("-j") + 1].split(",")
                rows = [(sid, self.jobs[sid]) for sid in ids if sid in self.jobs]
                if not rows and check:
                    raise SlurmError("squeue: error: Invalid job id specified")
            keys = {"%i": lambda s, j: s, "%j": lambda s, j: j.name, "%k": lambda s, j: j.comment,
                    "%T": lambda s, j: j.state, "%N": lambda s, j: "n1", "%r": lambda s, j: "None"}
            return "".join("|".join(keys[k](sid, j) for k in fmt.split("|")) + "\n" for sid, j in rows)
        if cmd == "scontrol":
            sid = rest[-1]
            j = self.jobs.get(sid)
            if j is None:
                raise SlurmError("slurm_load_jobs error: Invalid job id specified")
            return (f"JobId={sid} JobName={j.name} JobState={j.state} ExitCode=0:15 "
                    f"NodeList=n1 Reason=None\n")
        if cmd == "sacct":
            return ""
        raise AssertionError(f"unexpected Slurm command {args}")

    def sent(self, sid: str) -> list[str]:
        """The scancel commands sent to one job, as strings."""
        return [" ".join(c) for c in self.calls if c[0] == "scancel" and c[-1] == sid]


@pytest.fixture
def slurm() -> FakeSlurm:
    return FakeSlurm()


def backend(slurm: FakeSlurm, tmp_path: Path) -> SlurmBackend:
    lab = load_cluster(REPO / "examples" / "clusters" / "lab.yaml")
    return SlurmBackend(tmp_path / "state", cluster=lab, cli=slurm, cwd=REPO)  # type: ignore[arg-type]


def spec(tmp_path: Path, attempt: int = 1) -> LaunchSpec:
    return LaunchSpec(job_id=1, attempt=attempt, name="fake", command=("python", "-c", "pass"),
                      nodes=(NodeAssignment("a100-00", (0,)),), workdir=tmp_path / "job-1")


def slurm_id(handle_dir: Path) -> str:
    text = (handle_dir / "launch.json").read_text()
    return re.search(r'"slurm_job_id": "(\d+)"', text).group(1)  # type: ignore[union-attr]


def wait(check: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_cancel_sends_term_and_returns_the_kill_comes_after_the_grace(
        slurm: FakeSlurm, tmp_path: Path) -> None:
    b = backend(slurm, tmp_path)
    b.launch(spec(tmp_path))
    sid = slurm_id(tmp_path / "job-1" / "attempt-1")
    slurm.jobs[sid].honours_term = False  # its ranks checkpoint slowly: only the kill ends it
    started = time.monotonic()
    b.cancel(1, 1, grace_s=0.5)
    b.cancel(1, 1, grace_s=60.0)  # again: no second SIGTERM, the kill stays due at 0.5 s
    assert time.monotonic() - started < 0.3
    assert slurm.sent(sid) == [f"scancel --signal=TERM {sid}"]
    assert [o.status for o in b.poll()] == [AttemptStatus.RUNNING]
    wait(lambda: slurm.jobs[sid].state == "CANCELLED")
    assert time.monotonic() - started >= 0.5
    assert slurm.sent(sid) == [f"scancel --signal=TERM {sid}", f"scancel --full --signal=KILL {sid}",
                               f"scancel {sid}"]
    [obs] = b.poll()
    assert obs.status is AttemptStatus.CANCELLED
    assert b.poll() == []
    b.cancel(1, 1)  # ended: nothing sent
    assert len(slurm.sent(sid)) == 3


def test_a_job_that_honours_sigterm_gets_no_kill(slurm: FakeSlurm, tmp_path: Path) -> None:
    b = backend(slurm, tmp_path)
    b.launch(spec(tmp_path))
    sid = slurm_id(tmp_path / "job-1" / "attempt-1")
    b.cancel(1, 1, grace_s=0.2)
    assert [o.status for o in b.poll()] == [AttemptStatus.CANCELLED]
    wait(lambda: not b._kills.due())
    assert slurm.sent(sid) == [f"scancel --signal=TERM {sid}"]


def test_reap_finds_the_job_by_name_and_comment_without_a_handle(
        slurm: FakeSlurm, tmp_path: Path) -> None:
    """sbatch went through, then the control plane died before launch.json."""
    b = backend(slurm, tmp_path)
    mine = slurm.add(job_name(1, 1), b._comment(1, 1))
    other_instance = slurm.add(job_name(1, 1), "grace job 1 attempt 1 of someoneelse")
    other_attempt = slurm.add(job_name(1, 2), b._comment(1, 2))
    assert b.reap(1, 1, tmp_path / "job-1") == 1
    assert slurm.jobs[mine].state == "CANCELLED"
    assert slurm.sent(mine) == [f"scancel --full --signal=KILL {mine}", f"scancel {mine}"]
    assert slurm.jobs[other_instance].state == slurm.jobs[other_attempt].state == "RUNNING"
    assert b.reap(1, 1, tmp_path / "job-1") == 0


def test_reap_waits_for_slurm_and_raises_if_the_job_stays_live(
        slurm: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grace.backends import slurm as slurm_module

    monkeypatch.setattr(slurm_module, "REAP_TIMEOUT_S", 0.3)
    b = backend(slurm, tmp_path)
    sid = slurm.add(job_name(1, 1), b._comment(1, 1))
    slurm.stuck.add(sid)
    with pytest.raises(ReapError, match=sid):
        b.reap(1, 1, tmp_path / "job-1")


def test_launch_of_attempt_2_first_reaps_attempt_1(slurm: FakeSlurm, tmp_path: Path) -> None:
    b = backend(slurm, tmp_path)
    b.launch(spec(tmp_path))
    first = slurm_id(tmp_path / "job-1" / "attempt-1")
    restarted = backend(slurm, tmp_path)  # knows nothing of attempt 1
    restarted.launch(spec(tmp_path, attempt=2))
    assert slurm.jobs[first].state == "CANCELLED"
    kinds = [c[0] for c in slurm.calls]
    last_kill = max(i for i, c in enumerate(slurm.calls) if c == ("scancel", first))
    assert last_kill < len(kinds) - 1 - kinds[::-1].index("sbatch")  # killed before the sbatch
    second = slurm_id(tmp_path / "job-1" / "attempt-2")
    assert slurm.jobs[second].state == "RUNNING"


def test_launch_refuses_to_start_attempt_2_while_attempt_1_survives(
        slurm: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grace.backends import slurm as slurm_module

    monkeypatch.setattr(slurm_module, "REAP_TIMEOUT_S", 0.3)
    b = backend(slurm, tmp_path)
    b.launch(spec(tmp_path))
    slurm.stuck.add(slurm_id(tmp_path / "job-1" / "attempt-1"))
    with pytest.raises(ReapError):
        b.launch(spec(tmp_path, attempt=2))
    assert [c[0] for c in slurm.calls].count("sbatch") == 1
    assert not (tmp_path / "job-1" / "attempt-2").exists()


def test_secrets_go_to_sbatchs_environment_never_to_a_file_or_argv(
        slurm: FakeSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The attempt's token and data key reach sbatch only through its environment; the
    control plane's own values of those names (an admin's shell) reach no job."""
    token, key = "gjob_fake-attempt-token-1234", "ZmFrZS1kYXRhLWtleS1mb3ItdGhlLXRlc3QtMDAwMDA="
    monkeypatch.setenv("GRACE_TOKEN", "gadm_the-control-planes-own-token")
    monkeypatch.setenv("GRACE_CHECKPOINT_KEY", "the-control-planes-own-key")
    b = backend(slurm, tmp_path)
    secret = LaunchSpec(job_id=1, attempt=1, name="fake", command=("python", "-c", "pass"),
                        nodes=(NodeAssignment("a100-00", (0,)),), workdir=tmp_path / "job-1",
                        env={"GRACE_TOKEN": token, "GRACE_CHECKPOINT_KEY": key, "PLAIN": "visible"})
    handle = b.launch(secret)
    sid = slurm_id(tmp_path / "job-1" / "attempt-1")
    sent = slurm.envs[sid]
    assert (sent["GRACE_TOKEN"], sent["GRACE_CHECKPOINT_KEY"]) == (token, key)
    [sbatch] = [c for c in slurm.calls if c[0] == "sbatch"]
    assert "--export=ALL" in sbatch
    job_sh = (tmp_path / "job-1" / "attempt-1" / "job.sh").read_text()
    assert "export PLAIN=visible" in job_sh and "--export=ALL" in job_sh
    leaks = [(p, s) for p in tmp_path.rglob("*") if p.is_file()
             for s in (token, key) if s.encode() in p.read_bytes()]
    assert leaks == []
    assert token not in " ".join(sbatch) + handle and key not in " ".join(sbatch) + handle

    # an attempt without a data key (no KMS) does not get the control plane's
    b.launch(LaunchSpec(job_id=2, attempt=1, name="fake", command=("python", "-c", "pass"),
                        nodes=(NodeAssignment("a100-00", (0,)),), workdir=tmp_path / "job-2",
                        env={"GRACE_TOKEN": token}))
    sent = slurm.envs[slurm_id(tmp_path / "job-2" / "attempt-1")]
    assert sent["GRACE_TOKEN"] == token and "GRACE_CHECKPOINT_KEY" not in sent
