"""Staffing by the seed's rule, and each rule of thumb's ``agrees`` flipped by its input.

Facts are built by ``plan_facts`` from real workloads and price books (the cloud options
priced as the plan prices them); inputs are moved with ``with_value``, so every
expectation is recomputed from the same functions the plan uses.
"""

from __future__ import annotations

import math

import pytest

from grace.cost.plan import (
    commitment_option,
    on_demand_option,
    owned_option,
    owning_threshold,
    plan_facts,
    staffing,
)
from grace.cost.pricebook import PriceBook, load_pricebook, with_value
from grace.cost.rules_of_thumb import (
    BREAKEVEN_MONTHS,
    BREAKEVEN_UTILIZATION,
    PlanFacts,
    breakeven_rule,
    capital_rule,
    rules_of_thumb,
    size_rule,
    utilization_rule,
)
from grace.cost.tco import HOURS_PER_MONTH, owned_rates, owned_staff_usd_per_month
from grace.cost.workload import Workload

BOOK = load_pricebook()
OD = "gpus.H100-SXM.offers.hyperscaler.on_demand_usd_per_gpu_hour"


def facts(w: Workload, book: PriceBook = BOOK) -> PlanFacts:
    cloud = [on_demand_option(w, book), commitment_option(w, book, "cloud-1y"),
             commitment_option(w, book, "cloud-3y")]
    return plan_facts(w, book, cloud)


def cheap_cloud(book: PriceBook, factor: float) -> PriceBook:
    """Every H100 cloud price times ``factor`` (a world where renting is cheap)."""
    for k in ("on_demand", "reserved_1y", "reserved_3y", "spot"):
        path = f"gpus.H100-SXM.offers.hyperscaler.{k}_usd_per_gpu_hour"
        fig = book.gpus["H100-SXM"].offers["hyperscaler"]
        book = with_value(book, path, getattr(fig, f"{k}_usd_per_gpu_hour").value * factor)
    return book


def test_staffing_follows_the_seed_by_default_and_shows_both() -> None:
    o = BOOK.owned
    assert o.gpus_per_fte.value == 64 and "0.5 FTE" in o.gpus_per_fte.source
    for gpus in (8, 32, 64, 512):
        st = staffing(gpus, BOOK)
        assert st["fte"] == pytest.approx(max(st["min_fte"], gpus / st["gpus_per_fte"]))
        assert st["fte_by_seed_rule"] == pytest.approx(0.5 * gpus / 32)
        assert st["usd_per_month"] == pytest.approx(st["fte"] * st["usd_per_fte_year"] / 12)
        assert st["usd_per_month"] == pytest.approx(owned_staff_usd_per_month(BOOK, gpus))
        assert st["usd_per_month_by_seed_rule"] == pytest.approx(
            st["fte_by_seed_rule"] * st["usd_per_fte_year"] / 12)
        assert st["source"] == o.gpus_per_fte.source
        if gpus / 64 >= st["min_fte"]:  # above the minimum the default is the seed's rule
            assert st["fte"] == pytest.approx(st["fte_by_seed_rule"])


def test_the_size_rule_flips_with_the_gpus_and_with_the_plans_answer() -> None:
    big = facts(Workload(128, "H100-SXM", 0.7, 36))
    assert big.owning_wins and size_rule(big).agrees is True
    assert "own" in size_rule(big).says
    rent_world = facts(Workload(128, "H100-SXM", 0.7, 36), cheap_cloud(BOOK, 0.3))
    assert not rent_world.owning_wins and size_rule(rent_world).agrees is False
    assert size_rule(facts(Workload(48, "H100-SXM", 0.7, 36))).agrees is None
    small = size_rule(facts(Workload(16, "H100-SXM", 0.7, 36), cheap_cloud(BOOK, 0.3)))
    assert "rent" in small.says and small.agrees is True
    assert "staff" in small.why and "capex" in small.why


def test_the_capital_rule_reads_the_plans_own_capex() -> None:
    f = facts(Workload(128, "H100-SXM", 0.7, 36))
    assert f.capital_usd == pytest.approx(
        128 * owned_rates(BOOK, "H100-SXM", "on-prem").capex_per_gpu_usd)
    assert capital_rule(f).agrees is True
    assert capital_rule(facts(Workload(128, "H100-SXM", 0.7, 36),
                              cheap_cloud(BOOK, 0.3))).agrees is False
    tiny = capital_rule(facts(Workload(4, "H100-SXM", 0.7, 36)))  # 4 x ~43k < 200k
    assert "rent" in tiny.says
    assert capital_rule(facts(Workload(8, "H100-SXM", 0.7, 36))).agrees is None  # 200k-500k


def test_the_utilization_rule_is_the_plans_12_month_threshold() -> None:
    w = Workload(64, "H100-SXM", 0.7, 36)
    f = facts(w)
    w12 = Workload(64, "H100-SXM", 0.7, 12)
    own12 = owned_option(w12, BOOK, "on-prem")
    assert f.threshold_12m == pytest.approx(owning_threshold(w12, own12.total_usd, BOOK))
    assert f.threshold_12m_without_resale == pytest.approx(
        owning_threshold(w12, own12.total_usd + own12.resale_usd, BOOK))
    lo, hi = BREAKEVEN_UTILIZATION
    r = utilization_rule(f)
    assert r.agrees is (lo <= f.threshold_12m <= hi)
    assert f"{100 * f.threshold_12m:.1f}%" in r.plan_says and "sells for" in r.why
    # the threshold scales as 1 / on-demand price (no egress): move the price to land it
    # in the middle of 60-70%, then out again
    od = BOOK.offers("H100-SXM", "hyperscaler").on_demand_usd_per_gpu_hour.value
    inside = with_value(BOOK, OD, od * f.threshold_12m / ((lo + hi) / 2))
    assert utilization_rule(facts(w, inside)).agrees is True
    outside = with_value(BOOK, OD, od * f.threshold_12m / (hi + 0.1))
    assert utilization_rule(facts(w, outside)).agrees is False


def test_the_breakeven_rule_is_the_plans_breakeven_month() -> None:
    w = Workload(64, "H100-SXM", 0.7, 36)
    lo, hi = BREAKEVEN_MONTHS

    def month_at(od: float) -> tuple[int | None, bool | None]:
        book = with_value(BOOK, OD, od)
        f = facts(w, book)
        return f.breakeven_month, breakeven_rule(f).agrees

    rates = owned_rates(BOOK, "H100-SXM", "on-prem")
    staff = owned_staff_usd_per_month(BOOK, 64) / 64

    def od_for(months: float) -> float:
        """On-demand price at which capex is paid back in ``months``:
        capex / (od x U x 730 - running - staff) = months."""
        return (rates.capex_per_gpu_usd / months + rates.opex_per_gpu_month_usd + staff) / (
            0.7 * HOURS_PER_MONTH)

    for target, agrees in ((11.5, True), (hi + 2.5, False), (lo - 3.5, False)):
        be, ok = month_at(od_for(target))
        assert be == math.ceil(target) and ok is agrees
    # never breaking even within the workload is a disagreement, said as such
    f = facts(w, with_value(BOOK, OD, od_for(40)))
    r = breakeven_rule(f)
    assert f.breakeven_month is None and r.agrees is False and "within 36 months" in r.plan_says


def test_every_rule_has_its_fields_and_a_source() -> None:
    rules = [r.to_json() for r in rules_of_thumb(facts(Workload(64, "H100-SXM", 0.7, 36)))]
    assert len(rules) == 4
    for r in rules:
        assert set(r) == {"rule", "source", "says", "plan_says", "agrees", "why", "reason"}
        assert r["why"].endswith(r["reason"])
        assert r["source"].startswith("the seeds") and r["why"]
