"""``grace lifecycle``'s plan, checked by recomputing its figures from the inputs it echoes.

The histories are generated (``lifecycle_builders``): monthly GPU-hours growing 5% a
month, or a short noisy one. Every expected value below is computed from the plan's
own echoed inputs (trend, price figures, catalog figures), never typed in.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from grace.cost.history import CloudUsage, History, HistoryFormat, HistoryJob
from grace.cost.lifecycle import LifecycleInputs, OwnedGroup, lifecycle_plan
from grace.cost.lifecycle_demand import MONTH_S, fit_trend, monthly_gpu_hours
from grace.cost.pricebook import PriceBook

from .lifecycle_builders import growing_history, month_targets

HPM = 730.0


def _plan(book: PriceBook, months: int = 36, history_months: int = 12, growth: float = 0.05,
          noise: float = 0.0, **kw: Any) -> dict[str, Any]:
    hours, _ = monthly_gpu_hours(growing_history(history_months, growth, noise=noise))
    kw.setdefault("owned", (OwnedGroup("H100-SXM", 96, 0.0),))
    return lifecycle_plan(hours, LifecycleInputs(months, "H100-SXM", **kw), book)


# ------------------------------------------------------------------ demand
def test_monthly_hours_split_a_job_across_months_by_overlap() -> None:
    # 8 GPUs for 20 h starting 10 h before the end of month 1; a marker job observes month 2
    jobs = [HistoryJob("a", "t", MONTH_S - 36_000.0, 72_000.0, 8.0),
            HistoryJob("end", "t", 2 * MONTH_S + 1.0, 60.0, 1.0)]
    hours, partial = monthly_gpu_hours(History("x", HistoryFormat.CSV, jobs))
    assert hours == pytest.approx((80.0, 80.0))
    assert partial == pytest.approx(60.0 / 3600.0)


def test_a_cloud_bill_line_spreads_evenly_over_its_period() -> None:
    # 1,000 GPU-hours billed over the second half of month 1 and the first half of month 2;
    # a second line, ending after month 3, observes month 3 whole
    usage = [CloudUsage(MONTH_S / 2, 1.5 * MONTH_S, "p5.48xlarge", "H100-SXM", 1000.0, 0.0),
             CloudUsage(2 * MONTH_S, 3 * MONTH_S + 1.0, "p5.48xlarge", "H100-SXM", 0.0, 0.0)]
    hours, _ = monthly_gpu_hours(History("bill", HistoryFormat.CLOUD_BILL, usage=usage))
    assert hours == pytest.approx((500.0, 500.0, 0.0))


def test_fit_recovers_the_generated_growth_and_echoes_its_months() -> None:
    hours, _ = monthly_gpu_hours(growing_history(12, 0.05))
    trend = fit_trend(hours)
    assert trend.growth_per_month == pytest.approx(0.05, rel=1e-3)
    assert trend.months == tuple(range(1, 13)) and trend.r2 == pytest.approx(1.0)
    targets = month_targets(12, 0.05)
    assert hours == pytest.approx(targets, rel=0.02)  # jobs spill a little into the next month


def test_projection_recomputes_from_the_echoed_trend(book: PriceBook) -> None:
    p = _plan(book)
    t, k, u = p["demand"]["trend"], p["history"]["complete_months"], 0.7
    for m, (h, g) in enumerate(zip(p["demand"]["gpu_hours_by_month"],
                                   p["demand"]["gpus_needed_by_month"], strict=True), start=1):
        assert h == pytest.approx(math.exp(t["intercept"] + t["slope"] * (k + m)))
        assert g == pytest.approx(h / (HPM * u))


def test_a_given_growth_fixes_the_slope(book: PriceBook) -> None:
    p = _plan(book)
    q = lifecycle_plan(tuple(p["history"]["monthly_gpu_hours"]),
                       LifecycleInputs(36, "H100-SXM", growth=0.10,
                                       owned=(OwnedGroup("H100-SXM", 96, 0.0),)), book)
    assert q["demand"]["trend"]["method"] == "given"
    assert q["demand"]["trend"]["growth_per_month"] == pytest.approx(0.10)
    assert q["demand"]["fit"]["growth_per_month"] == pytest.approx(0.05, rel=1e-3)


# ------------------------------------------------------------------ ordering
def _capacity_without(p: dict[str, Any], upto: int) -> list[int]:
    """Owned GPUs plus tranches before number ``upto``, counted from the month they answer."""
    cap = list(p["capacity"]["owned_gpus_by_month"])
    for tr in p["tranches"][:upto - 1]:
        for t in range(tr["crossing_month"], len(cap) + 1):
            cap[t - 1] += tr["gpus"]
    return cap


def test_each_tranche_is_ordered_a_lead_time_before_demand_crosses_capacity(
        book: PriceBook) -> None:
    p = _plan(book)
    need = p["demand"]["gpus_needed_by_month"]
    weeks = p["inputs"]["prices"]["lifecycle.lead_time_weeks"]["value"]
    lead = math.ceil(weeks * 168 / HPM)
    assert p["inputs"]["lead_time_months"] == lead >= 2
    assert p["tranches"], "5% a month for 36 months must outgrow 96 GPUs"
    first_cross = next(t for t in range(1, 37) if need[t - 1] > p["capacity"][
        "owned_gpus_by_month"][t - 1])
    assert p["demand_crosses_owned_capacity_month"] == first_cross > lead
    for i, tr in enumerate(p["tranches"], start=1):
        cap = _capacity_without(p, i)
        cross = next(t for t in range(1, 37) if need[t - 1] > cap[t - 1])
        assert tr["crossing_month"] == cross
        assert tr["choice"] == "buy"
        assert tr["order_month"] <= cross - lead and tr["delivered_month"] == cross
        # whole nodes covering the largest shortfall over the cover window
        window = range(cross, min(36, cross + p["inputs"]["cover_months"] - 1) + 1)
        short = max(need[t - 1] - cap[t - 1] for t in window)
        assert tr["gpus"] == math.ceil(short / 8) * 8
    assert all(n <= c + 1e-9 for n, c in zip(need, p["capacity"]["gpus_by_month"],
                                             strict=True))


def test_a_crossing_sooner_than_the_lead_time_is_marked_late_and_bridged(
        book: PriceBook) -> None:
    p = _plan(book, owned=())
    first = p["tranches"][0]
    assert first["crossing_month"] == 1 and first["order_month"] == 0
    assert first["late_months"] == first["delivered_month"] - 1 > 0
    rate = p["inputs"]["prices"]["gpus.H100-SXM.offers.hyperscaler.on_demand_usd_per_gpu_hour"]
    bridge = p["cash"]["on_demand_bridge_usd_by_month"]
    assert bridge[0] == pytest.approx(p["demand"]["gpu_hours_by_month"][0] * rate["value"])
    assert all(b == 0 for b in bridge[first["delivered_month"] - 1:])


# ------------------------------------------------------------------ retirement
def _series(p: dict[str, Any], gen: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Both cost series recomputed from the echoed figures."""
    r, nr, cat = gen["running"], p["retirement"]["new_rate"], p["inputs"]["catalog"]
    speed = cat[gen["model"]]["bf16_tflops"] / cat[p["inputs"]["gpu"]]["bf16_tflops"]
    assert gen["speed_vs_new"] == pytest.approx(speed)
    old, new = [], []
    for t in range(1, p["inputs"]["months"] + 1):
        age = gen["age_months"] + t
        running = (r["energy_usd_per_gpu_month"] + r["space_usd_per_gpu_month"]
                   + r["maintenance_usd_per_gpu_month_new"]
                   * (1 + r["maintenance_growth_per_year"]) ** (age / 12)
                   + r["staff_usd_per_gpu_month"])
        old.append(running / HPM / speed)
        today = (nr["capital_usd_per_gpu_hour"] + nr["opex_usd_per_gpu_hour"]
                 + nr["staff_usd_per_gpu_hour"])
        new.append(today * 0.5 ** (t / (12 * nr["price_performance_doubling_years"])))
    return old, new


def _echoed_components_match_the_book(p: dict[str, Any], gen: dict[str, Any]) -> None:
    prices, r = p["inputs"]["prices"], gen["running"]
    v = {k.split(".", 1)[1]: f["value"] for k, f in prices.items() if k.startswith("owned.")}
    watts = p["inputs"]["catalog"][gen["model"]]["board_watts"]
    kw = 8 * watts / 1000 * v["node_power_overhead"]
    assert r["node_kw"] == pytest.approx(kw)
    assert r["energy_usd_per_gpu_month"] == pytest.approx(
        kw * v["pue"] * v["electricity_usd_per_kwh"] * HPM / 8)
    server = prices[f"gpus.{gen['model']}.server_capex_per_node_usd"]["value"]
    assert r["maintenance_usd_per_gpu_month_new"] == pytest.approx(
        server * v["maintenance_fraction_per_year"] / 12 / 8)
    assert r["maintenance_growth_per_year"] == prices[
        "lifecycle.maintenance_growth_per_year"]["value"]
    pool = p["inputs"]["staff_pool_gpus"]
    fte = max(v["min_fte"], pool / v["gpus_per_fte"])
    assert r["staff_usd_per_gpu_month"] == pytest.approx(
        fte * v["staff_usd_per_fte_year"] / 12 / pool)


@pytest.mark.parametrize("owned", [OwnedGroup("H100-SXM", 96, 0.0),
                                   OwnedGroup("A100-80GB", 64, 0.0)],
                         ids=["same-generation", "older-generation"])
def test_a_generation_retires_in_the_first_month_it_costs_more_than_new(
        book: PriceBook, owned: OwnedGroup) -> None:
    p = _plan(book, owned=(owned,))
    gen = p["retirement"]["generations"][0]
    _echoed_components_match_the_book(p, gen)
    old, new = _series(p, gen)
    assert gen["old_usd_per_useful_gpu_hour_by_month"] == pytest.approx(old)
    assert gen["new_usd_per_useful_gpu_hour_by_month"] == pytest.approx(new)
    first = next(t for t in range(1, 37) if old[t - 1] > new[t - 1])
    assert 1 < first < 36, "the scenario must cross inside the horizon, not at its ends"
    assert gen["retire_month"] == first and gen["action"] == "retire or repurpose"
    gone = max(first, p["inputs"]["lead_time_months"])  # not before a replacement can arrive
    assert gen["leaves_month"] == gone
    owned_caps = p["capacity"]["owned_gpus_by_month"]
    assert owned_caps[gone - 2] == owned.count and owned_caps[gone - 1] == 0


def test_the_new_rate_today_is_the_tco_owned_rate(book: PriceBook) -> None:
    from grace.cost.tco import owned_usd_per_gpu_hour

    p = _plan(book)
    nr = p["retirement"]["new_rate"]
    assert nr["usd_per_gpu_hour_today"] == pytest.approx(
        owned_usd_per_gpu_hour(book, "H100-SXM", "on-prem", p["inputs"]["staff_pool_gpus"]))


# ------------------------------------------------------------------ cash and choice
def test_cash_never_falls_and_adds_up(book: PriceBook) -> None:
    p = _plan(book, owned=(OwnedGroup("A100-80GB", 64, 12.0), OwnedGroup("H100-SXM", 32, 0.0)))
    c = p["cash"]
    cum = c["cumulative_usd_by_month"]
    assert all(b >= a for a, b in itertools.pairwise(cum))
    parts = [c[k] for k in ("owned_running_usd_by_month", "buy_usd_by_month",
                            "lease_usd_by_month", "cloud-1y_usd_by_month",
                            "on_demand_bridge_usd_by_month")]
    assert cum[-1] == pytest.approx(sum(sum(x) for x in parts))
    chosen = sum(tr["options"][tr["choice"]]["cash_usd"] for tr in p["tranches"])
    assert sum(c["buy_usd_by_month"]) == pytest.approx(chosen)


def test_buy_cost_recomputes_from_capex_running_and_resale(book: PriceBook) -> None:
    p = _plan(book)
    tr = p["tranches"][0]
    v = {k: f["value"] for k, f in p["inputs"]["prices"].items()}
    capex_node = (v["gpus.H100-SXM.server_capex_per_node_usd"]
                  * (1 + v["owned.storage_capex_fraction"] + v["owned.misc_capex_fraction"])
                  + v["owned.network_capex_per_node_usd"])
    held = 36 - tr["delivered_month"] + 1
    life = v["owned.amortization_years"] * 12
    res = v["owned.residual_value_fraction"]
    book_value = res + (1 - res) * (1 - min(held, life) / life)
    buy = tr["options"]["buy"]
    assert buy["resale_usd"] == pytest.approx(tr["gpus"] * capex_node / 8 * book_value)
    lease = tr["options"]["lease"]
    assert lease["usd_per_month"] == pytest.approx(
        tr["gpus"] * capex_node / 8 * v["lifecycle.lease_rate_per_month"])
    term = v["lifecycle.lease_term_months"]
    assert lease["billed_months"] == math.ceil(held / term) * term
    cloud = tr["options"]["cloud-1y"]
    assert cloud["total_usd"] == pytest.approx(
        tr["gpus"] * HPM * v["gpus.H100-SXM.offers.hyperscaler.reserved_1y_usd_per_gpu_hour"]
        * math.ceil(held / 12) * 12)


def test_the_choice_flips_with_preserve_cash_and_with_uncertain_demand(
        book: PriceBook) -> None:
    steady = _plan(book)
    assert not steady["demand"]["uncertain"]
    assert {tr["choice"] for tr in steady["tranches"]} == {"buy"}
    for tr in steady["tranches"]:  # buy chosen because it is the cheaper of buy and lease
        assert tr["options"]["buy"]["total_usd"] <= tr["options"]["lease"]["total_usd"]
    cash = _plan(book, preserve_cash=True)
    assert {tr["choice"] for tr in cash["tranches"]} == {"lease"}
    noisy = _plan(book, history_months=4, noise=0.4, owned=(OwnedGroup("H100-SXM", 8, 0.0),))
    assert noisy["demand"]["uncertain"] and "fewer than 6" in noisy["demand"]["uncertain_reason"]
    assert noisy["tranches"] and {tr["choice"] for tr in noisy["tranches"]} == {"cloud-1y"}
    scattered = _plan(book, history_months=12, noise=0.5, owned=(OwnedGroup("H100-SXM", 8, 0.0),))
    sd = scattered["demand"]["fit"]["residual_sd"]
    assert sd > scattered["inputs"]["uncertainty_test"]["max_residual_sd"]
    assert {tr["choice"] for tr in scattered["tranches"]} == {"cloud-1y"}


def test_a_generation_due_now_stays_until_a_replacement_can_arrive(book: PriceBook) -> None:
    p = _plan(book, owned=(OwnedGroup("A100-80GB", 64, 36.0),))
    gen, lead = p["retirement"]["generations"][0], p["inputs"]["lead_time_months"]
    old, new = _series(p, gen)
    assert old[0] > new[0] and gen["retire_month"] == 1  # already dearer than new today
    assert gen["leaves_month"] == lead
    assert p["capacity"]["owned_gpus_by_month"][:lead] == [64] * (lead - 1) + [0]
    first = p["tranches"][0]
    assert first["delivered_month"] <= lead  # its replacement arrives as it leaves
