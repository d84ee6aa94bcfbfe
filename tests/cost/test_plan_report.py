"""``grace plan --html`` as a reader sees it, read from the plotly figure.

The cash curves never fall (the resale of owned hardware is its own marker after the
last month, not a drop in the last month), and the tornado's labels sit in their own
row's margin, never over the cash plot.
"""

from __future__ import annotations

import html
import os
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from grace.cost.plan import plan
from grace.cost.pricebook import PriceBook
from grace.cost.report import label_margin_px, plan_figure, short_labels, write_plan_html
from grace.cost.site import SiteSpec
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


def test_the_tornado_keys_its_bars_in_its_own_legend(results: dict[int, dict]) -> None:
    fig = plan_figure(results[36])
    bars = [tr for tr in fig.data if tr.type == "bar"]
    assert {tr.legend for tr in bars} == {"legend2"}
    assert all(tr.legend in (None, "legend") for tr in fig.data if tr.type == "scatter")
    assert fig.layout.legend2.y == fig.layout.yaxis2.domain[1]  # beside the tornado


def test_the_page_shows_the_site_staffing_and_rules_of_thumb(tmp_path: Path) -> None:
    book = round_book()
    w = Workload(64, "H100-SXM", 0.7, 36)
    free, at30 = plan(w, book), plan(w, book, SiteSpec(30))
    for result, name in ((free, "free.html"), (at30, "site.html")):
        write_plan_html(result, tmp_path / name)
    free_doc, site_doc = (tmp_path / "free.html").read_text(), (tmp_path / "site.html").read_text()
    assert "<h2>Site</h2>" not in free_doc and "<h2>Site</h2>" in site_doc
    assert html.escape(at30["site"]["reason"]) in site_doc
    assert f"{at30['site']['draw_kw']:.1f}" in site_doc
    for doc, result in ((free_doc, free), (site_doc, at30)):
        assert "<h2>Staffing</h2>" in doc and "<h2>Rules of thumb</h2>" in doc
        for r in result["rules_of_thumb"]:
            assert html.escape(r["plan_says"]) in doc


def _browser() -> Any:
    """Debian's chromium and chromedriver through selenium, as the dashboard's browser test
    drives them; skipped without them unless GRACE_TEST_BROWSER=1 (CI)."""
    missing = [p for p in ("/usr/bin/chromium", "/usr/bin/chromedriver") if not Path(p).exists()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium")
    if missing:
        if os.environ.get("GRACE_TEST_BROWSER", "").strip() == "1":
            pytest.fail(f"GRACE_TEST_BROWSER=1 but {', '.join(missing)} missing", pytrace=False)
        pytest.skip(f"needs {', '.join(missing)}")
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1024,900"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


#: each plot area's box, and each tornado tick label's box, as the browser lays them out
_BOXES_JS = """
const box = e => {const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom];};
return {plots: [...document.querySelectorAll('.bglayer rect.bg')].map(box),
        labels: [...document.querySelectorAll('g.y2tick text')].map(box),
        svg: box(document.querySelector('svg.main-svg'))};
"""


@pytest.mark.slow
def test_in_a_browser_no_tornado_label_touches_the_cash_plot(results: dict[int, dict],
                                                             tmp_path: Path) -> None:
    path = tmp_path / "plan.html"
    write_plan_html(results[36], path)
    driver = _browser()
    try:
        driver.get(path.as_uri())
        deadline = time.monotonic() + 30
        boxes = driver.execute_script(_BOXES_JS)
        while len(boxes["labels"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            boxes = driver.execute_script(_BOXES_JS)
    finally:
        driver.quit()
    cash, tornado = boxes["plots"]
    labels, svg = boxes["labels"], boxes["svg"]
    assert len(labels) == len(results[36]["sensitivity"][:12])
    for left, top, right, _bottom in labels:
        assert left >= svg[0]  # not cut at the figure's edge
        assert right <= tornado[0] + 1  # left of its own bars
        assert top >= cash[3]  # below the cash plot, never over it
