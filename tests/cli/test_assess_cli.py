"""``grace assess`` from the command line: the JSON keys others rely on, the tables at 80
columns, the HTML report, and every bad flag refused with exit 2 and the flag's name."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from grace.cli.assess import print_assessment
from grace.cli.main import app
from grace.cost.history import load_history

REPO = Path(__file__).resolve().parents[2]
BILL = REPO / "examples" / "cloud_bill.csv"
SACCT = REPO / "tests" / "cost" / "data" / "sacct_small.txt"
WIDTH = 80
runner = CliRunner()


def assess(*args: str) -> Any:
    r = runner.invoke(app, ["assess", *args])
    return r


def assess_json(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "assess.json"
    r = assess(*args, "--json", str(out))
    assert r.exit_code == 0, r.output
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def check_contract(data: dict[str, Any]) -> None:
    """The keys the issue names, in the shapes it names."""
    assert len(data["indicators"]) == 6
    for i in data["indicators"]:
        assert {"name", "met", "evidence", "threshold"} <= set(i)
        assert i["met"] in (True, False, None) and i["evidence"]
    assert data["met_count"] == sum(i["met"] is True for i in data["indicators"])
    assert data["unknown_count"] == sum(i["met"] is None for i in data["indicators"])
    assert isinstance(data["verdict"], str) and data["verdict"]
    assert isinstance(data["placement_by_class"], list)


def test_a_cloud_bill_end_to_end(tmp_path: Path) -> None:
    html = tmp_path / "assess.html"
    data = assess_json(tmp_path, "--history", str(BILL), "--format", "cloud-bill",
                       "--html", str(html))
    check_contract(data)
    h = data["inputs"]["history"]
    history = load_history(BILL, "cloud-bill")
    assert (h["format"], h["bill_lines"], h["jobs"]) == ("cloud-bill", len(history.usage), 0)
    # the plotted months recompute from the history and sum to its GPU-hours
    assert h["gpu_hours_by_month"] == pytest.approx(history.gpu_hours_by_period())
    assert sum(h["gpu_hours_by_month"]) == pytest.approx(h["gpu_hours"])
    assert h["billed_usd"] == pytest.approx(sum(u.cost_usd for u in history.usage))
    capacity = next(i for i in data["indicators"] if i["name"] == "capacity-difficulty")
    assert capacity["met"] is not None  # the bill's capacity errors are evidence
    text = html.read_text()
    assert "GPU-hours by month" in text and "plotly" in text
    for i in data["indicators"]:
        assert i["name"] in text
    assert "2026-01-05" in text  # months labelled by date: a bill has a calendar


def test_a_sacct_export_end_to_end(tmp_path: Path) -> None:
    data = assess_json(tmp_path, "--history", str(SACCT), "--format", "sacct",
                       "--data-classification", "regulated", "--html", str(tmp_path / "a.html"))
    check_contract(data)
    assert data["inputs"]["history"]["skipped"]["never started"] == 1
    governance = next(i for i in data["indicators"] if i["name"] == "data-governance")
    assert governance["met"] is True
    classes = {c["class"] for c in data["placement_by_class"]}
    assert classes and all(c["runs_on"] for c in data["placement_by_class"])
    assert sum(c["jobs"] for c in data["placement_by_class"]) == data["inputs"]["history"]["jobs"]


def test_flipping_the_declared_classification_flips_governance(tmp_path: Path) -> None:
    public = assess_json(tmp_path, "--history", str(SACCT), "--data-classification", "public")
    gov = next(i for i in public["indicators"] if i["name"] == "data-governance")
    assert gov["met"] is False


def test_json_dash_prints_json_alone() -> None:
    r = assess("--history", str(SACCT), "--json", "-")
    assert r.exit_code == 0, r.output
    check_contract(json.loads(r.stdout))


def _offline(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GRACE_URL", "GRACE_TOKEN")}
    return subprocess.run([sys.executable, "-m", "grace.cli.main", *args], cwd=REPO,
                          env=env | {"COLUMNS": str(WIDTH)}, capture_output=True, text=True,
                          timeout=300)


def fits_with_every_row(text: str, data: dict[str, Any]) -> None:
    """No line over 80; each indicator's name and answer, each class and its jobs, whole."""
    lines = text.splitlines()
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, wide
    word = {True: "yes", False: "no", None: "unknown"}
    for i in data["indicators"]:  # a name is never cut: it starts its row, its answer beside it
        assert any(line.split()[:2] == [i["name"], word[i["met"]]] for line in lines if line.strip())
    for c in data["placement_by_class"]:
        assert any(line.split()[:2] == [c["class"], f"{c['jobs']:,}"] for line in lines
                   if line.strip()), c


@pytest.mark.parametrize("history", [(SACCT, "sacct"), (BILL, "cloud-bill")])
def test_the_tables_fit_80_columns(tmp_path: Path, history: tuple[Path, str]) -> None:
    data = assess_json(tmp_path, "--history", str(history[0]), "--format", history[1])
    buffer = io.StringIO()
    print_assessment(data, Console(file=buffer, width=WIDTH))
    fits_with_every_row(buffer.getvalue(), data)
    assert " ".join(data["verdict"].split()) in " ".join(buffer.getvalue().split())


@pytest.mark.slow
def test_the_real_cli_fits_80_columns_through_a_pipe(tmp_path: Path) -> None:
    out = _offline("assess", "--history", str(SACCT), "--json", str(tmp_path / "a.json"))
    assert out.returncode == 0, out.stderr
    fits_with_every_row(out.stdout, json.loads((tmp_path / "a.json").read_text()))
    assert "6 of 11 rows kept" in out.stderr  # what was skipped goes to stderr


@pytest.mark.parametrize(("args", "flag"), [
    (["--history", str(SACCT), "--format", "slurm"], "--format"),
    (["--history", str(SACCT), "--data-classification", "secret"], "--data-classification"),
    (["--history", str(SACCT), "--gpu", "L40S"], "--gpu"),
    (["--history", str(SACCT), "--cloud", "nowhere"], "--cloud"),
    (["--history", "no/such/file.txt"], "--history"),
    (["--history", str(SACCT), "--format", "csv", "--columns", "submit=Submit"], "--columns"),
    (["--history", str(SACCT), "--format", "philly", "--columns", "a=b"], "--columns"),
    (["--history", str(BILL), "--format", "sacct"], "--history"),
    (["--history", str(SACCT), "--prices", "no/such/prices.yaml"], "--prices"),
])
def test_bad_flags_exit_2_naming_the_flag(args: list[str], flag: str) -> None:
    r = assess(*args, "--json", "-")
    assert r.exit_code == 2, r.output
    assert flag in r.stderr and "Traceback" not in r.output
    assert r.stdout == ""  # no half-written JSON


def test_a_scaling_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "scaling.json"
    bad.write_text("ranks,efficiency\n1,1.0\n")
    r = assess("--history", str(SACCT), "--scaling", str(bad), "--json", "-")
    assert r.exit_code == 2 and "--scaling" in r.stderr and "grace bench scaling" in r.stderr


def test_a_history_with_no_usable_rows_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text(SACCT.read_text().splitlines()[0] + "\n")
    r = assess("--history", str(empty), "--json", "-")
    assert r.exit_code == 2 and "no usable rows" in r.stderr
