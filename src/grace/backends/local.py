"""The local backend: a whole ClusterSpec played out on this one machine.

Each node of a gang becomes its own ``torchrun`` agent, so a 2-node job really
rendezvouses over loopback as two machines would over the network. A node's
GPU ids go into ``CUDA_VISIBLE_DEVICES``; on a machine without GPUs they are
just slots and the training script uses gloo. When NVML finds GPUs, the
inventory is this machine's real GPUs instead of the spec (see ``nvml.py``).

What one 2-node x 2-GPU attempt looks like (``ps -o pid,pgid,sid,cmd``)::

    agent  python -m grace.backends.local_agent agent --node a100-00 -- ...  pgid=sid=A
    └ torchrun  python -m torch.distributed.run --node-rank=0 ...            pgid=A
      ├ rank shim  python -m grace.backends.local_agent rank -- cmd...        pgid=sid=R0
      │ └ python examples/train_ddp.py ...                                     pgid=R0
      └ rank shim (local rank 1) ...                                          pgid=sid=R1
    agent  ... --node a100-01 ...                                             pgid=sid=B
    └ ... the same, node-rank 1

Every agent runs in a session of its own (``start_new_session``), so killing
the control plane, even with SIGKILL, leaves the attempt running; torchrun in
turn starts every worker in a session of its own, which is why cancellation
does not stop at ``killpg`` of the agents: it also signals every process whose
environment carries the attempt's ``GRACE_LOCAL_TOKEN`` (see ``local_agent``).

On disk, under the job's ``workdir``::

    attempt-<n>/launch.json          the handle, written before launch() returns
    attempt-<n>/<node>.log           torchrun's output, with every rank's lines teed in
    attempt-<n>/<node>.agent.json    the agent's pid and pgid, written as it starts
    attempt-<n>/<node>.exit          torchrun's exit code (atomic), written as it ends
    attempt-<n>/ranks/rank-<r>.exit  each rank's own exit code and end time
    attempt-<n>/ranks/<node>/<job>-<n>_*/attempt_0/<local rank>/{stdout,stderr}.log
    attempt-<n>/launching.json       the token, written before any process is started
    attempt-<n>/cancel.json          written by cancel() before it signals anything
    attempt-<n>/reaped.json          written by reap() before it kills a watched attempt
    attempt-<n>/tmp/                 $TMPDIR
    checkpoints/                     $GRACE_CHECKPOINT_DIR, shared by all attempts
    home/                            $HOME, shared by all attempts

Cancel returns at once: it writes ``cancel.json`` and sends SIGTERM; one daemon
thread per backend (started when needed, gone when idle) SIGKILLs what is left
when the grace period ends, so a 60 s grace never stalls the reconcile cycle.

Reap finds an attempt's processes without its handle: by the token in
``launching.json``/``launch.json`` (also in ``attempt-<n>.stale-*``), and by the
``GRACE_WORKDIR``/``GRACE_ATTEMPT`` every process of an attempt inherits. Launch
of attempt n reaps attempts 1..n-1 of the job first, so a gang orphaned by a
control plane that died mid-launch never shares GPUs with its successor.

Isolation (``isolation.py``, decided once at construction): with ``users`` each
agent starts through the exec shim (``sandbox_exec``) as its tenant's uid, in a
cgroup per attempt and node (``cgroups.py``); with ``cgroup`` as root in those
cgroups; with ``none`` as today. Every process of an attempt is in its cgroups,
so cancel, teardown and reap also SIGKILL whatever ``cgroup.procs`` lists, which
catches a child that left its session and scrubbed its environment; an attempt
that fails after its cgroup counted an OOM kill is reported ``oom``. Files a job
can write are read without trusting it (``isolation.read_job_file``), and the
control plane's own records in a job's directory count only when root owns them.
Every mode gives the job a clean environment (``isolation.job_environment``).

Rendezvous is torchrun's *static* one (``--master-addr/--master-port`` with
``--node-rank=i``), not c10d: static maps NodeAssignment ``i`` to group rank
``i`` (c10d hands out ranks in arrival order), so node ``i``'s GPUs really hold
ranks ``i*k .. i*k+k-1`` and a failed rank names the right node; it needs one
port, hosted by node 0's agent, and no store election between two agents that
both think they own 127.0.0.1. An attempt never restarts inside torchrun
(``--max-restarts=0``): retries are the control plane's decision.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grace.backends import local_agent
from grace.backends.base import (
    AttemptStatus,
    Deadlines,
    LaunchSpec,
    LaunchSpecError,
    Observation,
    ReapError,
)
from grace.backends.cgroups import AttemptCgroup, CgroupError, leaf_name, scope_of
from grace.backends.isolation import (
    DEFAULT_JOB_UIDS,
    UID_MAP,
    Isolation,
    TenantUids,
    first_blocked,
    job_environment,
    private_dir,
    read_job_file,
    read_job_json,
    resolve,
    shim_command,
)
from grace.backends.local_agent import (
    TOKEN_ENV,
    processes_where,
    processes_with_token,
    read_json,
    write_json_atomic,
)
from grace.spec.cluster import ClusterSpec, NodeGroupSpec

log = logging.getLogger(__name__)

#: Version of the handle's JSON layout; adopt() refuses handles of another version.
HANDLE_VERSION = 1
#: After one node fails (or vanishes), seconds the others get between SIGTERM and SIGKILL.
TEARDOWN_GRACE_S = 5.0
#: Faults ``inject`` can cause, with the signal each sends to the rank (None: a drill process).
INJECTABLE: dict[str, signal.Signals | None] = {
    "kill-rank": signal.SIGKILL, "hang-rank": signal.SIGSTOP, "straggler": None}
#: Lines of a node's log quoted in an Observation's detail.
DETAIL_LINES = 20
#: Seconds reap() keeps SIGKILLing an attempt's processes before it gives up (ReapError).
REAP_TIMEOUT_S = 10.0
#: Seconds between two SIGKILL rounds while processes of an attempt remain.
KILL_ROUND_S = 0.05
#: Bytes in the ``memory_gb`` of a job or a node group (GiB, as ``free -g`` counts).
GIB = 1 << 30


@dataclass
class _Node:
    name: str
    index: int
    gpus: tuple[int, ...]  # the CUDA ids given to this node's ranks
    pid: int  # the agent's pid; its pgid too (it leads its own session)
    proc: subprocess.Popen[bytes] | None = None  # only for agents this instance started
    cgroup: AttemptCgroup | None = None  # every process of this node of the attempt


@dataclass
class _Attempt:
    job_id: int
    attempt: int
    dir: Path
    token: str
    nodes: list[_Node]
    handle: str
    kill_at: float | None = None  # monotonic time to SIGKILL a gang being torn down or cancelled
    uid: int | None = None  # the tenant's uid its processes run as (isolation=users)
    cancelled: bool = False  # cancel() asked, even if its marker could not be written
    reaped: bool = False  # reap() ended it, even if its marker could not be written

    def cgroups(self) -> list[AttemptCgroup]:
        return [n.cgroup for n in self.nodes if n.cgroup is not None]


#: Where rendezvous ports are drawn from when the ephemeral range is unknown (Linux's default
#: ephemeral range is 32768-60999).
_RDZV_PORTS = (20000, 32767)


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def _free_port() -> int:
    """A loopback port free right now, outside the ephemeral range.

    Not ``bind(0)``: that hands out an ephemeral port, and node 1's torchrun,
    connecting to it before node 0 listens, can be given the same port as its
    own source port (a TCP self-connect), so node 0 then fails with EADDRINUSE.
    Another process could still take the port before torchrun binds it.
    """
    eph_lo, eph_hi = _ephemeral_range()
    lo, hi = _RDZV_PORTS
    if not (hi < eph_lo or lo > eph_hi):  # an unusual ephemeral range: use what lies below it
        lo, hi = 1024, max(1024, eph_lo - 1)
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.randint(lo, hi)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded range: any port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, owner: int | None, lines: int = DETAIL_LINES, max_chars: int = 4000) -> str:
    """The last lines of a log a job wrote; with ``owner``, only a regular file of that uid
    (never a symlink a job planted to make root read something else into its detail)."""
    raw = read_job_file(path, owner)
    if raw is None:
        return ""
    return "\n".join(raw.decode(errors="replace").splitlines()[-lines:])[-max_chars:]


def _attempt_number(dir_name: str) -> int | None:
    """``attempt-3`` or ``attempt-3.stale-1700000000`` -> 3; None for anything else."""
    head, _, _ = dir_name.partition(".stale-")
    prefix, _, number = head.partition("-")
    return int(number) if prefix == "attempt" and number.isdigit() else None


def _scan_attempts(tokens: set[str], workdir: str, attempts: set[int]) -> dict[int, int]:
    """``{pid: pgid}`` of live processes of these attempts: carrying one of ``tokens``, or
    ``GRACE_WORKDIR=workdir`` with ``GRACE_ATTEMPT`` in ``attempts`` (every process the
    backend starts gets both). One pass over /proc; zombies (empty environ), other users'
    processes and this process are skipped."""
    prefixes = tuple(f"{TOKEN_ENV}={t}:".encode() for t in tokens if t)
    wd = f"GRACE_WORKDIR={workdir}".encode()
    numbers = {f"GRACE_ATTEMPT={n}".encode() for n in attempts}

    def ours(env: list[bytes]) -> bool:
        by_token = bool(prefixes) and any(v.startswith(prefixes) for v in env)
        return by_token or (wd in env and not numbers.isdisjoint(env))

    return processes_where(ours, exclude=(os.getpid(),))


def _agent_end(a: _Attempt, node: str) -> str:
    """How a vanished agent ended, when this instance started it (its exit status is ours
    to read): " (killed by SIGKILL)", " (exited 1)"; empty for an adopted agent."""
    proc = next((n.proc for n in a.nodes if n.name == node), None)
    code = None if proc is None else proc.returncode
    if code is None:
        return ""
    if code < 0:
        try:
            return f" (killed by {signal.Signals(-code).name})"
        except ValueError:
            return f" (killed by signal {-code})"
    return f" (exited {code})"


def rank_logs(attempt_dir: Path) -> dict[str, dict[int, tuple[Path, Path]]]:
    """``{node: {local_rank: (stdout.log, stderr.log)}}`` that torchrun wrote for an attempt."""
    found: dict[str, dict[int, tuple[Path, Path]]] = {}
    for out in sorted((attempt_dir / "ranks").glob("*/*/attempt_*/*/stdout.log")):
        node = out.parents[3].name
        found.setdefault(node, {})[int(out.parent.name)] = (out, out.with_name("stderr.log"))
    return found


class LocalBackend:
    """Runs attempts as torchrun agents on this machine; survives control-plane restarts.

    ``state_dir`` keeps one handle per launched attempt that has not been
    reported ended (``recorded_handles``), so a control plane that died between
    ``launch`` and saving the handle can still find it. ``cwd`` is where the
    job's command runs (relative script paths resolve there): the control
    plane's working directory unless given. ``use_nvml=False`` ignores NVML
    even where it finds GPUs (tests use it to stay deterministic).

    ``isolation`` (see ``grace.backends.isolation``) is resolved here, once:
    AUTO picks the strongest mode this host allows and logs a WARNING naming
    what is missing; USERS or CGROUP asked for but impossible raise
    IsolationError. ``job_uids`` is where tenants' uids come from (USERS).
    """

    name = "local"

    def __init__(
        self,
        cluster: ClusterSpec,
        state_dir: Path,
        *,
        cwd: Path | None = None,
        use_nvml: bool = True,
        isolation: Isolation = Isolation.AUTO,
        job_uids: range | None = None,
    ) -> None:
        self._state_dir = Path(state_dir).resolve()
        (self._state_dir / "attempts").mkdir(mode=0o700, parents=True, exist_ok=True)
        self._cwd = Path(cwd).resolve() if cwd is not None else Path.cwd()
        self._scope = scope_of(self._state_dir)
        self._isolation = resolve(isolation, self._state_dir, self._cwd,
                                  job_uids if job_uids is not None else DEFAULT_JOB_UIDS, self._scope)
        self._uids = (TenantUids(self._state_dir / UID_MAP, self._isolation.uids)
                      if self._isolation.users else None)
        self._dead_cgroups: list[AttemptCgroup] = []  # ended attempts' cgroups not yet removed
        self._attempts: dict[tuple[int, int], _Attempt] = {}
        self._lock = threading.RLock()
        self._inventory = cluster
        self._slots: dict[str, tuple[int, ...]] = {}  # node -> slot-to-CUDA-id map (NVML only)
        self._kills = Deadlines(f"grace-local-kills-{id(self):x}")  # cancel's SIGKILL after grace
        caps = {"launch", "cancel", "adopt", "poll", "reap", "inject"}
        if use_nvml:
            from grace.backends import nvml

            gpus = nvml.probe()
            if gpus:
                self._inventory, self._slots = nvml.cluster_from_gpus(gpus)
                caps.add("nvml")
        self.capabilities: frozenset[str] = frozenset(caps)
        self._groups: dict[str, NodeGroupSpec] = {
            name: g for g in self._inventory.node_groups for name in g.node_names()}
        self._sweep_cgroups()

    def _sweep_cgroups(self) -> None:
        """Remove this state dir's empty cgroups that no recorded attempt owns: left by a
        control plane that died after its attempt ended and before it was reported. Those
        of recorded attempts stay (their OOM count is read when the attempt is adopted)."""
        h = self._isolation.hierarchy
        if h is None:
            return
        recorded = {f"{job}-{attempt}-" for job, attempt in self.recorded_handles()}
        for cg in h.leaves(self._scope, ""):
            leaf = cg.path.name
            if not any(leaf.startswith(prefix) for prefix in recorded) and not cg.pids():
                with contextlib.suppress(OSError):
                    cg.remove()

    def isolation_report(self) -> dict[str, Any]:
        """How attempts are kept apart here (mode, why, cgroup version, uid range), for
        ``/healthz``."""
        report = self._isolation.report()
        if self._uids is not None:
            report["tenants"] = len(self._uids.known())
        return report

    # ------------------------------------------------------------------ protocol

    def inventory(self) -> ClusterSpec:
        """The spec given, or this machine's GPUs as NVML reports them."""
        return self._inventory

    def launch(self, spec: LaunchSpec) -> str:
        """Start one detached torchrun agent per node; returns the JSON handle.

        First every surviving process of the job's attempts 1..n-1 in this
        workdir is reaped (ReapError, nothing started, if one survives): the
        control plane may have lost track of one, e.g. by dying between the
        launch record and saving the handle, and two attempts of one job must
        never hold the GPUs at once.

        Idempotent per (job, attempt): launching an attempt that this or an
        earlier control plane already started, and whose agents are still alive
        or left exit records, adopts it and returns its handle instead of
        starting a duplicate gang. A leftover without ``launch.json`` (a launch
        cut short) is reaped, moved aside to ``attempt-<n>.stale-<time>``, and
        the attempt starts afresh.
        """
        spec.check()
        key = (spec.job_id, spec.attempt)
        workdir = Path(spec.workdir).resolve()
        with self._lock:
            if spec.attempt > 1:
                ended = self._reap(spec.job_id, set(range(1, spec.attempt)), workdir)
                if ended:
                    log.warning("job %s: ended %d surviving process(es) of attempts before %s "
                                "before launching it", spec.job_id, ended, spec.attempt)
            if key in self._attempts:
                return self._attempts[key].handle
            attempt_dir = workdir / f"attempt-{spec.attempt}"
            adopted = self._adopt_recorded(spec, attempt_dir)
            if adopted is not None:
                return adopted
            if attempt_dir.exists():
                # A launch cut short before launch.json: kill whatever it had started.
                self._reap(spec.job_id, {spec.attempt}, workdir)
                attempt_dir.rename(attempt_dir.with_name(f"{attempt_dir.name}.stale-{time.time():.0f}"))
            return self._start(spec, attempt_dir)

    def poll(self) -> list[Observation]:
        """RUNNING for live attempts; each ended attempt reported exactly once, then forgotten
        (its cgroups removed)."""
        out: list[Observation] = []
        with self._lock:
            for key, a in list(self._attempts.items()):
                obs = self._observe(a)
                out.append(obs)
                if obs.status is not AttemptStatus.RUNNING:
                    del self._attempts[key]
                    self._kills.drop(key)
                    with contextlib.suppress(FileNotFoundError):
                        self._registry(*key).unlink()
                    self._dead_cgroups += a.cgroups()
            self._remove_dead_cgroups()
        return out

    def cancel(self, job_id: int, attempt: int, grace_s: float = 10.0) -> None:
        """SIGTERM every process of the attempt now; SIGKILL what is left after ``grace_s``.

        Returns at once: the SIGKILL comes from this backend's kill worker, so a
        long grace (a move lets a job checkpoint for a minute) never holds up the
        caller's cycle. ``poll`` reports CANCELLED, once, when every process is
        gone. The ``cancel.json`` marker written first makes the outcome CANCELLED
        even if the control plane dies mid-cancel (the next one's ``adopt`` re-arms
        the SIGKILL). Cancelling again only brings the SIGKILL forward if its grace
        is shorter; unknown or already-ended attempts are left alone.
        """
        with self._lock:
            a = self._attempts.get((job_id, attempt))
            if a is None:
                return
            if all(self._node_state(a, n)[0] == "exited" for n in a.nodes):
                return  # it ended on its own; poll() reports how
            a.cancelled = True
            if self._control_record(a, "cancel.json") is None:
                try:
                    write_json_atomic(a.dir / "cancel.json", {"at": time.time(), "grace_s": grace_s})
                except OSError as e:  # the job owns the directory and may stand in the way
                    log.warning("job %s attempt %s: no cancel.json: %s", job_id, attempt, e)
            at = time.monotonic() + max(0.0, grace_s)
            if a.kill_at is None:  # not yet signalled by a cancel or a failure's teardown
                self._signal_all(a, signal.SIGTERM)
                a.kill_at = at
            else:
                a.kill_at = min(a.kill_at, at)
            kill_at = a.kill_at
        self._schedule_kill(a, kill_at)

    def adopt(self, job_id: int, attempt: int, handle: str) -> bool:
        """Watch an attempt started by an earlier control plane; False if it is gone.

        Gone means no agent alive (pid present *and* running this attempt's
        agent, so a reused pid is not mistaken for it), no exit record and no
        cancel marker: it then has no outcome to report and the caller should
        treat it as LOST. Any stray worker of it is killed.
        """
        try:
            data = json.loads(handle)
            if data.get("v") != HANDLE_VERSION or data.get("backend") != self.name:
                raise ValueError(f"not a local backend handle (v{data.get('v')})")
            if (data["job_id"], data["attempt"]) != (job_id, attempt):
                raise ValueError(f"handle is for job {data['job_id']} attempt {data['attempt']}")
            uid = data.get("uid")
            a = _Attempt(
                job_id=job_id,
                attempt=attempt,
                dir=Path(data["dir"]),
                token=str(data["token"]),
                nodes=[
                    _Node(n["node"], int(n["index"]), tuple(n["gpus"]), int(n["pid"]),
                          cgroup=self._cgroup(job_id, attempt, str(n["node"])))
                    for n in data["nodes"]
                ],
                handle=handle,
                uid=int(uid) if uid is not None else None,
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"job {job_id} attempt {attempt}: bad handle: {e}") from e
        with self._lock:
            if (job_id, attempt) in self._attempts:
                return True
            states = [self._node_state(a, n)[0] for n in a.nodes]
            cancel = self._control_record(a, "cancel.json")
            if all(s == "gone" for s in states) and cancel is None:
                self._kill_strays(a)
                self._dead_cgroups += a.cgroups()
                self._remove_dead_cgroups()
                with contextlib.suppress(FileNotFoundError):
                    self._registry(job_id, attempt).unlink()
                return False
            self._attempts[(job_id, attempt)] = a
            if cancel is not None and "running" in states:
                # cancelled by a control plane that died before the SIGKILL: keep its deadline
                left = float(cancel.get("at", 0.0)) + float(cancel.get("grace_s", 0.0)) - time.time()
                a.kill_at = time.monotonic() + max(0.0, left)
        if a.kill_at is not None:
            self._schedule_kill(a, a.kill_at)
        return True

    def reap(self, job_id: int, attempt: int, workdir: Path) -> int:
        """SIGKILL every process of the attempt, handle or not; returns how many it ended.

        Found by the tokens of ``attempt-<n>/launching.json`` and ``launch.json``
        (and of ``attempt-<n>.stale-*``), the state dir's record, a watched
        attempt's own token, and by ``GRACE_WORKDIR``/``GRACE_ATTEMPT``; killed
        round after round until none is left, for at most ``REAP_TIMEOUT_S``
        (ReapError after that). A watched attempt gets ``reaped.json`` first, so
        ``poll`` reports it LOST ("reaped"), once; an unwatched one loses its
        state-dir record, so no later restart tries to adopt it.
        """
        with self._lock:
            return self._reap(job_id, {attempt}, Path(workdir).resolve())

    def drain(self, node: str, reason: str) -> None:
        """Nothing to tell: the local machine has no scheduler of its own."""
        log.info("drain %s (%s): no-op on the local backend", node, reason)

    # ------------------------------------------------------------------ extras

    def inject(self, job_id: int, attempt: int, fault: str, rank: int = 0) -> list[int]:
        """Cause a fault on purpose (tests, drills): ``kill-rank`` SIGKILLs the training
        process of global rank ``rank``; ``hang-rank`` SIGSTOPs it, so it stops making
        progress and heartbeating without dying; ``straggler`` keeps it stopped three
        quarters of the time (``local_agent throttle``), so it runs at about a quarter
        of its speed, alive and heartbeating. Returns
        the pids it signalled (or throttles)."""
        if fault not in INJECTABLE:
            raise ValueError(f"unknown fault {fault!r}; the local backend injects "
                             f"{', '.join(INJECTABLE)}")
        with self._lock:
            a = self._attempts.get((job_id, attempt))
        if a is None:
            raise ValueError(f"job {job_id} attempt {attempt} is not running here")
        hit = []
        for pid in processes_with_token(a.token):
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if f"RANK={rank}".encode() in env and local_agent.__name__.encode() not in cmd \
                    and b"torch.distributed.run" not in cmd:
                with contextlib.suppress(ProcessLookupError):
                    sig = INJECTABLE[fault]
                    if sig is None:
                        self._throttle(a, pid, env)
                    else:
                        os.kill(pid, sig)
                    hit.append(pid)
        if not hit:
            raise ValueError(f"no training process of rank {rank} found for job {job_id}")
        return hit

    @staticmethod
    def _throttle(a: _Attempt, pid: int, rank_env: list[bytes]) -> None:
        """Start the throttle drill beside rank ``pid``, carrying its node's token so that
        cancelling the attempt ends the drill too (and continues the rank first)."""
        os.kill(pid, 0)  # raises ProcessLookupError if it is already gone
        token = next((e.split(b"=", 1)[1].decode() for e in rank_env
                      if e.startswith(TOKEN_ENV.encode() + b"=")), f"{a.token}:0")
        subprocess.Popen(
            [sys.executable, "-m", local_agent.__name__, "throttle", "--pid", str(pid)],
            env={**os.environ, TOKEN_ENV: token}, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def recorded_handles(self) -> dict[tuple[int, int], str]:
        """Handles of attempts launched from this state_dir and not yet reported ended."""
        found: dict[tuple[int, int], str] = {}
        for path in (self._state_dir / "attempts").glob("*.json"):
            data = read_json(path)
            if data is not None:
                found[(int(data["job_id"]), int(data["attempt"]))] = json.dumps(data, sort_keys=True)
        return found

    # ------------------------------------------------------------------ internals

    def cut_short_handle(self, job_id: int, attempt: int, workdir: Path) -> str | None:
        """The handle of a launch cut short (no ``launch.json``, no registry record) whose
        every planned agent started, rebuilt from ``launching.json`` (the control plane's,
        with the plan) and each agent's ``<node>.agent.json`` (its pid); None if any agent
        is missing or the record is an older one without a plan.

        A control plane that died between starting the agents and recording the handle
        would otherwise reap the attempt at its restart and run the job again; if the
        restart is slower than the job, the attempt has finished by then and its work is
        done twice. Adopted, it is watched like any other: running, or ended with the
        outcome its exit records give. A pid that is not this attempt's agent (a job can
        write its own ``agent.json``) is not taken for one: ``adopt`` checks each agent's
        command line.
        """
        attempt_dir = Path(workdir).resolve() / f"attempt-{attempt}"
        plan = self._control_record(attempt_dir, "launching.json")
        if plan is None or not isinstance(plan.get("nodes"), list) or not plan.get("token"):
            return None
        uid = plan.get("uid")
        nodes = []
        for n in plan["nodes"]:
            agent = read_job_json(attempt_dir / f"{n['node']}.agent.json",
                                  int(uid) if uid is not None else None)
            pid = agent.get("pid") if agent is not None else None
            if agent is None or agent.get("node") != n["node"] or not isinstance(pid, int):
                return None
            nodes.append({**n, "pid": pid, "pgid": pid})
        data = {"v": HANDLE_VERSION, "backend": self.name, "job_id": job_id, "attempt": attempt,
                "dir": str(attempt_dir), "token": plan["token"], "port": plan.get("port"),
                "uid": uid, "isolation": plan.get("isolation"), "nodes": nodes}
        return json.dumps(data, sort_keys=True)

    def _registry(self, job_id: int, attempt: int) -> Path:
        return self._state_dir / "attempts" / f"{job_id}-{attempt}.json"

    def _reap(self, job_id: int, attempts: set[int], workdir: Path) -> int:
        """Reap these attempts of a job (see ``reap``); the caller holds ``self._lock``."""
        tokens: set[str] = set()
        watched = [a for k in attempts if (a := self._attempts.get((job_id, k))) is not None]
        tokens.update(a.token for a in watched)
        for k in attempts:
            record = read_json(self._registry(job_id, k))
            if record is not None and record.get("token"):
                tokens.add(str(record["token"]))
        with contextlib.suppress(OSError):
            for d in workdir.iterdir():
                if _attempt_number(d.name) in attempts:
                    for name in ("launching.json", "launch.json"):
                        record = self._control_record(d, name)
                        if record is not None and record.get("token"):
                            tokens.add(str(record["token"]))
        cgroups = self._attempt_cgroups(job_id, attempts, watched)

        def alive() -> dict[int, int]:
            found = _scan_attempts(tokens, str(workdir), attempts)
            for cg in cgroups:
                found.update(dict.fromkeys(cg.pids() - found.keys(), 0))  # 0: no group to kill
            return found

        found = alive()
        if found:
            for a in watched:
                a.reaped = True
                with contextlib.suppress(OSError):  # the job's own directory: it may be in the way
                    write_json_atomic(a.dir / "reaped.json", {"at": time.time()})
        ended: set[int] = set()
        deadline = time.monotonic() + REAP_TIMEOUT_S
        while found:
            if time.monotonic() > deadline:
                raise ReapError(f"job {job_id} attempt(s) {sorted(attempts)}: processes "
                                f"{sorted(found)} survive SIGKILL after {REAP_TIMEOUT_S:g}s")
            for cg in cgroups:  # everything in them, whatever its environment and session
                cg.kill()
            # groups led by one of them are the attempt's (agents, rank shims): a member
            # that dropped the variables still dies with its group
            local_agent.signal_groups({g for p, g in found.items() if p == g}, signal.SIGKILL)
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                    ended.add(pid)
                except (ProcessLookupError, PermissionError):
                    continue
            time.sleep(KILL_ROUND_S)
            for a in watched:  # our own children: collect them so they leave no zombie
                for n in a.nodes:
                    if n.proc is not None:
                        n.proc.poll()
            found = alive()
        watched_cgroups = {cg.path for a in watched for cg in a.cgroups()}
        self._dead_cgroups += [cg for cg in cgroups if cg.path not in watched_cgroups]
        self._remove_dead_cgroups()  # a watched attempt's go once poll() reports it
        for k in attempts:
            if (job_id, k) not in self._attempts:
                with contextlib.suppress(FileNotFoundError):
                    self._registry(job_id, k).unlink()
        if ended:
            log.warning("job %s attempt(s) %s: reaped %d process(es)", job_id, sorted(attempts),
                        len(ended))
        return len(ended)

    def _attempt_cgroups(self, job_id: int, attempts: set[int],
                         watched: list[_Attempt]) -> list[AttemptCgroup]:
        """The cgroups of these attempts: the watched ones' and whatever exists under this
        state dir's scope with their names (a launch cut short, an attempt never adopted)."""
        found = {cg.path: cg for a in watched for cg in a.cgroups()}
        h = self._isolation.hierarchy
        if h is not None:
            for k in attempts:
                for cg in h.leaves(self._scope, f"{job_id}-{k}-"):
                    found.setdefault(cg.path, cg)
        return list(found.values())

    # ------------------------------------------------------------------ the kill worker

    def _schedule_kill(self, a: _Attempt, at: float) -> None:
        """SIGKILL what is left of ``a`` at monotonic time ``at`` (the earliest asked wins);
        retried every second while processes survive and the attempt is watched."""
        key = (a.job_id, a.attempt)

        def kill() -> float | None:
            if self._kill_now(a):
                return None
            log.error("job %s attempt %s: processes survive SIGKILL; trying again", *key)
            with self._lock:
                watched = key in self._attempts
            return time.monotonic() + 1.0 if watched else None

        self._kills.at(key, at, kill)

    def _kill_now(self, a: _Attempt) -> bool:
        """SIGKILL every process of ``a`` round after round; True once none is left."""
        deadline = time.monotonic() + REAP_TIMEOUT_S
        while True:
            with self._lock:
                if not self._any_alive(a):
                    return True
                if time.monotonic() > deadline:
                    return False
                self._signal_all(a, signal.SIGKILL)
            time.sleep(KILL_ROUND_S)

    def _cuda_ids(self, node: str, slots: tuple[int, ...]) -> tuple[int, ...]:
        """Slots -> CUDA ids: identity on a spec cluster, NVML indexes on a real one."""
        real = self._slots.get(node)
        if real is None:
            return slots
        if any(not 0 <= s < len(real) for s in slots):
            raise ValueError(f"node {node} has GPU slots 0..{len(real) - 1}, asked for {list(slots)}")
        return tuple(real[s] for s in slots)

    def _command(self, command: tuple[str, ...]) -> list[str]:
        """``python`` means this interpreter, so jobs run in the control plane's environment."""
        cmd = list(command)
        if cmd[0] in ("python", "python3"):
            cmd[0] = sys.executable
        return cmd

    def _env(self, spec: LaunchSpec, i: int, gpus: tuple[int, ...], token: str) -> dict[str, str]:
        """The attempt's clean environment (``isolation.job_environment``): nothing of the
        control plane's own beyond the allow-list."""
        workdir = Path(spec.workdir).resolve()
        attempt_dir = workdir / f"attempt-{spec.attempt}"
        return job_environment(os.environ, spec.env, {
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
            "GRACE_JOB_ID": str(spec.job_id),
            "GRACE_ATTEMPT": str(spec.attempt),
            "GRACE_NODE": spec.nodes[i].node,
            "GRACE_WORKDIR": str(workdir),
            "GRACE_CHECKPOINT_DIR": str(workdir / "checkpoints"),
            "HOME": spec.env.get("HOME") or str(workdir / "home"),
            "TMPDIR": spec.env.get("TMPDIR") or str(attempt_dir / "tmp"),
            TOKEN_ENV: f"{token}:{i}",
        })

    def _cpu_cores(self, node: str, gpus: int) -> float:
        """The node's share of CPU cores for ``gpus`` GPUs (the cgroup's CPU weight)."""
        group = self._groups.get(node)
        if group is None:
            return float(max(1, gpus))
        return group.cpu_cores * max(1, gpus) / group.gpus_per_node

    def _memory_bytes(self, spec: LaunchSpec, node: str, gpus: int) -> int | None:
        """The node's memory limit: the job's ``memory_gb`` per node, else the node's share
        for its GPUs (``memory_gb * gpus / gpus_per_node`` of its node group)."""
        if spec.memory_gb is not None:
            if not spec.memory_gb > 0:
                raise LaunchSpecError(f"job {spec.job_id}: memory_gb must be above 0, got "
                                      f"{spec.memory_gb}")
            return int(spec.memory_gb * GIB)
        group = self._groups.get(node)
        if group is None:
            log.warning("node %s is not in the inventory: no memory limit for it", node)
            return None
        return int(group.memory_gb * GIB * max(1, gpus) / group.gpus_per_node)

    def _cgroup(self, job_id: int, attempt: int, node: str) -> AttemptCgroup | None:
        """Where this node of the attempt lives, when the mode uses cgroups (derivable, so
        a restarted control plane finds it from the handle alone)."""
        h = self._isolation.hierarchy
        return h.leaf(self._scope, leaf_name(job_id, attempt, node)) if h is not None else None

    @staticmethod
    def _fresh(cgroup: AttemptCgroup) -> None:
        """Remove a leftover of a launch cut short (its processes were reaped), so the new
        attempt starts with its own OOM count; CgroupError if it cannot be emptied."""
        for _ in range(20):
            if not cgroup.exists() or (not cgroup.kill() and cgroup.remove()):
                return
            time.sleep(KILL_ROUND_S)
        raise CgroupError(f"cgroup {cgroup.name} of an earlier launch cannot be emptied")

    def _remove_dead_cgroups(self) -> None:
        """Remove the cgroups of ended attempts; one with a process left is emptied first
        and tried again at the next poll."""
        left = []
        for cg in self._dead_cgroups:
            cg.kill()
            try:
                if not cg.remove():
                    left.append(cg)
            except OSError as e:
                log.error("cannot remove cgroup %s: %s", cg.name, e)
        self._dead_cgroups = left

    def _control_record(self, a: _Attempt | Path, name: str) -> dict[str, Any] | None:
        """A record the control plane wrote in an attempt dir (launch, cancel, reap): with
        users isolation only a root-owned regular file counts, so a job cannot forge one in
        its own directory (a launch record naming another tenant's processes)."""
        d = a.dir if isinstance(a, _Attempt) else a
        return read_job_json(d / name, 0 if self._isolation.users else None)

    def _adopt_recorded(self, spec: LaunchSpec, attempt_dir: Path) -> str | None:
        """The handle of this attempt if an earlier launch recorded it (the state dir's
        registry, else ``launch.json``) and it is still there to adopt: launching it again
        must not start a second gang. A record naming another directory is ignored."""
        previous = read_json(self._registry(spec.job_id, spec.attempt))
        if previous is None or previous.get("dir") != str(attempt_dir):
            previous = self._control_record(attempt_dir, "launch.json")
        if previous is None or previous.get("dir") != str(attempt_dir):
            return None
        old = json.dumps(previous, sort_keys=True)
        if not self.adopt(spec.job_id, spec.attempt, old):
            return None
        log.warning("job %s attempt %s was launched already; adopted it", spec.job_id, spec.attempt)
        return old

    def _job_dirs(self, spec: LaunchSpec, attempt_dir: Path, uid: int | None) -> None:
        """The job's directories, before any of its processes exist.

        With a uid: the workdir stays root's, mode 0711 (the job cannot rename what is in
        it, so the control plane's paths into it stay what they were), and its
        ``checkpoints/`` and ``home/``, and the attempt dir, are the uid's, mode 0700.
        """
        workdir = attempt_dir.parent
        workdir.mkdir(parents=True, exist_ok=True)
        (attempt_dir / "ranks").mkdir(parents=True)
        (attempt_dir / "tmp").mkdir()
        for n in spec.nodes:  # root opens them for the agents; created before the chown
            (attempt_dir / f"{n.node}.log").touch()
        if uid is None:
            (workdir / "checkpoints").mkdir(exist_ok=True)
            (workdir / "home").mkdir(exist_ok=True)
            return
        blocked = first_blocked(workdir.parent)
        if blocked is not None:
            raise LaunchSpecError(f"job {spec.job_id}: its uid {uid} cannot reach its workdir "
                                  f"{workdir}: {blocked} is closed to other users; put workdirs "
                                  "under the state dir's jobs/ or chmod o+x it")
        st = os.lstat(workdir)
        if (st.st_uid, st.st_gid) != (0, 0):
            os.lchown(workdir, 0, 0)
        os.chmod(workdir, 0o711)
        for sub in ("checkpoints", "home"):
            private_dir(workdir / sub, uid, uid)
        private_dir(attempt_dir, uid, uid)

    def _start(self, spec: LaunchSpec, attempt_dir: Path) -> str:
        uid = self._uids.uid_of(spec.tenant) if self._uids is not None else None
        limits = [self._memory_bytes(spec, n.node, len(n.gpus)) for n in spec.nodes]
        self._job_dirs(spec, attempt_dir, uid)
        port, token = _free_port(), uuid.uuid4().hex[:16]
        # The token goes to disk before any process exists, so a control plane that
        # dies mid-launch leaves a way to find (and kill) a half-started gang; with it the
        # plan (every node, its GPUs), so one whose agents all started can be adopted
        # instead (``cut_short_handle``).
        cuda = [self._cuda_ids(a.node, a.gpus) for a in spec.nodes]
        plan = [{"node": a.node, "index": i, "gpus": list(cuda[i]),
                 "cgroup": cg.name if (cg := self._cgroup(spec.job_id, spec.attempt, a.node))
                 else None} for i, a in enumerate(spec.nodes)]
        write_json_atomic(attempt_dir / "launching.json", {
            "token": token, "at": time.time(), "port": port, "uid": uid,
            "isolation": self._isolation.mode.value, "nodes": plan})
        rank_cmd = [
            sys.executable,
            "-m",
            local_agent.__name__,
            "rank",
            "--attempt-dir",
            str(attempt_dir),
            "--",
            *self._command(spec.command),
        ]
        nodes: list[_Node] = []
        try:
            for i, assignment in enumerate(spec.nodes):
                gpus = cuda[i]
                torchrun = [
                    sys.executable, "-m", "torch.distributed.run",
                    f"--nnodes={len(spec.nodes)}", f"--node-rank={i}",
                    f"--nproc-per-node={max(1, len(gpus))}",
                    "--rdzv-backend=static", "--master-addr=127.0.0.1", f"--master-port={port}",
                    f"--rdzv-id={spec.job_id}-{spec.attempt}", "--max-restarts=0",
                    f"--log-dir={attempt_dir / 'ranks' / assignment.node}", "--tee=3",
                    "--no-python", "--", *rank_cmd,
                ]  # fmt: skip
                agent = [
                    sys.executable,
                    "-m",
                    local_agent.__name__,
                    "agent",
                    "--attempt-dir",
                    str(attempt_dir),
                    "--node",
                    assignment.node,
                ]
                if spec.time_limit_s is not None:
                    agent.append(f"--time-limit={spec.time_limit_s}")
                argv = [*agent, "--", *torchrun]
                cgroup = self._cgroup(spec.job_id, spec.attempt, assignment.node)
                if cgroup is not None:
                    self._fresh(cgroup)
                    cgroup.create(limits[i], self._cpu_cores(assignment.node, len(gpus)))
                if self._isolation.mode is not Isolation.NONE:
                    argv = shim_command(argv, joins=cgroup.procs_files() if cgroup else [], uid=uid)
                node_log = os.open(attempt_dir / f"{assignment.node}.log",
                                   os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
                try:
                    proc = subprocess.Popen(
                        argv,
                        cwd=self._cwd,
                        env=self._env(spec, i, gpus, token),
                        stdin=subprocess.DEVNULL,
                        stdout=node_log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # outlives the control plane; killpg ends the agent
                    )
                finally:
                    os.close(node_log)
                nodes.append(_Node(assignment.node, i, gpus, proc.pid, proc, cgroup))
        except BaseException:
            for n in nodes:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(n.pid, signal.SIGKILL)
            for i, assignment in enumerate(spec.nodes):
                cg = nodes[i].cgroup if i < len(nodes) else self._cgroup(
                    spec.job_id, spec.attempt, assignment.node)
                if cg is not None:
                    self._dead_cgroups.append(cg)
            self._remove_dead_cgroups()
            raise
        data = {
            "v": HANDLE_VERSION,
            "backend": self.name,
            "job_id": spec.job_id,
            "attempt": spec.attempt,
            "dir": str(attempt_dir),
            "token": token,
            "port": port,
            "uid": uid,
            "isolation": self._isolation.mode.value,
            "nodes": [
                {"node": n.name, "index": n.index, "gpus": list(n.gpus), "pid": n.pid, "pgid": n.pid,
                 "cgroup": n.cgroup.name if n.cgroup else None}
                for n in nodes
            ],
        }
        handle = json.dumps(data, sort_keys=True)
        write_json_atomic(self._registry(spec.job_id, spec.attempt), data)  # root's: trusted
        try:
            write_json_atomic(attempt_dir / "launch.json", data)  # a copy beside the job's files
        except OSError as e:  # its own processes own the directory now and may stand in the way
            log.warning("job %s attempt %s: no launch.json in %s: %s", spec.job_id, spec.attempt,
                        attempt_dir, e)
        self._attempts[(spec.job_id, spec.attempt)] = _Attempt(
            spec.job_id, spec.attempt, attempt_dir, token, nodes, handle, uid=uid
        )
        log.info("job %s attempt %s: %d agents started, port %d, isolation %s%s", spec.job_id,
                 spec.attempt, len(nodes), port, self._isolation.mode,
                 f" as uid {uid}" if uid is not None else "")
        return handle

    def _agent_alive(self, a: _Attempt, n: _Node) -> bool:
        """Is node ``n``'s agent still running? Reaps our own children; checks cmdline for adopted ones."""
        if n.proc is not None:
            return n.proc.poll() is None
        try:
            cmdline = Path(f"/proc/{n.pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return False
        except OSError:  # no /proc (not Linux): trust the pid alone
            try:
                os.kill(n.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        args = cmdline.split(b"\0")  # empty for a zombie
        return (
            local_agent.__name__.encode() in args and str(a.dir).encode() in args and n.name.encode() in args
        )

    def _node_state(self, a: _Attempt, n: _Node) -> tuple[str, dict[str, Any] | None]:
        """("exited", record) | ("running", None) | ("gone", None): gone = dead without a record.

        The record is read again after the liveness check because the agent
        writes it *before* exiting: dead and still no record means none is coming.
        """
        path = a.dir / f"{n.name}.exit"
        record = read_job_json(path, a.uid)
        if record is not None:
            return "exited", record
        if self._agent_alive(a, n):
            return "running", None
        record = read_job_json(path, a.uid)
        return ("exited", record) if record is not None else ("gone", None)

    def _any_alive(self, a: _Attempt) -> bool:
        with self._lock:
            if any(self._agent_alive(a, n) for n in a.nodes):
                return True
        return bool(processes_with_token(a.token)) or any(cg.pids() for cg in a.cgroups())

    def _signal_all(self, a: _Attempt, sig: int) -> None:
        """Signal every live agent's group, every process carrying the attempt's token, and
        every process in its cgroups (a child that daemonized and scrubbed its environment
        is still there)."""
        pgids = {n.pid for n in a.nodes if self._agent_alive(a, n)}
        pgids.update(processes_with_token(a.token).values())
        local_agent.signal_groups(pgids, sig)
        if sig == signal.SIGKILL:  # a process that left its group still carries the token
            for pid in processes_with_token(a.token):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        for cg in a.cgroups():
            cg.signal(sig)

    def _kill_strays(self, a: _Attempt) -> bool:
        """Once every agent is dead, nothing of the attempt may linger: SIGKILL the rest
        (by token, and everything in its cgroups) until none is left; False if some
        survived a second of it."""
        for _ in range(20):
            left = processes_with_token(a.token)
            in_cgroups = [cg for cg in a.cgroups() if cg.pids()]
            if not left and not in_cgroups:
                return True
            for cg in in_cgroups:
                cg.kill()
            local_agent.signal_groups(left.values(), signal.SIGKILL)
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        return not processes_with_token(a.token) and not any(cg.pids() for cg in a.cgroups())

    def _tear_down(self, a: _Attempt) -> None:
        """End the nodes still running after another failed: SIGTERM now, SIGKILL later polls."""
        now = time.monotonic()
        if a.kill_at is None:
            a.kill_at = now + TEARDOWN_GRACE_S
            self._signal_all(a, signal.SIGTERM)
        elif now >= a.kill_at:
            self._signal_all(a, signal.SIGKILL)

    def _first_failure(self, a: _Attempt, exits: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
        """The earliest non-zero exit: a time-limit stop, else a rank, else a node's torchrun."""
        for name, rec in exits.items():
            if rec.get("reason") == "time_limit":
                return {"node": name, "exit_code": rec.get("exit_code"), "why": "time_limit"}
        ranks = [r for r in (read_job_json(p, a.uid) for p in (a.dir / "ranks").glob("rank-*.exit"))
                 if r]
        bad = [r for r in ranks if r.get("exit_code") not in (0, None)]
        if bad:
            first = min(bad, key=lambda r: float(r.get("ended_at", 0.0)))
            return {
                "node": first.get("node"),
                "exit_code": first["exit_code"],
                "rank": first.get("rank"),
                "local_rank": first.get("local_rank"),
            }
        bad_nodes = [(name, rec) for name, rec in exits.items() if rec.get("exit_code") != 0]
        if bad_nodes:
            name, rec = min(bad_nodes, key=lambda nr: float(nr[1].get("ended_at", 0.0)))
            return {"node": name, "exit_code": rec.get("exit_code")}
        return None

    def _failure_log(self, a: _Attempt, failure: dict[str, Any]) -> str:
        """The failed rank's own stderr tail (its traceback), else its node's log tail.

        The node log ends with torchrun's reaction (often a SIGTERM traceback
        from the teardown), which says less than the rank's last words.
        """
        files = rank_logs(a.dir).get(str(failure["node"]), {}).get(failure.get("local_rank", -1))
        if files is not None:
            text = _tail(files[1], a.uid) or _tail(files[0], a.uid)
            if text:
                return text
        return _tail(a.dir / f"{failure['node']}.log", a.uid)

    def _observe(self, a: _Attempt) -> Observation:
        states = {n.name: self._node_state(a, n) for n in a.nodes}
        exits = {name: rec for name, (s, rec) in states.items() if s == "exited" and rec is not None}
        running = [name for name, (s, _) in states.items() if s == "running"]
        gone = [name for name, (s, _) in states.items() if s == "gone"]
        cancelled = a.cancelled or self._control_record(a, "cancel.json") is not None
        failure = None if cancelled else self._first_failure(a, exits)

        def obs(status: AttemptStatus, **kw: Any) -> Observation:
            return Observation(a.job_id, a.attempt, status, **kw)

        if running:
            if cancelled or failure is not None or gone:
                self._tear_down(a)  # torchrun on the healthy nodes would hang or fail anyway
            return obs(AttemptStatus.RUNNING)
        if not self._kill_strays(a):
            # ended means no process left: the GPUs are not free while one survives
            log.error("job %s attempt %s: agents gone, but processes survive SIGKILL",
                      a.job_id, a.attempt)
            return obs(AttemptStatus.RUNNING)
        if cancelled:
            return obs(AttemptStatus.CANCELLED, detail="cancelled")
        if a.reaped or self._control_record(a, "reaped.json") is not None:
            return obs(AttemptStatus.LOST, detail="ended by reap(): its processes were SIGKILLed")
        oom = self._oom(a, failure, gone)
        if oom is not None:
            return oom
        if gone and failure is not None and failure.get("exit_code") in (-15, -9, 137, 143):
            failure = None  # ranks signalled as their vanished agent went down: the agent is the cause
        if failure is not None:
            node = failure["node"]
            if failure.get("why") == "time_limit":
                head = f"node {node} reached the attempt's time limit"
            elif "rank" in failure:
                head = f"rank {failure['rank']} on node {node} exited {failure['exit_code']}"
            else:
                head = f"torchrun on node {node} exited {failure['exit_code']}"
            return obs(
                AttemptStatus.FAILED,
                exit_code=failure["exit_code"],
                failed_node=node,
                detail=f"{head}\n{self._failure_log(a, failure)}",
            )
        if gone:
            node = gone[0]
            return obs(
                AttemptStatus.LOST,
                failed_node=node,
                detail=f"agent of node {node} disappeared without an exit record"
                f"{_agent_end(a, node)}\n{_tail(a.dir / f'{node}.log', a.uid)}",
            )
        return obs(AttemptStatus.SUCCEEDED, exit_code=0)

    def _oom(self, a: _Attempt, failure: dict[str, Any] | None, gone: list[str]) -> Observation | None:
        """FAILED with ``oom`` when the kernel killed a process of a node for its memory
        limit and the attempt did not succeed; None otherwise (a job that lost a worker to
        the limit and finished anyway succeeded). Called after every process is gone."""
        if failure is None and not gone:
            return None
        for n in a.nodes:
            if n.cgroup is None or n.cgroup.oom_kills() <= 0:
                continue
            limit = n.cgroup.memory_limit()
            gib = f"{limit / GIB:.3g} GiB" if limit is not None else "its limit"
            log_text = self._failure_log(a, failure) if failure else _tail(a.dir / f"{n.name}.log", a.uid)
            return Observation(
                a.job_id, a.attempt, AttemptStatus.FAILED,
                exit_code=failure.get("exit_code") if failure else None,
                failed_node=n.name, oom=True,
                detail=f"oom: node {n.name} used more than its memory limit of {gib}; the kernel "
                       f"killed {n.cgroup.oom_kills()} of its processes (give the job a larger "
                       f"memory_gb)\n{log_text}")
        return None
