"""Every live table at ``COLUMNS=80`` through a pipe, from the real ``grace`` CLI against a
real API (``live_world``): no line over 80 characters, states whole, names told apart,
``-`` where there is no exit code, a requeued job's wait and run from its attempts, and
``grace jobs`` that pages instead of silently stopping at 200."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import LAB, job_spec, served
from live_world import DRAIN_REASON, LONG_SWEEP, REQUEUED, SHORT_SWEEP, World, live_world
from rich.console import Console

from grace.cli import demo
from grace.cli.fit import duration
from grace.control.api import create_app
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.core.topology import Topology
from grace.spec.loader import load_cluster

WIDTH = 80


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with live_world(tmp_path_factory.mktemp("live")) as w:
        yield w


def fits(text: str, width: int = WIDTH) -> list[str]:
    lines = text.splitlines()
    too_wide = [line for line in lines if len(line) > width]
    assert not too_wide, f"{len(too_wide)} lines over {width} characters: {too_wide}"
    return lines


def row_of(lines: list[str], job_id: int) -> str:
    [row] = [line for line in lines if re.match(rf"^\s*{job_id}\s", line)]
    return row


def api_json(world: World, *args: str) -> object:
    out = world.grace(*args, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def totals(job: dict) -> tuple[float, float]:
    """Pending and running seconds, summed by hand from the attempts the API answers."""
    ran = sum(a["ended_at"] - a["started_at"] for a in job["attempts"])
    return job["ended_at"] - job["submitted_at"] - ran, ran


@pytest.mark.slow
def test_grace_jobs_fits_with_states_whole_and_names_told_apart(world: World) -> None:
    out = world.grace("jobs")
    assert out.returncode == 0, out.stderr
    lines = fits(out.stdout)
    listed = api_json(world, "jobs")
    assert isinstance(listed, list) and len(listed) == len(world.ids)
    assert len(lines) == 3 + len(listed)  # title, header, rule, one line a job: nothing wraps
    for job in listed:
        row = row_of(lines, job["id"])
        assert re.search(rf"\s{job['state']}\s", row), (job["state"], row)
    assert not any(re.search(r"\b(complet|cancel|runn|pend)…", line) for line in lines)
    for i in (1, 2, 3):  # short names whole, long ones elided yet all different
        assert SHORT_SWEEP.format(i) in row_of(lines, world.ids[f"short{i}"])
    long_cells = {row_of(lines, world.ids[f"long{i}"]).split()[1] for i in (1, 2, 3)}
    assert len(long_cells) == 3 and all("…" in c for c in long_cells), long_cells
    assert LONG_SWEEP.format(1) not in out.stdout  # it did need eliding at 80


@pytest.mark.slow
def test_a_requeued_job_waits_and_runs_as_its_attempts_did(world: World) -> None:
    job = api_json(world, "job", str(world.ids["requeued"]))
    assert isinstance(job, dict) and len(job["attempts"]) == 2
    wait, ran = totals(job)
    assert wait > 199  # it waited 200 s for GPUs between its attempts
    row = row_of(fits(world.grace("jobs").stdout), world.ids["requeued"])
    assert f" {duration(wait)} " in row and row.rstrip().endswith(duration(ran)), row
    shown = world.grace("job", str(world.ids["requeued"]))
    assert shown.returncode == 0, shown.stderr
    lines = fits(shown.stdout)
    assert f"wait {duration(wait)}, run {duration(ran)} over 2 attempts" in lines
    assert REQUEUED in shown.stdout and "completed" in lines[0]


@pytest.mark.slow
def test_grace_job_prints_a_dash_for_no_exit_code_and_details_in_full(world: World) -> None:
    out = world.grace("job", str(world.ids["cancelled"]))
    assert out.returncode == 0, out.stderr
    lines = fits(out.stdout)
    assert "None" not in out.stdout
    [attempt] = [line for line in lines if re.match(r"^1\s+cancelled\s", line)]
    assert attempt.split()[3] == "-", attempt  # #, state, nodes, exit
    failed = world.grace("job", str(world.ids["failed"]))
    assert failed.returncode == 0, failed.stderr
    lines = fits(failed.stdout)
    job = api_json(world, "job", str(world.ids["failed"]))
    assert isinstance(job, dict)
    text = " ".join(failed.stdout.split())
    assert " ".join(job["reason"].split()) in text  # the whole reason, wrapped
    # the event's detail whole, its traceback's lines kept, not JSON cut at 80 characters
    assert "ModuleNotFoundError: No module named 'tokenizerz'" in failed.stdout
    assert 'File "train.py", line 3' in failed.stdout


@pytest.mark.slow
def test_grace_jobs_format_chooses_and_checks_its_columns(world: World) -> None:
    out = world.grace("jobs", "--format", "id,state,attempts,wait")
    assert out.returncode == 0, out.stderr
    lines = fits(out.stdout)
    assert lines[1].split() == ["id", "state", "attempts", "wait"]
    assert row_of(lines, world.ids["requeued"]).split()[:3] == [
        str(world.ids["requeued"]), "completed", "2"]
    bad = world.grace("jobs", "--format", "id,nope")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "'nope'" in bad.stderr and "id, name, tenant, state" in " ".join(bad.stderr.split())


@pytest.mark.slow
def test_grace_nodes_fits_and_prints_a_cut_reason_in_full(world: World) -> None:
    out = world.grace("nodes")
    assert out.returncode == 0, out.stderr
    lines = fits(out.stdout)
    [row] = [line for line in lines if line.startswith("a100-00 ") and "A100-80GB" in line]
    assert re.match(r"a100-00\s+A100-80GB\s+0/4\s+4\s+drained\s", row), row
    assert " ".join(DRAIN_REASON.split()) in " ".join(out.stdout.split())
    wide = world.grace("nodes", columns=200)  # wide enough: one line, no note under it
    assert sum(DRAIN_REASON in line for line in wide.stdout.splitlines()) == 1


@pytest.mark.slow
def test_grace_showback_fits_with_every_header_and_figure_whole(world: World,
                                                               tmp_path: Path) -> None:
    out = world.grace("showback")
    assert out.returncode == 0, out.stderr
    lines = fits(out.stdout)
    headers = " ".join(lines)
    for h in ("jobs", "GPU-h", "useful", "useful %", "failures", "data/sync", "queue h", "cost",
              "lost $"):
        assert f" {h} " in f" {headers} ", h
    report = world.grace("showback", "--json", str(tmp_path / "showback.json"))
    assert report.returncode == 0, report.stderr
    tenants = json.loads((tmp_path / "showback.json").read_text())["tenants"]
    assert "computer-vision" in tenants
    for name, f in tenants.items():  # each tenant whole, each of its figures whole
        rows = [line.split() for line in lines if line.startswith(f"{name} ")]
        cells = [c for r in rows for c in r]
        assert f"{f['allocated_gpu_hours']:,.1f}" in cells and f"${f['allocated_usd']:,.0f}" in cells
        assert f"{100 * f['useful_share']:.1f}%" in cells
    assert "…" not in out.stdout


def test_demo_summary_and_live_table_fit(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(demo, "console", Console(file=buf, width=WIDTH, color_system=None))
    rows = api_json(world, "jobs")
    assert isinstance(rows, list)
    demo._summary(rows)
    demo.console.print(demo.jobs_table(rows, WIDTH))
    lines = fits(buf.getvalue())
    assert any(re.match(r"wait: avg \d+s, max \S+; run: avg \S+, max \S+$", line)
               for line in lines), lines
    assert any(line.startswith("computer-vision ") for line in lines)


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """1,005 pending jobs: more than one page of ``GET /jobs`` (1,000 at most)."""
    from helpers import make_token

    tmp = tmp_path_factory.mktemp("crowded")
    store = Store.open(f"sqlite:///{tmp / 'grace.sqlite'}")
    with store.transaction() as s:
        for i in range(1005):
            repo.add_job(s, job_spec(f"bulk-{i}"), 1_700_000_000.0 + i)
    token = make_token(store, "admin")
    app = create_app(store, Topology.from_spec(load_cluster(LAB)), tmp / "state")
    try:
        with served(app) as url:
            yield World(url, token)
    finally:
        store.close()


@pytest.mark.slow
def test_grace_jobs_pages_instead_of_silently_stopping(crowded: World) -> None:
    out = crowded.grace("jobs", "--json")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)) == 200
    assert "newest 200" in out.stderr and "--all" in out.stderr
    out = crowded.grace("jobs", "--all", "--json")
    assert out.returncode == 0, out.stderr
    ids = [j["id"] for j in json.loads(out.stdout)]
    assert len(ids) == len(set(ids)) == 1005 and ids == sorted(ids, reverse=True)
    assert out.stderr == ""
    out = crowded.grace("jobs", "--limit", "1002")
    assert out.returncode == 0, out.stderr
    lines = fits(out.stdout)
    assert len(lines) == 3 + 1002 and "newest 1002" in out.stderr


@pytest.mark.slow
def test_grace_history_pages_through_every_job_once(crowded: World) -> None:
    out = crowded.grace("history", "--since", "all", "--all", "--json")
    assert out.returncode == 0, out.stderr
    ids = [j["id"] for j in json.loads(out.stdout)]
    assert len(ids) == len(set(ids)) == 1005 and ids == sorted(ids) and out.stderr == ""
    out = crowded.grace("history", "--since", "all", "--limit", "1002")
    assert out.returncode == 0, out.stderr
    lines = fits(out.stdout)
    shown = [int(line.split()[0]) for line in lines[3:]]
    assert shown == ids[:1002] and "oldest 1002" in out.stderr and "--all" in out.stderr
