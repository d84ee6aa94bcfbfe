"""The two tiny supervisors the local backend puts around torchrun and each rank.

``python -m grace.backends.local_agent agent --attempt-dir D --node N -- torchrun...``
    One per node of an attempt, started by :class:`~grace.backends.local.LocalBackend`
    in a session of its own so the control plane's death does not take it along.
    It records its pid and process group in ``D/N.agent.json``, runs torchrun in
    its own process group, enforces the attempt's time limit, sweeps up any
    worker torchrun left behind, and writes torchrun's exit code to ``D/N.exit``
    atomically. Those two files are how a restarted control plane learns what
    happened while it was dead.

``python -m grace.backends.local_agent rank --attempt-dir D -- command...``
    One per rank, as torchrun's entrypoint (``--no-python``). It runs the user's
    command and writes ``D/ranks/rank-R.exit`` with the exit code and the time,
    so the backend knows which rank failed *first* and with what code: torchrun
    itself only exits 1, and every other rank of a gang fails moments later
    because its peers vanished.

Why sweep by environment: torchrun starts every worker with
``start_new_session=True``, so ``killpg`` of the agent's group does not reach the
workers, and a SIGKILLed torchrun leaves them orphaned. Every process of an
attempt inherits ``GRACE_LOCAL_TOKEN=<attempt token>:<node index>``; reading
``/proc/<pid>/environ`` finds them all, whatever session they moved to (Linux
only; elsewhere only the agents' process groups are signalled).

This module imports neither torch nor the rest of Grace so each supervisor
starts in tens of milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

#: Environment variable every process of an attempt inherits: ``<token>:<node index>``.
TOKEN_ENV = "GRACE_LOCAL_TOKEN"
#: Seconds between SIGTERM and SIGKILL when the agent itself ends its node's processes.
AGENT_KILL_GRACE_S = 10.0
#: ``oom_score_adj`` of each rank and the job's command (-1000..1000; 0 is the default).
JOB_OOM_SCORE_ADJ = 500


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write temp + fsync + rename + fsync(dir): a reader sees all of it or nothing.

    The exit records are the only thing that survives a control-plane crash,
    so a torn half-written file must never be readable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(path: Path) -> dict[str, Any] | None:
    """The record at ``path``, or None if it is absent or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def processes_with_token(
    token: str, node_index: int | None = None, exclude: Iterable[int] = ()
) -> dict[int, int]:
    """``{pid: pgid}`` of live processes of an attempt (or of one node of it).

    A process belongs to node ``i`` of the attempt when its environment holds
    ``GRACE_LOCAL_TOKEN=<token>:<i>``. Zombies (empty environ) and other users'
    processes are skipped.
    """
    whole = f"{TOKEN_ENV}={token}:".encode()
    exact = None if node_index is None else whole + str(node_index).encode()
    return processes_where(
        lambda env: any(var == exact if exact is not None else var.startswith(whole)
                        for var in env), exclude)


def processes_where(matches: Callable[[list[bytes]], bool],
                    exclude: Iterable[int] = ()) -> dict[int, int]:
    """``{pid: pgid}`` of live processes whose environment (its ``NAME=value`` entries)
    ``matches``: one pass over /proc. Zombies (empty environ), other users' processes
    and ``exclude`` are skipped."""
    skip = set(exclude)
    found: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if matches(env):
            try:
                found[int(entry)] = os.getpgid(int(entry))
            except ProcessLookupError:
                continue
    return found


def signal_groups(pgids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each process group, ignoring groups that are already gone."""
    for pgid in set(pgids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def _noop_handler(signum: int, frame: object) -> None:
    """A handler (not SIG_IGN, which children would inherit): the child handles the signal."""


def _shield() -> None:
    """Let SIGTERM/SIGINT/SIGHUP reach the child through the process group, not end us first."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _noop_handler)


def _sweep(token: str, node_index: int, own_pid: int, grace_s: float) -> None:
    """SIGTERM every process of this node, SIGKILL what is left after ``grace_s``."""
    left = processes_with_token(token, node_index, exclude=[own_pid])
    if not left:
        return
    signal_groups(left.values(), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = processes_with_token(token, node_index, exclude=[own_pid])
    for _ in range(20):
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
        left = processes_with_token(token, node_index, exclude=[own_pid])


def _wait(
    proc: subprocess.Popen[bytes], node: str, time_limit_s: float | None, sweep: Callable[[float], None]
) -> tuple[int, str]:
    """torchrun's exit code and why it ended; past the time limit, end it (SIGTERM, then SIGKILL)."""
    try:
        return proc.wait(timeout=time_limit_s), "exited"
    except subprocess.TimeoutExpired:
        pass
    print(
        f"grace agent: time limit of {time_limit_s:g}s reached; ending node {node}",
        file=sys.stderr,
        flush=True,
    )
    proc.terminate()
    sweep(AGENT_KILL_GRACE_S)
    try:
        return proc.wait(timeout=AGENT_KILL_GRACE_S), "time_limit"
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(), "time_limit"


def _wait_recorded(
    proc: subprocess.Popen[bytes], node: str, time_limit_s: float | None, sweep: Callable[[float], None]
) -> tuple[int, str]:
    """``_wait``, but an error of the agent's own while ending torchrun still yields an
    outcome: without one the agent would die with no exit record and the attempt would
    read as LOST (a node fault) instead of what really ended it."""
    started = time.monotonic()
    try:
        return _wait(proc, node, time_limit_s, sweep)
    except Exception as e:
        print(f"grace agent: supervising node {node} failed: {e!r}", file=sys.stderr, flush=True)
        with contextlib.suppress(OSError):
            proc.kill()
        code = proc.wait()
        past = time_limit_s is not None and time.monotonic() - started >= time_limit_s
        return code, "time_limit" if past else "exited"


def run_agent(attempt_dir: Path, node: str, time_limit_s: float | None, argv: list[str]) -> int:
    """Supervise torchrun for one node; always leave ``<node>.exit`` behind if we live to."""
    me = os.getpid()
    write_json_atomic(
        attempt_dir / f"{node}.agent.json",
        {"node": node, "pid": me, "pgid": os.getpgid(0), "started_at": time.time(), "argv": argv},
    )
    _shield()
    token, _, index = os.environ.get(TOKEN_ENV, "").rpartition(":")

    def sweep(grace_s: float) -> None:
        if token and index.isdigit():
            _sweep(token, int(index), me, grace_s)

    try:
        proc = subprocess.Popen(argv)  # same process group: killpg(agent) reaches torchrun
    except OSError as e:
        print(f"grace agent: cannot start {argv[0]}: {e}", file=sys.stderr, flush=True)
        code, reason = 127, "exec_failed"
    else:
        code, reason = _wait_recorded(proc, node, time_limit_s, sweep)
    try:
        sweep(2.0)  # workers torchrun orphaned: they live in sessions of their own
    except Exception as e:  # the record below matters more than a perfect sweep
        print(f"grace agent: sweeping node {node} failed: {e!r}", file=sys.stderr, flush=True)
    write_json_atomic(
        attempt_dir / f"{node}.exit",
        {"node": node, "exit_code": code, "reason": reason, "ended_at": time.time()},
    )
    return code if code >= 0 else 128 - code


def _prefer_for_oom() -> None:
    """Make this rank (and the job's command it starts) the OOM killer's first choice.

    When an attempt reaches its cgroup's memory limit, the kernel kills the
    process with the highest score: left alone, that can be torchrun (a few
    hundred MB of torch), and then no supervisor lives to record which rank
    failed. ``JOB_OOM_SCORE_ADJ`` makes the job's own processes the victims, on
    the machine as a whole too (before the control plane). Raising the value
    needs no privilege; lowering the supervisors' would (CAP_SYS_RESOURCE).
    """
    path = "/proc/self/oom_score_adj"
    with contextlib.suppress(OSError, ValueError):
        with open(path) as f:
            if int(f.read()) >= JOB_OOM_SCORE_ADJ:
                return
        with open(path, "w") as f:
            f.write(str(JOB_OOM_SCORE_ADJ))


def run_rank(attempt_dir: Path, argv: list[str]) -> int:
    """Run one rank's command and record its exit code and end time."""
    rank = os.environ.get("RANK", "?")
    record: dict[str, Any] = {
        "rank": int(rank) if rank.isdigit() else rank,
        "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
        "node": os.environ.get("GRACE_NODE", ""),
        "pid": os.getpid(),
    }
    _shield()
    _prefer_for_oom()
    try:
        proc = subprocess.Popen(argv)  # same group: torchrun's killpg(rank) reaches it
    except OSError as e:
        print(f"grace rank: cannot start {argv[0]}: {e}", file=sys.stderr, flush=True)
        code = 127
    else:
        code = proc.wait()
    record.update(exit_code=code, ended_at=time.time())
    write_json_atomic(attempt_dir / "ranks" / f"rank-{rank}.exit", record)
    if code < 0:  # killed by a signal: die the same way so torchrun reports it faithfully
        with contextlib.suppress(OSError, ValueError):  # SIGKILL/SIGSTOP take no handler
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def run_throttle(pid: int, stop_s: float, run_s: float) -> int:
    """Make process ``pid`` a straggler: stopped ``stop_s``, running ``run_s``, until it exits.

    A drill for ``grace inject --fault straggler``: from outside, the rank looks
    like a GPU held down by its clocks, slower but alive. On SIGTERM (the attempt
    is being cancelled or moved) the target is continued first, so it can honour
    its own SIGTERM and checkpoint instead of sleeping through it.
    """
    def _release(*_: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        os._exit(0)

    signal.signal(signal.SIGTERM, _release)
    signal.signal(signal.SIGINT, _release)
    try:
        while True:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(stop_s)
            os.kill(pid, signal.SIGCONT)
            time.sleep(run_s)
    except ProcessLookupError:
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grace.backends.local_agent")
    sub = parser.add_subparsers(dest="role", required=True)
    agent = sub.add_parser("agent", help="supervise torchrun for one node of an attempt")
    agent.add_argument("--attempt-dir", type=Path, required=True)
    agent.add_argument("--node", required=True)
    agent.add_argument("--time-limit", type=float, default=None)
    agent.add_argument("command", nargs=argparse.REMAINDER)
    rank = sub.add_parser("rank", help="run one rank's command and record how it ended")
    rank.add_argument("--attempt-dir", type=Path, required=True)
    rank.add_argument("command", nargs=argparse.REMAINDER)
    throttle = sub.add_parser("throttle", help="slow a process down (straggler drill)")
    throttle.add_argument("--pid", type=int, required=True)
    throttle.add_argument("--stop-s", type=float, default=0.15)
    throttle.add_argument("--run-s", type=float, default=0.05)
    args = parser.parse_args(argv)
    if args.role == "throttle":
        return run_throttle(args.pid, args.stop_s, args.run_s)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("give the command to run after --")
    if args.role == "agent":
        return run_agent(args.attempt_dir, args.node, args.time_limit, command)
    return run_rank(args.attempt_dir, command)


if __name__ == "__main__":
    sys.exit(main())
