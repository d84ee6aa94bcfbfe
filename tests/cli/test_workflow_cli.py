"""Slurm's workflow flags and verbs through the real CLI: ``submit --array --dependency
--hold --time --nodes --gpus-per-node``, ``hold``, ``release``, ``requeue``, and an
array shown as one line of ``grace jobs`` at 80 columns (the real API on uvicorn, the
real reconciler with a scripted backend)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import FakeClock, lab_reconciler, make_token, served
from live_world import World
from rich.console import Console

from grace.backends.base import AttemptStatus
from grace.cli.jobs_view import group_arrays, jobs_table
from grace.cli.workflow import flag_fields, slurm_time, submitted_line
from grace.control.api import create_app
from grace.control.store.db import Store


# ---------------------------------------------------------------- in process
def test_slurms_time_reads_a_bare_number_as_minutes() -> None:
    assert slurm_time("90") == "90m"
    assert slurm_time("1-02:00:00") == "1-02:00:00"
    assert flag_fields(2, 4, "2h", "afterok:3", True, "0-9%2") == {
        "nodes": 2, "gpus_per_node": 4, "runtime_limit": "2h", "dependency": "afterok:3",
        "array": "0-9%2", "hold": True}
    assert flag_fields(None, None, None, None, False, None) == {}


def _task(i: int, state: str, now: float) -> dict[str, Any]:
    return {"id": 12 + i, "name": "sweep-lr", "tenant": "research", "state": state,
            "gpus": 1.0, "submitted_at": now - 600,
            "started_at": now - 300 if state != "pending" else None,
            "ended_at": now - 60 if state == "completed" else None, "attempts": 1,
            "reason": "array-limit" if state == "pending" else None,
            "array": {"id": 12, "index": i, "limit": 2, "kind": "array"}}


def test_an_array_is_one_line_with_its_counts_by_state() -> None:
    now = time.time()
    states = ["completed"] * 5 + ["running"] * 2 + ["pending"] * 3
    rows = [_task(i, s, now) for i, s in enumerate(states)]
    rows.append({**_task(0, "running", now), "id": 99, "array": None,
                 "name": "llama-7b-lora-sweep-seed-1-lr-3e-4-warmup-2000-cosine"})
    grouped = group_arrays(rows)
    assert len(grouped) == 2
    assert grouped[0]["id"] == "12_[0-9%2]" and grouped[0]["state"] == "running"
    assert grouped[0]["reason"] == "2 run 3 pend 5 done"
    for shown, counts in ((rows[:-1], "2 run 3 pend 5 done"), (rows, "2 run 3 pen…")):
        out = io.StringIO()  # beside a long name the counts give way at their end
        Console(file=out, width=80).print(jobs_table(shown, 80, now=now))
        lines = out.getvalue().splitlines()
        assert all(len(line) <= 80 for line in lines), lines
        [line] = [x for x in lines if "12_[0-9%2]" in x]
        assert line.endswith(counts), line


def test_the_submit_line_names_an_arrays_tasks() -> None:
    out = {"id": 5, "array": {"id": 5, "tasks": [5, 6, 7], "indices": [0, 1, 2]}}
    assert submitted_line(out) == "submitted array 5: 3 tasks, jobs 5-7"
    assert submitted_line({"id": 4}) == "submitted job 4"


# ---------------------------------------------------------------- the real CLI
@dataclass
class Live:
    world: World
    rec: Any
    clock: FakeClock

    def grace(self, *args: str) -> Any:
        return self.world.grace(*args)

    def ok(self, verb: str, *args: str) -> Any:
        out = self.world.grace(verb, "--json", *args)  # before a submit's "--"
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def cycle(self) -> None:
        self.clock.advance(1.0)
        self.rec.cycle()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp: Path = tmp_path_factory.mktemp("workflow")
    store = Store.open(f"sqlite:///{tmp / 'grace.sqlite'}")
    clock = FakeClock(time.time() - 3600)
    rec = lab_reconciler(store, tmp / "state", clock)
    app = create_app(store, rec.topo, tmp / "state", rec, rec.backend, clock=clock)
    token = make_token(store, "member", "research")
    try:
        with served(app) as url:
            yield Live(World(url, token), rec, clock)
    finally:
        store.close()


@pytest.mark.slow
def test_submit_an_array_with_a_limit_and_see_it_as_one_line(live: Live) -> None:
    out = live.ok("submit", "--gpus", "1", "--array", "0-9%2", "--time", "90", "--",
                  "python", "train.py")
    tasks = out["array"]["tasks"]
    assert len(tasks) == 10
    live.cycle()
    table = live.grace("jobs")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    [line] = [x for x in lines if f"{tasks[0]}_[0-9%2]" in x]
    assert line.endswith("2 run 8 pend")
    spec = live.ok("job", str(tasks[0]))["spec"]
    assert spec["runtime_limit"] == 5400 and spec["env"]["SLURM_ARRAY_TASK_ID"] == "0"
    bad = live.grace("submit", "--gpus", "1", "--array", "5-1", "--", "python", "train.py")
    assert bad.returncode != 0 and "array" in bad.stderr and "e.g." in bad.stderr


@pytest.mark.slow
def test_dependency_hold_release_and_requeue_from_the_cli(live: Live) -> None:
    parent = live.ok("submit", "--nodes", "1", "--gpus-per-node", "2", "--time", "02:00:00",
                     "--", "python", "train.py")["id"]
    child = live.ok("submit", "--gpus", "1", "--dependency", f"afterok:{parent}", "--hold",
                    "--", "python", "eval.py")["id"]
    live.cycle()
    shown = live.ok("job", str(child))
    assert (shown["state"], shown["reason"], shown["held"]) == ("pending", "held", True)
    assert live.ok("release", str(child))["held"] is False
    live.cycle()
    assert live.ok("job", str(child))["reason"] == "dependency"
    live.rec.backend.finish(parent, AttemptStatus.SUCCEEDED)
    live.cycle()
    assert live.ok("job", str(child))["state"] == "running"
    requeued = live.ok("requeue", str(child), "--hold")
    assert requeued["requeue_requested"] is True
    live.cycle()
    live.cycle()
    assert (live.ok("job", str(child))["state"], live.ok("job", str(child))["held"]) == (
        "pending", True)
    refused = live.grace("hold", str(parent))  # completed: only a pending job is held
    assert refused.returncode != 0 and "only a pending job" in refused.stderr


@pytest.mark.slow
def test_a_file_written_for_another_tenant_is_submitted_with_tenant(live: Live,
                                                                    tmp_path: Path) -> None:
    """The examples name their teams' tenants: a member of another team submits them with
    ``--tenant`` (its own), and without it is told so, not only refused."""
    job = tmp_path / "theirs.yaml"
    job.write_text("name: theirs\ntenant: vision\ngpus: 1\ncommand: [python, train.py]\n")
    refused = live.grace("submit", str(job))
    assert refused.returncode != 0 and "--tenant research" in refused.stderr, refused.stderr
    out = live.ok("submit", "--tenant", "research", str(job))
    assert out["tenant"] == "research"
    sweep = live.ok("submit", "--tenant", "research",
                    str(Path(__file__).resolve().parents[2] / "examples/jobs/sweep.yaml"))
    assert sweep["tenant"] == "research" and len(sweep["trials"]) == 16


@pytest.mark.slow
def test_an_arrays_id_and_id_index_act_as_in_slurm_from_the_cli(live: Live) -> None:
    out = live.ok("submit", "--gpus", "1", "--array", "0-2", "--hold", "--", "python", "x.py")
    head, tasks = out["id"], out["array"]["tasks"]
    one = live.grace("release", f"{head}_1")
    assert one.returncode == 0 and f"job {tasks[1]} released" in one.stdout, one.stdout
    rest = live.grace("cancel", str(head))
    assert rest.returncode == 0, rest.stderr
    assert f"array {head}: 3 job(s) cancelling" in rest.stdout, rest.stdout
    live.cycle()
    assert all(live.ok("job", str(t))["state"] == "cancelled" for t in tasks)
    bad = live.grace("hold", "12-3")
    assert bad.returncode == 2 and "12_3" in bad.stderr
