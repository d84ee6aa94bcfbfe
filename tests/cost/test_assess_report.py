"""The ``grace assess`` HTML page: what people wrote is escaped, months are labelled, and
the page shows every indicator, class and option from the JSON it is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grace.cost.assess_report import flatten, month_labels, render_body, write_assess_html
from grace.cost.history import MONTH_S


def result(origin: float | None = None) -> dict[str, Any]:
    indicator = {"name": "predictability", "met": None, "threshold": "CV >= 0.25",
                 "evidence": "jobs named <script>alert(1)</script> spread", "figures": {}}
    return {
        "inputs": {"gpu": "H100-SXM", "gpus": 16,
                   "history": {"path": "h.csv", "format": "csv", "rows": 3, "jobs": 2,
                               "bill_lines": 0, "skipped": {"no GPUs": 1},
                               "origin_epoch_s": origin, "gpu_hours_by_month": [10.0, 20.0]}},
        "indicators": [indicator], "met_count": 0, "unknown_count": 1,
        "verdict": "none met: stay on shared capacity", "verdict_level": "stay-shared",
        "dollars": {"options": [{"name": "on-prem", "total_usd": 1234.5,
                                 "breakeven_month": None, "note": ""}],
                    "owning_saves_usd": 99.0},
        "placement_by_class": [{"class": "sweep", "runtime": "<= 24 h", "jobs": 2,
                                "gpu_hours": 30.0, "share": 1.0, "runs_on": "spot",
                                "why": "cheapest", "usd_per_month": {"spot": 5.0, "owned": 9.0}}],
    }


def test_what_people_wrote_is_escaped_and_every_row_shown() -> None:
    body = render_body(result())
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    for text in ("predictability", "unknown", "stay on shared capacity", "sweep (&lt;= 24 h)",
                 "spot $/month", "owned $/month", "$1,234", "1 no GPUs", "16 GPUs all month"):
        assert text in body, text


def test_months_are_dates_when_the_history_has_a_calendar() -> None:
    assert month_labels(2, None) == ["month 1", "month 2"]
    assert month_labels(2, 0.0) == ["1970-01-01", "1970-01-31"]  # 730 h = 30.4 days
    assert MONTH_S == 730 * 3600


def test_flatten_names_records_by_their_name() -> None:
    rows = dict(flatten({"a": {"b_usd": 1500.0, "rate_usd_per_gpu_hour": 2.5},
                         "opts": [{"name": "x", "n": 3}], "big": list(range(20))}))
    assert rows == {"a.b_usd": "$1,500", "a.rate_usd_per_gpu_hour": "$2.50", "opts.x.n": "3",
                    "big": "20 values (in the JSON)"}


def test_the_page_is_written_whole(tmp_path: Path) -> None:
    out = tmp_path / "r" / "assess.html"
    write_assess_html(result(origin=1767571200.0), out)
    text = out.read_text()
    assert text.startswith("<!doctype html>") and "2026-01-05" in text and "plotly" in text
