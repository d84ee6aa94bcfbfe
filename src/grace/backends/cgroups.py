"""One cgroup per attempt and node: its memory limit, its CPU share, and a way to end
every process in it.

Layout (v1: the same relative path under each controller's mount)::

    <mount>/grace/<scope>/<job>-<attempt>-<node>/

``grace`` sits at the root of the hierarchy, beside the control plane's own
cgroup and not inside it, so that restarting the control plane (a systemd
unit, a container) never takes its jobs along. ``scope`` is a short hash of
the backend's state dir, so two control planes (or two test runs) on one
machine never share a name, and a restarted control plane finds the cgroups
of the attempts it adopts from the same state dir and the handle's job,
attempt and node names alone.

Why cgroups and not process groups or the environment: a process can leave
its process group and session (``setsid``) and scrub its environment, but it
cannot leave its cgroup without write access to another cgroup's
``cgroup.procs`` (root's). So ``pids()`` is every process of the attempt-node,
whatever it did, and ``kill()`` ends them all: atomically with ``cgroup.kill``
(v2, Linux 5.14+), else frozen first (the v1 freezer, or ``cgroup.freeze``),
so nothing can fork while the SIGKILLs go out.

v1 controllers used: ``memory`` (required: the limit, membership, OOM
counter), ``cpu`` (``cpu.shares``), ``pids`` (a ceiling against fork bombs),
``freezer`` (atomic kill). The CPU weight is the node's share of cores for the
attempt's GPUs (``cpu_cores * gpus / gpus_per_node``), so attempts weigh in
proportion to their GPUs, and each as much as that many busy processes outside
any cgroup. v2: one directory with ``memory.max``,
``memory.swap.max``, ``cpu.weight``, ``pids.max``; the controllers are enabled
in ``cgroup.subtree_control`` of ``grace`` and the scope.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

#: The parent of every Grace cgroup, at the root of each hierarchy.
PARENT = "grace"
#: Where mounts are listed (a parameter for tests of the parser).
MOUNTS = Path("/proc/self/mounts")
#: v1 controllers an attempt joins; only ``memory`` is required.
V1_CONTROLLERS = ("memory", "cpu", "pids", "freezer")
#: v2 controllers enabled for Grace's subtree; only ``memory`` is required.
V2_CONTROLLERS = ("memory", "cpu", "pids")
#: ``pids.max`` per attempt-node: far above what training needs (threads count),
#: low enough that a fork bomb cannot exhaust the machine's pids.
PIDS_MAX = 32768
#: v1 ``cpu.shares`` and v2 ``cpu.weight`` per CPU core of the node's share (the kernels'
#: defaults for one busy task), so under contention an attempt weighs what its cores would.
V1_SHARES_PER_CORE = 1024
V2_WEIGHT_PER_CORE = 100
#: The CPU weight of ``grace`` and each scope: a parent competes with the processes beside
#: it as one entity, so at the kernel's default every attempt together would weigh what one
#: busy process outside the cgroups does. Raised only from the default (an operator's
#: own value stays).
V1_PARENT_SHARES = (1024, 262144)  # (default, Grace's)
V2_PARENT_WEIGHT = (100, 10000)
#: Seconds to wait for a freeze to take effect before killing anyway.
FREEZE_WAIT_S = 1.0
_NAME_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class CgroupVersion(StrEnum):
    V1 = "v1"
    V2 = "v2"


class CgroupError(RuntimeError):
    """The attempt's cgroup could not be created or configured."""


def scope_of(state_dir: Path) -> str:
    """The per-control-plane directory under ``grace``: 12 hex digits of the state dir's path."""
    return hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:12]


def leaf_name(job_id: int, attempt: int, node: str) -> str:
    """``<job>-<attempt>-<node>``; the node name with anything but ``[A-Za-z0-9_.-]`` as ``_``."""
    return f"{job_id}-{attempt}-{_NAME_SAFE.sub('_', node)}"


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _read(path: Path) -> str:
    with open(path) as f:
        return f.read()


def _pids_in(procs: Path) -> set[int]:
    try:
        return {int(line) for line in _read(procs).split()}
    except (OSError, ValueError):
        return set()


def _counter(path: Path, key: str) -> int | None:
    """``key N`` from a flat-keyed file (``memory.events``, ``memory.oom_control``)."""
    try:
        text = _read(path)
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


@dataclass(frozen=True)
class Hierarchy:
    """Where the cgroup controllers are mounted, and which version drives them.

    v1: ``mounts`` maps each controller Grace uses to its mount point; v2: the
    one unified mount under key ``""``.
    """

    version: CgroupVersion
    mounts: dict[str, Path]

    @classmethod
    def detect(cls, mounts_file: Path = MOUNTS) -> Hierarchy | None:
        """v2 when a cgroup2 mount has the memory controller, else v1 with a memory
        mount, else None. A hybrid host (systemd's empty cgroup2 at
        ``/sys/fs/cgroup/unified``, controllers on v1) is v1."""
        try:
            lines = _read(mounts_file).splitlines()
        except OSError:
            return None
        v1: dict[str, Path] = {}
        for line in lines:
            fields = line.split()
            if len(fields) < 4:
                continue
            where, fstype, options = Path(fields[1].replace("\\040", " ")), fields[2], fields[3]
            if fstype == "cgroup2":
                try:
                    controllers = _read(where / "cgroup.controllers").split()
                except OSError:
                    continue
                if "memory" in controllers:
                    return cls(CgroupVersion.V2, {"": where})
            elif fstype == "cgroup":
                for opt in options.split(","):
                    if opt in V1_CONTROLLERS:
                        v1.setdefault(opt, where)
        if "memory" in v1:
            return cls(CgroupVersion.V1, v1)
        return None

    def scope_dirs(self, scope: str) -> list[Path]:
        return [m / PARENT / scope for m in self.mounts.values()]

    def leaf(self, scope: str, name: str) -> AttemptCgroup:
        return AttemptCgroup(self, {c: m / PARENT / scope / name for c, m in self.mounts.items()})

    def leaves(self, scope: str, prefix: str) -> list[AttemptCgroup]:
        """The existing leaves of ``scope`` whose name starts with ``prefix``."""
        base = self._membership_mount() / PARENT / scope
        try:
            names = sorted(p.name for p in base.iterdir() if p.is_dir() and p.name.startswith(prefix))
        except OSError:
            return []
        return [self.leaf(scope, n) for n in names]

    def check_writable(self, scope: str) -> str | None:
        """None when Grace can create, configure and remove a cgroup here, else why not."""
        probe = self.leaf(scope, f"probe-{os.getpid()}")
        try:
            probe.create(memory_bytes=None, cores=1.0)
        except (OSError, CgroupError) as e:
            return f"cannot create a cgroup under {self._membership_mount() / PARENT}: {e}"
        finally:
            probe.remove()
        return None

    def _membership_mount(self) -> Path:
        return self.mounts["memory" if self.version is CgroupVersion.V1 else ""]


@dataclass(frozen=True)
class AttemptCgroup:
    """The cgroup(s) of one node of one attempt: one directory per v1 controller, or one v2."""

    hierarchy: Hierarchy
    dirs: dict[str, Path]  # controller (v1) or "" (v2) -> directory

    @property
    def v2(self) -> bool:
        return self.hierarchy.version is CgroupVersion.V2

    @property
    def path(self) -> Path:
        """The directory whose ``cgroup.procs`` lists every process (v1: the memory one)."""
        return self.dirs["" if self.v2 else "memory"]

    @property
    def name(self) -> str:
        """``grace/<scope>/<leaf>``, as an operator finds it under each mount."""
        return "/".join(self.path.parts[-3:])

    def procs_files(self) -> list[Path]:
        """What the exec shim writes its pid into, one per directory."""
        return [d / "cgroup.procs" for d in self.dirs.values()]

    def create(self, memory_bytes: int | None, cores: float) -> None:
        """Make the directories, set the memory limit (bytes; None: none) and the CPU weight
        of ``cores`` cores; raises CgroupError (or OSError)."""
        if self.v2:
            self._create_v2(memory_bytes, cores)
        else:
            self._create_v1(memory_bytes, cores)

    def _create_v1(self, memory_bytes: int | None, cores: float) -> None:
        for d in self.dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        if "cpu" in self.dirs:
            for parent in (self.dirs["cpu"].parent.parent, self.dirs["cpu"].parent):
                _raise_default(parent / "cpu.shares", *V1_PARENT_SHARES)
        mem = self.dirs["memory"]
        if memory_bytes is not None:
            _write(mem / "memory.limit_in_bytes", str(memory_bytes))
            swap = mem / "memory.memsw.limit_in_bytes"  # memory+swap: no swapping past the limit
            if swap.exists():
                _write(swap, str(memory_bytes))
        if "cpu" in self.dirs:
            shares = min(262144, max(2, round(V1_SHARES_PER_CORE * cores)))
            _write(self.dirs["cpu"] / "cpu.shares", str(shares))
        if "pids" in self.dirs:
            _write(self.dirs["pids"] / "pids.max", str(PIDS_MAX))

    def _create_v2(self, memory_bytes: int | None, cores: float) -> None:
        leaf = self.dirs[""]
        scope, parent, mount = leaf.parent, leaf.parent.parent, leaf.parent.parent.parent
        for d in (mount, parent, scope):
            d.mkdir(exist_ok=True)
            enabled = set(_read(d / "cgroup.subtree_control").split())
            for c in V2_CONTROLLERS:
                if c in enabled:
                    continue
                try:
                    _write(d / "cgroup.subtree_control", f"+{c}")
                except OSError as e:
                    if c == "memory":
                        raise CgroupError(f"cannot enable the memory controller in {d}: {e}") from e
        for d in (parent, scope):
            _raise_default(d / "cpu.weight", *V2_PARENT_WEIGHT)
        leaf.mkdir(exist_ok=True)
        if memory_bytes is not None:
            _write(leaf / "memory.max", str(memory_bytes))
            if (leaf / "memory.swap.max").exists():
                _write(leaf / "memory.swap.max", "0")
        if (leaf / "cpu.weight").exists():
            _write(leaf / "cpu.weight", str(min(10000, max(1, round(V2_WEIGHT_PER_CORE * cores)))))
        if (leaf / "pids.max").exists():
            _write(leaf / "pids.max", str(PIDS_MAX))

    def exists(self) -> bool:
        return self.path.is_dir()

    def pids(self) -> set[int]:
        """Every live process in it (exited ones leave it at once, zombies included)."""
        return _pids_in(self.path / "cgroup.procs")

    def memory_limit(self) -> int | None:
        name = "memory.max" if self.v2 else "memory.limit_in_bytes"
        try:
            text = _read(self.path / name).strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    def oom_kills(self) -> int:
        """How many of its processes the kernel's OOM killer ended because of *its own*
        memory limit (not because the whole host ran out, which counts too otherwise).

        v2: ``memory.events`` ``oom_kill``, when its ``oom`` (the limit was reached and an
        allocation was about to fail) is non-zero. v1: ``memory.oom_control``
        ``oom_kill`` (Linux 4.13+; 1 on older kernels), when the peak usage
        (``memory.max_usage_in_bytes``) reached the limit.
        """
        if self.v2:
            events = self.path / "memory.events"
            return (_counter(events, "oom_kill") or 0) if _counter(events, "oom") else 0
        limit = self.memory_limit()
        try:
            peak = int(_read(self.path / "memory.max_usage_in_bytes"))
        except (OSError, ValueError):
            return 0
        if limit is None or peak < limit * 0.99:
            return 0
        kills = _counter(self.path / "memory.oom_control", "oom_kill")
        return 1 if kills is None else kills

    def signal(self, sig: int) -> int:
        """Send ``sig`` to every process in it; SIGKILL ends them all at once (``kill``).
        Returns how many processes it signalled."""
        if sig == signal.SIGKILL:
            return self.kill()
        return _signal(self.pids(), sig)

    def kill(self) -> int:
        """SIGKILL every process in it, with nothing able to fork meanwhile; returns how
        many there were. One round: the caller checks ``pids()`` and repeats if needed."""
        pids = self.pids()
        if not pids:
            return 0
        if self.v2 and (self.path / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(self.path / "cgroup.kill", "1")
                return len(pids)
        with self._frozen():
            return _signal(self.pids() | pids, signal.SIGKILL)

    @contextlib.contextmanager
    def _frozen(self) -> Iterator[None]:
        """Freeze it (v1 freezer, v2 ``cgroup.freeze``) while the body runs; a missing
        freezer only loses atomicity, so it is not an error."""
        if self.v2:
            state, frozen, thawed = self.path / "cgroup.freeze", "1", "0"
        elif "freezer" in self.dirs:
            state, frozen, thawed = self.dirs["freezer"] / "freezer.state", "FROZEN", "THAWED"
        else:
            yield
            return
        try:
            _write(state, frozen)
        except OSError:
            yield
            return
        deadline = time.monotonic() + FREEZE_WAIT_S
        while time.monotonic() < deadline and not self._is_frozen():
            time.sleep(0.005)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                _write(state, thawed)  # SIGKILLed tasks die as they thaw

    def _is_frozen(self) -> bool:
        if self.v2:
            return _counter(self.path / "cgroup.events", "frozen") == 1
        try:
            return _read(self.dirs["freezer"] / "freezer.state").strip() == "FROZEN"
        except OSError:
            return True

    def remove(self) -> bool:
        """Remove its directories (and the scope's, once empty); False while a process is
        left in it. A directory already gone counts as removed."""
        removed = True
        for d in self.dirs.values():
            try:
                d.rmdir()
            except FileNotFoundError:
                continue
            except OSError as e:
                if e.errno in (errno.EBUSY, errno.ENOTEMPTY):
                    removed = False
                    continue
                raise
            with contextlib.suppress(OSError):  # the scope, when this was its last leaf
                d.parent.rmdir()
        return removed


def _raise_default(path: Path, default: int, value: int) -> None:
    """Write ``value`` where the file still holds the kernel's ``default``."""
    with contextlib.suppress(OSError, ValueError):
        if int(_read(path)) == default:
            _write(path, str(value))


def _signal(pids: Iterable[int], sig: int) -> int:
    sent = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            continue
    return sent


__all__ = ["AttemptCgroup", "CgroupError", "CgroupVersion", "Hierarchy", "leaf_name", "scope_of"]
