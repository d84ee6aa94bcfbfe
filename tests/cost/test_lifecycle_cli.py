"""``grace lifecycle`` from the command line: a generated CSV history in, JSON and HTML out;
bad flags exit 2 naming the flag."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grace.cli.main import app

from .lifecycle_builders import COLUMNS, write_history_csv

runner = CliRunner()


def _run(tmp_path: Path, *extra: str, months: int = 12, noise: float = 0.0) -> dict:
    hist = write_history_csv(tmp_path / "history.csv", months, 0.05, noise=noise)
    out = tmp_path / "plan.json"
    r = runner.invoke(app, ["lifecycle", "--history", str(hist), "--format", "csv",
                            "--columns", COLUMNS, "--months", "36", "--json", str(out),
                            *extra])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


def test_lifecycle_reads_a_csv_history_and_writes_json_and_html(tmp_path: Path) -> None:
    html = tmp_path / "plan.html"
    p = _run(tmp_path, "--owned", "H100-SXM:96:0", "--owned", "A100-80GB:32:12",
             "--html", str(html))
    assert p["inputs"]["history"]["jobs"] == 12 * 40 + 1
    assert p["history"]["complete_months"] == 12
    assert p["demand"]["fit"]["growth_per_month"] == pytest.approx(0.05, rel=1e-2)
    lead = p["inputs"]["lead_time_months"]
    first = p["tranches"][0]
    assert first["order_month"] <= first["crossing_month"] - lead
    assert {g["model"] for g in p["retirement"]["generations"]} == {"H100-SXM", "A100-80GB"}
    cum = p["cash"]["cumulative_usd_by_month"]
    assert len(cum) == 36 and all(b >= a for a, b in itertools.pairwise(cum))
    text = html.read_text()
    for title in ("Demand against capacity", "Cost per useful GPU-hour",
                  "Cumulative cash spent", "plotly"):
        assert title in text


def test_the_default_owned_is_the_busiest_month_in_whole_nodes(tmp_path: Path) -> None:
    p = _run(tmp_path)
    peak = max(p["history"]["monthly_gpu_hours"]) / (730 * 0.7)
    assert p["inputs"]["owned"] == [{"model": "H100-SXM", "count": math.ceil(peak / 8) * 8,
                                     "age_months": 0.0}]
    assert p["inputs"]["owned_source"].startswith("assumed")


def test_a_cloud_bill_owns_nothing_unless_told_and_owned_groups_merge(tmp_path: Path) -> None:
    """A team paying a cloud bill owns no GPUs: the plan must not invent a cluster for it.
    The same group given twice (any case) is one group with both counts."""
    from typer.testing import CliRunner

    from grace.cli.main import app

    bill = Path(__file__).resolve().parents[2] / "examples" / "cloud_bill.csv"
    base = ["lifecycle", "--history", str(bill), "--format", "cloud-bill", "--months", "12",
            "--json", "-"]
    r = CliRunner().invoke(app, base)
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)
    assert p["inputs"]["owned"] == [] and p["inputs"]["owned_source"].startswith("a cloud bill")
    r = CliRunner().invoke(app, [*base, "--owned", "h100-sxm:8:0", "--owned", "H100-SXM:8:0"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["inputs"]["owned"] == [
        {"model": "H100-SXM", "count": 16, "age_months": 0.0}]
    r = CliRunner().invoke(app, [*base, "--owned", "none", "--owned", "H100-SXM:8:0"])
    assert r.exit_code == 2 and "cannot be combined" in r.output


def test_preserve_cash_and_a_short_noisy_history_flip_the_choice(tmp_path: Path) -> None:
    assert {t["choice"] for t in _run(tmp_path)["tranches"]} == {"buy"}
    assert {t["choice"] for t in _run(tmp_path, "--preserve-cash")["tranches"]} == {"lease"}
    noisy = _run(tmp_path, months=4, noise=0.4)
    assert noisy["demand"]["uncertain"]
    assert {t["choice"] for t in noisy["tranches"]} == {"cloud-1y"}


@pytest.mark.parametrize(("flag", "value"), [
    ("--target-utilization", "70"), ("--target-utilization", "0"), ("--growth", "5"),
    ("--growth", "-1"), ("--owned", "A100-80GB"), ("--owned", "Z9:8:1"),
    ("--owned", "H100-SXM:0:1"), ("--owned", "L40S:8:1"), ("--months", "0"),
    ("--gpu", "L40S"), ("--site", "moon"), ("--cloud", "nowhere"),
    ("--cover-months", "0"), ("--format", "nope"), ("--history", "missing.csv"),
    ("--growth", "nan"), ("--growth", "inf"), ("--growth", "1"), ("--months", "121"),
    ("--target-utilization", "nan"), ("--target-utilization", "0.01"),
    ("--json", "/proc/x.json"), ("--html", "/proc/x.html"), ("--json", "."),
])
def test_a_bad_flag_exits_2_naming_it(tmp_path: Path, flag: str, value: str) -> None:
    hist = write_history_csv(tmp_path / "history.csv", 8, 0.05)
    args = {"--history": str(hist), "--format": "csv", "--columns": COLUMNS, "--months": "12"}
    args[flag] = str(tmp_path / value) if flag == "--history" else value
    if flag == "--format":
        del args["--columns"]
    r = runner.invoke(app, ["lifecycle", *[x for kv in args.items() for x in kv]])
    assert r.exit_code == 2, r.output
    assert flag in r.output


def test_the_tranche_table_fits_80_columns_with_every_figure_whole(tmp_path: Path) -> None:
    from io import StringIO

    from rich.console import Console

    from grace.cli.lifecycle import _table, money

    p = _run(tmp_path, "--owned", "none", "--growth", "0.2")  # many, large tranches
    out = StringIO()
    Console(file=out, width=80, color_system=None).print(_table(p, 80))
    lines = out.getvalue().splitlines()
    assert lines and max(len(line) for line in lines) <= 80
    text = out.getvalue()
    for tr in p["tranches"]:
        for o in tr["options"].values():
            assert money(o["total_usd"]) in text
        assert str(tr["gpus"]) in text


def test_lifecycle_reads_grace_own_store(tmp_path: Path) -> None:
    """A real SQLite store written through the store's repository, as the reconciler
    writes it: 7 months of 8-GPU jobs whose run time grows 5% a month."""
    from grace.control.store import repository as repo
    from grace.control.store.db import Store
    from grace.control.store.models import AttemptState, JobState
    from grace.cost.lifecycle_demand import MONTH_S
    from grace.spec.job import JobSpec

    path = tmp_path / "grace.sqlite"
    store = Store.open(f"sqlite:///{path}")
    t0, placed = 1.7e9, [{"node": "n1", "gpus": list(range(8))}]
    try:
        with store.transaction() as s:
            repo.upsert_node(s, "n1", 8, "H100-SXM")
        for m in range(8):
            for i in range(4 if m < 7 else 1):  # month 7 holds one job: it marks the end
                submit = t0 + m * MONTH_S + i * MONTH_S / 4
                run = 100 * 3600.0 * 1.05 ** m
                with store.transaction() as s:
                    job = repo.add_job(s, JobSpec.model_validate(
                        {"name": f"train-{m}-{i}", "command": ["python", "train.py"],
                         "tenant": "llm", "gpus": 8}),
                        submit)
                    a = repo.start_attempt(s, job, placed, "local", f"h-{m}-{i}", submit)
                    repo.end_attempt(s, a, AttemptState.SUCCEEDED, submit + run, exit_code=0)
                    repo.set_job_state(s, job, JobState.COMPLETED, submit + run)
    finally:
        store.close()
    out = tmp_path / "plan.json"
    r = runner.invoke(app, ["lifecycle", "--history", str(path), "--format", "grace",
                            "--months", "24", "--owned", "H100-SXM:8:0", "--json", str(out)])
    assert r.exit_code == 0, r.output
    p = json.loads(out.read_text())
    assert p["inputs"]["history"]["jobs"] == 29 and p["history"]["complete_months"] == 7
    assert p["demand"]["fit"]["growth_per_month"] == pytest.approx(0.05, rel=1e-6)
    assert p["history"]["monthly_gpu_hours"][0] == pytest.approx(4 * 8 * 100)
    assert not p["demand"]["uncertain"] and p["tranches"][0]["choice"] == "buy"
