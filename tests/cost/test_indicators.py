"""The six indicators of ``grace assess``, each flipped on a crafted history.

Every test builds its history here, changes one thing, and checks that the
indicator moves from not met to met (and to unknown when the data it needs is
not there). Thresholds are read from their constants, never restated.
"""

from __future__ import annotations

import numpy as np
import pytest

from grace.cost.assess import breakeven
from grace.cost.demand import daily_gpu_hours, fleet_size
from grace.cost.history import DAY_S, CloudUsage, History, HistoryFormat, HistoryJob
from grace.cost.indicators import (
    CAPACITY_ERROR_RATE,
    CAPACITY_WAIT_S,
    LONG_MULTINODE_DAY_SHARE,
    PREDICTABILITY_CV,
    PREDICTABILITY_MIN_GROUP,
    SCALING_EFFICIENCY_FLOOR,
    Indicator,
    all_thresholds,
    capacity_difficulty,
    data_governance,
    long_multinode_runs,
    predictability,
    scaling_efficiency,
    sustained_utilization,
)
from grace.cost.pricebook import PriceBook, load_pricebook

HOUR = 3600.0


@pytest.fixture(scope="module")
def real_book() -> PriceBook:
    return load_pricebook()


def job(i: int, *, gpus: float = 1, run_h: float = 1.0, submit_h: float = 0.0,
        wait_h: float | None = None, **kw: object) -> HistoryJob:
    start = None if wait_h is None else (submit_h + wait_h) * HOUR
    return HistoryJob(f"j{i}", str(kw.pop("tenant", "t")), submit_h * HOUR, run_h * HOUR, gpus,
                      start_s=start, **kw)  # type: ignore[arg-type]


def history(jobs: list[HistoryJob], fmt: HistoryFormat = HistoryFormat.CSV,
            usage: list[CloudUsage] | None = None) -> History:
    return History("crafted", fmt, jobs=jobs, usage=usage or [])


def bill(errors: int | None = None, requests: int | None = None) -> History:
    month = 730 * HOUR
    lines = [CloudUsage(m * month, (m + 1) * month, "p5.48xlarge", "H100-SXM", 5000.0, 34400.0,
                        errors, requests) for m in range(3)]
    return history([], HistoryFormat.CLOUD_BILL, lines)


# ----------------------------------------------------------------- 1
def test_long_multinode_runs_flip_on_share_of_multi_day_gang_hours() -> None:
    short = [job(i, gpus=1, run_h=4) for i in range(100)]  # 400 GPU-hours, single node
    r = long_multinode_runs(history(short))
    assert r.met is False and r.figures["share_over_1_day"] == 0.0
    # 16-GPU jobs (2 nodes at 8/node) of 2 days: 16 x 48 = 768 GPU-hours each
    need = LONG_MULTINODE_DAY_SHARE.value * 400 / (1 - LONG_MULTINODE_DAY_SHARE.value)
    n = int(np.ceil(need / 768))
    r = long_multinode_runs(history(short + [job(100 + i, gpus=16, run_h=48) for i in range(n)]))
    assert r.met is True
    assert r.figures["share_over_1_day"] >= LONG_MULTINODE_DAY_SHARE.value
    assert r.figures["share_over_7_days"] == 0.0
    # the same GPU-hours on one node each (nodes recorded) is not a multi-node run
    one_node = [job(100 + i, gpus=16, run_h=48, nodes=1) for i in range(n)]
    assert long_multinode_runs(history(short + one_node)).met is False


def test_long_multinode_runs_week_share_alone_can_meet_it() -> None:
    base = [job(i, gpus=1, run_h=4) for i in range(1000)]  # 4,000 GPU-hours
    week = [job(2000, gpus=16, run_h=8 * 24)]  # 3,072 GPU-hours over 7 days
    r = long_multinode_runs(history(base + week))
    assert r.met is True and r.figures["share_over_7_days"] > 0.10


def test_long_multinode_runs_unknown_on_a_bill() -> None:
    r = long_multinode_runs(bill())
    assert r.met is None and "job log" in r.evidence


# ----------------------------------------------------------------- 2
def _bench(eff: dict[int, float]) -> dict[str, object]:
    return {"efficiency": {str(k): v for k, v in eff.items()}, "ranks": sorted(eff)}


def test_scaling_efficiency_from_bench_json_flips_at_the_floor() -> None:
    h = history([job(0)])
    floor = SCALING_EFFICIENCY_FLOOR.value
    fine = scaling_efficiency(h, _bench({1: 1.0, 2: 0.97, 4: floor + 0.05}))
    assert fine.met is False and fine.figures["largest_ranks"] == 4
    bad = scaling_efficiency(h, _bench({1: 1.0, 2: 0.97, 4: 0.9, 8: floor - 0.05}))
    assert bad.met is True and "8 ranks" in bad.evidence


def test_scaling_efficiency_from_history_step_times() -> None:
    def runs(step_at_4: float) -> History:
        jobs = [job(i, gpus=8, name="llm", step_time_s=1.0) for i in range(3)]
        jobs += [job(10 + i, gpus=32, name="llm", step_time_s=step_at_4) for i in range(3)]
        return history(jobs)

    fine = scaling_efficiency(runs(1.1), None)  # 1.0 / 1.1 = 91%
    assert fine.met is False
    assert fine.figures["median_efficiency_at_largest"] == pytest.approx(1 / 1.1)
    bad = scaling_efficiency(runs(1.5), None)  # 67%
    assert bad.met is True and "'llm'" in bad.evidence


def test_scaling_efficiency_unknown_says_run_the_bench() -> None:
    r = scaling_efficiency(history([job(0, name="llm")]), None)
    assert r.met is None and "run grace bench scaling" in r.evidence
    with pytest.raises(ValueError, match="scaling"):
        scaling_efficiency(history([job(0)]), {"throughput": {}})


# ----------------------------------------------------------------- 3
def test_capacity_difficulty_flips_on_multi_gpu_queue_waits() -> None:
    quick = [job(i, gpus=8, run_h=2, submit_h=i, wait_h=0.1) for i in range(20)]
    r = capacity_difficulty(history(quick))
    assert r.met is False and r.figures["judged"] == "multi-GPU jobs"
    slow = quick[:17] + [job(100 + i, gpus=8, run_h=2, submit_h=i, wait_h=3) for i in range(3)]
    r = capacity_difficulty(history(slow))
    assert r.met is True and r.figures["p90_wait_s"] >= CAPACITY_WAIT_S.value


def test_capacity_difficulty_unknown_without_starts_names_the_format() -> None:
    r = capacity_difficulty(history([job(i, gpus=8) for i in range(5)], HistoryFormat.PHILLY))
    assert r.met is None
    assert "philly history records no job start times" in r.evidence


def test_capacity_difficulty_from_a_bills_capacity_errors() -> None:
    assert capacity_difficulty(bill()).met is None
    few = int(CAPACITY_ERROR_RATE.value * 100) - 2
    assert capacity_difficulty(bill(few, 100)).met is False
    r = capacity_difficulty(bill(few + 4, 100))
    assert r.met is True and r.figures["capacity_errors"] == 3 * (few + 4)


# ----------------------------------------------------------------- 4
def _steady(gpus_busy: float, days: int) -> History:
    """``gpus_busy`` GPUs busy around the clock for ``days``: one job per day."""
    return history([job(d, gpus=gpus_busy, run_h=24, submit_h=24 * d) for d in range(days)])


def test_sustained_utilization_flips_at_plans_breakeven(real_book: PriceBook) -> None:
    be = breakeven(real_book, "H100-SXM", "hyperscaler", 64)["utilization"]
    for busy, want in ((64 * be * 0.8, False), (64 * min(1.0, be * 1.2), True)):
        h = _steady(busy, 100)
        r = sustained_utilization(daily_gpu_hours(h), h.span_s, h.gpu_hours, 64, be, "test")
        assert r.met is want
        assert r.figures["judged_window"] == "90"  # the longest window 100 days hold
        assert set(r.figures["windows"]) == {"30", "90"}
        assert r.figures["judged_utilization"] == pytest.approx(busy / 64)


def test_sustained_utilization_short_history_and_empty(real_book: PriceBook) -> None:
    """Ten busy days say nothing of a sustained load: unknown, not met (the 30-day window
    is the shortest the rule reads)."""
    h = _steady(32, 10)
    r = sustained_utilization(daily_gpu_hours(h), h.span_s, h.gpu_hours, 64, 0.4, "test")
    assert r.met is None and "30-day window" in r.evidence
    h = _steady(32, 31)
    r = sustained_utilization(daily_gpu_hours(h), h.span_s, h.gpu_hours, 64, 0.4, "test")
    assert r.met is True and r.figures["judged_window"] == "30"
    empty = history([])
    r = sustained_utilization(daily_gpu_hours(empty), 0.0, 0.0, 64, 0.4, "test")
    assert r.met is None


def test_fleet_size_covers_p90_hourly_demand_in_whole_nodes() -> None:
    h = _steady(20, 10)  # 20 GPUs every hour: 3 nodes of 8
    f = fleet_size(h, None, 8)
    assert f.p90_concurrent_gpus == pytest.approx(20) and f.gpus == 24
    assert fleet_size(h, 100, 8).gpus == 100
    with pytest.raises(ValueError, match="gpus"):
        fleet_size(h, 0, 8)


def test_daily_demand_splits_a_job_across_days() -> None:
    h = history([job(0, gpus=2, run_h=36, submit_h=12), job(1, gpus=1, run_h=1, submit_h=50)])
    daily = daily_gpu_hours(h)
    assert list(daily) == pytest.approx([24.0, 48.0])  # day 3 (part day) left out


# ----------------------------------------------------------------- 5
def test_predictability_flips_on_run_time_spread() -> None:
    n = int(PREDICTABILITY_MIN_GROUP.value)
    steady = [job(i, gpus=8, run_h=10, name="nightly") for i in range(n)]
    r = predictability(history(steady))
    assert r.met is False and r.figures["groups_by_name"] == 1
    spread = [job(i, gpus=8, run_h=h, name="nightly") for i, h in enumerate([4, 10, 16, 6, 14])]
    assert predictability(history(spread)).met is True
    # a failed run's time is left out: the steady group stays steady
    failed = [*steady, job(99, gpus=8, run_h=0.5, name="nightly", state="FAILED")]
    assert predictability(history(failed)).met is False


def test_predictability_of_unnamed_jobs_is_unknown_with_their_spread_for_reference() -> None:
    """Without names nothing says two jobs are the same work: the spread of tenant x GPUs x
    class groups is shown, but it decides nothing (a named group does)."""
    n = int(PREDICTABILITY_MIN_GROUP.value)
    jobs = [job(i, gpus=4, run_h=h, tenant="vc1", limit_s=2 * DAY_S)
            for i, h in enumerate([2, 9, 20, 5, 30][:n])]
    r = predictability(history(jobs))
    assert r.met is None and r.figures["groups_by_name"] == 0
    assert r.figures["weighted_cv"] > PREDICTABILITY_CV.value and "no job names" in r.evidence
    steady = [job(100 + i, gpus=8, run_h=10, name="nightly") for i in range(n)]
    r = predictability(history([*jobs, *steady]))
    assert r.met is False and r.figures["groups_by_name"] == 1
    assert "1 unnamed group(s) left out" in r.evidence


def test_predictability_unknown_without_groups() -> None:
    n = int(PREDICTABILITY_MIN_GROUP.value)
    assert predictability(history([job(i, name="x") for i in range(n - 1)])).met is None
    assert predictability(bill()).met is None


# ----------------------------------------------------------------- 6
def test_data_governance_from_declaration_or_flagged_jobs() -> None:
    h = history([job(0)])
    assert data_governance(h, None).met is None
    assert "--data-classification" in data_governance(h, None).evidence
    assert data_governance(h, "internal").met is False
    assert data_governance(h, "regulated").met is True
    flagged = history([job(0), job(1, sensitive_data=True)])
    r = data_governance(flagged, None)
    assert r.met is True and r.figures["sensitive_jobs"] == 1


def test_every_threshold_is_echoed_with_a_source() -> None:
    echoed = all_thresholds()
    assert {"scaling_efficiency_floor", "capacity_wait_s", "predictability_cv"} <= set(echoed)
    assert all(t["source"] for t in echoed.values())
    assert [str(i) for i in Indicator] == [
        "long-multinode-runs", "scaling-efficiency", "capacity-difficulty",
        "sustained-utilization", "predictability", "data-governance"]


@pytest.mark.parametrize("eff", [{"1": 1.0, "8": float("nan")}, {"1": 1.0, "8": -3},
                                 {"1": 1.0, "8": 7}, {"0": 1.0}, {"1": 1.0, "8": float("inf")}])
def test_scaling_json_with_impossible_efficiencies_is_refused(eff: dict[str, float]) -> None:
    """A NaN, negative or 700% efficiency is a broken file, not evidence: refused with the
    rank count it was given at, never printed as "nan%" or counted as met."""
    with pytest.raises(ValueError, match=r"scaling\.efficiency"):
        scaling_efficiency(history([job(0)]), {"efficiency": eff})


def test_demand_above_the_fleet_is_judged_full_not_over_100_percent() -> None:
    h = _steady(80, 40)
    r = sustained_utilization(daily_gpu_hours(h), h.span_s, h.gpu_hours, 8, 0.4, "test")
    assert r.met is True and r.figures["judged_utilization"] == 1.0
    assert r.figures["demand_over_fleet"] == pytest.approx(10.0)
    assert "demand exceeds the 8 GPUs given" in r.evidence and "1000" not in r.evidence
