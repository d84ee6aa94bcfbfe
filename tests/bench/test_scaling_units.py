"""``grace bench scaling``'s arithmetic on heartbeat records written by the runtime's own
``StepWindow`` (the records a real run leaves), its JSON and its table at 80 columns."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from grace.bench.net import BenchError
from grace.bench.scaling import RankRun, ScalingReport, explain, parse_ranks, read_heartbeats
from grace.runtime.heartbeat import StepWindow


def write_rank(attempt_dir: Path, rank: int, steps: int, step_s: float,
               phases: dict[str, float], first_step_s: float = 1.0) -> None:
    """``steps`` steps through a real StepWindow (2 steps per record), as the runtime
    writes them: step 1 is a record of its own and slow (warm-up)."""
    window = StepWindow(record_s=2 * step_s - 1e-9)
    now = 0.0
    lines = []
    for step in range(1, steps + 1):
        s = first_step_s if step == 1 else step_s
        now += s
        rec = window.add(step, 1.0, 512.0, s, phases, now)
        if rec is not None:
            lines.append(json.dumps(rec))
    last = window.flush(now)
    if last is not None:
        lines.append(json.dumps(last))
    attempt_dir.mkdir(parents=True, exist_ok=True)
    (attempt_dir / f"heartbeats-rank{rank}.jsonl").write_text("\n".join(lines) + "\n")


def test_rank_counts_parse_sorted_and_bad_ones_name_the_flag() -> None:
    assert parse_ranks("4,1,2,2") == [1, 2, 4]
    for bad in ("", "0", "two", "1,-2"):
        with pytest.raises(BenchError, match="--ranks"):
            parse_ranks(bad)


def test_step_time_leaves_out_the_first_step_and_adds_the_sync(tmp_path: Path) -> None:
    phases = {"data": 0.001, "forward": 0.004, "backward": 0.01, "allreduce": 0.006,
              "optimizer": 0.002, "sync": 0.003}
    write_rank(tmp_path, 0, steps=11, step_s=0.02, phases=phases)
    write_rank(tmp_path, 1, steps=11, step_s=0.03, phases=phases)  # the slower rank
    run = read_heartbeats(tmp_path, 2)
    assert run.step_s == pytest.approx(0.03 + 0.003)  # the slowest rank's, sync included
    assert run.steps_measured == 10
    assert run.phases["allreduce"] == pytest.approx(0.006)
    assert run.phases["h2d"] == 0.0  # a phase the script never timed reads zero


def test_too_few_steps_say_to_raise_steps(tmp_path: Path) -> None:
    write_rank(tmp_path, 0, steps=1, step_s=0.02, phases={})
    with pytest.raises(BenchError, match="raise --steps"):
        read_heartbeats(tmp_path, 1)


def test_a_missing_rank_file_says_what_the_script_must_do(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match=r"grace\.runtime\.init"):
        read_heartbeats(tmp_path, 1)


def report() -> ScalingReport:
    base = {"data": 0.001, "h2d": 0.0, "forward": 0.003, "backward": 0.004, "allreduce": 0.0,
            "optimizer": 0.001, "sync": 0.0}
    four = {**base, "backward": 0.012, "allreduce": 0.007, "sync": 0.004}
    runs = [RankRun(1, 0.009, base, 50), RankRun(2, 0.012, base, 50), RankRun(4, 0.021, four, 50)]
    return ScalingReport(runs=runs, batch_size=16, steps=51, script="examples/train_ddp.py",
                         backend="gloo", cpus=2, host="test")


def test_efficiency_is_throughput_over_n_times_one_rank() -> None:
    d = report().to_json()
    assert set(d["throughput"]) == set(d["efficiency"]) == set(d["phases"]) == {"1", "2", "4"}
    assert d["throughput"]["1"] == pytest.approx(16 / 0.009)
    assert d["throughput"]["4"] == pytest.approx(4 * 16 / 0.021)
    assert d["efficiency"]["1"] == pytest.approx(1.0)
    assert d["efficiency"]["4"] == pytest.approx(d["throughput"]["4"] / (4 * d["throughput"]["1"]))
    assert d["efficiency"]["4"] == pytest.approx(0.009 / 0.021)


def test_without_one_rank_the_smallest_count_is_the_base() -> None:
    r = report()
    r.runs = r.runs[1:]
    d = r.to_json()
    assert d["base_ranks"] == 2 and d["efficiency"]["2"] == pytest.approx(1.0)
    assert d["efficiency"]["4"] == pytest.approx(0.012 / 0.021)


def test_the_explanation_names_the_phases_that_grew() -> None:
    r = report()
    text = explain(r.runs[2], r.base)
    assert text.startswith("step 21.0 ms vs 9.0 ms: backward +8.0 ms, sync +4.0 ms")
    assert "all-reduce 7.0 ms inside backward" in text


def test_the_table_fits_80_columns() -> None:
    from grace.bench.scaling import scaling_table

    console = Console(width=80, record=True, file=io.StringIO())
    console.print(scaling_table(report(), 80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "43%" in text and "4 ranks: step 21.0 ms" in text


def test_the_html_pages_are_self_contained(tmp_path: Path) -> None:
    from grace.bench.html import net_html, scaling_html
    from grace.bench.net import Backend, NetReport, NetResult, Op

    scaling_html(report(), tmp_path / "s.html")
    rows = [NetResult.from_time(op, 1024 << i, 4, 1, 1e-4 * (i + 1)) for op in Op for i in range(3)]
    net_html(NetReport(rows, Backend.GLOO, 4, 1, "local"), tmp_path / "n.html")
    for page in ("s.html", "n.html"):
        text = (tmp_path / page).read_text()
        assert "plotly" in text and "cdn.plot.ly" not in text.split("<body", 1)[0]
    assert "reducescatter busbw" in (tmp_path / "n.html").read_text()
