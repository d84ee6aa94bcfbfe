"""Run Debian's ``fio`` and read its JSON: the device's own limit on a path.

``grace bench storage`` compares each of Grace's passes with fio doing the
same thing on the same directory in the same run, so fio is the yardstick,
not a competitor: the job this module builds mirrors Grace's pass (same
number of jobs, files per job, file size and block size; files visited one
after another, sequential within a file) and differs from fio's defaults
only where the defaults would measure something Grace's pass does not do:

- ``fallocate=none``: Grace writes a file the way a data pipeline does,
  without preallocating it; fio preallocates by default.
- ``end_fsync=1`` and ``fsync_on_close=1`` on writes: the data is on the
  device when the pass ends, as Grace's writes (one fsync per file) are.
- ``invalidate=1`` on reads: the page cache is dropped for each file before
  it is read, as Grace does with ``POSIX_FADV_DONTNEED``, so both read the
  device and neither reads memory.

Bandwidths are in GB/s of 10^9 bytes, fio's ``bw_bytes`` divided by 1e9.
"""

from __future__ import annotations

import enum
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INSTALL_HINT = "install it with `apt-get install fio` (Debian/Ubuntu) and run again"


class FioError(RuntimeError):
    """fio is missing, failed, or wrote something that is not its JSON report."""


class FioOp(enum.Enum):
    """The two passes fio runs; the value is fio's ``rw=``."""

    READ = "read"
    WRITE = "write"


@dataclass(frozen=True)
class FioJob:
    """One fio run shaped like one of Grace's passes.

    ``jobs`` processes each go through ``files_per_job`` files of
    ``file_bytes`` one after another (``file_service_type=sequential``),
    reading or writing each from start to end in ``block_bytes`` requests.
    A read job with the same ``name`` and shape reads the files the write
    job left (fio names them ``name.job.file``).
    """

    name: str
    directory: Path
    op: FioOp
    jobs: int
    files_per_job: int
    file_bytes: int
    block_bytes: int

    def args(self) -> list[str]:
        """fio's command-line arguments for this job (binary not included)."""
        if min(self.jobs, self.files_per_job, self.file_bytes, self.block_bytes) < 1:
            raise ValueError(f"fio job {self.name}: every count and size must be positive: {self}")
        args = [
            f"--name={self.name}",
            f"--directory={self.directory}",
            f"--rw={self.op.value}",
            f"--bs={self.block_bytes}",
            f"--numjobs={self.jobs}",
            f"--nrfiles={self.files_per_job}",
            f"--filesize={self.file_bytes}",
            f"--size={self.file_bytes * self.files_per_job}",
            "--file_service_type=sequential",
            "--ioengine=psync",
            "--fallocate=none",
            "--group_reporting",
            "--output-format=json",
        ]
        if self.op is FioOp.WRITE:
            args += ["--end_fsync=1", "--fsync_on_close=1"]
        else:
            args += ["--invalidate=1"]
        return args


@dataclass(frozen=True)
class FioResult:
    """fio's aggregate figures for one job (all its processes together)."""

    op: FioOp
    bw_bytes: float
    io_bytes: int
    runtime_ms: int
    version: str

    @property
    def gbps(self) -> float:
        """Bandwidth in GB/s (10^9 bytes per second)."""
        return self.bw_bytes / 1e9


def fio_binary() -> str:
    """The path of ``fio``; a :class:`FioError` with the install command if it is missing."""
    found = shutil.which("fio")
    if found is None:
        raise FioError(f"fio is not on PATH: grace bench storage measures the device with it; {INSTALL_HINT}")
    return found


def fio_version(binary: str) -> str:
    """fio's version string, e.g. ``fio-3.33``."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise FioError(f"`{binary} --version` failed ({exc}); {INSTALL_HINT}") from exc
    return out.stdout.strip()


def parse_fio_json(text: str, op: FioOp) -> FioResult:
    """The aggregate result of ``op`` in fio's ``--output-format=json`` report.

    fio may print warnings before the JSON document, so parsing starts at the
    first ``{``. With ``--group_reporting`` there is one entry in ``jobs``;
    without it the entries are summed (bandwidths add up because the jobs ran
    at the same time). A job that reports an error, or moved no bytes, is a
    :class:`FioError`: a zero would otherwise look like a slow device.
    """
    start = text.find("{")
    if start < 0:
        raise FioError(f"fio printed no JSON report; its output began: {text[:200]!r}")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise FioError(f"fio's JSON report does not parse ({exc}); its output began: {text[:200]!r}") from exc
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or not jobs:
        raise FioError("fio's JSON report has no `jobs` list")
    bw = 0.0
    io = 0
    runtime = 0
    for job in jobs:
        if not isinstance(job, dict) or not isinstance(job.get(op.value), dict):
            raise FioError(f"fio's JSON report has a job without a `{op.value}` section")
        if job.get("error"):
            raise FioError(f"fio job {job.get('jobname')!r} failed with error {job['error']}")
        part: dict[str, Any] = job[op.value]
        bw += float(part.get("bw_bytes", 0))
        io += int(part.get("io_bytes", 0))
        runtime = max(runtime, int(part.get("runtime", 0)))
    if bw <= 0 or io <= 0:
        raise FioError(f"fio's {op.value} pass moved no data (bw_bytes={bw}, io_bytes={io})")
    return FioResult(
        op=op, bw_bytes=bw, io_bytes=io, runtime_ms=runtime, version=str(doc.get("fio version", ""))
    )


def run_fio(job: FioJob, binary: str, timeout_s: float = 600.0) -> FioResult:
    """Run ``job`` and return its result.

    ``subprocess.run`` kills fio if this process is interrupted (Ctrl-C) or
    the timeout passes, so no fio outlives the benchmark; the caller removes
    the files.
    """
    try:
        proc = subprocess.run([binary, *job.args()], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise FioError(
            f"fio {job.op.value} on {job.directory} ran past {timeout_s:.0f} s: pass a smaller --size"
        ) from exc
    except OSError as exc:
        raise FioError(f"could not run fio ({exc}); {INSTALL_HINT}") from exc
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()[-500:]
        raise FioError(f"fio {job.op.value} on {job.directory} exited with {proc.returncode}: {detail}")
    return parse_fio_json(proc.stdout, job.op)
