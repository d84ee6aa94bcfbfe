"""``grace plan`` and ``grace showback`` from the command line, and ``GET /showback``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from grace.cli.main import app
from grace.control.api import create_app
from grace.control.store import tokens
from grace.control.store.db import Store
from grace.control.store.models import Role
from grace.core.topology import Topology
from grace.spec.loader import load_cluster

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_plan_writes_the_json_keys_others_rely_on(tmp_path: Path) -> None:
    out, html = tmp_path / "plan.json", tmp_path / "plan.html"
    r = runner.invoke(app, ["plan", "--gpus", "64", "--gpu", "H100-SXM", "--utilization", "0.6",
                            "--months", "36", "--prices", str(REPO / "examples" / "prices.yaml"),
                            "--json", str(out), "--html", str(html)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert [o["name"] for o in data["options"]] == [
        "on-prem", "colo", "cloud-on-demand", "cloud-1y", "cloud-3y", "hybrid"]
    for o in data["options"]:
        assert {"name", "total_usd", "useful_gpu_hours", "usd_per_useful_gpu_hour",
                "breakeven_month"} <= set(o)
    assert 0 < data["owning_beats_renting_above_utilization"] < 1
    assert data["sensitivity"] and data["inputs"]["workload"]["utilization"] == 0.6
    text = html.read_text()
    assert "Cumulative cash spent" in text and "plotly" in text


def test_plan_refuses_a_percentage_for_utilization() -> None:
    r = runner.invoke(app, ["plan", "--gpus", "8", "--gpu", "H100-SXM", "--utilization", "60",
                            "--months", "12"])
    assert r.exit_code == 2
    assert "write 0.6 for 60%" in r.output


def test_plan_names_a_gpu_the_book_lacks() -> None:
    r = runner.invoke(app, ["plan", "--gpus", "8", "--gpu", "L40S", "--utilization", "0.5",
                            "--months", "12"])
    assert r.exit_code == 2
    assert "no prices for GPU 'L40S'" in r.output


def test_showback_endpoint_answers_on_an_empty_cluster(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'grace.sqlite'}")
    topo = Topology.from_spec(load_cluster(REPO / "examples" / "clusters" / "lab.yaml"))
    with store.transaction() as s:
        _, token = tokens.create(s, name="ops", role=Role.OPERATOR, tenant=None,
                                 created_by="test", now=0.0)
    client = TestClient(create_app(store, topo, tmp_path),
                        headers={"Authorization": f"Bearer {token}"})
    r = client.get("/showback", params={"since": 0})
    store.close()
    assert r.status_code == 200
    body = r.json()
    assert body["capacity_gpus"] == 12 and body["jobs"] == []
    assert {"1d", "7d"} == set(body["windows"]) and body["totals"]["allocated_gpu_hours"] == 0


def test_showback_in_twin_mode_adds_up(tmp_path: Path) -> None:
    trace = REPO.parent / "shared" / "traces" / "tiresias" / "60_job.csv"
    if not trace.is_file():
        pytest.skip(f"public trace not found at {trace}")
    out = tmp_path / "showback.json"
    r = runner.invoke(app, ["showback", "--cluster", str(REPO / "examples" / "clusters" /
                                                         "philly.yaml"),
                            "--trace", str(trace), "--format", "tiresias", "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["totals"]["jobs"] == 60
    assert sum(t["allocated_gpu_hours"] for t in data["tenants"].values()) == pytest.approx(
        data["totals"]["allocated_gpu_hours"])
