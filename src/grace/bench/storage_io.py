"""Grace's side of ``grace bench storage``: the I/O a training job does.

Three access patterns:

- **data set writes**: ``k`` workers each write their share of the large
  files sequentially in ``block`` requests from one page-aligned buffer of
  random bytes (incompressible), and fsync each file when it is complete;
- **data loader reads**: the files in a shuffled order, dealt to ``k``
  workers round robin (how PyTorch's ``DataLoader`` hands a shuffled
  sampler's batches to its workers), each read sequentially into one
  page-aligned preallocated buffer (``readinto``: no allocation per block);
- **checkpoints**: a state dict saved and loaded through
  ``torch.distributed.checkpoint`` the way ``grace.runtime.checkpoint``
  does it (``FileSystemWriter(sync_files=True)``, then the directory
  fsynced), single process.

The workers are processes, as a ``DataLoader``'s are, started once per run
(:class:`WorkerPool`, running :mod:`grace.bench.storage_worker`) so no
process start-up is timed. Threads would share the GIL: every request hands
it back and forth, and on a busy machine a thread waiting for a GIL holder
that the kernel has descheduled loses a time slice per request (on this
project's loaded 2-core VM, four writer threads reached 0.27 GB/s where fio
reached 0.66 in the same minutes). All workers of a pass are told to start
at once, each times its own part, and a pass takes as long as its slowest
worker: total bytes over the longest worker's time, which is how fio computes
its aggregate bandwidth (``group_reporting``: bytes over the longest job's
runtime).

Before every timed read the files' pages are dropped from the page cache
with ``POSIX_FADV_DONTNEED``: the files were fsynced, so their pages are
clean and the kernel drops them without root. Reads then come from the
device, as fio's (``invalidate=1``) do. Readers hint
``POSIX_FADV_SEQUENTIAL``, as fio does for sequential jobs (its
``fadvise_hint`` default).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import random
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any


class StorageIOError(RuntimeError):
    """A pass read back fewer bytes than it wrote, or a worker failed or died."""


class Task(enum.Enum):
    """What a worker does with its share of the files."""

    WRITE = "write"
    READ = "read"


def evict(paths: Sequence[Path]) -> None:
    """Drop the (clean, fsynced) pages of ``paths`` from the page cache."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class WorkerPool:
    """``k`` worker processes (:mod:`grace.bench.storage_worker`), started once, one task each per pass.

    A context manager: leaving it closes the workers' stdin (they exit), and
    kills them if it is left by an exception (Ctrl-C included), so none
    outlives the run.
    """

    def __init__(self, workers: int, seed: int = 0) -> None:
        self.workers = workers
        self.seed = seed
        script = str(Path(__file__).with_name("storage_worker.py"))
        self._procs: list[subprocess.Popen[str]] = []
        try:
            for _ in range(workers):
                self._procs.append(
                    subprocess.Popen(
                        [sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                    )
                )
        except BaseException:
            self.close(kill=True)
            raise

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(kill=kind is not None)

    def close(self, kill: bool = False) -> None:
        for p in self._procs:
            if kill:
                p.kill()
            elif p.stdin is not None:
                with contextlib.suppress(OSError):
                    p.stdin.close()
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()

    def _send(self, proc: subprocess.Popen[str], obj: Any) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(obj) + "\n")
        proc.stdin.flush()

    def _reply(self, proc: subprocess.Popen[str]) -> dict[str, Any]:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise StorageIOError(f"a storage bench worker process died (exit status {proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def run(
        self, op: Task, shares: Sequence[Sequence[Path]], file_bytes: int, block_bytes: int
    ) -> tuple[float, int]:
        """Give worker ``i`` ``shares[i]``; (seconds of the slowest worker, bytes moved in all).

        Every worker prepares first; only when all are ready are they told to
        go, so they start together and each times its own part.
        """
        assert len(shares) == self.workers
        for i, (proc, share) in enumerate(zip(self._procs, shares, strict=True)):
            task = {"op": op.value, "paths": [str(p) for p in share], "file_bytes": file_bytes,
                    "block_bytes": block_bytes, "seed": self.seed + i}  # fmt: skip
            self._send(proc, task)
        ready = [self._reply(p) for p in self._procs]
        errors = [r["error"] for r in ready if "error" in r]
        word = "skip" if errors else "go"
        for proc in self._procs:
            self._send(proc, word)
        done = [self._reply(p) for p, r in zip(self._procs, ready, strict=True) if "error" not in r]
        errors += [r["error"] for r in done if "error" in r]
        if errors:
            raise StorageIOError(f"{op.value} pass failed: {errors[0]}")
        return max(float(r["seconds"]) for r in done), sum(int(r["bytes"]) for r in done)


def write_files(pool: WorkerPool, paths: Sequence[Path], file_bytes: int, block_bytes: int) -> float:
    """Write ``paths`` (each ``file_bytes``) with the pool's workers; seconds taken, fsyncs included.

    Worker ``i`` writes ``paths[i::k]`` one after another, like fio's job
    ``i`` with ``file_service_type=sequential``.
    """
    k = pool.workers
    seconds, _ = pool.run(Task.WRITE, [paths[i::k] for i in range(k)], file_bytes, block_bytes)
    return seconds


def read_files(pool: WorkerPool, paths: Sequence[Path], block_bytes: int, seed: int = 0) -> tuple[float, int]:
    """Read ``paths`` in a shuffled order dealt round robin to the workers; (seconds, bytes read).

    The caller evicts the files first so the reads reach the device.
    """
    order = list(paths)
    random.Random(seed).shuffle(order)
    k = pool.workers
    return pool.run(Task.READ, [order[i::k] for i in range(k)], 0, block_bytes)


def checkpoint_round_trip(
    directory: Path, nbytes: int, seed: int = 0, settle: Callable[[], None] | None = None
) -> tuple[float, float]:
    """Save then load a state dict of ``nbytes`` of float32 through DCP; (write s, read s).

    The write is timed from ``dcp.save`` until its files and the directory
    are fsynced (``sync_files=True`` fsyncs every file, as Grace's runtime
    does); the files are then evicted and the load into preallocated tensors
    is timed. The loaded tensors are compared with the saved ones after the
    clock stops, so a load that read nothing cannot pass as a fast one.
    """
    import torch
    import torch.distributed.checkpoint as dcp

    from grace.runtime.checkpoint import fsync_dir

    warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
    count, numel = _tensors(nbytes)
    gen = torch.Generator().manual_seed(seed)
    state = {"model": {f"layer{i}.weight": torch.rand(numel, generator=gen) for i in range(count)}}
    directory.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    dcp.save(state, storage_writer=dcp.FileSystemWriter(directory, sync_files=True), no_dist=True)
    fsync_dir(directory)
    write_s = time.perf_counter() - t0

    evict([p for p in directory.rglob("*") if p.is_file()])
    if settle is not None:
        settle()
    target = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()}}
    t0 = time.perf_counter()
    dcp.load(target, storage_reader=dcp.FileSystemReader(directory), no_dist=True)
    read_s = time.perf_counter() - t0
    for key, saved in state["model"].items():
        if not torch.equal(saved, target["model"][key]):
            raise StorageIOError(f"DCP loaded {key} from {directory} with different values than it saved")
    return write_s, read_s


def _tensors(nbytes: int) -> tuple[int, int]:
    """(tensors, elements each) of a float32 state dict of about ``nbytes``: 64 MiB tensors, like layers."""
    count = max(1, -(-nbytes // (64 << 20)))
    return count, max(1, nbytes // 4 // count)


def checkpoint_payload_bytes(nbytes: int) -> int:
    """The bytes of tensor data :func:`checkpoint_round_trip` really saves for ``nbytes``."""
    count, numel = _tensors(nbytes)
    return count * numel * 4
