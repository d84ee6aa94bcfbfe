"""``grace plan --site-kw`` from the command line: the issue's two sites, at 80 columns."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from grace.cli.main import app

runner = CliRunner()
SEED = ["plan", "--gpus", "64", "--gpu", "H100-SXM", "--utilization", "0.7", "--months", "36"]


def _plan(*extra: str) -> tuple[dict, str]:
    r = runner.invoke(app, [*SEED, *extra, "--json", "-"])
    assert r.exit_code == 0, r.output
    table = runner.invoke(app, [*SEED, *extra], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    assert max(len(line) for line in table.output.splitlines()) <= 80
    return json.loads(r.output), table.output


def test_a_60_kw_site_hosts_the_seeds_64_h100s() -> None:
    data, text = _plan("--site-kw", "60")
    site = data["site"]
    assert site["feasible"] is True and site["site_kw"] == 60
    assert site["draw_kw_low"] <= 60 <= site["draw_kw_high"]
    assert site["draw_kw"] == site["nodes_needed"] * site["node_kw"]
    assert {"draw_kw", "nodes_powered", "racks", "feasible", "reason"} <= set(site)
    onprem = next(o for o in data["options"] if o["name"] == "on-prem")
    assert onprem["total_usd"] is not None
    assert "site: fits" in text and "staffing:" in text and "rules of thumb" in text


def test_a_30_kw_site_refuses_on_prem_with_the_nodes_that_fit() -> None:
    data, text = _plan("--site-kw", "30")
    site = data["site"]
    assert site["feasible"] is False and site["nodes_powered"] == 4
    assert site["nodes_in_boxes"] == site["nodes_needed"] - 4
    onprem = next(o for o in data["options"] if o["name"] == "on-prem")
    assert onprem["total_usd"] is None and "4 of 8 nodes fit" in onprem["note"]
    assert data["cheapest"] != "on-prem"
    assert "REFUSED" in text and "4 fit, 4 in boxes" in text


def test_without_a_site_the_plan_has_no_site_and_keeps_its_keys() -> None:
    r = runner.invoke(app, [*SEED, "--json", "-"])
    data = json.loads(r.output)
    assert "site" not in data
    assert {"inputs", "options", "cheapest", "owning_beats_renting_above_utilization",
            "owning_beats_renting_above_utilization_unclamped", "sensitivity", "staffing",
            "rules_of_thumb"} <= set(data)
    st = data["staffing"]
    assert st["fte"] == max(st["min_fte"], st["gpus"] / st["gpus_per_fte"])


def test_site_details_without_the_sites_power_are_refused() -> None:
    r = runner.invoke(app, [*SEED, "--cooling-kw", "40"])
    assert r.exit_code == 2 and "--site-kw" in r.output
    r = runner.invoke(app, [*SEED, "--site-kw", "0"])
    assert r.exit_code == 2


@pytest.mark.parametrize("args", [
    ["--site-kw", "inf"], ["--site-kw", "nan"], ["--site-kw", "60", "--rack-kw", "inf"],
    ["--site-kw", "60", "--floor-kg-per-m2", "nan"], ["--utilization", "nan"],
    ["--gpus", "inf"], ["--gpus", "nan"], ["--json", "/proc/x.json"], ["--html", "/proc/x.html"],
])
def test_non_finite_numbers_and_unwritable_outputs_exit_2_naming_the_flag(
        args: list[str]) -> None:
    """nan passes every range check (each comparison with it is false) and inf passes a
    minimum: both must be refused while parsing, not surface as a traceback or a figure."""
    from typer.testing import CliRunner

    from grace.cli.main import app

    base = {"--gpus": "64", "--gpu": "H100-SXM", "--utilization": "0.7", "--months": "36"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    r = CliRunner().invoke(app, ["plan", *[x for kv in base.items() for x in kv]])
    assert r.exit_code == 2, r.output
    assert args[-2] in r.output and "Traceback" not in r.output


def test_a_rack_that_holds_no_node_says_so_not_zero_racks_of_zero_nodes() -> None:
    r = CliRunner().invoke(app, ["plan", "--gpus", "8", "--gpu", "H100-SXM", "--utilization",
                                 "0.7", "--months", "36", "--site-kw", "60", "--rack-kw", "5"],
                           env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "no rack can hold one node" in r.output and "0 racks" not in r.output
    assert "1 node draw" in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80
