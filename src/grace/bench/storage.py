"""``grace bench storage --path DIR``: does storage keep up, against fio on the same path.

A training job waits on storage in two ways: its data loader reads shuffled
shards (and many small files), and its checkpoints write and read a burst.
This bench runs those access patterns (:mod:`grace.bench.storage_io`) and, in
the same run on the same directory, fio (:mod:`grace.bench.fio`) doing the
same sequential reads and writes: same number of jobs, files per job, file
size and block size. Each of Grace's figures is reported next to fio's and as
a ratio, so "storage is slow" and "Grace uses storage badly" can be told
apart.

How the comparison is kept fair:

- **Page cache.** Every read pass reads the device: Grace drops each file's
  pages (``POSIX_FADV_DONTNEED`` after fsync) before reading, fio
  invalidates them (``invalidate=1``). Every write pass ends with the data
  on the device: one fsync per file in both.
- **Noise.** Shared disks (and the virtual disks of cloud machines) vary by
  tens of percent from one second to the next, so the passes run in
  ``rounds`` rounds, fio and Grace alternating which goes first; each
  headline figure is the median over rounds, the ratio is the ratio of the
  medians, and every sample is kept in the result.
- **Same bytes.** Each tool writes fresh files (the previous round's are
  deleted and the file system synced first) and then reads the files it
  just wrote.
- **Same rest.** Every timed pass starts after the device rested
  ``settle_s``, and Grace's passes rest as long again as fio spends outside
  its timed span (see :meth:`_Run.settle`): a virtual disk's write burst
  keeps flushing for seconds after fsync returns.

docs/bench.md (``## Storage``) has the full method and measured figures.

Checkpoint figures go through real ``torch.distributed.checkpoint`` of a
float32 state dict of ``ckpt_mb`` (by default half the data set); their
ratios are against fio's sequential write and read. Small files are Grace's
alone (files per second): fio has no loader-like small-file pattern to
compare with.

Everything is written under one hidden directory in ``--path``, removed at
the end, on an error and on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grace.bench import fio as fio_mod
from grace.bench import storage_io as sio

MIB = 1 << 20
MAX_FILE_MB = 256
DEFAULT_SIZE_MB = 1024
DEFAULT_SMALL_FILES = 2000
DEFAULT_SMALL_KB = 64
DEFAULT_BLOCK_KB = 1024
DEFAULT_ROUNDS = 4
DEFAULT_SETTLE_S = 1.0
_SPACE_MARGIN = 1.1
_SPACE_SLACK = 64 * MIB
_SMALL_PER_DIR = 1000

Progress = Callable[[str], None]


class StorageBenchError(ValueError):
    """A bad argument or an unusable ``--path``; the message names the option and the fix."""


@dataclass(frozen=True)
class StoragePlan:
    """The sizes of one run, derived once from the options and checked before any byte is written."""

    readers: int
    files: int
    file_bytes: int
    block_bytes: int
    small_files: int
    small_bytes: int
    ckpt_bytes: int
    rounds: int
    settle_s: float = DEFAULT_SETTLE_S

    @property
    def data_bytes(self) -> int:
        return self.files * self.file_bytes

    @property
    def need_bytes(self) -> int:
        """Free space the run needs: its largest phase (each phase deletes its files) plus 10%."""
        peak = max(self.data_bytes, self.small_files * self.small_bytes, self.ckpt_bytes)
        return int(peak * _SPACE_MARGIN) + _SPACE_SLACK


def plan_storage(
    readers: int,
    size_mb: int,
    small_files: int,
    *,
    small_kb: int = DEFAULT_SMALL_KB,
    block_kb: int = DEFAULT_BLOCK_KB,
    ckpt_mb: int | None = None,
    rounds: int = DEFAULT_ROUNDS,
    settle_s: float = DEFAULT_SETTLE_S,
) -> StoragePlan:
    """Turn the options into file counts and sizes, or a :class:`StorageBenchError` naming the option.

    The data set is ``size_mb`` split into files of up to 256 MiB, at least
    two per reader (so the shuffled order matters), and a whole number of
    files per reader (so fio's jobs each get the same share).
    """
    if readers < 1:
        raise StorageBenchError(f"--readers must be at least 1, got {readers}")
    if size_mb < 2 * readers:
        raise StorageBenchError(
            f"--size must be at least {2 * readers} MiB for {readers} readers (two files of 1 MiB each), "
            f"got {size_mb}: pass a larger --size or fewer --readers"
        )
    if small_files < 1:
        raise StorageBenchError(f"--small-files must be at least 1, got {small_files}")
    if small_kb < 1:
        raise StorageBenchError(f"small-file size must be at least 1 KiB, got {small_kb}")
    if block_kb < 4:
        raise StorageBenchError(f"block size must be at least 4 KiB, got {block_kb}")
    if rounds < 1:
        raise StorageBenchError(f"rounds must be at least 1, got {rounds}")
    if not 0 <= settle_s <= 60:
        raise StorageBenchError(f"settle time must be within 0..60 s, got {settle_s}")
    if ckpt_mb is not None and ckpt_mb < 1:
        raise StorageBenchError(f"checkpoint size must be at least 1 MiB, got {ckpt_mb}")
    file_mb = min(MAX_FILE_MB, size_mb // (2 * readers))
    files = size_mb // file_mb // readers * readers
    file_bytes = file_mb * MIB
    return StoragePlan(
        readers=readers,
        files=files,
        file_bytes=file_bytes,
        block_bytes=min(block_kb * 1024, file_bytes),
        small_files=small_files,
        small_bytes=small_kb * 1024,
        ckpt_bytes=sio.checkpoint_payload_bytes((max(1, size_mb // 2) if ckpt_mb is None else ckpt_mb) * MIB),
        rounds=rounds,
        settle_s=settle_s,
    )


def check_path(path: Path, need_bytes: int) -> None:
    """Refuse a ``--path`` the run cannot use, before anything is written."""
    if not path.exists():
        raise StorageBenchError(
            f"--path {path} does not exist: create it, or point --path at an existing directory"
        )
    if not path.is_dir():
        raise StorageBenchError(f"--path {path} is not a directory: point --path at the directory to measure")
    if not os.access(path, os.W_OK | os.X_OK):
        raise StorageBenchError(
            f"--path {path} is not writable by this user: "
            "pick a directory you can write to, or fix its permissions"
        )
    free = shutil.disk_usage(path).free
    if free < need_bytes:
        raise StorageBenchError(
            f"--path {path} has {free / 2**30:.2f} GiB free and this run needs {need_bytes / 2**30:.2f} GiB: "
            "pass a smaller --size, or free space there"
        )


@dataclass(frozen=True)
class StorageResult:
    """One run's figures; GB/s are 10^9 bytes per second, medians over ``rounds``.

    ``read_ratio = read_gbps / fio_read_gbps`` and ``write_ratio`` likewise,
    from the same run on the same ``path``; the ``*_samples`` are the
    per-round figures behind the medians, in round order.
    """

    path: str
    fio_version: str
    readers: int
    rounds: int
    settle_s: float
    files: int
    file_bytes: int
    block_bytes: int
    size_bytes: int
    read_gbps: float
    fio_read_gbps: float
    write_gbps: float
    fio_write_gbps: float
    read_ratio: float
    write_ratio: float
    ckpt_bytes: int
    ckpt_write_gbps: float
    ckpt_read_gbps: float
    ckpt_write_ratio: float
    ckpt_read_ratio: float
    small_files: int
    small_bytes: int
    small_read_gbps: float
    small_read_files_per_s: float
    small_write_files_per_s: float
    read_samples: tuple[float, ...]
    fio_read_samples: tuple[float, ...]
    write_samples: tuple[float, ...]
    fio_write_samples: tuple[float, ...]
    elapsed_s: float

    def to_json(self) -> dict[str, Any]:
        """A plain dict for ``--json`` (samples as lists)."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        return out


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Let SIGTERM unwind like Ctrl-C, so the ``finally`` that removes the files runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _clear(directory: Path) -> None:
    """Empty ``directory`` and flush the file system, outside any timed span.

    The ``sync`` commits the deletion now (on a file system mounted with
    ``discard`` that includes trimming the freed blocks), so the next pass's
    first fsync does not pay for the previous pass's files.
    """
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    os.sync()


def _gbps(nbytes: int, seconds: float) -> float:
    return nbytes / max(seconds, 1e-9) / 1e9


class _Run:
    """The passes of one run inside its work directory ``work``."""

    def __init__(
        self, plan: StoragePlan, work: Path, fio_bin: str, pool: sio.WorkerPool, progress: Progress
    ) -> None:
        self.plan = plan
        self.pool = pool
        self.work = work
        self.fio_bin = fio_bin
        self.say = progress
        self.grace_dir = work / "grace"
        self.fio_dir = work / "fio"
        self.fio_overhead_s = 0.0
        self.grace_paths = [self.grace_dir / f"shard-{i:05d}.bin" for i in range(plan.files)]

    def settle(self, extra_s: float = 0.0) -> None:
        """Leave the device idle before a timed pass: ``settle_s`` plus ``extra_s``.

        A virtual disk (and a storage array's cache) absorbs a burst of
        writes and flushes it for seconds after the guest's fsync returned;
        a pass started meanwhile shares the device with that flush. On this
        project's VM a second 1 GiB write within 3 s of the first ran at
        0.4 GB/s against 1.2 to 2 GB/s for the first. So every pass rests
        first, and Grace's passes rest as long again as fio spends starting
        and stopping outside its timed span (``extra_s``): without that,
        fio's start-up alone gave its passes a longer rest, and the order of
        the passes, not the tools, decided the figures.
        """
        time.sleep(self.plan.settle_s + extra_s)

    def fio_job(self, op: fio_mod.FioOp) -> fio_mod.FioJob:
        p = self.plan
        return fio_mod.FioJob(
            name="grace-seq",
            directory=self.fio_dir,
            op=op,
            jobs=p.readers,
            files_per_job=p.files // p.readers,
            file_bytes=p.file_bytes,
            block_bytes=p.block_bytes,
        )

    def _fio(self, op: fio_mod.FioOp) -> float:
        """GB/s of one fio pass; notes how long fio spent outside its timed span."""
        self.settle()
        self.say(f"fio: sequential {op.value}")
        t0 = time.perf_counter()
        result = fio_mod.run_fio(self.fio_job(op), self.fio_bin)
        self.fio_overhead_s = max(0.0, time.perf_counter() - t0 - result.runtime_ms / 1000)
        return result.gbps

    def fio_round(self) -> tuple[float, float]:
        """(read, write) GB/s of fio: a write of fresh files, then a read of them (``invalidate=1``)."""
        _clear(self.fio_dir)
        write = self._fio(fio_mod.FioOp.WRITE)
        read = self._fio(fio_mod.FioOp.READ)
        _clear(self.fio_dir)
        return read, write

    def grace_round(self, seed: int) -> tuple[float, float]:
        """(read, write) GB/s of Grace: writers on fresh files, then shuffled readers, evicted first.

        Each pass first rests as long as fio's passes do, start-up included
        (:meth:`settle` plus fio's last overhead), so both tools' passes
        begin the same time after the pass before them.
        """
        p = self.plan
        _clear(self.grace_dir)
        self.settle(self.fio_overhead_s)
        self.say("grace: data set write")
        write_s = sio.write_files(self.pool, self.grace_paths, p.file_bytes, p.block_bytes)
        sio.evict(self.grace_paths)
        self.settle(self.fio_overhead_s)
        self.say("grace: shuffled read")
        read_s, got = sio.read_files(self.pool, self.grace_paths, p.block_bytes, seed)
        if got != p.data_bytes:
            raise sio.StorageIOError(
                f"read back {got} bytes of the {p.data_bytes} written in {self.grace_dir}"
            )
        _clear(self.grace_dir)
        return _gbps(got, read_s), _gbps(p.data_bytes, write_s)

    def small_files(self) -> tuple[float, float, float]:
        """(read GB/s, read files/s, write files/s) over many small files."""
        p = self.plan
        root = self.work / "small"
        dirs = -(-p.small_files // _SMALL_PER_DIR)
        for d in range(dirs):
            (root / f"d{d:04d}").mkdir(parents=True)
        paths = [root / f"d{i // _SMALL_PER_DIR:04d}" / f"f{i:07d}" for i in range(p.small_files)]
        self.settle()
        self.say(f"grace: {p.small_files} small files")
        write_s = sio.write_files(self.pool, paths, p.small_bytes, p.small_bytes)
        sio.evict(paths)
        self.settle()
        read_s, got = sio.read_files(self.pool, paths, p.small_bytes)
        if got != p.small_files * p.small_bytes:
            raise sio.StorageIOError(f"read back {got} bytes of the small files written in {root}")
        shutil.rmtree(root)
        return _gbps(got, read_s), p.small_files / read_s, p.small_files / write_s

    def checkpoint(self) -> tuple[float, float]:
        """(write, read) GB/s of a DCP save and load."""
        self.say(f"grace: DCP checkpoint of {self.plan.ckpt_bytes / MIB:.0f} MiB")
        directory = self.work / "ckpt"
        self.settle()
        write_s, read_s = sio.checkpoint_round_trip(directory, self.plan.ckpt_bytes, settle=self.settle)
        shutil.rmtree(directory)
        return _gbps(self.plan.ckpt_bytes, write_s), _gbps(self.plan.ckpt_bytes, read_s)


def run_storage_bench(
    path: Path,
    readers: int = 4,
    size_mb: int = DEFAULT_SIZE_MB,
    small_files: int = DEFAULT_SMALL_FILES,
    progress: Progress | None = None,
    *,
    small_kb: int = DEFAULT_SMALL_KB,
    block_kb: int = DEFAULT_BLOCK_KB,
    ckpt_mb: int | None = None,
    rounds: int = DEFAULT_ROUNDS,
    settle_s: float = DEFAULT_SETTLE_S,
) -> StorageResult:
    """Measure ``path`` with Grace's access patterns and fio's, in one run; see the module docstring.

    Raises :class:`StorageBenchError` for bad options or an unusable path and
    :class:`~grace.bench.fio.FioError` when fio is missing or fails, both
    before anything is written where they can be; every file written is
    removed whatever happens.
    """
    path = Path(path)
    plan = plan_storage(
        readers,
        size_mb,
        small_files,
        small_kb=small_kb,
        block_kb=block_kb,
        ckpt_mb=ckpt_mb,
        rounds=rounds,
        settle_s=settle_s,
    )
    check_path(path, plan.need_bytes)
    fio_bin = fio_mod.fio_binary()
    version = fio_mod.fio_version(fio_bin)
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    try:
        work = Path(tempfile.mkdtemp(prefix=".grace-bench-storage-", dir=path))
    except PermissionError as exc:
        raise StorageBenchError(
            f"--path {path}: cannot create a directory there ({exc}); pick a writable --path"
        ) from exc
    samples: dict[str, list[float]] = {"grace_read": [], "fio_read": [], "grace_write": [], "fio_write": []}
    try:
        with _sigterm_as_interrupt(), sio.WorkerPool(plan.readers) as pool:
            run = _Run(plan, work, fio_bin, pool, say)
            for r in range(plan.rounds):
                say(f"round {r + 1}/{plan.rounds}")
                for tool in ("fio", "grace") if r % 2 == 0 else ("grace", "fio"):
                    read, write = run.fio_round() if tool == "fio" else run.grace_round(seed=r)
                    samples[f"{tool}_read"].append(read)
                    samples[f"{tool}_write"].append(write)
            small_read, small_rfps, small_wfps = run.small_files()
            ckpt_write, ckpt_read = run.checkpoint()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return StorageResult(
        path=str(path),
        fio_version=version,
        readers=plan.readers,
        rounds=plan.rounds,
        settle_s=plan.settle_s,
        files=plan.files,
        file_bytes=plan.file_bytes,
        block_bytes=plan.block_bytes,
        size_bytes=plan.data_bytes,
        read_gbps=med["grace_read"],
        fio_read_gbps=med["fio_read"],
        write_gbps=med["grace_write"],
        fio_write_gbps=med["fio_write"],
        read_ratio=med["grace_read"] / med["fio_read"],
        write_ratio=med["grace_write"] / med["fio_write"],
        ckpt_bytes=plan.ckpt_bytes,
        ckpt_write_gbps=ckpt_write,
        ckpt_read_gbps=ckpt_read,
        ckpt_write_ratio=ckpt_write / med["fio_write"],
        ckpt_read_ratio=ckpt_read / med["fio_read"],
        small_files=plan.small_files,
        small_bytes=plan.small_bytes,
        small_read_gbps=small_read,
        small_read_files_per_s=small_rfps,
        small_write_files_per_s=small_wfps,
        read_samples=tuple(samples["grace_read"]),
        fio_read_samples=tuple(samples["fio_read"]),
        write_samples=tuple(samples["grace_write"]),
        fio_write_samples=tuple(samples["fio_write"]),
        elapsed_s=time.perf_counter() - t0,
    )


def storage_html(result: StorageResult, out: Path) -> None:
    """A self-contained page (plotly inlined, no CDN): Grace's bandwidth next to fio's per pass."""
    import plotly.graph_objects as go

    passes = ["sequential read", "sequential write", "checkpoint write (DCP)", "checkpoint read (DCP)"]
    grace = [result.read_gbps, result.write_gbps, result.ckpt_write_gbps, result.ckpt_read_gbps]
    fio = [result.fio_read_gbps, result.fio_write_gbps, result.fio_write_gbps, result.fio_read_gbps]
    ratios = [result.read_ratio, result.write_ratio, result.ckpt_write_ratio, result.ckpt_read_ratio]
    fig = go.Figure()
    fig.add_bar(
        name="Grace",
        x=passes,
        y=grace,
        text=[f"{g:.2f} ({r:.0%} of fio)" for g, r in zip(grace, ratios, strict=True)],
    )
    fig.add_bar(name=f"fio ({result.fio_version})", x=passes, y=fio, text=[f"{f:.2f}" for f in fio])
    fig.update_layout(
        barmode="group",
        title=(
            f"Storage on {result.path}: {result.readers} readers, {result.files} x "
            f"{result.file_bytes / MIB:.0f} MiB files, {result.block_bytes // 1024} KiB blocks, "
            f"median of {result.rounds} rounds"
        ),
        yaxis_title="GB/s (10^9 bytes/s)",
    )
    small = (
        f"<p>Small files ({result.small_files} x {result.small_bytes // 1024} KiB, "
        f"{result.readers} readers): "
        f"read {result.small_read_files_per_s:,.0f} files/s ({result.small_read_gbps:.3f} GB/s), "
        f"write {result.small_write_files_per_s:,.0f} files/s (fsync each).</p>"
    )
    body = fig.to_html(include_plotlyjs=True, full_html=False)
    out.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>grace bench storage</title></head>"
        f"<body>{body}{small}</body></html>",
        encoding="utf-8",
    )
