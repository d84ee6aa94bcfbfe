"""The divergence guard's rules, without torch."""

from __future__ import annotations

import math

import pytest

from grace.runtime.divergence import DIVERGED_EXIT_CODE, Diverged, DivergenceGuard


def test_exit_code_is_the_reconcilers() -> None:
    assert DIVERGED_EXIT_CODE == 86
    err = Diverged("loss is nan", 7)
    assert err.code == 86 and "step 7" in str(err)
    assert isinstance(err, SystemExit)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_loss_diverges_at_once(bad: float) -> None:
    g = DivergenceGuard()
    assert not g.check(5.0).diverged
    v = g.check(bad)
    assert v.diverged and v.suspect
    assert str(bad) in v.reason


def test_a_falling_loss_never_trips() -> None:
    g = DivergenceGuard(spike_factor=3.0, window=20, min_history=5, patience=1)
    assert not any(g.check(10.0 * 0.9**i).suspect for i in range(200))


def test_spike_needs_patience_consecutive_steps() -> None:
    g = DivergenceGuard(spike_factor=3.0, window=10, min_history=5, patience=2)
    for _ in range(10):
        assert not g.check(1.0).suspect
    first = g.check(10.0)
    assert first.suspect and not first.diverged  # one spike: suspect, not yet diverged
    second = g.check(10.0)
    assert second.diverged and "10.0x its recent average" in second.reason


def test_one_normal_step_resets_the_streak_and_spikes_stay_out_of_the_average() -> None:
    g = DivergenceGuard(spike_factor=3.0, window=10, min_history=5, patience=2)
    for _ in range(10):
        g.check(1.0)
    assert g.check(10.0).suspect
    assert not g.check(1.0).suspect  # back to normal: the count resets
    assert g.streak == 0
    assert g.mean == pytest.approx(1.0)  # the spike never entered the average
    assert not g.check(10.0).diverged  # a new streak starts from one


def test_no_spike_judgement_before_min_history() -> None:
    g = DivergenceGuard(spike_factor=2.0, min_history=5, patience=1)
    for loss in (1.0, 1.0, 1.0, 100.0):  # only 3 losses known: too few to call 100 a spike
        assert not g.check(loss).diverged


def test_state_round_trips() -> None:
    g = DivergenceGuard(window=5, min_history=2, patience=3)
    for x in (1.0, 2.0, 3.0):
        g.check(x)
    h = DivergenceGuard(window=5, min_history=2, patience=3)
    h.load_state_dict(g.state_dict())
    assert h.mean == g.mean and h.streak == g.streak


def test_rejects_nonsense_thresholds() -> None:
    with pytest.raises(ValueError):
        DivergenceGuard(spike_factor=1.0)
