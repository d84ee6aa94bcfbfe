"""``grace assess`` on the whole Philly job list (``shared/traces/philly-pollux/philly.csv``):
every one of its 82,247 jobs read, its virtual clusters as the tenants.

The traces sit beside the repository, as in ``tests/sim/conftest.py`` (``GRACE_TRACES_DIR``
points elsewhere); the tests skip, saying where they looked, when the file is absent.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grace.cli.main import app
from grace.cost.history import HistoryFormat, load_history

REPO = Path(__file__).resolve().parents[2]
PHILLY_JOBS = 82_247  # shared/traces/philly-pollux/README.md


@pytest.fixture(scope="module")
def philly_csv() -> Path:
    env = os.environ.get("GRACE_TRACES_DIR")
    where = (Path(env) if env else REPO.parent / "shared" / "traces") / "philly-pollux" / "philly.csv"
    if not where.is_file():
        pytest.skip(f"Philly job list not found at {where}; put it there or set GRACE_TRACES_DIR")
    return where


@pytest.mark.slow
def test_philly_reads_every_job_with_its_vcs_as_tenants(philly_csv: Path) -> None:
    h = load_history(philly_csv, HistoryFormat.PHILLY)
    assert len(h.jobs) == PHILLY_JOBS and h.rows == PHILLY_JOBS and not h.skipped
    with philly_csv.open() as f:
        rows = list(csv.DictReader(f))
    assert {j.tenant for j in h.jobs} == {r["cluster"] for r in rows}
    assert sum(j.gpu_hours for j in h.jobs) == pytest.approx(
        sum(float(r["duration"]) * int(r["num_gpus"]) for r in rows) / 3600)
    assert all(j.start_s is None and j.nodes is None for j in h.jobs)  # not recorded


@pytest.mark.slow
def test_assess_on_philly_end_to_end(philly_csv: Path, tmp_path: Path) -> None:
    out = tmp_path / "philly.json"
    r = CliRunner().invoke(app, ["assess", "--history", str(philly_csv), "--format", "philly",
                                 "--json", str(out), "--html", str(tmp_path / "philly.html")])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["inputs"]["history"]["jobs"] == PHILLY_JOBS
    assert {i["name"] for i in data["indicators"]} == {
        "long-multinode-runs", "scaling-efficiency", "capacity-difficulty",
        "sustained-utilization", "predictability", "data-governance"}
    capacity = next(i for i in data["indicators"] if i["name"] == "capacity-difficulty")
    assert capacity["met"] is None  # Philly records no starts: waits are unknown, not zero
    assert sum(c["jobs"] for c in data["placement_by_class"]) == PHILLY_JOBS
