"""Site feasibility (``grace plan --site-kw``): every figure recomputed from the echoed inputs.

The only results written down are the issue's facts: 64 H100s draw the seed's
"roughly 60kW" (inside the price book's range) and fit a 60 kW site; a 30 kW site
powers 4 of their 8 nodes.
"""

from __future__ import annotations

import math

import pytest

from grace.cost.plan import options, plan
from grace.cost.pricebook import PriceBook, load_pricebook
from grace.cost.site import KW_TOLERANCE, SiteLimit, SiteSpec, site_fit
from grace.cost.workload import Workload

BOOK: PriceBook = load_pricebook()


def fit(kw: float, gpus: float = 64, **spec: float) -> dict:
    return site_fit(BOOK, "H100-SXM", gpus, SiteSpec(kw, **spec)).to_json()


def fits_in(kw: float, node_kw: float) -> int:
    return math.floor(kw * (1 + KW_TOLERANCE) / node_kw + 1e-9)


def test_the_seeds_64_h100s_draw_about_60_kw_and_fit_a_60_kw_site() -> None:
    s = fit(60)
    assert s["feasible"] and s["limited_by"] == [] and s["nodes_in_boxes"] == 0
    # the draw recomputes from the echoed catalog watts, GPUs per node and overhead
    node = s["node_gpus"] * s["board_watts"] / 1000 * s["node_power_overhead"]
    assert s["node_kw"] == pytest.approx(node)
    assert s["nodes_needed"] == math.ceil(s["gpus"] / s["node_gpus"])
    assert s["draw_kw"] == pytest.approx(s["nodes_needed"] * node)
    low = s["nodes_needed"] * s["node_gpus"] * s["board_watts"] / 1000
    assert s["draw_kw_low"] == pytest.approx(low * s["node_power_overhead_low"])
    assert s["draw_kw_high"] == pytest.approx(low * s["node_power_overhead_high"])
    # the seed's 60 kW lies in the range, and the value rounds to it
    assert s["draw_kw_low"] <= 60 <= s["draw_kw_high"]
    assert round(s["draw_kw"]) == 60
    assert s["nodes_powered"] == s["nodes_needed"] == fits_in(60, node)


def test_a_30_kw_site_powers_4_of_the_8_nodes() -> None:
    s = fit(30)
    assert not s["feasible"] and s["limited_by"] == ["power"]
    assert s["nodes_by_power"] == fits_in(s["site_kw"], s["node_kw"]) == 4
    assert s["nodes_powered"] == s["nodes_fit"] == 4
    assert s["nodes_in_boxes"] == s["nodes_needed"] - 4
    assert "4 of 8 nodes fit" in s["reason"] and "--site-kw" in s["reason"]


def test_cooling_defaults_to_power_and_binds_when_lower() -> None:
    assert fit(60)["cooling_kw"] == 60
    s = fit(60, cooling_kw=20)
    assert s["limited_by"] == ["cooling"] and "--cooling-kw" in s["reason"]
    assert s["nodes_powered"] == fits_in(s["cooling_kw"], s["node_kw"])
    assert s["nodes_powered"] < s["nodes_by_power"]


def test_racks_count_whichever_of_power_and_height_needs_more() -> None:
    # 16 kW racks hold 2 nodes by power (5 by height): power decides
    s = fit(60, rack_kw=16)
    assert s["nodes_per_rack_by_kw"] == fits_in(16, s["node_kw"])
    assert s["nodes_per_rack_by_units"] == math.floor(s["rack_units"] / s["node_rack_units"])
    assert s["racks"] == s["racks_by_kw"] == math.ceil(s["nodes_fit"] / s["nodes_per_rack_by_kw"])
    assert s["racks_by_kw"] > s["racks_by_units"]
    # 130 kW racks: height decides
    s = fit(60, rack_kw=130)
    assert s["racks"] == s["racks_by_units"] == math.ceil(
        s["nodes_fit"] / s["nodes_per_rack_by_units"]) >= s["racks_by_kw"]
    assert s["feasible"]


def test_rack_weight_and_floor_load_recompute() -> None:
    s = fit(60)
    in_fullest = min(s["nodes_per_rack"], s["nodes_fit"])
    assert s["rack_weight_kg"] == pytest.approx(s["rack_empty_kg"] + in_fullest * s["node_weight_kg"])
    assert s["floor_load_kg_per_m2"] == pytest.approx(s["rack_weight_kg"] / s["rack_footprint_m2"])
    assert s["floor_load_kg_per_m2"] <= s["floor_kg_per_m2"]


def test_a_weak_floor_spreads_the_nodes_over_more_racks() -> None:
    base = fit(60)
    # a rating that carries the empty rack and 2 nodes, not 3
    two = (base["rack_empty_kg"] + 2.5 * base["node_weight_kg"]) / base["rack_footprint_m2"]
    s = fit(60, floor_kg_per_m2=two)
    assert s["feasible"] and s["nodes_per_rack"] == s["nodes_per_rack_by_floor"] == 2
    assert s["racks"] == math.ceil(s["nodes_fit"] / 2) > base["racks"]
    assert s["floor_load_kg_per_m2"] <= s["floor_kg_per_m2"]


def test_a_floor_that_cannot_carry_one_node_refuses_the_site_and_says_so() -> None:
    base = fit(60)
    one = (base["rack_empty_kg"] + base["node_weight_kg"]) / base["rack_footprint_m2"]
    s = fit(60, floor_kg_per_m2=one * 0.9)
    assert not s["feasible"] and s["limited_by"] == ["floor"]
    assert s["nodes_fit"] == 0 and s["nodes_in_boxes"] == s["nodes_needed"]
    assert "floor" in s["reason"] and "--floor-kg-per-m2" in s["reason"]
    assert f"{one:.0f} kg/m2" in s["reason"]
    assert fit(60, floor_kg_per_m2=one * 1.01)["feasible"]  # just enough: one node a rack


def test_a_node_hungrier_than_a_rack_refuses_the_site() -> None:
    base = fit(60)
    s = fit(60, rack_kw=base["node_kw"] * 0.9)
    assert not s["feasible"] and s["limited_by"] == ["rack-power"]
    assert "--rack-kw" in s["reason"] and s["nodes_fit"] == 0


def test_site_inputs_must_be_positive() -> None:
    for bad in (0.0, -5.0, float("nan")):
        with pytest.raises(ValueError, match="site_kw must be a number above 0"):
            SiteSpec(bad)
    with pytest.raises(ValueError, match="rack_kw"):
        SiteSpec(60, rack_kw=0)
    assert SiteLimit("floor") is SiteLimit.FLOOR


W = Workload(64, "H100-SXM", 0.7, 36)


def test_a_site_that_cannot_host_on_prem_refuses_it_and_keeps_colo() -> None:
    free = {o.name: o for o in options(W, BOOK)}
    at30 = {o.name: o for o in options(W, BOOK, SiteSpec(30))}
    onprem = at30["on-prem"]
    assert onprem.total_usd is None and onprem.cumulative_usd == () and onprem.breakeven_month is None
    assert "cannot host 64 GPUs" in onprem.note and "4 of 8 nodes fit" in onprem.note
    assert onprem.detail["total_usd_if_hosted"] == pytest.approx(free["on-prem"].total_usd)
    assert onprem.detail["site_nodes_fit"] == 4
    # colo is another building; the hybrid owns 32 GPUs (4 nodes), which 30 kW powers
    assert at30["colo"].total_usd == pytest.approx(free["colo"].total_usd)
    assert at30["hybrid"].total_usd is not None


def test_the_hybrid_is_refused_when_its_owned_part_does_not_fit() -> None:
    opts = {o.name: o for o in options(W, BOOK, SiteSpec(15))}
    hybrid = opts["hybrid"]
    assert hybrid.total_usd is None and "hybrid's 32 owned GPUs" in hybrid.note
    assert hybrid.detail["site_nodes_fit"] == fits_in(15, fit(15)["node_kw"])


def test_plan_json_has_site_only_with_a_site_and_the_economics_do_not_move() -> None:
    free, at30 = plan(W, BOOK), plan(W, BOOK, SiteSpec(30))
    assert "site" not in free
    assert at30["site"]["feasible"] is False and at30["site"]["nodes_fit"] == 4
    assert at30["site"]["hybrid"]["feasible"] is True
    assert at30["cheapest"] != "on-prem"
    # the thresholds, sensitivity and rules judge owning as such, wherever it is hosted
    for key in ("owning_beats_renting_above_utilization", "sensitivity", "rules_of_thumb"):
        assert at30[key] == free[key]
    assert "site.floor_kg_per_m2" in at30["inputs"]["prices"]
    assert at30["inputs"]["prices"]["site.rack_kw"]["source"]
