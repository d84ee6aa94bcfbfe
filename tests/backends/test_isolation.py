"""Isolation on the local backend, with real processes, real uids and real cgroups.

The attack: a job of tenant B, running as its own uid, tries to read and write
tenant A's checkpoints, signal A's processes, read the server's environment,
open the store, list the state dir; each must fail with EACCES/EPERM, and A
then completes untouched. A child that double-forks, ``setsid()``s and
re-execs itself with an empty environment dies with its attempt's cancel (only
the cgroup can find it). A job past its memory limit is killed by the cgroup
and reported as ``oom`` while its neighbour completes. A job's environment
holds nothing of the control plane's own.

These need root and writable cgroups; ``users`` mode also needs the job uid
to reach the interpreter (here under /root, mode 0700). Without them the tests
skip, saying what to do; with ``GRACE_TEST_ISOLATION=1`` (CI) they fail
instead, and the fixture opens the directories on the way to the interpreter
(``chmod o+x``) itself.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grace.backends.base import AttemptStatus, Backend, LaunchSpec, NodeAssignment, Observation
from grace.backends.cgroups import CgroupVersion, Hierarchy, scope_of
from grace.backends.isolation import (
    DEFAULT_JOB_UIDS,
    UID_MAP,
    Isolation,
    IsolationError,
    TenantUids,
    first_blocked,
    job_environment,
    read_job_file,
    users_blocker,
)
from grace.backends.local import GIB, LocalBackend
from grace.backends.local_agent import processes_with_token
from grace.control.live.observe import failure_kind
from grace.core.jobs import JobId, PendingJob
from grace.core.placement import WholeRequest
from grace.core.restart import FailedAttempt, FailureKind, RestartVerdict, on_failure
from grace.spec import load_cluster
from grace.spec.cluster import ClusterSpec

REPO = Path(__file__).resolve().parents[2]
STRICT = os.environ.get("GRACE_TEST_ISOLATION") == "1"


def _unavailable(why: str) -> None:
    if STRICT:
        pytest.fail(f"GRACE_TEST_ISOLATION=1 but {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="module")
def lab() -> ClusterSpec:
    return load_cluster(REPO / "examples" / "clusters" / "lab.yaml")


@pytest.fixture
def cgroups_here() -> Hierarchy:
    """Root with a writable cgroup hierarchy, or a skip (a failure under GRACE_TEST_ISOLATION=1)."""
    if os.geteuid() != 0:
        _unavailable("these tests need root (they create cgroups and run jobs as other uids)")
    h = Hierarchy.detect()
    if h is None:
        _unavailable("no cgroup hierarchy with a memory controller is mounted")
    assert h is not None
    problem = h.check_writable("test-probe")
    if problem:
        _unavailable(problem)
    return h


@pytest.fixture
def users_here(cgroups_here: Hierarchy) -> Hierarchy:
    """Also: a job uid can reach the interpreter. Under GRACE_TEST_ISOLATION=1 the fixture
    opens the directories on the way (chmod o+x), else it skips saying which."""
    for _ in range(10):
        blocked = first_blocked(Path(sys.executable))
        if blocked is None:
            return cgroups_here
        if not STRICT:
            pytest.skip(f"uid {DEFAULT_JOB_UIDS.start} cannot reach the interpreter {sys.executable}: "
                        f"{blocked} is closed to other users; run  chmod o+x {blocked}  or set "
                        "GRACE_TEST_ISOLATION=1 to let the test do it")
        os.chmod(blocked, stat.S_IMODE(blocked.stat().st_mode) | stat.S_IXOTH)
    pytest.fail("the interpreter's directories stay closed after chmod o+x")


@pytest.fixture
def state() -> Iterator[Path]:
    """A state dir under /tmp (pytest's tmp_path is under a 0700 directory no job uid can
    enter), with a stand-in store and admin token as `grace up` leaves them (0600)."""
    d = Path(tempfile.mkdtemp(prefix="grace-iso-", dir="/tmp"))
    os.chmod(d, 0o711)
    for name, text in (("grace.sqlite", "SQLite format 3\0 the store"), ("admin.token", "admin-secret")):
        (d / name).write_text(text)
        os.chmod(d / name, 0o600)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def scripts() -> Iterator[Path]:
    """Where the jobs' scripts live: readable by every uid."""
    d = Path(tempfile.mkdtemp(prefix="grace-iso-scripts-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def script(where: Path, name: str, body: str) -> str:
    path = where / name
    path.write_text(textwrap.dedent(body))
    os.chmod(path, 0o644)
    return str(path)


def backend(lab: ClusterSpec, state: Path, mode: Isolation) -> LocalBackend:
    b = LocalBackend(lab, state, cwd=REPO, use_nvml=False, isolation=mode)
    assert b.isolation_report()["mode"] == mode.value, b.isolation_report()
    return b


def spec_for(state: Path, job_id: int, command: tuple[str, ...], *, tenant: str = "default",
             gpus: tuple[int, ...] = (0,), env: dict[str, str] | None = None,
             memory_gb: float | None = None) -> LaunchSpec:
    return LaunchSpec(job_id=job_id, attempt=1, name=f"job-{job_id}", command=command,
                      nodes=(NodeAssignment("a100-00", gpus),), workdir=state / "jobs" / f"j-{job_id}",
                      env={"OMP_NUM_THREADS": "1", **(env or {})}, tenant=tenant, memory_gb=memory_gb)


def wait_all(b: Backend, jobs: set[int], timeout: float = 120.0) -> dict[int, Observation]:
    """Poll like the reconciler until every one of ``jobs`` has been reported ended."""
    ended: dict[int, Observation] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for o in b.poll():
            if o.job_id in jobs and o.status is not AttemptStatus.RUNNING:
                assert o.job_id not in ended, f"job {o.job_id} reported ended twice"
                ended[o.job_id] = o
        if ended.keys() == jobs:
            return ended
        time.sleep(0.2)
    raise AssertionError(f"jobs {sorted(jobs - ended.keys())} still running after {timeout}s")


def wait_for(path: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def assert_scope_gone(b: LocalBackend, h: Hierarchy, state: Path) -> None:
    """Every cgroup of the backend was removed once its attempt was reported ended."""
    for d in h.scope_dirs(scope_of(state)):
        left = [p.name for p in d.iterdir() if p.is_dir()] if d.exists() else []
        assert left == [], f"cgroups left under {d}: {left}"


# ---------------------------------------------------------------- fast: no torchrun


def test_tenants_get_distinct_uids_that_survive_a_restart(tmp_path: Path) -> None:
    uids = TenantUids(tmp_path / UID_MAP, range(61000, 61003))
    a, b = uids.uid_of("alpha"), uids.uid_of("beta")
    assert (a, b) == (61000, 61001)
    again = TenantUids(tmp_path / UID_MAP, range(61000, 61003))  # a restarted control plane
    assert again.uid_of("beta") == b and again.uid_of("alpha") == a
    assert again.uid_of("gamma") == 61002
    with pytest.raises(IsolationError, match="wider range"):
        again.uid_of("delta")
    assert stat.S_IMODE((tmp_path / UID_MAP).stat().st_mode) == 0o600
    with pytest.raises(ValueError, match="job_uids"):
        TenantUids(tmp_path / "x.json", range(0, 0))


def test_cgroup_detection_prefers_a_v2_with_memory_and_reads_hybrid_hosts_as_v1(tmp_path: Path) -> None:
    """The mount-table parser: a hybrid host (systemd's empty cgroup2, controllers on v1) is
    v1; a cgroup2 whose cgroup.controllers lists memory is v2. Only the parsing is faked
    (a mounts file and one cgroup.controllers file); the kernel is not."""
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("")
    mounts = tmp_path / "mounts"
    mounts.write_text(
        f"cgroup2 {unified} cgroup2 rw,relatime 0 0\n"
        f"cgroup {tmp_path}/memory cgroup rw,relatime,memory 0 0\n"
        f"cgroup {tmp_path}/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0\n")
    h = Hierarchy.detect(mounts)
    assert h is not None and h.version is CgroupVersion.V1
    assert h.mounts == {"memory": tmp_path / "memory", "cpu": tmp_path / "cpu,cpuacct"}
    (unified / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    h = Hierarchy.detect(mounts)
    assert h is not None and h.version is CgroupVersion.V2 and h.mounts == {"": unified}
    mounts.write_text("proc /proc proc rw 0 0\n")
    assert Hierarchy.detect(mounts) is None


def test_job_environment_is_an_allow_list() -> None:
    host = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "CUDA_HOME": "/cuda", "TZ": "UTC",
            "DATABASE_URL": "postgresql://grace:pw@db/grace", "GRACE_DB_URL": "sqlite:///x",
            "GRACE_TOKEN": "admin-secret", "GRACE_URL": "http://127.0.0.1:8470", "AWS_SECRET": "x",
            "PYTHONPATH": "/server/only", "VIRTUAL_ENV": "/venv"}
    env = job_environment(host, {"GRACE_TOKEN": "job-token", "PYTHONPATH": "/job/lib"},
                          {"GRACE_JOB_ID": "7"})
    assert env["GRACE_TOKEN"] == "job-token"
    assert env["GRACE_URL"] == "http://127.0.0.1:8470"  # inherited only because the spec lacks it
    for gone in ("DATABASE_URL", "GRACE_DB_URL", "AWS_SECRET", "VIRTUAL_ENV"):
        assert gone not in env
    assert env["PYTHONPATH"].split(os.pathsep)[1:] == ["/job/lib"]  # Grace's src first, not the server's
    assert {"PATH", "LANG", "LC_ALL", "CUDA_HOME", "TZ", "GRACE_JOB_ID"} <= env.keys()
    assert job_environment(host, {"GRACE_URL": "http://api:1"}, {})["GRACE_URL"] == "http://api:1"


def test_root_reads_of_a_jobs_files_refuse_symlinks_fifos_and_other_owners(tmp_path: Path) -> None:
    """What the control plane reads from a job's directory (exit records, log tails) must not
    follow a symlink the job planted to the store, nor block on a FIFO."""
    secret = tmp_path / "admin.token"
    secret.write_text("admin-secret")
    own = tmp_path / "a100-00.log"
    own.write_text("line 1\nline 2\n")
    (tmp_path / "link.log").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo.log")
    me = os.getuid()
    assert read_job_file(own, me) == b"line 1\nline 2\n"
    assert read_job_file(own, me, max_bytes=7) == b"line 2\n"
    assert read_job_file(tmp_path / "link.log", None) is None
    assert read_job_file(tmp_path / "fifo.log", None) is None  # returns at once
    assert read_job_file(own, me + 1) is None  # another uid's file, e.g. through a symlinked dir


def test_auto_picks_users_only_where_a_job_uid_can_run(lab: ClusterSpec, state: Path,
                                                       cgroups_here: Hierarchy) -> None:
    """AUTO says which mode and why; USERS asked for where it cannot work raises, naming the fix."""
    blocker = users_blocker(DEFAULT_JOB_UIDS.start, state, REPO)
    b = LocalBackend(lab, state, cwd=REPO, use_nvml=False)
    report = b.isolation_report()
    assert report["cgroup_version"] == cgroups_here.version.value
    if blocker is None:
        assert report["mode"] == "users", report
        assert report["uid_range"] == [61000, 61999]
        assert stat.S_IMODE(state.stat().st_mode) == 0o711
        for name in ("grace.sqlite", "admin.token", "attempts"):
            assert stat.S_IMODE((state / name).stat().st_mode) & 0o077 == 0, name
    else:
        assert report["mode"] == "cgroup", report
        assert "chmod o+x" in report["why"] and report["uid_range"] is None
        with pytest.raises(IsolationError, match="chmod o\\+x"):
            LocalBackend(lab, state, cwd=REPO, use_nvml=False, isolation=Isolation.USERS)
    closed = Path(tempfile.mkdtemp(dir=state))  # 0700: no job uid can enter a state dir in it
    try:
        cg = LocalBackend(lab, closed / "state", cwd=REPO, use_nvml=False)
        assert cg.isolation_report()["mode"] == "cgroup"
        assert "put the state dir where uid" in cg.isolation_report()["why"] or blocker is not None
    finally:
        shutil.rmtree(closed)
    assert LocalBackend(lab, state, cwd=REPO, use_nvml=False,
                        isolation=Isolation.NONE).isolation_report()["mode"] == "none"


def test_oom_is_its_own_failure_kind_and_is_not_retried() -> None:
    """What the control plane records for an attempt the backend saw OOM-killed: failure_kind
    "oom", and no automatic retry (the same limit would kill it again), naming memory_gb."""
    obs = Observation(1, 1, AttemptStatus.FAILED, exit_code=-9, detail="oom: node a100-00 ...",
                      failed_node="a100-00", oom=True)
    assert failure_kind(obs) is FailureKind.OOM and FailureKind.OOM.value == "oom"
    assert failure_kind(Observation(1, 1, AttemptStatus.FAILED, exit_code=-9)) is FailureKind.KILLED
    job = PendingJob(JobId(1), "t", 0.0, WholeRequest(1), {}, ("A100-80GB",))
    d = on_failure(job, FailedAttempt(FailureKind.OOM, None, ran_s=86400.0, first_attempt=False,
                                      progressed=True, restarts_without_progress=0))
    assert d.verdict is RestartVerdict.GIVE_UP_OUT_OF_MEMORY and d.job is None
    assert "memory_gb" in d.reason


# ---------------------------------------------------------------- slow: real jobs

ATTACKED = """
    import os, sys, time
    ckpt = os.environ["GRACE_CHECKPOINT_DIR"]
    pattern = bytes(range(256)) * 64
    with open(os.path.join(ckpt, "step-1.bin"), "wb") as f:
        f.write(pattern)
    open(os.path.join(ckpt, "ready"), "w").close()
    while not os.path.exists(os.path.join(ckpt, "release")):  # the test (root) writes it
        time.sleep(0.1)
    with open(os.path.join(ckpt, "step-1.bin"), "rb") as f:
        assert f.read() == pattern, "checkpoint changed"
    assert sorted(os.listdir(ckpt)) == ["ready", "release", "step-1.bin"], os.listdir(ckpt)
"""

ATTACKER = """
    import json, os, signal
    results = {}
    def attempt(name, fn):
        try:
            fn()
            results[name] = "allowed"
        except OSError as e:
            results[name] = __import__("errno").errorcode.get(e.errno, str(e.errno))
    victim = os.environ["VICTIM_CKPT"]
    def write_victim():
        with open(os.path.join(victim, "evil"), "wb") as f:
            f.write(b"x")
    def read_victim():
        with open(os.path.join(victim, "step-1.bin"), "rb") as f:
            f.read()
    attempt("list victim checkpoints", lambda: os.listdir(victim))
    attempt("read victim checkpoint", read_victim)
    attempt("write victim checkpoint", write_victim)
    attempt("write victim workdir", lambda: os.mkdir(os.path.join(os.path.dirname(victim), "evil")))
    for pid in os.environ["VICTIM_PIDS"].split(","):
        attempt(f"kill {pid}", lambda: os.kill(int(pid), signal.SIGKILL))
    server = os.environ["SERVER_PID"]
    attempt("server environ", lambda: open(f"/proc/{server}/environ", "rb").read())
    results["server cmdline"] = open(f"/proc/{server}/cmdline", "rb").read().decode(errors="replace")
    state = os.environ["STATE_DIR"]
    attempt("open store for writing", lambda: open(os.path.join(state, "grace.sqlite"), "r+b").close())
    attempt("read admin token", lambda: open(os.path.join(state, "admin.token")).read())
    attempt("list state dir", lambda: os.listdir(state))
    attempt("list jobs dir", lambda: os.listdir(os.path.join(state, "jobs")))
    attempt("write registry", lambda: open(os.path.join(state, "attempts", "9-1.json"), "w").close())
    attempt("write uid map", lambda: open(os.path.join(state, "tenant-uids.json"), "a").close())
    results["uid"] = os.getuid()
    results["secret in my env"] = "GRACE_TEST_SERVER_SECRET" in os.environ
    with open(os.path.join(os.environ["GRACE_CHECKPOINT_DIR"], "result.json"), "w") as f:
        json.dump(results, f)
"""


@pytest.mark.slow
def test_a_tenant_cannot_touch_another_tenants_job_files_or_processes(
        lab: ClusterSpec, state: Path, scripts: Path, users_here: Hierarchy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRACE_TEST_SERVER_SECRET", "hunter2")  # the "server" is this process
    b = backend(lab, state, Isolation.USERS)
    victim = spec_for(state, 1, ("python", script(scripts, "attacked.py", ATTACKED)), tenant="alpha")
    handle_a = b.launch(victim)
    ckpt_a = victim.workdir / "checkpoints"
    wait_for(ckpt_a / "ready")
    pids_a = sorted(processes_with_token(json.loads(handle_a)["token"]))
    assert len(pids_a) >= 4  # agent, torchrun, rank shim, the script
    attacker = spec_for(state, 2, ("python", script(scripts, "attacker.py", ATTACKER)), tenant="beta",
                        gpus=(1,), env={"VICTIM_CKPT": str(ckpt_a), "SERVER_PID": str(os.getpid()),
                                        "VICTIM_PIDS": ",".join(map(str, pids_a)),
                                        "STATE_DIR": str(state)})
    b.launch(attacker)
    ended = wait_all(b, {2})
    assert ended[2].status is AttemptStatus.SUCCEEDED, ended[2]
    results = json.loads((attacker.workdir / "checkpoints" / "result.json").read_text())
    uids = json.loads((state / UID_MAP).read_text())
    assert results.pop("uid") == uids["beta"] != uids["alpha"]
    cmdline = results.pop("server cmdline")
    assert "hunter2" not in cmdline  # world-readable on Linux: secrets never go on a command line
    assert results.pop("secret in my env") is False
    refused = {name: outcome for name, outcome in results.items() if outcome in ("EACCES", "EPERM")}
    assert refused == results, f"allowed: { {k: v for k, v in results.items() if k not in refused} }"
    assert len(results) == 11 + len(pids_a)
    assert all(alive(p) for p in pids_a)
    (ckpt_a / "release").touch()
    ended = wait_all(b, {1})
    assert ended[1].status is AttemptStatus.SUCCEEDED and ended[1].exit_code == 0, ended[1]
    assert (ckpt_a / "step-1.bin").read_bytes() == bytes(range(256)) * 64
    # who owns what: the job's dirs its uid's, 0700; the workdir root's, 0711
    alpha = uids["alpha"]
    for d, owner, mode in ((ckpt_a, alpha, 0o700), (victim.workdir / "attempt-1", alpha, 0o700),
                           (victim.workdir, 0, 0o711), (state, 0, 0o711), (state / "attempts", 0, 0o700)):
        st = d.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (owner, mode), d
    assert LocalBackend(lab, state, cwd=REPO, use_nvml=False)._uids.known() == uids  # type: ignore[union-attr]
    assert_scope_gone(b, users_here, state)


DAEMON = """
    import os, sys, time
    pidfile = os.path.join(os.environ["GRACE_CHECKPOINT_DIR"], "daemon.pid")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pidfile + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(pidfile + ".tmp", pidfile)
            # an empty environment: no GRACE_LOCAL_TOKEN, no GRACE_WORKDIR for a /proc scan to find
            os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)"], {})
        os._exit(0)
    time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", [Isolation.CGROUP, Isolation.USERS])
def test_a_daemonized_child_dies_with_its_attempts_cancel(
        lab: ClusterSpec, state: Path, scripts: Path, cgroups_here: Hierarchy, mode: Isolation,
        request: pytest.FixtureRequest) -> None:
    if mode is Isolation.USERS:
        request.getfixturevalue("users_here")
    b = backend(lab, state, mode)
    spec = spec_for(state, 1, ("python", script(scripts, "daemon.py", DAEMON)))
    b.launch(spec)
    pidfile = spec.workdir / "checkpoints" / "daemon.pid"
    wait_for(pidfile)
    daemon = int(pidfile.read_text())
    assert alive(daemon)
    assert Path(f"/proc/{daemon}/environ").read_bytes() == b""  # invisible to the token scan
    assert os.getsid(daemon) not in {os.getsid(p) for p in processes_with_token(
        json.loads(b.recorded_handles()[(1, 1)])["token"])}
    cgroup = b._attempts[(1, 1)].nodes[0].cgroup
    assert cgroup is not None and daemon in cgroup.pids()
    b.cancel(1, 1, grace_s=1.0)
    ended = wait_all(b, {1}, timeout=30.0)
    assert ended[1].status is AttemptStatus.CANCELLED, ended[1]
    assert not alive(daemon)
    assert not cgroup.exists()
    assert_scope_gone(b, cgroups_here, state)


HOG = """
    import os, time
    chunks = []
    for _ in range(64):  # 2 GiB in 32 MiB chunks, every page touched
        chunks.append(bytearray(32 << 20))
        for i in range(0, 32 << 20, 4096):
            chunks[-1][i] = 1
    open(os.path.join(os.environ["GRACE_CHECKPOINT_DIR"], "survived"), "w").close()
"""
NEIGHBOUR = """
    import os, time
    time.sleep(2)
    open(os.path.join(os.environ["GRACE_CHECKPOINT_DIR"], "done"), "w").close()
"""


@pytest.mark.slow
def test_a_job_past_its_memory_limit_is_oom_killed_and_its_neighbour_completes(
        lab: ClusterSpec, state: Path, scripts: Path, cgroups_here: Hierarchy) -> None:
    b = backend(lab, state, Isolation.CGROUP)
    hog = spec_for(state, 1, ("python", script(scripts, "hog.py", HOG)), memory_gb=0.5)
    neighbour = spec_for(state, 2, ("python", script(scripts, "neighbour.py", NEIGHBOUR)), gpus=(1,))
    b.launch(hog)
    b.launch(neighbour)
    limits = [cg.memory_limit() for k in ((1, 1), (2, 1)) for cg in b._attempts[k].cgroups()]
    assert limits == [GIB // 2, 512 * GIB // 4]  # memory_gb; the node's share: 1 of its 4 GPUs
    ended = wait_all(b, {1, 2})
    oom = ended[1]
    assert oom.status is AttemptStatus.FAILED and oom.oom, oom
    assert oom.detail.startswith("oom: node a100-00 used more than its memory limit of 0.5 GiB"), oom.detail
    assert oom.failed_node == "a100-00" and failure_kind(oom) is FailureKind.OOM
    assert not (hog.workdir / "checkpoints" / "survived").exists()
    assert ended[2].status is AttemptStatus.SUCCEEDED, ended[2]
    assert (neighbour.workdir / "checkpoints" / "done").exists()
    assert_scope_gone(b, cgroups_here, state)


ENV_DUMP = """
    import json, os
    with open(os.path.join(os.environ["GRACE_CHECKPOINT_DIR"], "env.json"), "w") as f:
        json.dump(dict(os.environ), f)
"""


@pytest.mark.slow
def test_a_jobs_environment_holds_nothing_of_the_servers(
        lab: ClusterSpec, state: Path, scripts: Path, cgroups_here: Hierarchy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    server_only = {"GRACE_TEST_SERVER_SECRET": "hunter2", "DATABASE_URL": "postgresql://u:pw@db/g",
                   "GRACE_DB_URL": "sqlite:////x", "GRACE_TOKEN": "admin-secret"}
    for k, v in server_only.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("GRACE_URL", "http://127.0.0.1:18999")
    b = backend(lab, state, Isolation.CGROUP)
    spec = spec_for(state, 1, ("python", script(scripts, "env.py", ENV_DUMP)),
                    env={"GRACE_TOKEN": "job-scoped", "GRACE_JOB_UID": "store:1"})
    b.launch(spec)
    ended = wait_all(b, {1})
    assert ended[1].status is AttemptStatus.SUCCEEDED, ended[1]
    env = json.loads((spec.workdir / "checkpoints" / "env.json").read_text())
    assert not server_only.keys() - {"GRACE_TOKEN"} & env.keys()
    assert env["GRACE_TOKEN"] == "job-scoped" and env["GRACE_JOB_UID"] == "store:1"
    assert env["GRACE_URL"] == "http://127.0.0.1:18999"  # the fallback while specs lack it
    host_leaks = {k for k in os.environ if k in env and os.environ[k] == env[k]} - {
        "PATH", "LANG", "TZ", "GRACE_URL", "OMP_NUM_THREADS", "PYTHONUNBUFFERED"} - {
        k for k in env if k.startswith(("LC_", "CUDA_", "NCCL_"))}
    assert host_leaks == set(), host_leaks  # e.g. PYTEST_CURRENT_TEST, VIRTUAL_ENV, HOSTNAME
    workdir = spec.workdir.resolve()
    assert env["HOME"] == str(workdir / "home") and env["TMPDIR"] == str(workdir / "attempt-1" / "tmp")
    assert env["GRACE_CHECKPOINT_DIR"] == str(workdir / "checkpoints")
    assert env["GRACE_JOB_ID"] == "1" and env["GRACE_ATTEMPT"] == "1" and env["RANK"] == "0"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO / "src")
    assert_scope_gone(b, cgroups_here, state)

