"""The local backend with real processes: torchrun agents, a 2-node DDP gang, and the
control plane dying underneath it.

The slow tests start real ``torchrun`` gangs of ``examples/train_ddp.py`` (each
about 10-15 s on a 2-core machine); the fast ones cover the handle, the
atomic records and the NVML seam without starting torch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest
from test_contract import wait_until_ended

from grace.backends import nvml
from grace.backends.base import AttemptStatus, Backend, LaunchSpec, NodeAssignment
from grace.backends.local import LocalBackend, rank_logs
from grace.backends.local_agent import processes_with_token, read_json, write_json_atomic
from grace.spec import load_cluster
from grace.spec.cluster import ClusterSpec

REPO = Path(__file__).resolve().parents[2]
TRAIN = ("python", "examples/train_ddp.py", "--device", "cpu")
TWO_BY_TWO = (NodeAssignment("a100-00", (0, 1)), NodeAssignment("a100-01", (2, 3)))


@pytest.fixture(scope="module")
def lab() -> ClusterSpec:
    return load_cluster(REPO / "examples" / "clusters" / "lab.yaml")


def backend(lab: ClusterSpec, tmp_path: Path) -> LocalBackend:
    return LocalBackend(lab, tmp_path / "state", cwd=REPO, use_nvml=False)


def launch_spec(
    tmp_path: Path,
    *args: str,
    job_id: int = 1,
    nodes: tuple[NodeAssignment, ...] = TWO_BY_TWO,
    time_limit_s: float | None = None,
) -> LaunchSpec:
    return LaunchSpec(
        job_id=job_id,
        attempt=1,
        name=f"job-{job_id}",
        command=(*TRAIN, *args),
        nodes=nodes,
        workdir=tmp_path / f"job-{job_id}",
        env={"OMP_NUM_THREADS": "1"},
        time_limit_s=time_limit_s,
    )


def wait_for_text(path: Path, text: str, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in {path}")


def live_members(pgid: int) -> list[int]:
    """Processes of a group that still run; a zombie (dead, not yet reaped by init) does not count."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def assert_nothing_left(handle: str, extra_pgids: frozenset[int] = frozenset()) -> None:
    """No process of the attempt remains: not by its token, not in any of its process groups.

    ``os.killpg(pgid, 0)`` must raise, except where the group's only members are
    zombies whose parent (init, after the control plane died) has not reaped them yet.
    """
    data = json.loads(handle)
    assert processes_with_token(data["token"]) == {}
    deadline = time.monotonic() + 3.0  # a process SIGKILLed a moment ago may still be exiting
    for pgid in {n["pgid"] for n in data["nodes"]} | extra_pgids:
        while True:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            left = live_members(pgid)
            if not left:
                break
            assert time.monotonic() < deadline, f"process group {pgid} still runs: {left}"
            time.sleep(0.05)


# ---------------------------------------------------------------- fast: no torch


def test_satisfies_the_backend_protocol(lab: ClusterSpec, tmp_path: Path) -> None:
    b = backend(lab, tmp_path)
    assert isinstance(b, Backend)
    assert b.name == "local"
    assert b.capabilities == {"launch", "cancel", "adopt", "poll", "reap", "inject"}
    assert b.inventory() is lab
    assert b.poll() == []
    b.cancel(9, 1)  # unknown attempt: nothing to do
    b.drain("a100-00", "test")


# Bad specs, foreign handles and what every backend promises: test_contract.py.


def test_adopt_of_a_vanished_attempt_is_false(lab: ClusterSpec, tmp_path: Path) -> None:
    """Dead pids, no exit record, no cancel marker: nothing to watch, the caller marks it LOST."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    attempt_dir = tmp_path / "job-5" / "attempt-1"
    attempt_dir.mkdir(parents=True)
    handle = json.dumps(
        {
            "v": 1,
            "backend": "local",
            "job_id": 5,
            "attempt": 1,
            "dir": str(attempt_dir),
            "token": "deadbeef",
            "port": 1,
            "nodes": [{"node": "a100-00", "index": 0, "gpus": [0], "pid": dead.pid, "pgid": dead.pid}],
        }
    )
    b = backend(lab, tmp_path)
    assert b.adopt(5, 1, handle) is False
    assert b.poll() == []
    # The same attempt with an exit record is adoptable and reports its outcome.
    write_json_atomic(attempt_dir / "a100-00.exit", {"node": "a100-00", "exit_code": 0, "ended_at": 1.0})
    assert b.adopt(5, 1, handle) is True
    assert [o.status for o in b.poll()] == [AttemptStatus.SUCCEEDED]
    assert b.poll() == []


def test_atomic_records(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "n.exit"
    write_json_atomic(path, {"exit_code": 3})
    assert read_json(path) == {"exit_code": 3}
    assert [p.name for p in path.parent.iterdir()] == ["n.exit"]  # no temp file left
    path.write_text('{"exit_co')  # a torn file reads as absent, never as garbage
    assert read_json(path) is None


def test_nvml_model_matching() -> None:
    assert nvml.match_model("NVIDIA H100 80GB HBM3", 79.6) == "H100-SXM"
    assert nvml.match_model("NVIDIA H200", 139.8) == "H200"
    assert nvml.match_model("NVIDIA A100-SXM4-80GB", 79.2) == "A100-80GB"
    assert nvml.match_model("NVIDIA A100-SXM4-40GB", 39.4) == "A100-40GB"
    assert nvml.match_model("NVIDIA A10G", 22.0) == "A10"
    assert nvml.match_model("NVIDIA L40S", 44.5) == "L40S"
    assert nvml.match_model("Tesla T4", 15.0) == "T4"
    assert nvml.match_model("NVIDIA RTX 4090", 24.0) is None


def test_nvml_cluster_from_gpus() -> None:
    gpus = [nvml.NvmlGpu(i, "NVIDIA A100-SXM4-80GB", 79.2, 400.0, mig_enabled=i == 0) for i in range(4)]
    spec, slots = nvml.cluster_from_gpus(gpus, host="lab box")
    (group,) = spec.node_groups
    assert (group.name, group.gpu, group.gpus_per_node, group.mig_gpus_per_node) == (
        "lab-box",
        "A100-80GB",
        4,
        1,
    )
    assert slots == {"lab-box": (0, 1, 2, 3)}
    # A mixed machine is one node per model; an unknown model is added to the catalog.
    mixed = [nvml.NvmlGpu(0, "NVIDIA L40S", 44.5), nvml.NvmlGpu(1, "NVIDIA RTX 4090", 23.6, 450.0)]
    spec, slots = nvml.cluster_from_gpus(mixed, host="ws")
    assert {g.name: g.gpu for g in spec.node_groups} == {
        "ws-L40S": "L40S",
        "ws-NVIDIA-RTX-4090": "NVIDIA-RTX-4090",
    }
    assert slots == {"ws-L40S": (0,), "ws-NVIDIA-RTX-4090": (1,)}
    assert spec.catalog()["NVIDIA-RTX-4090"].vram_gb == 23.6


def test_nvml_probe_without_nvml() -> None:
    def missing() -> object:
        raise ImportError("no pynvml")

    def broken_init() -> object:
        def fail() -> None:
            raise RuntimeError("NVML Shared Library Not Found")

        return types.SimpleNamespace(nvmlInit=fail)

    assert nvml.probe(missing) == []
    assert nvml.probe(broken_init) == []


def test_nvml_probe_with_a_fake_driver() -> None:
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=80 * 2**30),
        nvmlDeviceGetPowerManagementLimit=lambda h: 700_000,
        nvmlDeviceGetMigMode=lambda h: (h == 1, h == 1),
    )
    gpus = nvml.probe(lambda: fake)
    assert gpus == [
        nvml.NvmlGpu(0, "NVIDIA H100 80GB HBM3", 80.0, 700.0, False),
        nvml.NvmlGpu(1, "NVIDIA H100 80GB HBM3", 80.0, 700.0, True),
    ]


def test_nvml_inventory_replaces_the_spec(
    lab: ClusterSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where NVML finds GPUs the inventory is this machine, and slots map to NVML indexes."""
    gpus = [nvml.NvmlGpu(i, "NVIDIA H200", 139.8) for i in (0, 1, 2, 3)]
    monkeypatch.setattr(nvml, "probe", lambda: gpus)
    b = LocalBackend(lab, tmp_path / "state", cwd=REPO)
    assert "nvml" in b.capabilities
    (group,) = b.inventory().node_groups
    assert (group.gpu, group.gpus_per_node) == ("H200", 4)
    assert b._cuda_ids(group.node_names()[0], (1, 3)) == (1, 3)
    assert b._cuda_ids("a100-00", (1, 3)) == (1, 3)  # a node NVML does not know: slots as given


# ---------------------------------------------------------------- slow: real torchrun gangs


@pytest.mark.slow
def test_ddp_2x2_job_succeeds_with_logs(lab: ClusterSpec, tmp_path: Path) -> None:
    b = backend(lab, tmp_path)
    spec = launch_spec(tmp_path, "--steps", "60")
    started = time.monotonic()
    handle = b.launch(spec)
    assert b.launch(spec) == handle  # launching the same attempt twice starts nothing new
    assert b.recorded_handles() == {(1, 1): handle}
    obs = wait_until_ended(b, 1)
    elapsed = time.monotonic() - started
    assert obs.status is AttemptStatus.SUCCEEDED, obs
    assert obs.exit_code == 0
    assert elapsed < 60, f"the 2x2 60-step job took {elapsed:.1f}s"

    attempt_dir = tmp_path / "job-1" / "attempt-1"
    node0 = (attempt_dir / "a100-00.log").read_text()
    assert "step 60/60 loss" in node0 and "done" in node0
    assert (attempt_dir / "a100-01.log").exists()
    assert (tmp_path / "job-1" / "checkpoints").is_dir()
    logs = rank_logs(attempt_dir)
    assert {node: sorted(ranks) for node, ranks in logs.items()} == {"a100-00": [0, 1], "a100-01": [0, 1]}
    expected = {"a100-00": "CUDA_VISIBLE_DEVICES=0,1", "a100-01": "CUDA_VISIBLE_DEVICES=2,3"}
    for node, ranks in logs.items():
        for stdout, stderr in ranks.values():
            assert expected[node] in stdout.read_text()
            assert f"node {node}" in stdout.read_text()
            assert stderr.exists()
    records = [read_json(attempt_dir / "ranks" / f"rank-{r}.exit") for r in range(4)]
    assert [r and r["exit_code"] for r in records] == [0, 0, 0, 0]
    assert [r and r["node"] for r in records] == ["a100-00", "a100-00", "a100-01", "a100-01"]
    assert b.recorded_handles() == {}
    assert_nothing_left(handle)


@pytest.mark.slow
def test_cancel_mid_run_leaves_no_process(lab: ClusterSpec, tmp_path: Path) -> None:
    b = backend(lab, tmp_path)
    handle = b.launch(launch_spec(tmp_path, "--steps", "100000", "--log-every", "5"))
    wait_for_text(tmp_path / "job-1" / "attempt-1" / "a100-00.log", "step 5/")
    token = json.loads(handle)["token"]
    running = processes_with_token(token)
    assert len(running) == 12  # 2 agents + 2 torchruns + 4 rank shims + 4 trainers
    assert len(set(running.values())) == 6  # each agent's group, each rank's session
    started = time.monotonic()
    b.cancel(1, 1, grace_s=5.0)
    assert time.monotonic() - started < 1.0  # returns at once; the kill worker does the rest
    obs = wait_until_ended(b, 1, timeout=15)
    assert obs.status is AttemptStatus.CANCELLED
    assert time.monotonic() - started < 15
    assert_nothing_left(handle, frozenset(running.values()))


@pytest.mark.slow
def test_failed_rank_fails_the_attempt(lab: ClusterSpec, tmp_path: Path) -> None:
    b = backend(lab, tmp_path)
    handle = b.launch(launch_spec(tmp_path, "--steps", "60", "--fail-at-step", "5"))
    obs = wait_until_ended(b, 1)
    assert obs.status is AttemptStatus.FAILED, obs
    assert obs.exit_code == 3
    assert obs.failed_node == "a100-00"
    assert "rank 0 on node a100-00 exited 3" in obs.detail
    assert "injected failure at step 5" in obs.detail
    assert_nothing_left(handle)  # the healthy node was torn down too


_CONTROL_PLANE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from grace.backends.base import LaunchSpec, NodeAssignment
    from grace.backends.local import LocalBackend
    from grace.spec import load_cluster

    tmp, repo = Path(sys.argv[1]), Path(sys.argv[2])
    b = LocalBackend(load_cluster(repo / "examples/clusters/lab.yaml"), tmp / "state", cwd=repo,
                     use_nvml=False)
    b.launch(LaunchSpec(job_id=7, attempt=1, name="adopted",
                        command=("python", "examples/train_ddp.py", "--device", "cpu", "--steps", "60"),
                        nodes=(NodeAssignment("a100-00", (0, 1)), NodeAssignment("a100-01", (2, 3))),
                        workdir=tmp / "job-7", env={"OMP_NUM_THREADS": "1"}))
    print("launched", flush=True)
    time.sleep(3600)
    """
)


@pytest.mark.slow
def test_attempt_survives_control_plane_sigkill_and_is_adopted(lab: ClusterSpec, tmp_path: Path) -> None:
    """SIGKILL the control plane mid-run; a new one adopts the gang and sees it finish, once."""
    cp = subprocess.Popen(
        [sys.executable, "-c", _CONTROL_PLANE, str(tmp_path), str(REPO)], stdout=subprocess.PIPE, text=True
    )
    assert cp.stdout is not None and cp.stdout.readline().strip() == "launched"
    wait_for_text(tmp_path / "job-7" / "attempt-1" / "a100-00.log", "rank 0/4")
    cp.send_signal(signal.SIGKILL)
    cp.wait()

    b = backend(lab, tmp_path)  # the restarted control plane, same state_dir
    handles = b.recorded_handles()
    assert list(handles) == [(7, 1)]
    handle = handles[(7, 1)]
    assert json.loads(handle)["dir"] == str(tmp_path / "job-7" / "attempt-1")
    assert b.adopt(7, 1, handle) is True
    assert [o.status for o in b.poll()] == [AttemptStatus.RUNNING]
    # Relaunching the attempt (the store never saw the handle) adopts instead of duplicating.
    assert b.launch(launch_spec(tmp_path, "--steps", "60", job_id=7)) == handle
    obs = wait_until_ended(b, 7)
    assert obs.status is AttemptStatus.SUCCEEDED, obs
    assert_nothing_left(handle)
    # A third control plane adopting after the end still learns the outcome from the exit records.
    late = backend(lab, tmp_path)
    assert late.adopt(7, 1, handle) is True
    assert [o.status for o in late.poll()] == [AttemptStatus.SUCCEEDED]


@pytest.mark.slow
@pytest.mark.parametrize("ended_before_restart", [False, True])
def test_a_launch_cut_short_after_every_agent_started_is_adopted_not_run_again(
        lab: ClusterSpec, tmp_path: Path, ended_before_restart: bool) -> None:
    """The control plane dies after starting every agent but before recording the handle
    (no registry record, no launch.json). The next one rebuilds the handle from the plan in
    launching.json and the agents' own records, and adopts the attempt: still running, or
    already ended with its outcome. Reaping it instead ran the job a second time whenever
    the restart was slower than the job (CI, test_crash_launch)."""
    b = backend(lab, tmp_path)
    short = ("python", "-c", "import time; time.sleep(4)")
    spec = dataclasses.replace(launch_spec(tmp_path), command=short)
    handle = b.launch(spec)
    attempt_dir = tmp_path / "job-1" / "attempt-1"
    for node in ("a100-00", "a100-01"):
        deadline = time.monotonic() + 20
        while not (attempt_dir / f"{node}.agent.json").exists():
            assert time.monotonic() < deadline, "the agent never recorded itself"
            time.sleep(0.05)
    (tmp_path / "state" / "attempts" / "1-1.json").unlink()  # as if the crash came first
    (attempt_dir / "launch.json").unlink()
    if ended_before_restart:
        deadline = time.monotonic() + 60
        while not all((attempt_dir / f"{n}.exit").exists() for n in ("a100-00", "a100-01")):
            assert time.monotonic() < deadline, "the attempt never ended"
            time.sleep(0.2)

    restarted = backend(lab, tmp_path)
    assert restarted.recorded_handles() == {}
    rebuilt = restarted.cut_short_handle(1, 1, tmp_path / "job-1")
    assert rebuilt is not None
    ours, theirs = json.loads(rebuilt), json.loads(handle)
    assert {k: ours[k] for k in ("token", "dir", "port", "nodes")} == {
        k: theirs[k] for k in ("token", "dir", "port", "nodes")}
    assert restarted.adopt(1, 1, rebuilt) is True
    obs = wait_until_ended(restarted, 1, timeout=60)
    assert obs.status is AttemptStatus.SUCCEEDED, obs
    assert_nothing_left(rebuilt)


def test_a_launch_cut_short_before_an_agent_recorded_itself_is_not_adopted(
        lab: ClusterSpec, tmp_path: Path) -> None:
    """No handle is rebuilt while any planned agent has no record of its own (it may never
    have started): recovery then reaps the attempt, as before."""
    b = backend(lab, tmp_path)
    attempt_dir = tmp_path / "job-1" / "attempt-1"
    attempt_dir.mkdir(parents=True)
    plan = [{"node": "a100-00", "index": 0, "gpus": [0, 1], "cgroup": None},
            {"node": "a100-01", "index": 1, "gpus": [2, 3], "cgroup": None}]
    write_json_atomic(attempt_dir / "launching.json",
                      {"token": "t0k3n", "at": 1.0, "port": 1, "uid": None, "isolation": "none",
                       "nodes": plan})
    write_json_atomic(attempt_dir / "a100-00.agent.json", {"node": "a100-00", "pid": 1, "pgid": 1})
    assert b.cut_short_handle(1, 1, tmp_path / "job-1") is None
    write_json_atomic(attempt_dir / "a100-01.agent.json", {"node": "a100-00", "pid": 1, "pgid": 1})
    assert b.cut_short_handle(1, 1, tmp_path / "job-1") is None  # a record for another node
    write_json_atomic(attempt_dir / "a100-01.agent.json", {"node": "a100-01", "pid": 1, "pgid": 1})
    rebuilt = b.cut_short_handle(1, 1, tmp_path / "job-1")
    assert rebuilt is not None and [n["pid"] for n in json.loads(rebuilt)["nodes"]] == [1, 1]
    # pid 1 is no agent of this attempt: adopt sees nothing of it alive and no exit record
    assert b.adopt(1, 1, rebuilt) is False
    write_json_atomic(attempt_dir / "launching.json", {"token": "t0k3n", "at": 1.0})
    assert b.cut_short_handle(1, 1, tmp_path / "job-1") is None  # an older record: no plan


@pytest.mark.slow
def test_sigkilled_agents_are_lost(lab: ClusterSpec, tmp_path: Path) -> None:
    """Agents killed without a chance to write exit records: LOST, and orphaned workers are swept."""
    b = backend(lab, tmp_path)
    handle = b.launch(launch_spec(tmp_path, "--steps", "100000", "--sleep-per-step", "0.05"))
    wait_for_text(tmp_path / "job-1" / "attempt-1" / "a100-00.log", "rank 0/4")
    token = json.loads(handle)["token"]
    workers = processes_with_token(token)
    for node in json.loads(handle)["nodes"]:
        os.killpg(node["pgid"], signal.SIGKILL)  # agent + torchrun; the ranks live on in their sessions
    obs = wait_until_ended(b, 1, timeout=10)
    assert obs.status is AttemptStatus.LOST, obs
    assert "without an exit record (killed by SIGKILL)" in obs.detail
    assert not any((tmp_path / "job-1" / "attempt-1" / f"{n}.exit").exists() for n in ("a100-00", "a100-01"))
    assert_nothing_left(handle, frozenset(workers.values()))


@pytest.mark.slow
def test_time_limit_ends_the_attempt(lab: ClusterSpec, tmp_path: Path) -> None:
    """The agent enforces the limit itself, so it holds even while the control plane is down."""
    b = backend(lab, tmp_path)
    one = (NodeAssignment("l40s-00", (0,)),)
    handle = b.launch(launch_spec(tmp_path, "--steps", "100000", nodes=one, time_limit_s=4.0))
    obs = wait_until_ended(b, 1, timeout=30)
    assert obs.status is AttemptStatus.FAILED, obs.detail  # in full: it names how the agent ended
    assert obs.failed_node == "l40s-00"
    assert "time limit" in obs.detail
    assert_nothing_left(handle)


# ---------------------------------------------------------------- reap and cancel, no torch
# Stand-ins for an attempt's processes: plain sleepers in sessions of their own, carrying
# what a real attempt's processes carry (the token, GRACE_WORKDIR/GRACE_ATTEMPT), and for an
# agent the command line _agent_alive checks. Each test collects its own children.

SLEEP = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"


def sleeper(env: dict[str, str], *argv: str) -> subprocess.Popen[bytes]:
    """A process that ignores SIGTERM (only SIGKILL ends it), with ``env`` added; returned
    once it does ignore it (SIGTERM is bit 15 of /proc's SigIgn mask)."""
    p = subprocess.Popen([sys.executable, "-c", SLEEP, *argv], env={**os.environ, **env},
                         stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while True:
        status = Path(f"/proc/{p.pid}/status").read_text()
        ignored = int(next(x for x in status.splitlines() if x.startswith("SigIgn:")).split()[1], 16)
        if ignored & (1 << (signal.SIGTERM - 1)):
            return p
        assert time.monotonic() < deadline, "the sleeper never got ready"
        time.sleep(0.01)


def ended_by_sigkill(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> bool:
    try:
        return proc.wait(timeout=timeout) == -signal.SIGKILL
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture
def procs() -> types.SimpleNamespace:
    started: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str], *argv: str) -> subprocess.Popen[bytes]:
        p = sleeper(env, *argv)
        started.append(p)
        return p

    ns = types.SimpleNamespace(start=start)
    yield ns
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def fake_agent(procs: types.SimpleNamespace, attempt_dir: Path, token: str, job_id: int = 1,
               attempt: int = 1) -> tuple[subprocess.Popen[bytes], str]:
    """A stand-in agent of node a100-00 and the handle of its attempt."""
    attempt_dir.mkdir(parents=True, exist_ok=True)
    p = procs.start({"GRACE_LOCAL_TOKEN": f"{token}:0"}, "grace.backends.local_agent",
                    str(attempt_dir), "a100-00")
    handle = json.dumps({"v": 1, "backend": "local", "job_id": job_id, "attempt": attempt,
                         "dir": str(attempt_dir), "token": token, "port": 1,
                         "nodes": [{"node": "a100-00", "index": 0, "gpus": [0], "pid": p.pid,
                                    "pgid": p.pid}]})
    return p, handle


def test_reap_ends_a_half_launched_attempt_by_its_launch_record(
        lab: ClusterSpec, tmp_path: Path, procs: types.SimpleNamespace) -> None:
    """A crash right after ``launching.json``: no handle anywhere, only the token on disk."""
    workdir = tmp_path / "job-1"
    write_json_atomic(workdir / "attempt-1" / "launching.json", {"token": "tok1", "at": 1.0})
    mine = [procs.start({"GRACE_LOCAL_TOKEN": f"tok1:{i}"}) for i in range(2)]
    other_attempt = procs.start({"GRACE_LOCAL_TOKEN": "tok2:0"})
    other_job = procs.start({"GRACE_WORKDIR": str((tmp_path / "job-2").resolve()),
                             "GRACE_ATTEMPT": "1"})
    assert backend(lab, tmp_path).reap(1, 1, workdir) == 2
    assert all(ended_by_sigkill(p) for p in mine)
    assert other_attempt.poll() is None and other_job.poll() is None
    assert backend(lab, tmp_path).reap(1, 1, workdir) == 0


def test_reap_finds_processes_by_workdir_and_attempt_and_in_stale_dirs(
        lab: ClusterSpec, tmp_path: Path, procs: types.SimpleNamespace) -> None:
    workdir = tmp_path / "job-1"
    write_json_atomic(workdir / "attempt-1.stale-1700000000" / "launching.json", {"token": "old"})
    by_env = procs.start({"GRACE_WORKDIR": str(workdir.resolve()), "GRACE_ATTEMPT": "1"})
    by_stale = procs.start({"GRACE_LOCAL_TOKEN": "old:0"})
    attempt_2 = procs.start({"GRACE_WORKDIR": str(workdir.resolve()), "GRACE_ATTEMPT": "2"})
    assert backend(lab, tmp_path).reap(1, 1, workdir) == 2
    assert ended_by_sigkill(by_env) and ended_by_sigkill(by_stale)
    assert attempt_2.poll() is None


def test_reap_of_a_watched_attempt_is_reported_lost_once(
        lab: ClusterSpec, tmp_path: Path, procs: types.SimpleNamespace) -> None:
    attempt_dir = tmp_path / "job-1" / "attempt-1"
    agent, handle = fake_agent(procs, attempt_dir, "tokw")
    b = backend(lab, tmp_path)
    assert b.adopt(1, 1, handle) is True
    assert b.reap(1, 1, tmp_path / "job-1") == 1
    assert ended_by_sigkill(agent)
    [obs] = b.poll()
    assert obs.status is AttemptStatus.LOST and "reap" in obs.detail
    assert b.poll() == []


def test_reap_that_cannot_end_everything_raises_and_launch_starts_nothing(
        lab: ClusterSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grace.backends import local
    from grace.backends.base import ReapError

    monkeypatch.setattr(local, "REAP_TIMEOUT_S", 0.2)
    monkeypatch.setattr(local, "_scan_attempts", lambda *a: {2**22 + 1: 2**22 + 1})  # unkillable
    b = backend(lab, tmp_path)
    with pytest.raises(ReapError, match="survive"):
        b.reap(1, 1, tmp_path / "job-1")
    spec = dataclasses.replace(launch_spec(tmp_path, nodes=(NodeAssignment("a100-00", (0,)),)),
                               attempt=2)
    with pytest.raises(ReapError):
        b.launch(spec)
    assert not (tmp_path / "job-1" / "attempt-2").exists()
    assert b.poll() == []


def test_cancel_returns_at_once_and_sigkills_after_the_grace(
        lab: ClusterSpec, tmp_path: Path, procs: types.SimpleNamespace) -> None:
    attempt_dir = tmp_path / "job-1" / "attempt-1"
    agent, handle = fake_agent(procs, attempt_dir, "tokc")
    b = backend(lab, tmp_path)
    assert b.adopt(1, 1, handle)
    started = time.monotonic()
    b.cancel(1, 1, grace_s=1.0)
    b.cancel(1, 1, grace_s=30.0)  # again, with a longer grace: harmless, the kill stays due at 1 s
    assert time.monotonic() - started < 0.5
    assert read_json(attempt_dir / "cancel.json")["grace_s"] == 1.0
    assert [o.status for o in b.poll()] == [AttemptStatus.RUNNING]  # it ignores SIGTERM
    obs = wait_until_ended(b, 1, timeout=10)
    took = time.monotonic() - started
    assert obs.status is AttemptStatus.CANCELLED
    assert 0.9 <= took < 5, took
    assert ended_by_sigkill(agent)
    b.cancel(1, 1)  # an ended attempt: nothing to do
    assert b.poll() == []


def test_adopt_re_arms_the_kill_of_a_cancel_cut_short(
        lab: ClusterSpec, tmp_path: Path, procs: types.SimpleNamespace) -> None:
    """The control plane died during a cancel's grace: the next one still SIGKILLs on time."""
    attempt_dir = tmp_path / "job-1" / "attempt-1"
    agent, handle = fake_agent(procs, attempt_dir, "toka")
    write_json_atomic(attempt_dir / "cancel.json", {"at": time.time() - 10, "grace_s": 5.0})
    b = backend(lab, tmp_path)
    assert b.adopt(1, 1, handle)
    assert ended_by_sigkill(agent, timeout=5)
    assert wait_until_ended(b, 1, timeout=5).status is AttemptStatus.CANCELLED


def test_deadlines_run_once_each_earliest_first_and_the_thread_goes_when_idle() -> None:
    from grace.backends.base import Deadlines

    d = Deadlines("test-deadlines")
    calls: list[str] = []
    again = iter([time.monotonic() + 0.05, None])
    now = time.monotonic()
    d.at("a", now + 0.2, lambda: calls.append("a-late"))  # type: ignore[func-returns-value]
    d.at("a", now + 0.05, lambda: calls.append("a"))  # type: ignore[func-returns-value]
    d.at("a", now + 5.0, lambda: calls.append("a-later"))  # later than due: ignored
    d.at("b", now + 0.1, lambda: (calls.append("b"), next(again))[1])
    d.at("c", now + 0.1, lambda: calls.append("c"))  # type: ignore[func-returns-value]
    d.drop("c")
    d.at("boom", now, lambda: 1 / 0)  # logged; the thread carries on
    deadline = time.monotonic() + 5
    while d.due() or d._thread is not None:
        assert time.monotonic() < deadline, d.due()
        time.sleep(0.02)
    assert calls == ["a", "b", "b"]
