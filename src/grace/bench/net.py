"""``grace bench net``: collective bandwidth and latency with the nccl-tests definitions.

What is measured: for each collective (all-reduce, all-gather, reduce-scatter) and
message size, the median wall time ``t`` of one operation over ``iters`` timed runs
after ``warmup`` untimed ones. A run's time is the slowest rank's (every rank times
its own call; the per-iteration maxima are taken with one all-reduce at the end), since
a collective is not done until every rank has its result.

The figures follow nccl-tests' ``doc/PERFORMANCE.md``
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):

- ``bytes`` (``S``) is the size of the whole buffer: the all-reduce's input, the
  all-gather's output, the reduce-scatter's input (each rank receives ``S/n``);
- ``algbw = S / t``;
- ``busbw = algbw x factor``, the factor making the figure comparable to the link's
  bandwidth whatever the rank count: all-reduce ``2(n-1)/n``, all-gather and
  reduce-scatter ``(n-1)/n``.

Units, as nccl-tests prints them: ``algbw_gbps`` and ``busbw_gbps`` are gigaBYTES per
second (1e9 bytes/s; ``gbps`` in the key reads "GB per s", not gigabits), and
``latency_us`` is ``t`` in microseconds. A link sold as 400 Gb/s InfiniBand tops out at
50 GB/s of busbw.

This module holds the parts that need no torch (sizes, factors, the report, its
table); the ranks run :mod:`grace.bench.net_worker`, started by :mod:`grace.bench.launch`.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from rich.console import RenderableType


class BenchError(Exception):
    """Something the user can fix (a flag, the machine's memory, Slurm); the text says how."""


class Op(StrEnum):
    """The collectives measured, named as nccl-tests names its binaries (less ``_perf``)."""

    ALLREDUCE = "allreduce"
    ALLGATHER = "allgather"
    REDUCESCATTER = "reducescatter"


class Backend(StrEnum):
    """``auto``: nccl when CUDA is present, else gloo (what a training job would use)."""

    AUTO = "auto"
    GLOO = "gloo"
    NCCL = "nccl"


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)

#: Largest size measured by default without CUDA: a CPU all-reduce of 1 GB over 4 ranks
#: holds about 8 GB and takes minutes; ask for more with ``--sizes 1K..1G``.
CPU_DEFAULT_MAX = 64 << 20
GPU_DEFAULT_MAX = 1 << 30
MIN_SIZE = 1 << 10
#: Bytes per element: float32, as nccl-tests' default ``-d float``.
ELEMENT_BYTES = 4
#: Share of the machine's memory the buffers of all local ranks may take.
MEMORY_SHARE = 0.5


def parse_size(text: str) -> int:
    """``"1K"`` -> 1024, ``"64M"``, ``"1G"``, ``"4096"``: binary units, as nccl-tests' ``-b/-e``."""
    m = _SIZE.match(text)
    if not m:
        raise BenchError(f"--sizes: {text!r} is not a size; write e.g. 1K, 64M, 1G or 4096")
    n = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if n < ELEMENT_BYTES:
        raise BenchError(f"--sizes: {text!r} is under {ELEMENT_BYTES} bytes (one float32)")
    return n


def parse_sizes(text: str) -> list[int]:
    """``"1K..1G"``: every power of two from 1K to 1G (nccl-tests' ``-f 2``); or a comma
    list ``"1K,1M,64M"``. Sorted, without repeats."""
    text = text.strip()
    if ".." in text:
        lo_s, _, hi_s = text.partition("..")
        lo, hi = parse_size(lo_s), parse_size(hi_s)
        if lo > hi:
            raise BenchError(f"--sizes: {text!r} runs backwards; write the smaller size first")
        sizes = []
        s = lo
        while s <= hi:
            sizes.append(s)
            s *= 2
        return sizes
    parts = [p for p in text.split(",") if p.strip()]
    if not parts:
        raise BenchError("--sizes is empty; write e.g. 1K..64M or 1K,1M")
    return sorted({parse_size(p) for p in parts})


def parse_rank_counts(text: str) -> list[int]:
    """``--ranks``: one count (``4``), a list (``2,4,8``) or a range ``2..8`` (every power
    of two from the first, and the last). Each count is at least 2; ascending, once each."""
    text = text.strip()
    try:
        if ".." in text:
            lo_s, hi_s = text.split("..", 1)
            lo, hi = int(lo_s), int(hi_s)
            if lo > hi:
                raise BenchError(f"--ranks {text}: the range runs backwards; write {hi}..{lo}")
            counts, n = [], lo
            while n < hi:
                counts.append(n)
                n *= 2
            counts.append(hi)
        else:
            counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BenchError(f"--ranks {text!r}: give a count (4), a list (2,4,8) or a range "
                         "(2..8)") from None
    if not counts or min(counts) < 2:
        raise BenchError(f"--ranks {text}: every count must be >= 2: a collective needs two "
                         "ranks to move data")
    return sorted(set(counts))


def merge_reports(reports: Sequence[NetReport]) -> NetReport:
    """One report of runs at several rank counts (same backend, nodes and launcher):
    their rows in rank order; ``ranks`` is the largest count."""
    first = reports[0]
    results = [r for rep in sorted(reports, key=lambda x: x.ranks) for r in rep.results]
    return NetReport(results=results, backend=first.backend,
                     ranks=max(rep.ranks for rep in reports), nodes=first.nodes,
                     launcher=first.launcher, host=first.host,
                     node_names=sorted({n for rep in reports for n in rep.node_names}),
                     placement=first.placement, iters=first.iters, warmup=first.warmup)


def parse_ops(text: str) -> list[Op]:
    """``"allreduce,allgather"`` -> the ops, in the order given, without repeats."""
    ops: list[Op] = []
    for part in (p.strip().lower().replace("_", "").replace("-", "") for p in text.split(",")):
        if not part:
            continue
        try:
            op = Op(part)
        except ValueError:
            raise BenchError(f"--ops: unknown collective {part!r}; choose from "
                             f"{', '.join(o.value for o in Op)}") from None
        if op not in ops:
            ops.append(op)
    if not ops:
        raise BenchError("--ops is empty; write e.g. allreduce,allgather,reducescatter")
    return ops


def format_size(n: int) -> str:
    """1024 -> ``1K``, 1 << 20 -> ``1M``: the table's and the plot's labels."""
    for unit in ("G", "M", "K"):
        if n >= _UNITS[unit] and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]}{unit}"
    return f"{n}B"


def busbw_factor(op: Op, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): the share of the buffer each
    rank must send over its link in a bandwidth-optimal algorithm."""
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    if op is Op.ALLREDUCE:
        return 2 * (ranks - 1) / ranks
    return (ranks - 1) / ranks


def element_count(op: Op, size: int, ranks: int) -> int:
    """float32 elements of the whole buffer, rounded down to a multiple of ``ranks`` for
    the ops that split it (each rank's share must be whole)."""
    count = max(1, size // ELEMENT_BYTES)
    if op is not Op.ALLREDUCE:
        count = max(ranks, count - count % ranks)
    return count


def default_max_size(cuda: bool) -> int:
    return GPU_DEFAULT_MAX if cuda else CPU_DEFAULT_MAX


def check_memory(sizes: Sequence[int], local_ranks: int, cuda: bool) -> None:
    """Refuse sizes whose buffers (input and output, per rank on this host) would not fit
    in half the host's memory; GPU buffers are the device's business."""
    if cuda or not sizes:
        return
    need = local_ranks * max(sizes) * 2
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return
    if need > total * MEMORY_SHARE:
        raise BenchError(
            f"--sizes: {format_size(max(sizes))} x {local_ranks} ranks x 2 buffers needs "
            f"{need / 1e9:.1f} GB, over half of this host's {total / 1e9:.1f} GB; "
            "lower the largest size or the ranks per node")


@dataclass(frozen=True)
class NetResult:
    """One row of the report: an op at one size over ``ranks`` ranks on ``nodes`` nodes."""

    op: Op
    bytes: int
    ranks: int
    nodes: int
    algbw_gbps: float  # gigaBYTES per second (1e9 B/s), as nccl-tests
    busbw_gbps: float
    latency_us: float  # median time of one op, microseconds

    @classmethod
    def from_time(cls, op: Op, size: int, ranks: int, nodes: int, seconds: float) -> NetResult:
        """The row of a measured median time, with nccl-tests' algbw and busbw."""
        t = max(seconds, 1e-12)
        algbw = size / t / 1e9
        return cls(op=op, bytes=size, ranks=ranks, nodes=nodes, algbw_gbps=algbw,
                   busbw_gbps=algbw * busbw_factor(op, ranks), latency_us=t * 1e6)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["op"] = self.op.value
        return d


@dataclass
class NetReport:
    """What ``grace bench net`` writes (``--json``) and plots (``--html``)."""

    results: list[NetResult]
    backend: Backend
    ranks: int
    nodes: int
    launcher: str
    host: str = field(default_factory=socket.gethostname)
    node_names: list[str] = field(default_factory=list)
    placement: str | None = None
    iters: int = 0
    warmup: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "results": [r.to_json() for r in self.results],
            "backend": self.backend.value,
            "ranks": self.ranks,
            "rank_counts": sorted({r.ranks for r in self.results}),
            "nodes": self.nodes,
            "launcher": self.launcher,
            "host": self.host,
            "node_names": self.node_names,
            "placement": self.placement,
            "iters": self.iters,
            "warmup": self.warmup,
            "units": {"algbw_gbps": "GB/s (1e9 bytes/s)", "busbw_gbps": "GB/s (1e9 bytes/s)",
                      "latency_us": "microseconds, median per op", "bytes": "bytes"},
        }


def figure(x: float) -> str:
    """Three significant figures, never in exponent form: 0.000335, 0.209, 12.4, 183."""
    if x == 0 or x >= 100:
        return f"{x:.0f}"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


def net_table(report: NetReport, width: int) -> RenderableType:
    """One row per (op, size), figures never cut; fits ``width`` (80 columns)."""
    from grace.cli.fit import Column, fit_table

    counts = sorted({r.ranks for r in report.results})
    several = len(counts) > 1  # a ranks column only when the run swept rank counts
    columns = [
        Column("op"),
        *([Column("ranks", justify="right")] if several else []),
        Column("size", justify="right"),
        Column("busbw GB/s", justify="right"),
        Column("algbw GB/s", justify="right"),
        Column("latency us", justify="right"),
    ]
    rows = [[r.op.value, *([str(r.ranks)] if several else []), format_size(r.bytes),
             figure(r.busbw_gbps), figure(r.algbw_gbps), f"{r.latency_us:.1f}"]
            for r in report.results]
    said = ",".join(map(str, counts)) if several else str(report.ranks)
    title = f"{report.backend.value}: {said} ranks on {report.nodes} node(s), {report.launcher}"
    return fit_table(columns, rows, width, title=title,
                     caption="GB/s = 1e9 bytes/s; busbw as nccl-tests (doc/PERFORMANCE.md)")


def cuda_available() -> bool:
    """Is there a CUDA device torch can use? (imports torch: only when a bench runs)"""
    import torch

    return bool(torch.cuda.is_available())


def resolve_backend(backend: Backend, cuda: bool) -> Backend:
    """``auto`` -> nccl with CUDA, else gloo; nccl without CUDA is refused."""
    if backend is Backend.AUTO:
        return Backend.NCCL if cuda else Backend.GLOO
    if backend is Backend.NCCL and not cuda:
        raise BenchError("--backend nccl needs CUDA, and torch sees no GPU here; "
                         "use --backend gloo (or auto)")
    return backend


@dataclass(frozen=True)
class NetPlan:
    """A validated ``grace bench net`` request."""

    ranks: int
    nodes: int = 1
    sizes: tuple[int, ...] | None = None  # None: 1K up to the backend's default maximum
    ops: tuple[Op, ...] = (Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER)
    iters: int = 20
    warmup: int = 5
    backend: Backend = Backend.AUTO
    launcher: str = "local"
    placement: str = "same-leaf"
    timeout_s: float = 900.0


def run_net_bench(plan: NetPlan, cluster: Any = None) -> NetReport:
    """Start the ranks (:mod:`grace.bench.launch`), wait, and build the report.

    ``cluster`` is a ``ClusterSpec`` to place on with the Slurm launcher (None: what
    Slurm reports).
    """
    import json
    import tempfile
    from pathlib import Path

    from grace.bench import launch

    if plan.ranks < 2:
        raise BenchError("--ranks must be >= 2: a collective needs two ranks to move data")
    if plan.iters < 1 or plan.warmup < 0:
        raise BenchError("--iters must be >= 1 and --warmup >= 0")
    launcher = launch.Launcher(plan.launcher)
    placement = launch.Placement(plan.placement)
    # importing torch takes seconds on a busy host: only when the choice depends on CUDA
    cuda = plan.backend is not Backend.GLOO and cuda_available()
    backend = resolve_backend(plan.backend, cuda)
    sizes = list(plan.sizes) if plan.sizes else parse_sizes(
        f"{MIN_SIZE}..{default_max_size(backend is Backend.NCCL)}")
    node_names: list[str] = []
    if launcher is launch.Launcher.LOCAL:
        if plan.nodes != 1:
            raise BenchError(f"--nodes {plan.nodes} needs --launcher slurm: the local launcher "
                             "starts every rank on this host")
        local_ranks = plan.ranks
    else:
        from grace.core.topology import Topology

        spec = launch.slurm_cluster(cluster)
        node_names = launch.choose_nodes(Topology.from_spec(spec), plan.nodes, placement,
                                         usable=launch.slurm_usable_nodes())
        local_ranks = -(-plan.ranks // plan.nodes)
    check_memory(sizes, local_ranks, backend is Backend.NCCL)
    with tempfile.TemporaryDirectory(prefix="grace-bench-net-") as tmp:
        out = Path(tmp) / "rank0.json"
        cmd = launch.RankCommand(
            argv=launch.python_module(
                "grace.bench.net_worker", "--ops", ",".join(o.value for o in plan.ops),
                "--sizes", ",".join(str(s) for s in sizes), "--iters", str(plan.iters),
                "--warmup", str(plan.warmup), "--backend", backend.value, "--out", str(out)),
            env={"OMP_NUM_THREADS": "1"},
        )
        if launcher is launch.Launcher.LOCAL:
            launch.run_local(cmd, plan.ranks, plan.timeout_s)
        else:
            launch.run_slurm(cmd, plan.ranks, node_names, plan.timeout_s)
        raw = json.loads(out.read_text())
    results = [NetResult.from_time(Op(r["op"]), int(r["bytes"]), plan.ranks, plan.nodes,
                                   float(r["seconds"])) for r in raw["rows"]]
    return NetReport(results=results, backend=backend, ranks=plan.ranks, nodes=plan.nodes,
                     launcher=launcher.value,
                     node_names=sorted(set(raw.get("node_names") or node_names)),
                     placement=placement.value if launcher is launch.Launcher.SLURM else None,
                     iters=plan.iters, warmup=plan.warmup)
