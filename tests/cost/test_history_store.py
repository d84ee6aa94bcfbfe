"""``grace assess --format grace``: a real SQLite store, written through the store's own
repository (as the API and the reconciler write it), read back as a history."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grace.cli.main import app
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import AttemptState, JobState
from grace.cost.history import HistoryFormat, load_history
from grace.cost.history_store import load_store
from grace.spec.job import JobSpec, WorkloadClass

#: The fixture's clock: a recent date, so a job still running "now" has run for weeks, not
#: since 1970 (which the plausibility filter would rightly skip).
T0 = time.time() - 30 * 86400.0
GANG = [{"node": "n1", "gpus": list(range(8))}, {"node": "n2", "gpus": list(range(8))}]
ONE = [{"node": "n3", "gpus": [0]}]


def _spec(**kw: object) -> JobSpec:
    return JobSpec.model_validate({"command": ["python", "train.py"], **kw})


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    """Three jobs: a sensitive 2-node run that failed once and was restarted, a 1-GPU job
    still running, and one that never started."""
    path = tmp_path / "state" / "grace.sqlite"
    store = Store.open(f"sqlite:///{path}")
    try:
        with store.transaction() as s:
            for n in ("n1", "n2"):
                repo.upsert_node(s, n, 8, "H100-SXM")
            repo.upsert_node(s, "n3", 8, "A100-80GB")
            big = repo.add_job(s, _spec(name="pretrain", tenant="llm", nodes=2, gpus_per_node=8,
                                        workload_class="full-run", sensitive_data=True,
                                        runtime_limit="2d"), T0 + 1000.0)
            small = repo.add_job(s, _spec(name="probe", tenant="vision", gpus=1), T0 + 1500.0)
            repo.add_job(s, _spec(name="waiting", tenant="vision", gpus=4), T0 + 1700.0)
        with store.transaction() as s:
            job = repo.require_job(s, big.id)
            a1 = repo.start_attempt(s, job, GANG, "local", "h-1", T0 + 1600.0)
            repo.end_attempt(s, a1, AttemptState.FAILED, T0 + 5000.0, exit_code=1)
            repo.set_job_state(s, job, JobState.PENDING, T0 + 5000.0, "restart")
        with store.transaction() as s:
            job = repo.require_job(s, big.id)
            a2 = repo.start_attempt(s, job, GANG, "local", "h-2", T0 + 6000.0)
            repo.end_attempt(s, a2, AttemptState.SUCCEEDED, T0 + 10_000.0, exit_code=0)
            repo.set_job_state(s, job, JobState.COMPLETED, T0 + 10_000.0)
            repo.start_attempt(s, repo.require_job(s, small.id), ONE, "local", "h-3", T0 + 2000.0)
    finally:
        store.close()
    return path


def test_the_store_gives_waits_gpu_time_nodes_and_sensitivity(store_file: Path) -> None:
    h = load_store(str(store_file), now=T0 + 3000.0)
    assert h.format is HistoryFormat.GRACE and h.rows == 3
    assert h.skipped == {"never started": 1}
    big, small = h.jobs
    assert h.origin_epoch_s == T0 + 1000.0 and big.submit_s == 0.0
    assert big.wait_s == 600.0  # first attempt's start - submission
    assert big.run_s == (5000 - 1600) + (10_000 - 6000)  # GPU-held time, not the gap
    assert (big.gpus, big.nodes, big.tenant, big.name) == (16.0, 2, "llm", "pretrain")
    assert big.sensitive_data and big.workload_class is WorkloadClass.FULL_RUN
    assert big.limit_s == 2 * 86400 and big.state == "completed"
    assert big.gpu_model == "H100-SXM"  # from the nodes it ran on
    assert small.run_s == 1000.0 and small.gpu_model == "A100-80GB"  # running: up to now
    assert not small.sensitive_data and small.wait_s == 500.0


def test_a_url_and_a_path_read_the_same_store(store_file: Path) -> None:
    by_url = load_history(f"sqlite:///{store_file}", "grace")
    by_path = load_history(store_file, "grace")
    assert [j.job_id for j in by_url.jobs] == [j.job_id for j in by_path.jobs] == ["1", "2"]


def test_what_is_not_a_store_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        load_store(str(tmp_path / "missing.sqlite"))
    with pytest.raises(ValueError, match="no SQLite file"):
        load_store(f"sqlite:///{tmp_path / 'missing.sqlite'}")
    assert not (tmp_path / "missing.sqlite").exists()  # nothing created
    text = tmp_path / "jobs.csv"
    text.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a Grace store"):
        load_store(str(text))


def test_assess_reads_the_store_end_to_end(store_file: Path) -> None:
    r = CliRunner().invoke(app, ["assess", "--history", str(store_file), "--format", "grace",
                                 "--json", "-"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["inputs"]["history"]["jobs"] == 2
    governance = next(i for i in data["indicators"] if i["name"] == "data-governance")
    assert governance["met"] is True  # the sensitive job alone meets it


def _fingerprint(path: Path) -> tuple[bytes, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_mode, st.st_mtime_ns


def test_reading_changes_no_file_it_is_pointed_at(store_file: Path, tmp_path: Path) -> None:
    """Assessing must not write: not an empty file, a CSV given the wrong --format, a
    foreign SQLite database, nor the store itself (its mode, journal and bytes stay)."""
    import sqlite3

    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    csv = tmp_path / "jobs.csv"
    csv.write_text("a,b\n1,2\n")
    foreign = tmp_path / "other.sqlite"
    with sqlite3.connect(foreign) as c:
        c.execute("create table x (a)")
    for p in (empty, csv, foreign):
        p.chmod(0o644)
    store_file.chmod(0o640)
    before = {p: _fingerprint(p) for p in (empty, csv, foreign, store_file)}
    messages = {}
    for p in (empty, csv, foreign):
        with pytest.raises(ValueError) as e:
            load_store(str(p))
        messages[p] = str(e.value)
    assert "not a SQLite database" in messages[empty] and "not a SQLite database" in messages[csv]
    assert "not a Grace store (no jobs, nodes table)" in messages[foreign]
    assert "migrate" not in " ".join(messages.values())  # never migrate someone's database
    assert len(load_store(str(store_file), now=T0 + 20_000.0).jobs) == 2
    assert {p: _fingerprint(p) for p in before} == before
    assert not (tmp_path / "other.sqlite-wal").exists()


def test_unreachable_or_unsupported_databases_say_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported database URL"):
        load_store("mysql://x/y")
    with pytest.raises(ValueError, match="cannot open the database"):
        load_store("postgresql://nobody@127.0.0.1:1/nodb")
