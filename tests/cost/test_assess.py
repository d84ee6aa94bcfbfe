"""``grace assess``'s verdict, its dollar figure and the workload-class table.

The dollar figure is recomputed from the echoed inputs through ``grace.cost.plan``;
the class table's rules (full runs and multi-day runs never on spot, owned only
when the verdict says own) are checked on crafted histories with the real book.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from grace.cost.assess import (
    SEVERAL_MET,
    AssessInputs,
    DataClassification,
    VerdictLevel,
    assess,
    verdict,
)
from grace.cost.history import MONTH_S, CloudUsage, History, HistoryFormat, HistoryJob
from grace.cost.indicators import Indicator, IndicatorResult
from grace.cost.plan import plan
from grace.cost.pricebook import PriceBook, load_pricebook
from grace.cost.workload import Workload
from grace.spec.job import WorkloadClass

HOUR = 3600.0
DAY = 24 * HOUR


@pytest.fixture(scope="module")
def real_book() -> PriceBook:
    return load_pricebook()


def _big_team() -> History:
    """Four months of 32-GPU three-day pre-training runs queued two hours, plus 1-GPU tuning."""
    jobs = [HistoryJob(f"p{i}", "llm", i * DAY, 3 * DAY, 32, name="pretrain-a",
                       start_s=i * DAY + 2 * HOUR) for i in range(120)]
    jobs += [HistoryJob(f"f{i}", "apps", i * 0.6 * DAY, (2 + i % 3) * HOUR, 1,
                        start_s=i * 0.6 * DAY + 60) for i in range(200)]
    return History("crafted", HistoryFormat.CSV, jobs=jobs)


def _small_cloud_team() -> History:
    """Six months of a cloud bill: 2,000 H100 GPU-hours a month, no jobs."""
    lines = [CloudUsage(m * MONTH_S, (m + 1) * MONTH_S, "p5.48xlarge", "H100-SXM", 2000.0,
                        2000.0 * 6.88) for m in range(6)]
    return History("bill", HistoryFormat.CLOUD_BILL, usage=lines)


@pytest.fixture(scope="module")
def big(real_book: PriceBook) -> dict[str, Any]:
    return assess(_big_team(), AssessInputs(), real_book)


def _result(i: int, met: bool | None) -> IndicatorResult:
    return IndicatorResult(list(Indicator)[i], met, "e", "t")


@pytest.mark.parametrize(("mets", "level"), [
    ([False] * 6, VerdictLevel.STAY_SHARED),
    ([None] * 6, VerdictLevel.STAY_SHARED),
    ([True] + [False] * 5, VerdictLevel.ON_THE_EDGE),
    ([True, True, None, None, False, False], VerdictLevel.ON_THE_EDGE),
    ([True, True, True, None, False, False], VerdictLevel.PAST_THE_POINT),
    ([True] * 6, VerdictLevel.PAST_THE_POINT),
])
def test_verdict_levels_count_met_and_name_unknowns(mets: list[bool | None],
                                                    level: VerdictLevel) -> None:
    got, text = verdict([_result(i, m) for i, m in enumerate(mets)])
    assert got is level
    assert (sum(1 for m in mets if m) >= SEVERAL_MET.value) is (got is VerdictLevel.PAST_THE_POINT)
    unknown = sum(1 for m in mets if m is None)
    assert f"{unknown} unknown" in text
    if unknown:
        assert str(Indicator(list(Indicator)[mets.index(None)])) in text


def test_big_team_is_past_the_point_and_json_is_complete(big: dict[str, Any]) -> None:
    json.dumps(big)  # JSON-able
    assert big["verdict_level"] == "past-the-point"
    assert big["met_count"] == sum(1 for i in big["indicators"] if i["met"])
    assert big["unknown_count"] == sum(1 for i in big["indicators"] if i["met"] is None)
    assert [i["name"] for i in big["indicators"]] == [str(i) for i in Indicator]
    for ind in big["indicators"]:
        assert set(ind) == {"name", "met", "evidence", "threshold", "figures"}
    assert "past the point" in big["verdict"]
    assert big["inputs"]["prices"]["gpus.H100-SXM.offers.hyperscaler.on_demand_usd_per_gpu_hour"][
        "source"]


def test_small_cloud_bill_is_not_past_the_point(real_book: PriceBook) -> None:
    out = assess(_small_cloud_team(), AssessInputs(
        data_classification=DataClassification.INTERNAL), real_book)
    by = {i["name"]: i for i in out["indicators"]}
    assert by["long-multinode-runs"]["met"] is None
    assert by["predictability"]["met"] is None
    assert by["capacity-difficulty"]["met"] is None
    assert by["data-governance"]["met"] is False
    assert out["verdict_level"] != "past-the-point"
    row, = out["placement_by_class"]
    assert row["class"] == "unclassified" and row["runs_on"] != "spot"


def test_breakeven_and_sustained_recompute_from_the_echo(big: dict[str, Any],
                                                         real_book: PriceBook) -> None:
    be = big["inputs"]["breakeven"]
    assert be["utilization"] == pytest.approx(
        be["onprem_total_usd"] / (be["gpus"] * 730 * be["months"]
                                  * be["on_demand_usd_per_gpu_hour"]))
    w = Workload(be["gpus"], big["inputs"]["gpu"], 1.0, be["months"], big["inputs"]["cloud"])
    assert plan(w, real_book)["owning_beats_renting_above_utilization_unclamped"]["on-prem"] == \
        pytest.approx(be["utilization"])
    sus = next(i for i in big["indicators"] if i["name"] == "sustained-utilization")
    assert sus["met"] is (sus["figures"]["judged_utilization"] >= be["utilization"])


def _recompute_dollars(out: dict[str, Any], book: PriceBook) -> None:
    d, inputs = out["dollars"], out["inputs"]
    w = Workload.from_profile(d["gpus"], inputs["gpu"], tuple(d["useful_gpu_hours_by_month"]),
                              inputs["cloud"])
    p = plan(w, book)
    totals = {o["name"]: o["total_usd"] for o in p["options"]}
    rate = inputs["prices"][
        f"gpus.{inputs['gpu']}.offers.{inputs['cloud']}.on_demand_usd_per_gpu_hour"]["value"]
    over = sum(d["overflow_gpu_hours_by_month"]) * rate
    assert d["overflow_usd"] == pytest.approx(over)
    owning = totals["on-prem"] + over
    clouds = {n: totals[n] + over for n in ("cloud-on-demand", "cloud-1y", "cloud-3y")
              if totals[n] is not None}
    cheapest = min(clouds, key=lambda n: clouds[n])
    assert d["owning"]["total_usd"] == pytest.approx(owning)
    assert d["cheapest_cloud"] == {"option": cheapest, "total_usd": pytest.approx(clouds[cheapest])}
    assert d["owning_saves_usd"] == pytest.approx(clouds[cheapest] - owning)
    assert d["owning_beats_renting_above_utilization"] == pytest.approx(
        p["owning_beats_renting_above_utilization"])
    for demand, useful, extra in zip(d["demand_gpu_hours_by_month"],
                                     d["useful_gpu_hours_by_month"],
                                     d["overflow_gpu_hours_by_month"], strict=True):
        assert useful == pytest.approx(min(demand, d["gpus"] * 730))
        assert useful + extra == pytest.approx(demand)


def test_dollar_figure_recomputes_through_plan(big: dict[str, Any], real_book: PriceBook) -> None:
    d = big["dollars"]
    assert d["months"] == big["inputs"]["breakeven"]["months"]  # repeated over one life
    assert d["overflow_usd"] == 0.0
    _recompute_dollars(big, real_book)
    assert ("saves" if d["owning_saves_usd"] >= 0 else "costs") in big["verdict"]


def test_months_over_the_fleet_are_rented_on_demand_in_every_option(
        real_book: PriceBook) -> None:
    out = assess(_big_team(), AssessInputs(gpus=64), real_book)
    d = out["dollars"]
    assert d["gpus"] == 64 and out["inputs"]["fleet"]["basis"] == "given (--gpus)"
    assert d["overflow_usd"] > 0
    assert all(u <= 64 * 730 + 1e-6 for u in d["useful_gpu_hours_by_month"])
    _recompute_dollars(out, real_book)


def test_placement_rows_recompute_and_follow_the_routes(big: dict[str, Any]) -> None:
    rates = big["inputs"]["placement"]["usd_per_useful_gpu_hour"]
    months = big["inputs"]["history"]["span_days"] * 24 / 730
    assert sum(r["share"] for r in big["placement_by_class"]) == pytest.approx(1.0)
    for row in big["placement_by_class"]:
        assert row["gpu_hours_per_month"] == pytest.approx(row["gpu_hours"] / months)
        for option, usd in row["usd_per_month"].items():
            assert usd == pytest.approx(row["gpu_hours_per_month"] * rates[option])
        assert row["runs_on"] == min(row["allowed"], key=lambda o: rates[o])
        assert row["why"]
    full = next(r for r in big["placement_by_class"] if r["class"] == "full-run")
    assert "spot" not in full["allowed"] and full["runs_on"] == "owned"  # verdict says own
    assert full["class_basis"] == {"name": 120}  # 'pretrain-a' names its class


def _one_class(real_book: PriceBook, run_h: float, **kw: Any) -> list[dict[str, Any]]:
    jobs = [HistoryJob(f"e{i}", "t", i * 2 * DAY, run_h * HOUR, 1, **kw) for i in range(10)]
    out = assess(History("x", HistoryFormat.CSV, jobs=jobs), AssessInputs(), real_book)
    assert out["verdict_level"] != "past-the-point"
    return list(out["placement_by_class"])


def test_short_runs_go_to_spot_and_multi_day_runs_never(real_book: PriceBook) -> None:
    short, = _one_class(real_book, 4.0)
    assert short["class"] == str(WorkloadClass.FINE_TUNE) and short["runtime"] == "<= 24 h"
    assert short["runs_on"] == "spot"  # cheapest in the real book for a short fine-tune
    assert "owned" not in short["allowed"]  # the verdict does not say own
    long, = _one_class(real_book, 40.0)  # a 1-GPU fine-tune of almost two days
    assert long["runtime"] == "> 24 h"
    assert "spot" not in long["allowed"] and long["runs_on"] != "spot"
    assert "max_spot_runtime_s" in long["why"]
    # a declared limit over a day keeps a short run off spot too (what a live router sees)
    limited, = _one_class(real_book, 4.0, limit_s=3 * DAY)
    assert limited["runs_on"] != "spot" and limited["class_basis"] == {"limit": 10}


def test_bad_inputs_name_the_fix(real_book: PriceBook) -> None:
    h = _big_team()
    with pytest.raises(ValueError, match="no prices for GPU"):
        assess(h, AssessInputs(gpu="V100"), real_book)
    with pytest.raises(ValueError, match="gpus must be more than 0"):
        assess(h, AssessInputs(gpus=0), real_book)
    with pytest.raises(ValueError, match="grace bench scaling"):
        assess(h, AssessInputs(scaling={"nothing": 1}), real_book)


def test_future_dates_warn_and_a_short_history_caveats_its_dollars() -> None:
    """A bill dated years ahead is a clock or unit slip the reader must see; a purchase
    priced from a day of history says how little it stands on."""
    from grace.cost.assess import history_warnings
    from grace.cost.history import History, HistoryFormat, HistoryJob

    h = History("x", HistoryFormat.CSV, [HistoryJob("1", "t", 0.0, 86_400.0, 8.0)])
    h.origin_epoch_s = 2_000_000_000.0  # 2033
    assert history_warnings(h, now=1_760_000_000.0)[0].startswith("the history runs to")
    assert history_warnings(h, now=2_000_000_000.0) == []
    from grace.cost.pricebook import load_pricebook

    result = assess(h, AssessInputs(), load_pricebook())
    assert "too short to size a purchase" in result["dollars"]["caveat"]
    assert "too short to size a purchase" in result["verdict"]
