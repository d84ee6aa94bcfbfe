"""A planner workload from a trace: GPU-hours per 730-hour month, and plans over a profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grace.cli.main import app
from grace.cost.hybrid import hybrid_option
from grace.cost.plan import on_demand_option, owned_option
from grace.cost.trace_workload import monthly_gpu_hours, tile
from grace.cost.workload import Workload
from grace.sim.traces.model import TraceJob

from .builders import round_book

H = 3600.0


def test_jobs_are_split_across_months_by_overlap() -> None:
    jobs = [TraceJob("a", 0.0, 1000 * H, 2),  # 730 h in month 1, 270 h in month 2, 2 GPUs
            TraceJob("b", 800 * H, 10 * H, 1, gpu_milli=500),  # half a GPU for 10 h
            TraceJob("c", 0.0, 0.0, 8)]  # no run time: no GPU-hours
    assert monthly_gpu_hours(jobs) == pytest.approx((1460.0, 540.0 + 5.0))


def test_tile_repeats_the_pattern() -> None:
    assert tile((1.0, 2.0), 5) == (1.0, 2.0, 1.0, 2.0, 1.0)
    assert tile((1.0, 2.0, 3.0), 2) == (1.0, 2.0)


def test_profile_workload_and_its_utilization() -> None:
    w = Workload.from_profile(10, "H100-SXM", (7300.0, 0.0, 3650.0))
    assert w.utilization == pytest.approx(10_950 / 21_900)  # 0.5
    assert w.useful_gpu_hours == pytest.approx(10_950)
    with pytest.raises(ValueError, match="use --gpus 11 or more"):
        Workload.from_profile(10, "H100-SXM", (8000.0,))


def test_on_demand_follows_the_profile_and_owning_does_not() -> None:
    book = round_book()
    w = Workload.from_profile(10, "H100-SXM", (7300.0, 0.0, 3650.0))
    od = on_demand_option(w, book)
    assert od.cumulative_usd == pytest.approx((36_500.0, 36_500.0, 54_750.0))  # x 5.00 $/h
    flat = Workload(10, "H100-SXM", 0.5, 3)
    assert owned_option(w, book, "on-prem").total_usd == pytest.approx(
        owned_option(flat, book, "on-prem").total_usd)


def test_hybrid_rent_follows_the_profile_at_the_replayed_rate() -> None:
    book = round_book()
    peaky = Workload.from_profile(10, "H100-SXM", (7300.0, 0.0))
    flat = Workload.from_profile(10, "H100-SXM", (3650.0, 3650.0))
    assert peaky.utilization == flat.utilization
    p, f = hybrid_option(peaky, book), hybrid_option(flat, book)
    # the replay runs at the average load, so both rent at the same rate per GPU-hour...
    rate = p.detail["cloud_usd_per_work_gpu_hour"]
    assert rate == pytest.approx(f.detail["cloud_usd_per_work_gpu_hour"])
    # ...and month by month in proportion to that month's work
    assert p.cumulative_usd[0] - f.cumulative_usd[0] == pytest.approx((7300 - 3650) * rate)
    assert p.total_usd == pytest.approx(f.total_usd)


def test_plan_from_a_csv_trace(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text("Submit,Elapsed,NGPU\n0,3600000,8\n1000,1800000,4\n")  # seconds
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(app, ["plan", "--gpus", "16", "--gpu", "H100-SXM", "--trace",
                                 str(trace), "--format", "csv", "--columns",
                                 "submit=Submit,duration=Elapsed,gpus=NGPU", "--months", "12",
                                 "--json", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    w = data["inputs"]["workload"]
    assert w["months"] == 12 and w["trace"]["format"] == "csv"
    # 8 GPUs x 1,000 h + 4 GPUs x 500 h = 10,000 GPU-h in the trace's 2 months, tiled 6 times
    assert sum(w["useful_gpu_hours_by_month"][:2]) == pytest.approx(10_000)
    assert w["useful_gpu_hours"] == pytest.approx(60_000)


def test_plan_wants_utilization_or_a_trace_not_both(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["plan", "--gpus", "8", "--gpu", "H100-SXM", "--months", "12"])
    assert r.exit_code == 2 and "--utilization" in r.output
