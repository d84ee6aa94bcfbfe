"""How far the local backend keeps attempts apart: from each other, and from the control plane.

Four modes (``Isolation``), decided once when the backend starts:

``users``
    Each tenant's attempts run as a uid of its own (``job_uids``, default
    61000-61999; no passwd entry needed), with no supplementary groups and
    umask 077, inside a cgroup per attempt and node (``cgroups``). A job can
    reach its own attempt and checkpoint directories (mode 0700, its uid) and
    nothing else of Grace's: other tenants' directories, the store, the admin
    token and the backend's registry are root's, mode 0600/0700, and the state
    dir is 0711 (traversable, not listable). It cannot signal or read the
    environment of any process but its own tenant's. Needs root, and the job
    uid must be able to exec the interpreter and import Grace and torch from
    where the control plane does (a probe checks it).
``cgroup``
    Attempts run as the control plane's user (root) in their cgroups: memory
    limits, CPU shares and kill-everything cancel, but no separation of tenants.
``none``
    Neither (not root, or no writable cgroups): today's process groups and
    environment tokens only; a daemonized child can outlive its cancel.
``auto``
    The strongest of the three this host allows, with a WARNING naming what is
    missing and the fix, when that is not ``users``.

Every mode gives jobs a clean environment (``job_environment``): an allow-list
of the host's variables, never the control plane's own (no database URL, no
admin token).

Residual exposure in ``users`` mode, said plainly: jobs share the machine's
network (a job can connect to another job's rendezvous port on loopback), all
GPU device files (``CUDA_VISIBLE_DEVICES`` is advisory: no device cgroup), and
``/proc/<pid>/cmdline`` of every process (world-readable on Linux unless /proc
is mounted with ``hidepid``): never pass secrets on a command line.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, BinaryIO

import grace
from grace.backends import sandbox_exec
from grace.backends.cgroups import Hierarchy
from grace.backends.local_agent import read_json, write_json_atomic

log = logging.getLogger(__name__)

#: Where tenants' uids come from unless the backend is given a range.
DEFAULT_JOB_UIDS = range(61000, 62000)
#: The tenant -> uid map in the state dir: stable across restarts, so checkpoints stay readable.
UID_MAP = "tenant-uids.json"
#: Seconds the users-mode probe may take (an interpreter start and a few imports).
PROBE_TIMEOUT_S = 60.0
#: Host variables a job gets: how to find programs and libraries, the locale, the time zone.
HOST_VARS = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH"})
#: Host variable prefixes a job gets: locale, CUDA and NCCL settings of this machine.
HOST_PREFIXES = ("LC_", "CUDA_", "NCCL_")
#: The one control-plane variable a job inherits when its spec lacks it (older callers).
INHERITED_FALLBACK = ("GRACE_URL",)


class Isolation(StrEnum):
    AUTO = "auto"
    USERS = "users"
    CGROUP = "cgroup"
    NONE = "none"


class IsolationError(RuntimeError):
    """The isolation asked for cannot be had on this host; the message says why and the fix."""


# ---------------------------------------------------------------- tenants' uids


class TenantUids:
    """Tenant -> uid (gid the same number), allocated from ``uids``, kept in ``path``.

    Written atomically under an exclusive ``flock``, so two control planes on one
    state dir never hand one uid to two tenants; a tenant keeps its uid for as
    long as the file lives, which keeps its checkpoints its own across restarts.
    """

    def __init__(self, path: Path, uids: range) -> None:
        if len(uids) == 0 or uids.start < 1:
            raise ValueError(f"job_uids {uids!r}: give a non-empty range of uids above 0, "
                             "e.g. range(61000, 62000)")
        self.path = Path(path)
        self.uids = uids
        self._lock = threading.Lock()

    def known(self) -> dict[str, int]:
        data = read_json(self.path) or {}
        return {str(k): int(v) for k, v in data.items() if isinstance(v, int)}

    def uid_of(self, tenant: str) -> int:
        known = self.known()
        if tenant in known:
            return known[tenant]
        lock_fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        with self._lock, os.fdopen(lock_fd, "r+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            known = self.known()  # again, under the lock
            if tenant in known:
                return known[tenant]
            taken = set(known.values())
            uid = next((u for u in self.uids if u not in taken), None)
            if uid is None:
                raise IsolationError(f"every uid of job_uids {self.uids.start}-{self.uids.stop - 1} "
                                     f"is taken ({len(taken)} tenants); give the backend a wider "
                                     f"range (LocalBackend(job_uids=...))")
            known[tenant] = uid
            write_json_atomic(self.path, dict(known))  # mkstemp: mode 0600
            log.info("tenant %r runs as uid %d", tenant, uid)
            return uid


# ---------------------------------------------------------------- files of a job


def first_blocked(path: Path, *, need_read: bool = False) -> Path | None:
    """The first directory on the way to ``path`` (and to what its symlinks point to)
    that a user who is neither its owner nor in its group cannot enter; ``path`` itself
    too when ``need_read`` (a directory to list and read from). None when all are open.

    Only the "other" permission bits count: a job uid has no supplementary groups.
    """
    path = Path(path)
    for p in dict.fromkeys((path.absolute(), Path(os.path.realpath(path)))):
        dirs = list(reversed(p.parents)) + ([p] if need_read or p.is_dir() else [])
        for d in dirs:
            try:
                mode = d.stat().st_mode
            except OSError:
                return d
            bits = stat.S_IXOTH | (stat.S_IROTH if need_read and d == p else 0)
            if mode & bits != bits:
                return d
    return None


def chown_tree(root: Path, uid: int, gid: int) -> int:
    """Give ``root`` and everything under it to ``uid``:``gid``; returns how many entries
    changed. Symlinks are changed themselves, never followed; a file with more than one
    hard link is left alone (it may be another file's, linked in to be captured)."""
    changed = 0
    for base, dirs, files in os.walk(root):
        for name in [*dirs, *files, ""]:
            p = os.path.join(base, name) if name else base
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            if (st.st_uid, st.st_gid) == (uid, gid):
                continue
            if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
                log.warning("not giving %s to uid %d: it has %d hard links", p, uid, st.st_nlink)
                continue
            os.lchown(p, uid, gid)
            changed += 1
    return changed


def private_dir(path: Path, uid: int, gid: int) -> None:
    """``path`` exists, belongs to ``uid`` (with all it holds, when it did not) and is 0700."""
    path.mkdir(parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise IsolationError(f"{path} is not a directory (a symlink?); remove it")
    if (st.st_uid, st.st_gid) != (uid, gid):
        chown_tree(path, uid, gid)
    os.chmod(path, 0o700)


def open_job_file(path: Path, owner: int | None) -> BinaryIO | None:
    """A file a job wrote, opened for reading without trusting the job; None if refused.

    Root opening a path inside a job's directory would otherwise follow a symlink the
    job planted there (to the store, the admin token, another tenant's checkpoint) or
    block forever on a FIFO. So: no symlink as the last component, a regular file only,
    opened without blocking, and, with ``owner``, only a file that uid owns (which
    also refuses another tenant's file, or root's, reached through a symlinked
    directory). The caller closes it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and (owner is None or st.st_uid == owner):
            return os.fdopen(fd, "rb")
    except OSError:
        pass
    os.close(fd)
    return None


def read_job_file(path: Path, owner: int | None, max_bytes: int = 64 * 1024) -> bytes | None:
    """The last ``max_bytes`` of a file a job wrote (see ``open_job_file``), or None."""
    f = open_job_file(path, owner)
    if f is None:
        return None
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                f.seek(size - max_bytes)
            return f.read(max_bytes)
        except OSError:
            return None


def read_job_json(path: Path, owner: int | None) -> dict[str, Any] | None:
    """A JSON record in a job's directory (see ``read_job_file``), or None."""
    raw = read_job_file(path, owner, max_bytes=1 << 20)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


# ---------------------------------------------------------------- environment


def job_environment(host: Mapping[str, str], spec_env: Mapping[str, str],
                    backend_env: Mapping[str, str]) -> dict[str, str]:
    """What an attempt's processes start with: the allow-listed host variables, the job's
    own env (which the control plane fills with its scoped token and URL), then the
    backend's ``GRACE_*``, GPUs and paths, which the job cannot override.

    Nothing else of the control plane's environment: it holds the store's URL and
    maybe an admin token. ``PYTHONPATH`` is Grace's source first, then the job's own.
    """
    env = {k: v for k, v in host.items() if k in HOST_VARS or k.startswith(HOST_PREFIXES)}
    env.update(spec_env)
    for name in INHERITED_FALLBACK:
        if name not in env and name in host:
            env[name] = host[name]
    env.update(backend_env)
    src = str(Path(grace.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, spec_env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA ids == NVML indexes
    return env


# ---------------------------------------------------------------- choosing the mode


@dataclass(frozen=True)
class Resolved:
    """The mode the backend runs in, and why."""

    mode: Isolation  # never AUTO
    requested: Isolation
    why: str
    hierarchy: Hierarchy | None  # cgroups, when the mode uses them
    uids: range

    @property
    def users(self) -> bool:
        return self.mode is Isolation.USERS

    def report(self) -> dict[str, Any]:
        """For ``/healthz``: the mode, why, the cgroup version and mounts, the uid range."""
        return {
            "mode": self.mode.value,
            "requested": self.requested.value,
            "why": self.why,
            "cgroup_version": self.hierarchy.version.value if self.hierarchy else None,
            "cgroup_mounts": {k or "unified": str(v) for k, v in self.hierarchy.mounts.items()}
            if self.hierarchy else {},
            "uid_range": [self.uids.start, self.uids.stop - 1] if self.users else None,
        }


def shim_command(program: list[str], *, joins: list[Path], uid: int | None) -> list[str]:
    """``program`` run through the exec shim: in these cgroups, as ``uid`` (gid the same)."""
    cmd = [sys.executable, "-S", "-E", str(Path(sandbox_exec.__file__).resolve())]
    for j in joins:
        cmd += ["--join", str(j)]
    if uid is not None:
        cmd += ["--uid", str(uid), "--gid", str(uid)]
    return [*cmd, "--", *program]


_PROBE = r"""
import importlib.util, os, sys
state, cwd = sys.argv[1], sys.argv[2]
try:
    import grace.backends.local_agent
except Exception as e:
    sys.exit(f"cannot import grace from {os.environ.get('PYTHONPATH')}: {e}")
torch = importlib.util.find_spec("torch")
if torch is None or not torch.origin:
    sys.exit("cannot find torch from " + sys.prefix)
try:
    open(torch.origin, "rb").close()
    os.listdir(os.path.dirname(torch.origin))
except OSError as e:
    sys.exit(f"cannot read torch: {e}")
if not os.access(state, os.X_OK):
    sys.exit(f"cannot enter the state dir {state}")
if not os.access(cwd, os.R_OK | os.X_OK):
    sys.exit(f"cannot read the working directory {cwd}")
"""
_probed: dict[tuple[Any, ...], str | None] = {}
_probe_lock = threading.Lock()


def users_blocker(uid: int, state_dir: Path, cwd: Path) -> str | None:
    """Why uid ``uid`` cannot reach what a job needs, with the fix; None when the permission
    bits on the way to the interpreter, the state dir and the working directory let it.
    Needs no process, so a host that obviously cannot run ``users`` decides at once."""
    interpreter = Path(sys.executable)
    checks = (
        (interpreter, False, f"the interpreter {interpreter}",
         "or install Python where other users can read it"),
        (state_dir.parent, False, f"the state dir {state_dir}",
         f"or put the state dir where uid {uid} can reach it"),
        (cwd, True, f"the working directory {cwd}", "or give the backend another cwd"),
    )
    for path, need_read, what, instead in checks:
        blocked = first_blocked(path, need_read=need_read)
        if blocked is not None:
            perm = "o+rx" if need_read and blocked == path else "o+x"
            return (f"uid {uid} cannot reach {what}: {blocked} is closed to other users; "
                    f"fix: chmod {perm} {blocked} ({instead})")
    return None


def probe_users(uid: int, state_dir: Path, cwd: Path) -> str | None:
    """A real probe through the exec shim, None when it passes: uid ``uid`` execs the
    interpreter, imports Grace, finds and reads torch (without importing it: seconds),
    enters the state dir and reads the working directory. Cached per process."""
    key = (uid, sys.executable, str(state_dir), str(cwd))
    with _probe_lock:
        if key not in _probed:
            _probed[key] = _run_probe(uid, state_dir, cwd)
        return _probed[key]


def _run_probe(uid: int, state_dir: Path, cwd: Path) -> str | None:
    src = str(Path(grace.__file__).resolve().parent.parent)
    cmd = shim_command([sys.executable, "-c", _PROBE, str(state_dir), str(cwd)], joins=[], uid=uid)
    try:
        done = subprocess.run(cmd, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                        "PYTHONPATH": src},
                              cwd="/", capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"the probe as uid {uid} did not run: {e}"
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    return f"uid {uid} cannot run a job from here: {last}"


def secure_state_dir(state_dir: Path) -> list[str]:
    """Make the state dir traversable but not listable (0711), its ``jobs`` dir too, and
    everything else in it closed to other users; returns what it changed.

    The store (``grace.sqlite`` and its ``-wal``/``-shm``), ``admin.token`` and the
    backend's registry live here, and job uids can guess their names.
    """
    changed = []
    jobs = state_dir / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    for d in (state_dir, jobs):
        if stat.S_IMODE(d.stat().st_mode) != 0o711:
            os.chmod(d, 0o711)
            changed.append(f"{d} -> 0711")
    for entry in state_dir.iterdir():
        if entry.name == "jobs" or entry.is_symlink():
            continue
        mode = stat.S_IMODE(entry.lstat().st_mode)
        if mode & 0o077:
            os.chmod(entry, mode & 0o700)
            changed.append(f"{entry} -> {oct(mode & 0o700)}")
    return changed


def resolve(requested: Isolation, state_dir: Path, cwd: Path, uids: range,
            scope: str) -> Resolved:
    """The mode to run in; raises IsolationError when ``requested`` (not AUTO) is impossible.

    AUTO logs a WARNING saying which mode it chose, what is missing and the fix,
    whenever it is not ``users``.
    """
    requested = Isolation(requested)
    if requested is Isolation.NONE:
        return Resolved(Isolation.NONE, requested, "isolation=none was asked for", None, uids)
    hierarchy = Hierarchy.detect()
    cgroup_problem = "no cgroup hierarchy with a memory controller is mounted"
    if hierarchy is not None:
        cgroup_problem = hierarchy.check_writable(scope) or ""
    cgroups = hierarchy if not cgroup_problem else None
    users_why = "the control plane does not run as root, so it cannot start jobs as other users"
    if requested is Isolation.CGROUP:
        users_why = "isolation=cgroup was asked for"
    elif os.geteuid() == 0:
        problem = users_blocker(uids.start, state_dir, cwd)
        if problem is None:
            changed = secure_state_dir(state_dir)  # before the probe: it must enter it
            if changed:
                log.info("isolation: closed the state dir to job users: %s", "; ".join(changed))
            problem = probe_users(uids.start, state_dir, cwd)
        if problem is None:
            why = f"each tenant runs as its own uid from {uids.start}-{uids.stop - 1}"
            if cgroups is None:
                why += (f"; but without cgroups ({cgroup_problem}): no memory limits, and a "
                        "daemonized child can outlive its attempt's cancel")
                log.warning("isolation: users %s", why)
            else:
                log.info("isolation: users (%s, cgroups %s)", why, cgroups.version)
            return Resolved(Isolation.USERS, requested, why, cgroups, uids)
        users_why = problem
    if requested is Isolation.USERS:
        raise IsolationError(f"isolation=users is not possible here: {users_why}")
    if cgroups is not None:
        why = (f"jobs run as the control plane's user, each attempt in its own cgroup; tenants "
               f"are not separated from each other or from the control plane because {users_why}")
        if requested is Isolation.AUTO:
            log.warning("isolation: cgroup (%s)", why)
        return Resolved(Isolation.CGROUP, requested, why, cgroups, uids)
    if requested is Isolation.CGROUP:
        raise IsolationError(f"isolation=cgroup is not possible here: {cgroup_problem}")
    why = (f"no isolation: jobs run as the control plane's user without cgroups ({cgroup_problem}; "
           f"{users_why}); cancel ends them by process group and environment only, so a "
           "daemonized child can outlive it")
    log.warning("isolation: none (%s)", why)
    return Resolved(Isolation.NONE, requested, why, None, uids)


__all__ = [
    "DEFAULT_JOB_UIDS",
    "Isolation",
    "IsolationError",
    "Resolved",
    "TenantUids",
    "chown_tree",
    "first_blocked",
    "job_environment",
    "open_job_file",
    "private_dir",
    "probe_users",
    "read_job_file",
    "read_job_json",
    "resolve",
    "secure_state_dir",
    "shim_command",
    "users_blocker",
]
