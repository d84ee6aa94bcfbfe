"""``grace plan --html`` as a reader sees it, read from the plotly figure.

The cash curves never fall (the resale of owned hardware is its own marker after the
last month, not a drop in the last month), and the tornado's labels sit in their own
row's margin, never over the cash plot.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from grace.cost.plan import plan
from grace.cost.pricebook import PriceBook
from grace.cost.report import label_margin_px, plan_figure, short_labels, write_plan_html
from grace.cost.workload import Workload
from grace.sim.report_page import STYLE

from .builders import round_book


@pytest.fixture(scope="module")
def results() -> dict[int, dict]:
    """36 months (one life, resale at book value) and 60 (a second purchase after the
    48-month life, the first traded in at a 35% residual)."""
    book: PriceBook = round_book(residual_value_fraction=0.35)
    return {m: plan(Workload(80, "H100-SXM", 0.5, m), book) for m in (36, 60)}


@pytest.mark.parametrize("months", [36, 60])
def test_no_cash_line_falls_and_the_resale_is_a_marker_after_the_last_month(
        results: dict[int, dict], months: int) -> None:
    result = results[months]
    fig = plan_figure(result)
    lines = [tr for tr in fig.data if tr.type == "scatter" and tr.mode == "lines"]
    assert {tr.name for tr in lines} == {o["name"] for o in result["options"]
                                        if o["cumulative_usd_by_month"]}
    for tr in lines:
        assert len(tr.y) == months
        assert all(b >= a for a, b in pairwise(tr.y)), tr.name  # cash spent never falls
    owned = {o["name"]: o for o in result["options"] if o["resale_usd"]}
    assert set(owned) == {"on-prem", "colo", "hybrid"}
    markers = {tr.name: tr for tr in fig.data if tr.type == "scatter" and tr.mode == "markers"}
    assert set(markers) == set(owned)
    for name, o in owned.items():
        (line,) = (tr for tr in lines if tr.name == name)
        assert markers[name].x == (months + 0.5,)  # after the last month, not in it
        assert markers[name].y[0] == pytest.approx(o["total_usd"])
        assert o["total_usd"] == pytest.approx(line.y[-1] - o["resale_usd"])
        assert markers[name].marker.color == line.line.color  # the option's one colour
        assert markers[name].showlegend is False


def test_the_tornado_has_its_own_row_and_a_margin_that_holds_its_labels(
        results: dict[int, dict]) -> None:
    fig = plan_figure(results[36])
    layout = fig.layout
    cash_y, tornado_y = layout.yaxis.domain, layout.yaxis2.domain
    assert tornado_y[1] < cash_y[0]  # the tornado is below the cash plot, with a gap
    assert layout.xaxis.domain == layout.xaxis2.domain  # both the full width
    bars = [tr for tr in fig.data if tr.type == "bar"]
    assert bars and all(tr.xaxis == "x2" and tr.yaxis == "y2" for tr in bars)
    assert all(tr.xaxis in (None, "x") for tr in fig.data if tr.type == "scatter")
    labels = list(bars[0].y)
    assert labels == short_labels([r["input"] for r in reversed(results[36]["sensitivity"][:12])])
    assert layout.margin.l >= label_margin_px(labels) >= 7 * max(map(len, labels))
    assert layout.yaxis2.automargin is True
    assert max(map(len, labels)) <= 30  # short names; the hover has the whole path


def test_short_labels_keep_the_whole_path_where_two_end_alike() -> None:
    assert short_labels(["owned.pue", "a.x", "b.x"]) == ["pue", "a.x", "b.x"]


def test_the_plan_page_is_styled_like_the_other_reports(results: dict[int, dict],
                                                         tmp_path: Path) -> None:
    path = tmp_path / "plan.html"
    write_plan_html(results[36], path)
    doc = path.read_text()
    assert STYLE in doc and doc.count("<h1>") == 1
    assert "resale credit" in doc and "class='swatch'" in doc
