"""Every table-printing verb of the real ``grace`` CLI at ``COLUMNS=80`` through a pipe (Rich
then renders at 80): no line over 80 characters, and the fields a user needs are there
whole: ids, full state words, names that stay distinguishable, every figure.

Live verbs run against ``live_world`` (the real API over a real SQLite store, jobs placed
by the real reconciler); the twin and cost verbs on a small trace on the lab cluster.
``jobs``, ``job``, ``showback`` and the demo's tables have their own tests in
``test_live_tables.py``; here are the rest, and ``--json`` meaning the same on each:
a flag printing JSON on live verbs, ``--json -`` printing JSON alone on report verbs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import LAB, REPO
from live_world import LONG_SWEEP, PENDING, World, live_world

pytestmark = pytest.mark.slow

WIDTH = 80


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with live_world(tmp_path_factory.mktemp("every")) as w:
        yield w


def fits(text: str) -> list[str]:
    lines = text.splitlines()
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, f"{len(wide)} lines over {WIDTH} characters: {wide}"
    return lines


def ok(out: subprocess.CompletedProcess[str]) -> list[str]:
    assert out.returncode == 0, out.stderr
    return fits(out.stdout)


def row(lines: list[str], first: str) -> str:
    [found] = [line for line in lines if re.match(rf"^\s*{re.escape(first)}\s", line)]
    return found


def offline(*args: str) -> subprocess.CompletedProcess[str]:
    """A twin or cost verb in a subprocess, stdout a pipe, at 80 columns."""
    env = {k: v for k, v in os.environ.items() if k not in ("GRACE_URL", "GRACE_TOKEN")}
    return subprocess.run([sys.executable, "-m", "grace.cli.main", *args], cwd=REPO,
                          env=env | {"COLUMNS": str(WIDTH)}, capture_output=True, text=True,
                          timeout=300)


# ------------------------------------------------------------------ live verbs
def test_history_fits_with_every_job_state_and_name(world: World) -> None:
    lines = ok(world.grace("history", "--since", "all"))
    listed = json.loads(world.grace("history", "--since", "all", "--json").stdout)
    assert sorted(j["id"] for j in listed) == sorted(world.ids.values())
    for job in listed:
        assert re.search(rf"\s{job['state']}(\s|$)", row(lines, str(job["id"]))), job["state"]
    long_cells = {row(lines, str(world.ids[f"long{i}"])).split()[1] for i in (1, 2, 3)}
    assert len(long_cells) == 3, long_cells  # elided in the middle, still told apart
    assert LONG_SWEEP.format(1) not in "\n".join(lines)
    # sacct's --format, the columns in the order given; states filtered
    lines = ok(world.grace("history", "--since", "all", "--format",
                           "id,name,gpus,wait,run,state,reason", "--state", "failed,cancelled"))
    assert lines[1].split() == ["id", "name", "gpus", "wait", "run", "state", "reason"]
    ids = {int(line.split()[0]) for line in lines[3:] if line.split()[0].isdigit()}
    assert ids == {world.ids["failed"], world.ids["cancelled"]}
    assert "None" not in "\n".join(lines)


def test_history_limit_says_on_stderr_that_more_exist(world: World) -> None:
    out = world.grace("history", "--since", "all", "--limit", "4", "--json")
    assert out.returncode == 0 and len(json.loads(out.stdout)) == 4
    assert "more exist" in out.stderr and "--all" in out.stderr
    bad = world.grace("history", "--since", "yesterday-ish")
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_priority_fits_and_lists_waiting_jobs_in_order(world: World) -> None:
    lines = ok(world.grace("priority"))
    body = json.loads(world.grace("priority", "--json").stdout)
    assert [j["id"] for j in body["jobs"]] == [world.ids["waiting2"], world.ids["waiting1"]]
    for j in body["jobs"]:
        cells = row(lines, str(j["position"])).split()
        assert cells[1] == str(j["id"]) and cells[5] == str(j["priority"]), cells
    assert lines[1].split()[:3] == ["pos", "id", "name"]
    text = " ".join(" ".join(lines).split())
    assert "tenant fair share" in text and "then priority" in text
    assert PENDING.format(1) not in text  # elided, yet both names differ
    names = [row(lines, str(p)).split()[2] for p in (1, 2)]
    assert names[0] != names[1]


def test_shares_fits_with_each_tenant_and_figure_whole(world: World) -> None:
    lines = ok(world.grace("shares"))
    body = json.loads(world.grace("shares", "--json").stdout)
    assert {t["tenant"] for t in body["tenants"]} == {"research", "computer-vision"}
    for t in body["tenants"]:
        cells = row(lines, t["tenant"]).split()
        assert cells[0] == t["tenant"] and cells[5] == f"{t['gpus_held']:g}", cells
        assert cells[7] == f"{t['fair_share']:.2f}", cells


def test_nodes_show_allocated_and_free_gpus_and_their_jobs(world: World) -> None:
    lines = ok(world.grace("nodes"))
    nodes = json.loads(world.grace("nodes", "--json").stdout)
    running = world.ids["running"]
    [holder] = [n for n in nodes if running in {j["id"] for j in n["jobs"]}]
    [line] = [x for x in lines if re.match(rf"{holder['name']}\s+{holder['gpu_model']}\s", x)]
    cells = line.split()
    assert cells[2] == f"{holder['allocated']}/{holder['gpus']}" and cells[3] == str(
        holder["free"]) and cells[4] == "healthy" and str(running) in cells, cells
    assert sum(n["allocated"] for n in nodes) == 1  # one 1-GPU job runs
    assert any(re.match(r"a100-00\s+A100-80GB\s+0/4\s+4\s+(draining|drained)\s", x)
               for x in lines), lines


@pytest.mark.parametrize("args, needs", [
    (("token", "list"), ["admin-all", "admin", "live"]),
    (("audit", "--limit", "20"), ["job.submitted", "node.state", "admin-all"]),
    (("alerts",), ["NodeDrained", "firing", "a100-00"]),
])
def test_admin_tables_fit(world: World, args: tuple[str, ...], needs: list[str]) -> None:
    text = "\n".join(ok(world.grace(*args)))
    for word in needs:
        assert word in text, word


def test_why_fits_and_names_the_reason(world: World) -> None:
    lines = ok(world.grace("why", str(world.ids["waiting1"])))
    assert "pending" in lines[0] and "waiting-for-capacity" in lines[0]


def test_live_json_is_a_flag_printing_whole_json(world: World) -> None:
    for args in (("jobs",), ("job", str(world.ids["failed"])), ("nodes",), ("history",),
                 ("priority",), ("shares",), ("alerts",), ("audit",), ("token", "list"),
                 ("why", str(world.ids["waiting1"]))):
        out = world.grace(*args, "--json", columns=40)  # narrower than any line of it
        assert out.returncode == 0, (args, out.stderr)
        json.loads(out.stdout)  # one document, never wrapped or cut at the width


# ------------------------------------------------------------------ twin and cost verbs
@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    path = tmp_path_factory.mktemp("trace") / "jobs.csv"
    path.write_text("submit,duration,gpus,tenant\n" + "".join(
        f"{60 * i},{600 + 300 * (i % 5)},{(1, 2, 4, 8)[i % 4]},{('vision', 'nlp')[i % 2]}\n"
        for i in range(60)))
    return ["--cluster", str(LAB), "--trace", str(path), "--format", "csv", "--columns",
            "submit=submit,duration=duration,gpus=gpus,tenant=tenant"]


def test_compare_and_simulate_fit_with_every_policy_and_figure(trace: list[str],
                                                              tmp_path: Path) -> None:
    policies = ["fifo", "easy-backfill", "grace"]
    lines = ok(offline("compare", *trace, "--policies", ",".join(policies), "--json",
                       str(tmp_path / "c.json")))
    summaries = json.loads((tmp_path / "c.json").read_text())
    headers = " ".join(line for line in lines if line.lstrip().startswith("metric"))
    for p in policies:
        assert f" {p}" in f" {headers} ", (p, headers)
    assert "jobs" in "\n".join(lines)
    out = offline("compare", *trace, "--policies", ",".join(policies), "--json", "-")
    assert out.returncode == 0, out.stderr
    timing = {"wall_s", "events_per_s"}  # how fast this run went: differs run to run
    assert {p: {k: v for k, v in s.items() if k not in timing}
            for p, s in json.loads(out.stdout).items()} == {
        p: {k: v for k, v in s.items() if k not in timing} for p, s in summaries.items()}
    lines = ok(offline("simulate", *trace, "--policy", "grace"))
    assert any(line.lstrip().startswith("metric") and "grace" in line for line in lines)


def test_plan_fits_with_every_option_and_sensitivity_row(tmp_path: Path) -> None:
    args = ["plan", "--gpus", "64", "--gpu", "H100-SXM", "--utilization", "0.6", "--months",
            "36"]
    lines = ok(offline(*args, "--json", str(tmp_path / "plan.json")))
    data = json.loads((tmp_path / "plan.json").read_text())
    # the option table ends at its footnote; the rules of thumb below may name an option too
    table = lines[:next(i for i, line in enumerate(lines) if line.startswith("* cheapest"))]
    for o in data["options"]:
        cells = row(table, o["name"]).split()
        assert f"${o['total_usd']:,.0f}" in cells, (o["name"], cells)
    # an input's long name wraps in its column: its pieces are each line's first word
    start = next(i for i, line in enumerate(lines) if line.startswith("input "))
    names = "".join(line.split()[0] for line in lines[start + 2:] if line.strip()
                    and not line.startswith("owning at low"))
    text = "\n".join(lines)
    for r in data["sensitivity"][:8]:
        assert r["input"] in names, r["input"]
        assert f"{100 * r['owning_beats_renting_above_utilization_at_high']:.1f}%" in text
    out = offline(*args, "--json", "-")
    assert out.returncode == 0 and json.loads(out.stdout)["cheapest"] == data["cheapest"]


def test_whatif_fits_with_every_figure(tmp_path: Path) -> None:
    args = ["whatif", "--gpus", "512", "--days", "2", "--replicates", "1"]
    lines = ok(offline(*args))
    out = offline(*args, "--json", "-")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    text = "\n".join(lines)
    for a in result["rows"]:
        assert f"{100 * a['ettr_model']:.2f}%" in text and f"{a['lost_gpu_hours']:,.0f}" in text
    assert "ETTR twin (no spares)" in text
