"""``grace plan`` on a worked example: 80 H100s at 50% for 48 months, the round price book.

Useful GPU-hours: 80 x 0.5 x 730 = 29,200 a month, 1,401,600 in all.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grace.cost.hybrid import hybrid_option
from grace.cost.hybrid_twin import run_hybrid_twin
from grace.cost.plan import (
    OPTION_NAMES,
    on_demand_option,
    options,
    owned_option,
    owning_threshold,
    plan,
)
from grace.cost.pricebook import PriceBook, overlay, parse_pricebook
from grace.cost.workload import Workload

from .builders import round_book

W = Workload(gpus=80, gpu="H100-SXM", utilization=0.5, months=48)
_BOOK = round_book()


def by_name(book: PriceBook, w: Workload = W) -> dict:
    return {o.name: o for o in options(w, book)}


def test_useful_gpu_hours() -> None:
    assert W.useful_gpu_hours_per_month == pytest.approx(29_200)
    assert W.useful_gpu_hours == pytest.approx(1_401_600)


def test_every_option_is_present_in_order(book: PriceBook) -> None:
    assert [o.name for o in options(W, book)] == list(OPTION_NAMES)


def test_on_prem_total_and_breakeven(book: PriceBook) -> None:
    o = by_name(book)["on-prem"]
    # 80 x 38,000 capex + 48 x (80 x 395.8125 + 10,000 staff) = 3,040,000 + 1,999,920
    assert o.total_usd == pytest.approx(5_039_920)
    assert o.usd_per_useful_gpu_hour == pytest.approx(5_039_920 / 1_401_600)  # 3.5958
    # renting costs 29,200 x 5 = 146,000 a month; owning 41,665 a month after 3,040,000:
    # 3,040,000 / (146,000 - 41,665) = 29.14 -> month 30
    assert o.breakeven_month == 30


def test_colo_pays_rent_per_kw(book: PriceBook) -> None:
    # 48 x (80 x 570.8125 + 10,000) = 2,671,920 on top of the capex
    assert by_name(book)["colo"].total_usd == pytest.approx(3_040_000 + 2_671_920)


def test_on_demand_rents_only_the_useful_hours(book: PriceBook) -> None:
    o = by_name(book)["cloud-on-demand"]
    assert o.total_usd == pytest.approx(7_008_000)  # 1,401,600 x 5.00
    assert o.usd_per_useful_gpu_hour == pytest.approx(5.0)
    assert o.breakeven_month is None  # it is the reference


def test_commitments_reserve_every_gpu_for_whole_terms(book: PriceBook) -> None:
    opts = by_name(book)
    # 1 y: 80 x 730 x 3.50 = 204,400 a month for 48 months; dearer than renting 146,000 a month
    assert opts["cloud-1y"].total_usd == pytest.approx(48 * 204_400)
    assert opts["cloud-1y"].breakeven_month is None
    # 3 y: 80 x 730 x 2.00 = 116,800 a month, billed for 72 months (two terms)
    assert opts["cloud-3y"].total_usd == pytest.approx(72 * 116_800)  # 8,409,600
    assert opts["cloud-3y"].breakeven_month == 1
    assert "72 months" in opts["cloud-3y"].note


def test_hybrid_is_the_twin_replay_scaled_to_the_plan(book: PriceBook) -> None:
    o = hybrid_option(W, book)
    run = run_hybrid_twin(W, book)
    # owned: 0.5 x 80 = 40 GPUs = 5 whole 8-GPU servers
    assert run.owned_gpus == 40 and o.detail["owned_gpus"] == 40
    # the replay's rate is its cloud bill over the work it replayed, and it did rent
    rate = run.cloud_usd / run.work_gpu_hours
    assert rate > 0 and o.detail["cloud_usd_per_work_gpu_hour"] == pytest.approx(rate)
    # by hand: 40 x 38,000 capex + 48 x (40 x 395.8125 running + 10,000 staff)
    #          + 1,401,600 useful GPU-h x rate (the round book has no egress volume)
    owned = 1_520_000 + 48 * (15_832.5 + 10_000)
    assert o.total_usd == pytest.approx(owned + 1_401_600 * rate)
    assert o.cumulative_usd[0] == pytest.approx(1_520_000 + 15_832.5 + 10_000 + 29_200 * rate)
    # the service the replay gave is reported with it
    assert o.detail["twin_avg_jct_h"] > 0 and "twin:" in o.note


def test_owning_more_of_the_workload_bursts_less(book: PriceBook) -> None:
    whole = parse_pricebook(overlay(book.model_dump(mode="json"),
                                    {"hybrid": {"owned_fraction": 1.0}}, "test"), "test")
    half, full = hybrid_option(W, book), hybrid_option(W, whole)
    assert full.detail["owned_gpus"] == 80
    assert full.detail["owned_work_share"] > half.detail["owned_work_share"]


def test_owning_beats_renting_threshold_is_where_costs_are_equal(book: PriceBook) -> None:
    result = plan(W, book)
    u = result["owning_beats_renting_above_utilization"]
    # 5,039,920 / (80 x 730 x 48 x 5.00) = 5,039,920 / 14,016,000
    assert u == pytest.approx(0.359584, abs=1e-6)
    at = Workload(80, "H100-SXM", u, 48)
    assert on_demand_option(at, book).total_usd == pytest.approx(
        owned_option(at, book, "on-prem").total_usd)


@settings(max_examples=40, deadline=None)
@given(gpus=st.integers(1, 4096), months=st.integers(1, 96),
       egress=st.floats(0, 1e6, allow_nan=False))
def test_threshold_equalizes_owning_and_renting(gpus: int, months: int, egress: float) -> None:
    book = _BOOK
    w = Workload(gpus, "H100-SXM", 0.5, months, egress_gb_per_month=egress)
    u = owning_threshold(w, owned_option(w, book, "on-prem").total_usd, book)
    if not 0 < u <= 1:
        return
    at = Workload(gpus, "H100-SXM", u, months, egress_gb_per_month=egress)
    rent = on_demand_option(at, book).total_usd
    own = owned_option(at, book, "on-prem").total_usd
    assert rent == pytest.approx(own, rel=1e-9)


def test_a_threshold_above_full_utilization_is_reported_as_none() -> None:
    # at 0.50 an hour on demand, 4 years of renting (80 x 730 x 48 x 0.5 = 1,401,600) is
    # less than the servers alone (3,040,000): owning wins at no utilization
    cheap = {"on_demand_usd_per_gpu_hour": 0.5, "reserved_1y_usd_per_gpu_hour": 0.4,
             "reserved_3y_usd_per_gpu_hour": 0.3, "spot_usd_per_gpu_hour": 0.2}
    book = parse_pricebook(overlay(round_book().model_dump(), {"gpus": {"H100-SXM": {
        "offers": {"hyperscaler": cheap}}}}, "cheap"), "cheap")
    result = plan(W, book)
    assert result["owning_beats_renting_above_utilization"] is None
    assert result["owning_beats_renting_above_utilization_unclamped"]["on-prem"] > 1


def test_egress_is_billed_to_cloud_options_only() -> None:
    book = round_book()
    w = Workload(80, "H100-SXM", 0.5, 48, egress_gb_per_month=10_000)  # 10 TB at 0.10 = 1,000/month
    with_egress = by_name(book, w)
    assert with_egress["cloud-on-demand"].total_usd == pytest.approx(7_008_000 + 48_000)
    assert with_egress["on-prem"].total_usd == pytest.approx(5_039_920)


def test_sensitivity_rows_are_sorted_by_effect_and_move_the_answer(book: PriceBook) -> None:
    rows = plan(W, book)["sensitivity"]
    effects = [r["effect"] for r in rows]
    assert effects == sorted(effects, reverse=True) and effects[0] > 0
    inputs = {r["input"] for r in rows}
    assert "gpus.H100-SXM.offers.hyperscaler.on_demand_usd_per_gpu_hour" in inputs
    assert "owned.colo_rent_usd_per_kw_month" not in inputs  # does not move on-prem
    capex = next(r for r in rows if r["input"] == "gpus.H100-SXM.server_capex_per_node_usd")
    assert capex["owning_beats_renting_above_utilization_at_high"] > capex[
        "owning_beats_renting_above_utilization_at_low"]


def test_inputs_are_echoed_with_sources(book: PriceBook) -> None:
    result = plan(W, book)
    prices = result["inputs"]["prices"]
    assert prices["owned.pue"]["value"] == 1.5
    assert prices["owned.pue"]["source"] == "override in round.yaml"
    assert result["inputs"]["workload"]["hours_per_month"] == 730


def test_a_cloud_without_a_3y_commitment_says_so() -> None:
    w = Workload(8, "H200", 0.5, 12, cloud="neocloud")
    o = by_name(round_book(), w)["cloud-3y"]
    assert o.total_usd is None and "no 3-year" in o.note


def test_workload_refuses_impossible_utilization() -> None:
    for bad in (0.0, -0.1, 1.2, 60):
        with pytest.raises(ValueError, match="utilization"):
            Workload(8, "H100-SXM", bad, 12)
