"""How a bench's ranks are started: local processes, or ``srun`` on nodes Grace would pick.

``local``: ``ranks`` processes on this host, each told its ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and a free ``MASTER_PORT`` on 127.0.0.1 (the environment
``torch.distributed``'s ``env://`` rendezvous reads), so nothing but this host is needed.

``slurm``: one ``srun`` step of ``ranks`` tasks over ``nodes`` nodes named with
``--nodelist``: the nodes come from the cluster Grace schedules on (by default what
Slurm reports, as ``grace up --backend slurm`` imports it, or a ``--cluster`` YAML
whose node names are Slurm's) and are picked by :func:`choose_nodes` the way a gang
lands: ``same-leaf`` keeps it under one leaf switch, ``cross-leaf`` spreads it over
leaves so the traffic crosses the spine. Each task finds its rank in ``SLURM_PROCID``;
rank 0's node is the rendezvous address.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from grace.bench.net import BenchError
from grace.core.topology import Topology
from grace.spec.cluster import ClusterSpec

#: Lines of a failed rank's output quoted in the error.
TAIL_LINES = 15


class Launcher(StrEnum):
    LOCAL = "local"
    SLURM = "slurm"


class Placement(StrEnum):
    """Where a multi-node bench's nodes sit in the network tree."""

    SAME_LEAF = "same-leaf"
    CROSS_LEAF = "cross-leaf"


def free_port() -> int:
    """A TCP port free on this host now (the kernel's pick), for the rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def choose_nodes(topology: Topology, nodes: int, placement: Placement,
                 usable: set[str] | None = None) -> list[str]:
    """``nodes`` node names of ``topology`` placed as ``placement`` asks.

    ``same-leaf``: the first leaf (in the topology's order, as Grace's placement
    fills leaves) with ``nodes`` usable nodes, its nodes in order. ``cross-leaf``: nodes
    dealt round-robin over the leaves that have a usable node, so at least two leaves
    are used and consecutive ranks talk across the spine. Raises :class:`BenchError`
    naming the flag and the fix when the placement cannot be honoured.
    """
    if nodes < 1:
        raise BenchError("--nodes must be >= 1")
    leaves = [[topology.nodes[i].name for i in members
               if usable is None or topology.nodes[i].name in usable]
              for members in topology.leaf_nodes]
    leaves = [leaf for leaf in leaves if leaf]
    total = sum(len(leaf) for leaf in leaves)
    if total < nodes:
        raise BenchError(f"--nodes {nodes}: cluster {topology.name!r} has only {total} usable "
                         "node(s); lower --nodes or resume drained nodes")
    if placement is Placement.SAME_LEAF:
        for leaf in leaves:
            if len(leaf) >= nodes:
                return leaf[:nodes]
        biggest = max(len(leaf) for leaf in leaves)
        raise BenchError(f"--placement same-leaf: no leaf of {topology.name!r} has {nodes} usable "
                         f"nodes (the largest has {biggest}); lower --nodes to {biggest} or use "
                         "--placement cross-leaf")
    if nodes < 2 or len(leaves) < 2:
        why = "one node sits under one leaf" if nodes < 2 else \
            f"cluster {topology.name!r} has one leaf with usable nodes"
        raise BenchError(f"--placement cross-leaf: {why}; use --nodes 2 or more on a cluster "
                         "with two leaves, or --placement same-leaf")
    chosen: list[str] = []
    depth = 0
    while len(chosen) < nodes:
        for leaf in leaves:
            if depth < len(leaf) and len(chosen) < nodes:
                chosen.append(leaf[depth])
        depth += 1
    return chosen


@dataclass(frozen=True)
class RankCommand:
    """What every rank runs: ``argv`` (``python`` first) with ``env`` added."""

    argv: list[str]
    env: Mapping[str, str]


def _rank_env(extra: Mapping[str, str]) -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2])  # so `python -m grace...` finds this tree
    env = dict(os.environ)
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-TAIL_LINES:])


def run_local(cmd: RankCommand, ranks: int, timeout_s: float) -> None:
    """``ranks`` processes of ``cmd`` on this host; returns when all exit 0.

    A rank that fails (or the timeout) ends the others (SIGTERM, then SIGKILL): a
    collective never finishes without all its ranks. The error quotes the failed
    rank's output.
    """
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="grace-bench-") as tmp:
        procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        for r in range(ranks):
            log = Path(tmp) / f"rank{r}.log"
            env = _rank_env({**cmd.env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                             "RANK": str(r), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(r),
                             "LOCAL_WORLD_SIZE": str(ranks)})
            with open(log, "wb") as out:
                procs.append((subprocess.Popen(cmd.argv, env=env, stdout=out,
                                               stderr=subprocess.STDOUT), log))
        _wait_all(procs, timeout_s)


def _wait_all(procs: Sequence[tuple[subprocess.Popen[bytes], Path]], timeout_s: float) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    failed: tuple[int, int, Path] | None = None
    try:
        while True:
            codes = [p.poll() for p, _ in procs]
            bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                i, c = bad[0]
                failed = (i, int(c or 0), procs[i][1])
                break
            if all(c == 0 for c in codes):
                return
            if time.monotonic() > deadline:
                raise BenchError(f"the ranks did not finish within {timeout_s:.0f}s; use fewer or "
                                 f"smaller --sizes or fewer --iters\n{_tail(procs[0][1])}")
            time.sleep(0.05)
    finally:
        _stop(procs)
    assert failed is not None
    i, code, log = failed
    raise BenchError(f"rank {i} exited with code {code}:\n{_tail(log)}")


def _stop(procs: Sequence[tuple[subprocess.Popen[bytes], Path]]) -> None:
    for p, _ in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p, _ in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def slurm_usable_nodes(conf: str | None = None) -> set[str]:
    """Nodes Slurm would start a step on now (idle or mixed, not drained or down)."""
    from grace.backends.slurm_cli import SlurmCli, SlurmError

    cli = SlurmCli(conf)
    try:
        out = cli.run("sinfo", "-h", "-N", "-o", "%N %t")
    except SlurmError as e:
        raise BenchError(f"--launcher slurm: {e}") from e
    usable = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].rstrip("*~#") in ("idle", "mix", "alloc"):
            usable.add(parts[0])
    return usable


def slurm_cluster(cluster: ClusterSpec | None, conf: str | None = None) -> ClusterSpec:
    """The cluster to place on: ``cluster`` when given, else what Slurm reports (the
    Slurm backend's own default)."""
    if cluster is not None:
        return cluster
    from grace.backends.slurm_cli import SlurmCli, SlurmError
    from grace.backends.slurm_inventory import import_cluster

    cli = SlurmCli(conf)
    if not cli.available():
        raise BenchError("--launcher slurm: no slurmctld answers `scontrol ping`; set "
                         "SLURM_CONF or start one (as root: export \"$(bash .ci/slurm-up.sh)\")")
    try:
        return import_cluster(cli)
    except (SlurmError, ValueError) as e:
        raise BenchError(f"--launcher slurm: cannot read the cluster from Slurm: {e}") from e


def run_slurm(cmd: RankCommand, ranks: int, node_names: Sequence[str], timeout_s: float) -> None:
    """One ``srun`` step of ``ranks`` tasks over ``node_names`` (evenly, rank 0 on the first).

    The rendezvous port is this host's free port: right on the one-host test cluster,
    and on a real cluster a port rarely taken on the first node (srun reports a clash
    as a failed rank).
    """
    per_node = math.ceil(ranks / len(node_names))
    if per_node * len(node_names) != ranks:
        raise BenchError(f"--ranks {ranks} does not split evenly over --nodes {len(node_names)}; "
                         "use a multiple of --nodes")
    env = _rank_env({**cmd.env, "MASTER_ADDR": node_names[0], "MASTER_PORT": str(free_port())})
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)  # the tasks take theirs from SLURM_PROCID/SLURM_NTASKS
    argv = ["srun", f"--nodes={len(node_names)}", f"--ntasks={ranks}",
            f"--ntasks-per-node={per_node}", f"--nodelist={','.join(node_names)}",
            "--distribution=block", "--kill-on-bad-exit=1", "--export=ALL",
            f"--time={max(1, math.ceil(timeout_s / 60))}", *cmd.argv]
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as e:
        raise BenchError("--launcher slurm: srun not found; install slurm-client or use "
                         "--launcher local") from e
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"srun did not finish within {timeout_s:.0f}s; use fewer --sizes") from e
    if done.returncode != 0:
        out = "\n".join((done.stderr + done.stdout).splitlines()[-TAIL_LINES:])
        raise BenchError(f"srun exited {done.returncode}:\n{out}")


def python_module(module: str, *args: str) -> list[str]:
    """``python -m module args``, with this interpreter (the ranks need the same torch)."""
    return [sys.executable, "-m", module, *args]
