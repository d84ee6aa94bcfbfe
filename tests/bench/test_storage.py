"""``grace bench storage``: fio's JSON, the options' errors, cleanup, and a real run.

The fio reports in ``data/`` (``fio_read.json``, ``fio_write.json``) are real
output of Debian's fio 3.33, captured on this project's development machine
from the job :class:`FioJob` builds (two jobs, two 1 MiB files each, 64 KiB
blocks), so parsing is tested against what fio really prints.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grace.bench import fio as fio_mod
from grace.bench import storage as st
from grace.bench import storage_io as sio
from grace.bench.fio import FioError, FioJob, FioOp, parse_fio_json

DATA = Path(__file__).parent / "data"
HAVE_FIO = shutil.which("fio") is not None
if not HAVE_FIO and os.environ.get("GRACE_TEST_FIO") == "1":  # CI installs it: never skip there
    raise RuntimeError("GRACE_TEST_FIO=1 but fio is not installed (apt-get install fio)")
needs_fio = pytest.mark.skipif(not HAVE_FIO, reason="fio is not installed (apt-get install fio)")


def fio_text(name: str) -> str:
    return (DATA / name).read_text()


# --- fio's JSON ---------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "op"), [("fio_read.json", FioOp.READ), ("fio_write.json", FioOp.WRITE)])
def test_a_real_fio_report_gives_its_aggregate_bandwidth(name: str, op: FioOp) -> None:
    doc = json.loads(fio_text(name))
    part = doc["jobs"][0][op.value]
    result = parse_fio_json(fio_text(name), op)
    assert result.op is op
    assert result.io_bytes == 2 * 2 * (1 << 20)  # two jobs, two 1 MiB files each
    assert result.bw_bytes == part["bw_bytes"] > 0
    assert result.gbps == pytest.approx(part["bw_bytes"] / 1e9)
    assert result.version == "fio-3.33"


def test_warnings_before_the_json_are_skipped() -> None:
    text = "fio: file hash not empty on exit\n" + fio_text("fio_read.json")
    assert parse_fio_json(text, FioOp.READ).io_bytes == 4 << 20


def test_jobs_reported_separately_are_summed() -> None:
    doc = json.loads(fio_text("fio_read.json"))
    doc["jobs"] = [doc["jobs"][0], {**doc["jobs"][0], "jobname": "second"}]
    one = parse_fio_json(fio_text("fio_read.json"), FioOp.READ)
    both = parse_fio_json(json.dumps(doc), FioOp.READ)
    assert both.bw_bytes == pytest.approx(2 * one.bw_bytes)
    assert both.io_bytes == 2 * one.io_bytes


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("fio: failed to open directory\n", "no JSON"),
        ('{"jobs": [', "does not parse"),
        ('{"fio version": "fio-3.33"}', "no `jobs`"),
    ],
)
def test_output_that_is_not_a_report_is_an_error(text: str, says: str) -> None:
    with pytest.raises(FioError, match=says):
        parse_fio_json(text, FioOp.READ)


def test_a_failed_job_or_one_that_moved_nothing_is_an_error_not_a_slow_device() -> None:
    doc = json.loads(fio_text("fio_write.json"))
    failed = {**doc, "jobs": [{**doc["jobs"][0], "error": 28}]}
    with pytest.raises(FioError, match="error 28"):
        parse_fio_json(json.dumps(failed), FioOp.WRITE)
    with pytest.raises(FioError, match="moved no data"):
        parse_fio_json(fio_text("fio_write.json"), FioOp.READ)  # a write report has an empty read section


def test_the_fio_job_mirrors_graces_pass_and_keeps_the_comparison_fair(tmp_path: Path) -> None:
    shape = {"name": "j", "directory": tmp_path, "jobs": 4, "files_per_job": 2, "file_bytes": 8 << 20}
    write = FioJob(op=FioOp.WRITE, block_bytes=1 << 20, **shape).args()
    read = FioJob(op=FioOp.READ, block_bytes=1 << 20, **shape).args()
    for args in (write, read):
        assert {"--numjobs=4", "--nrfiles=2", f"--filesize={8 << 20}", f"--size={16 << 20}"} <= set(args)
        assert {"--bs=1048576", "--file_service_type=sequential", "--fallocate=none"} <= set(args)
        assert "--output-format=json" in args
    assert {"--end_fsync=1", "--fsync_on_close=1"} <= set(write)
    assert "--invalidate=1" in read
    with pytest.raises(ValueError, match="positive"):
        FioJob(op=FioOp.READ, block_bytes=0, **shape).args()


def test_missing_fio_names_the_package_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FioError, match="apt-get install fio"):
        fio_mod.fio_binary()
    with pytest.raises(FioError, match="apt-get install fio"):
        st.run_storage_bench(tmp_path, size_mb=8, small_files=4)
    assert list(tmp_path.iterdir()) == []


# --- options and the path -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"readers": 0}, "--readers"),
        ({"size_mb": 7}, "--size must be at least 8 MiB"),
        ({"small_files": 0}, "--small-files"),
        ({"rounds": 0}, "rounds"),
        ({"block_kb": 1}, "block size"),
        ({"ckpt_mb": 0}, "checkpoint size"),
        ({"settle_s": -1.0}, "settle time"),
    ],
)
def test_bad_options_name_the_option(kwargs: dict[str, float], says: str) -> None:
    args = {"readers": 4, "size_mb": 1024, "small_files": 10} | kwargs
    readers, size_mb, small_files = args.pop("readers"), args.pop("size_mb"), args.pop("small_files")
    with pytest.raises(st.StorageBenchError, match=says):
        st.plan_storage(readers, size_mb, small_files, **args)


def test_the_data_set_is_a_whole_number_of_files_per_reader() -> None:
    plan = st.plan_storage(4, 1024, 100)
    assert (plan.files, plan.file_bytes, plan.block_bytes) == (8, 128 << 20, 1 << 20)
    odd = st.plan_storage(3, 100, 10)
    assert odd.files % 3 == 0 and odd.files >= 6
    assert odd.data_bytes <= 100 << 20
    big = st.plan_storage(2, 4096, 10)
    assert big.file_bytes == st.MAX_FILE_MB << 20
    assert st.plan_storage(2, 8, 10, block_kb=4096).block_bytes == 2 << 20  # never above a file


def test_an_unusable_path_names_path_or_size_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(st.StorageBenchError, match=r"--path .* does not exist: create it"):
        st.check_path(tmp_path / "nope", 1)
    (tmp_path / "file").write_text("x")
    with pytest.raises(st.StorageBenchError, match="is not a directory"):
        st.check_path(tmp_path / "file", 1)
    with pytest.raises(st.StorageBenchError, match="pass a smaller --size"):
        st.check_path(tmp_path, 1 << 62)
    st.check_path(tmp_path, 1)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_path_is_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(st.StorageBenchError, match="not writable"):
            st.check_path(tmp_path, 1)
    finally:
        tmp_path.chmod(0o700)


# --- Grace's passes -----------------------------------------------------------------------


@pytest.mark.slow
def test_worker_processes_write_then_read_shuffled_every_byte(tmp_path: Path) -> None:
    paths = [tmp_path / f"f{i}" for i in range(6)]
    with sio.WorkerPool(3) as pool:
        write_s = sio.write_files(pool, paths, 300_000, 65536)
        assert write_s > 0 and all(p.stat().st_size == 300_000 for p in paths)
        sio.evict(paths)
        read_s, got = sio.read_files(pool, paths, 65536)
        assert read_s > 0 and got == 6 * 300_000
        # a worker's error fails the pass, and the pool still serves the next one
        with pytest.raises(sio.StorageIOError, match="FileNotFoundError"):
            sio.read_files(pool, [tmp_path / "missing", *paths[:2]], 4096)
        assert sio.read_files(pool, paths, 65536)[1] == 6 * 300_000


@pytest.mark.slow
@needs_fio
def test_an_interrupt_mid_run_leaves_no_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def interrupted(*args: object, **kwargs: object) -> tuple[float, int]:
        raise KeyboardInterrupt

    monkeypatch.setattr(sio, "read_files", interrupted)  # after Grace's files are written
    with pytest.raises(KeyboardInterrupt):
        st.run_storage_bench(tmp_path, readers=2, size_mb=8, small_files=4, rounds=1)
    assert list(tmp_path.iterdir()) == []


def _result(**overrides: object) -> st.StorageResult:
    base: dict[str, object] = dict(
        path="/data", fio_version="fio-3.33", readers=4, rounds=3, settle_s=1.0, files=8,
        file_bytes=128 << 20, block_bytes=1 << 20, size_bytes=1 << 30, read_gbps=1.8, fio_read_gbps=2.0,
        write_gbps=0.9,
        fio_write_gbps=1.0, read_ratio=0.9, write_ratio=0.9, ckpt_bytes=1 << 29, ckpt_write_gbps=0.3,
        ckpt_read_gbps=0.4, ckpt_write_ratio=0.3, ckpt_read_ratio=0.2, small_files=100, small_bytes=65536,
        small_read_gbps=0.5, small_read_files_per_s=8000.0, small_write_files_per_s=3000.0,
        read_samples=(1.8,), fio_read_samples=(2.0,), write_samples=(0.9,), fio_write_samples=(1.0,),
        elapsed_s=30.0,
    )  # fmt: skip
    return st.StorageResult(**(base | overrides))  # type: ignore[arg-type]


def test_the_html_page_plots_grace_against_fio_without_a_cdn(tmp_path: Path) -> None:
    out = tmp_path / "storage.html"
    st.storage_html(_result(), out)
    page = out.read_text()
    # booleans, not `in page` asserts: pytest would diff the 4 MB page on a failure
    shows = {s: s in page for s in ("Grace", "fio (fio-3.33)", "90% of fio", "8,000 files/s", "<script src=")}
    assert shows == {"Grace": True, "fio (fio-3.33)": True, "90% of fio": True, "8,000 files/s": True,
                     "<script src=": False}  # fmt: skip
    assert _result().to_json()["read_samples"] == [1.8]


# --- end to end ---------------------------------------------------------------------------

ISSUE_KEYS = (
    "read_gbps",
    "fio_read_gbps",
    "write_gbps",
    "fio_write_gbps",
    "ckpt_write_gbps",
    "ckpt_read_gbps",
)


@pytest.mark.slow
@needs_fio
def test_a_real_run_reports_every_figure_and_its_ratios(tmp_path: Path) -> None:
    seen: list[str] = []
    result = st.run_storage_bench(
        tmp_path, readers=2, size_mb=16, small_files=40, progress=seen.append, rounds=2, settle_s=0.1
    )
    doc = result.to_json()
    numbers = [k for k, v in doc.items() if isinstance(v, (int, float))]
    assert set(ISSUE_KEYS) <= set(numbers)
    for key in numbers:
        assert math.isfinite(doc[key]) and doc[key] > 0, key
    assert doc["read_ratio"] == pytest.approx(doc["read_gbps"] / doc["fio_read_gbps"])
    assert doc["write_ratio"] == pytest.approx(doc["write_gbps"] / doc["fio_write_gbps"])
    assert doc["ckpt_write_ratio"] == pytest.approx(doc["ckpt_write_gbps"] / doc["fio_write_gbps"])
    for key in ("read_samples", "fio_read_samples", "write_samples", "fio_write_samples"):
        assert len(doc[key]) == 2 and min(doc[key]) > 0
    assert doc["fio_version"].startswith("fio-") and doc["path"] == str(tmp_path)
    assert any("fio" in m for m in seen) and any("DCP" in m for m in seen)
    assert list(tmp_path.iterdir()) == []
    json.dumps(doc)


@pytest.mark.slow
@needs_fio
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_run_removes_its_files(tmp_path: Path, sig: signal.Signals) -> None:
    code = (
        "import sys; from pathlib import Path; from grace.bench.storage import run_storage_bench; "
        "run_storage_bench(Path(sys.argv[1]), readers=2, size_mb=256, small_files=10, rounds=20)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)])
    try:
        deadline = time.monotonic() + 60
        while not any(p.is_file() for p in tmp_path.rglob("*")):
            assert time.monotonic() < deadline, "the run wrote nothing in 60 s"
            assert proc.poll() is None, "the run ended before it was signalled"
            time.sleep(0.05)
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert list(tmp_path.iterdir()) == []
