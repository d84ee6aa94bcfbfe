"""Checkpoint interval and goodput: Young, Daly and the closed-form ETTR on worked examples."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grace.core.checkpoint import (
    LLAMA3_GPU_MTBF_H,
    choose_interval,
    daly_interval,
    expected_ettr,
    goodput,
    job_mtbf_s,
    young_interval,
)


def test_llama3_job_mtbf_is_about_three_hours():
    # 419 unexpected interruptions in 54 days on 16,384 GPUs: one every ~3.1 h
    assert job_mtbf_s(16_384) / 3600 == pytest.approx(54 * 24 / 419)
    assert abs(LLAMA3_GPU_MTBF_H - 50_676) < 51


def test_young_worked_example():
    # delta 60 s, M 3 h: sqrt(2 * 60 * 10800) = 1138.4 s
    assert young_interval(60, 10_800) == pytest.approx(math.sqrt(2 * 60 * 10_800))


def test_daly_worked_example_and_limit():
    d, m = 60.0, 10_800.0
    x = d / (2 * m)
    expected = math.sqrt(2 * d * m) * (1 + math.sqrt(x) / 3 + x / 9) - d
    assert daly_interval(d, m) == pytest.approx(expected)
    assert daly_interval(d, m) == pytest.approx(1098.8, abs=0.5)
    assert daly_interval(500, 200) == 200  # delta >= 2M: checkpoint once per MTBF


def test_ettr_closed_form_by_hand():
    tau, d, m, r = 1800.0, 60.0, 10_800.0, 600.0
    wall = m * math.exp(r / m) * (math.exp((tau + d) / m) - 1)
    assert expected_ettr(tau, d, m, r) == pytest.approx(tau / wall)
    # no failures in sight: ETTR tends to tau / (tau + delta)
    assert expected_ettr(tau, d, 1e12, r) == pytest.approx(tau / (tau + d), rel=1e-6)


def test_goodput_shares_add_up():
    g = goodput(1800, 60, 10_800, 600)
    assert g.ettr + g.checkpointing + g.recomputation + g.restarts == pytest.approx(1.0)
    assert min(g.checkpointing, g.recomputation, g.restarts) > 0


@settings(max_examples=200, deadline=None)
@given(delta=st.floats(1, 600), mtbf=st.floats(3600, 30 * 86400), restart=st.floats(0, 3600))
def test_daly_is_within_half_a_point_of_the_best_interval(delta, mtbf, restart):
    auto = expected_ettr(daly_interval(delta, mtbf), delta, mtbf, restart)
    best = max(expected_ettr(t, delta, mtbf, restart)
               for t in (60, 300, 600, 1800, 3600, 7200, 14_400, 28_800))
    assert auto >= best - 0.005


def test_choose_interval_uses_a_fixed_interval_when_the_job_sets_one():
    fixed = choose_interval(1024, 30, 300, fixed_s=900)
    assert fixed.method == "fixed" and fixed.interval_s == 900
    auto = choose_interval(1024, 30, 300)
    assert auto.method == "daly"
    assert auto.expected_ettr >= fixed.expected_ettr
    # re-chosen as estimates move: a slower checkpoint means checkpointing less often
    assert choose_interval(1024, 120, 300).interval_s > auto.interval_s
    # a bigger job fails more often: checkpoint more often
    assert choose_interval(8192, 30, 300).interval_s < auto.interval_s
