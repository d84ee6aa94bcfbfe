"""The twin's HTML report as a reader sees it: read from the plotly figure JSON.

One colour per policy in every subplot and one legend entry per policy (so a reader
cannot misattribute which policy queues most), a capacity line at the cluster's GPUs,
utilization as a share, per-tenant charts, cloud GPUs and spend over time in a bursting
replay, and a file that loads nothing from another host.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from grace.cli.main import app
from grace.core.topology import Topology
from grace.sim.metrics import CLOUD_GPUS, CLOUD_PROVISIONED, CLOUD_USD
from grace.sim.report import figures
from grace.sim.report_figures import CAPACITY_GROUP, OKABE_ITO, policy_colours
from grace.sim.runner import ReplayInput, replay
from grace.sim.traces.model import LoadReport, Trace, TraceJob
from grace.spec.loader import parse_cluster

POLICIES = ["fifo", "easy-backfill", "grace"]
HOUR = 3600.0
CLUSTER = {"name": "tiny", "node_groups": [{"name": "n", "count": 2, "gpu": "H100-SXM",
                                            "gpus_per_node": 8, "nodes_per_leaf": 2}]}
CAPACITY = 16
# a full-cluster job behind a half-cluster one, small jobs that backfill around it, two tenants
ROWS = [(0, 2 * HOUR, 8, "vision"), (60, 3 * HOUR, 16, "nlp"), (120, HOUR, 4, "vision"),
        (180, HOUR, 2, "nlp"), (240, 4 * HOUR, 8, "vision"), (300, HOUR, 1, "nlp")]


def write_scene(tmp: Path) -> list[str]:
    trace = tmp / "jobs.csv"
    trace.write_text("submit,duration,gpus,tenant\n" + "".join(
        f"{s},{d:.0f},{g},{t}\n" for s, d, g, t in ROWS))
    cluster = tmp / "tiny.yaml"
    cluster.write_text(yaml.safe_dump({"kind": "cluster", **CLUSTER}))
    return ["--cluster", str(cluster), "--trace", str(trace), "--format", "csv",
            "--columns", "submit=submit,duration=duration,gpus=gpus,tenant=tenant"]


def results() -> dict:
    inp = ReplayInput(Topology.from_spec(parse_cluster(CLUSTER)),
                      Trace([TraceJob(str(i), s, d, g, t) for i, (s, d, g, t) in enumerate(ROWS)],
                            LoadReport("t")), "tiny.yaml", "jobs.csv")
    return {p: replay(inp, p) for p in POLICIES}


# ------------------------------------------------------------------ reading the HTML
class _Loads(HTMLParser):
    """Every URL an element makes the browser fetch or link to, and every <script> tag."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.scripts += tag == "script"
        self.urls += [v for k, v in attrs if k in ("src", "href", "action", "data", "poster")
                      and v is not None]


def plotted(doc: str) -> list[dict[str, Any]]:
    """Each ``Plotly.newPlot(id, data, layout, config)`` call's data and layout, in order."""
    dec = json.JSONDecoder()
    out = []
    for m in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*', doc):
        data, end = dec.raw_decode(doc, m.end())
        layout, _ = dec.raw_decode(doc, re.compile(r",\s*").match(doc, end).end())  # type: ignore[union-attr]
        out.append({"data": data, "layout": layout})
    return out


def colour(trace: dict[str, Any]) -> str:
    return trace["marker"]["color"] if trace["type"] == "bar" else trace["line"]["color"]


def axes(trace: dict[str, Any]) -> tuple[str, str]:
    return trace.get("xaxis", "x"), trace.get("yaxis", "y")


def axis_of(row: int, col: int) -> tuple[str, str]:
    """make_subplots numbers a two-column grid's axes row by row: (1,1) is x/y, (1,2) x2/y2."""
    n = (row - 1) * 2 + col
    return (f"x{n}", f"y{n}") if n > 1 else ("x", "y")


def check_one_colour_and_one_legend_entry_per_policy(fig: dict[str, Any],
                                                     policies: list[str]) -> None:
    by_policy: dict[str, list[dict]] = defaultdict(list)
    for tr in fig["data"]:
        by_policy[tr["legendgroup"]].append(tr)
    assert set(by_policy) == {*policies, CAPACITY_GROUP}
    grid = {axes(tr) for tr in fig["data"]}
    for p in policies:
        traces = by_policy[p]
        assert {colour(tr) for tr in traces} == {policy_colours(policies)[p]}, p
        assert all(tr["name"] == p for tr in traces)  # hover labels name the policy
        assert [tr.get("showlegend", True) for tr in traces].count(True) == 1, p
        assert {axes(tr) for tr in traces} == grid, p  # drawn in every subplot
    assert len({policy_colours(policies)[p] for p in policies}) == len(policies)
    shown = [tr["name"] for tr in fig["data"] if tr.get("showlegend", True)]
    assert shown == [*policies, f"capacity ({CAPACITY:,} GPUs)"]  # one legend, one entry each


# ------------------------------------------------------------------ the tests
def test_compare_html_gives_each_policy_one_colour_and_one_legend_entry_in_every_subplot(
        tmp_path: Path) -> None:
    html = tmp_path / "compare.html"
    r = CliRunner().invoke(app, ["compare", *write_scene(tmp_path), "--policies",
                                 ",".join(POLICIES), "--html", str(html)])
    assert r.exit_code == 0, r.output
    doc = html.read_text()
    main, tenants = plotted(doc)
    assert len(main["data"]) == 6 * len(POLICIES) + 1  # six subplots per policy, one capacity
    check_one_colour_and_one_legend_entry_per_policy(main, POLICIES)
    # the waiting-jobs chart differs between policies, so the colours are telling them apart
    waiting = {tr["name"]: tr["y"] for tr in main["data"] if axes(tr) == axis_of(2, 1)}
    assert len({json.dumps(v) for v in waiting.values()}) > 1
    # the summary table carries each policy's colour too
    for p, c in policy_colours(POLICIES).items():
        assert re.search(rf"background:{c}'></span>{re.escape(p)}</th>", doc), p
    # the tenant chart: one legend entry per tenant, each tenant one colour in every row
    groups: dict[str, set[str]] = defaultdict(set)
    for tr in tenants["data"]:
        groups[tr["legendgroup"]].add(tr["line"]["color"])
    assert set(groups) == {"vision", "nlp", CAPACITY_GROUP}
    assert all(len(c) == 1 for c in groups.values())
    assert [tr["name"] for tr in tenants["data"] if tr.get("showlegend", True)] == \
        ["vision", "nlp", f"capacity ({CAPACITY:,} GPUs)"]


def test_the_report_loads_nothing_from_another_host(tmp_path: Path) -> None:
    html = tmp_path / "compare.html"
    r = CliRunner().invoke(app, ["compare", *write_scene(tmp_path), "--policies",
                                 ",".join(POLICIES), "--html", str(html)])
    assert r.exit_code == 0, r.output
    doc = html.read_text()
    loads = _Loads()
    loads.feed(doc)
    assert loads.urls == []  # no <script src>, <link href>, <img src>: everything is inline
    assert loads.scripts >= 2 and "<link" not in doc
    from plotly.offline import get_plotlyjs_version

    # the installed package's plotly.js, inline, once (there are two figures)
    banner = re.findall(r"plotly\.js v\d+\.\d+\.\d+", doc)
    assert banner == [f"plotly.js v{get_plotlyjs_version()}"] and len(doc) > 3_000_000
    assert doc.count("window.PlotlyConfig") == 1


def test_the_capacity_line_is_the_clusters_gpus_and_utilization_is_a_share() -> None:
    res = results()
    main = figures(res, "t")[0]
    (cap,) = main.select_traces(selector={"legendgroup": CAPACITY_GROUP})
    assert set(cap.y) == {CAPACITY} and cap.x[0] == 0.0
    assert cap.line.dash == "dash"
    in_use = list(main.select_traces(row=2, col=2))
    assert cap in in_use  # drawn on the GPUs-in-use chart
    for p, r in res.items():
        (alloc,) = main.select_traces(selector={"legendgroup": p}, row=2, col=2)
        assert list(alloc.y) == r.series["allocated_gpus"]
        assert cap.x[-1] == pytest.approx(max(r.series["t_s"]) / 86400)  # to the last day
        (util,) = main.select_traces(selector={"legendgroup": p}, row=3, col=1)
        assert list(util.y) == pytest.approx([a / CAPACITY for a in r.series["allocated_gpus"]])
        assert max(util.y) == 1.0  # the 16-GPU job fills the cluster under every policy
    assert main.layout.yaxis5.tickformat == ".0%"


def test_per_tenant_charts_add_up_to_what_ran() -> None:
    res = results()
    main, tenants = figures(res, "t")
    for row, (p, r) in enumerate(res.items(), start=1):
        (bars,) = main.select_traces(selector={"legendgroup": p, "type": "bar"})
        assert list(bars.x) == ["vision", "nlp"]  # most GPU-hours first
        assert list(bars.y) == pytest.approx([
            sum(g * d for _, d, g, t in ROWS if t == tn) / HOUR for tn in bars.x])
        stacks = [tr for tr in tenants.select_traces(row=row, col=1)
                  if tr.legendgroup != CAPACITY_GROUP]
        assert {tr.legendgroup for tr in stacks} == {"vision", "nlp"}
        total = [sum(v) for v in zip(*(tr.y for tr in stacks), strict=True)]
        assert total == pytest.approx(r.series["allocated_gpus"])  # no GPU is left out
        assert max(r.tenant_series["nlp"]) == 16  # the full-cluster job shows as nlp's
        assert r.series["t_s"][-1] == max(j.end_s for j in r.jobs)  # the charts reach the end


def test_bursting_report_charts_cloud_gpus_and_spend_over_time(tmp_path: Path) -> None:
    """The twin's hybrid scene (tests/sim/test_bursting.py): 2 owned nodes, 4 spot and
    4 on-demand nodes of 8 GPUs to rent, at $2 and $6 per GPU-hour."""
    cluster = {"kind": "cluster", "name": "hybrid",
               "pools": [{"name": "own", "kind": "on-prem"}, {"name": "spot", "kind": "cloud"},
                         {"name": "od", "kind": "cloud"}],
               "node_groups": [{"name": g, "count": n, "gpu": "H100-SXM", "pool": g}
                               for g, n in (("own", 2), ("spot", 4), ("od", 4))]}
    burst = {"kind": "bursting", "queue_wait_threshold_s": 600, "check_interval_s": 60,
             "idle_release_s": 600, "offers": [
                 {"name": "spot", "gpu": "H100-SXM", "kind": "spot", "usd_per_gpu_hour": 2.0,
                  "preemptions_per_hour": 0.2, "provisioning_delay_s": 300},
                 {"name": "od", "gpu": "H100-SXM", "kind": "on-demand", "usd_per_gpu_hour": 6.0,
                  "provisioning_delay_s": 300}]}
    (tmp_path / "hybrid.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "bursting.yaml").write_text(yaml.safe_dump(burst))
    (tmp_path / "jobs.csv").write_text("submit,duration,gpus\n" + "".join(
        f"{i * 60},{4 * HOUR:.0f},8\n" for i in range(10)))
    html, out = tmp_path / "run.html", tmp_path / "run.json"
    r = CliRunner().invoke(app, [
        "simulate", "--cluster", str(tmp_path / "hybrid.yaml"), "--trace",
        str(tmp_path / "jobs.csv"), "--format", "csv", "--columns",
        "submit=submit,duration=duration,gpus=gpus", "--bursting", str(tmp_path / "bursting.yaml"),
        "--html", str(html), "--json", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads(out.read_text())
    main, _ = plotted(html.read_text())
    assert len(main["data"]) == 9 + 1  # six subplots, in-use + provisioned + spend, capacity
    check_one_colour_and_one_legend_entry_per_policy(main, ["grace"])
    cap = next(tr for tr in main["data"] if tr["legendgroup"] == CAPACITY_GROUP)
    assert set(cap["y"]) == {16}  # the owned GPUs: rented ones are not the cluster's capacity
    in_use, provisioned = (tr for tr in main["data"] if axes(tr) == axis_of(4, 1))
    assert provisioned["line"]["dash"] == "dot" and "dash" not in in_use["line"]
    assert all(u <= p for u, p in zip(in_use["y"], provisioned["y"], strict=True))
    assert 0 < max(in_use["y"]) <= max(provisioned["y"]) <= 64
    assert max(in_use["y"]) + 16 >= 10 * 8 * 0.5  # renting carried a real share of the load
    (spend,) = (tr for tr in main["data"] if axes(tr) == axis_of(4, 2))
    assert all(a <= b for a, b in pairwise(spend["y"]))  # accrued: never falls
    # the summary also bills nodes still up at the end until their idle timeout (600 s):
    # at most 8 nodes x 8 GPUs x 1/6 h x $6 = $64 more than the series accrued
    assert spend["y"][-1] > 0
    assert -1e-6 <= summary["cloud_usd"] - spend["y"][-1] <= 64
    assert summary["cloud_usd"] > 500


def test_the_palette_is_fixed_by_order_and_never_repeats() -> None:
    assert policy_colours(POLICIES) == dict(zip(POLICIES, OKABE_ITO[:3], strict=True))
    assert policy_colours(["grace", "fifo"])["grace"] == OKABE_ITO[0]  # order given, not name
    many = policy_colours([f"p{i}" for i in range(20)])
    assert len(set(many.values())) == 20
    with pytest.raises(ValueError, match="--policies: 40 policies"):
        policy_colours([f"p{i}" for i in range(40)])


def test_the_recorder_keeps_the_series_it_had() -> None:
    """The series the report drew before stay, and no cloud series without bursting."""
    (r, *_) = results().values()
    assert set(r.series) == {"t_s", "allocated_gpus", "queued_jobs"}
    assert not {CLOUD_GPUS, CLOUD_PROVISIONED, CLOUD_USD} & set(r.series)
    assert r.total_gpus == CAPACITY
