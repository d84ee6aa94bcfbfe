"""The early-stopping rules (core.early_stop): unit cases and their two invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from grace.core.early_stop import Mode, Rule, StopConfig, Trial, decide, incumbent, rungs

MEDIAN = StopConfig(rule=Rule.MEDIAN, grace_steps=10, min_trials=3)
HALVING = StopConfig(rule=Rule.SUCCESSIVE_HALVING, grace_steps=10, eta=2)


def curve(final: float, steps: int = 40, start: float = 5.0) -> list[tuple[int, float]]:
    """A loss that falls linearly from ``start`` to ``final`` over ``steps`` steps."""
    return [(s, start + (final - start) * s / steps) for s in range(1, steps + 1)]


def test_median_stops_a_trial_worse_than_the_others_median() -> None:
    trials = {i: Trial(curve(1.0 + 0.1 * i)) for i in range(4)}
    trials[9] = Trial(curve(4.8, steps=20))  # barely learns
    stops = decide(trials, Mode.MIN, MEDIAN)
    assert [s.trial for s in stops] == [9]
    assert "median rule at step 20" in stops[0].reason


def test_median_waits_for_enough_trials_and_the_grace_period() -> None:
    two = {0: Trial(curve(1.0)), 1: Trial(curve(1.1)), 9: Trial(curve(4.8, steps=20))}
    assert decide(two, Mode.MIN, MEDIAN) == []  # only 2 others: min_trials is 3
    young = {i: Trial(curve(1.0 + 0.1 * i)) for i in range(4)}
    young[9] = Trial(curve(4.8, steps=9))  # before grace_steps
    assert decide(young, Mode.MIN, MEDIAN) == []


def test_median_judges_a_trial_ahead_of_its_peers_at_their_common_step() -> None:
    """Side by side, the others lag: the rule compares at the latest step all have reached."""
    trials = {i: Trial(curve(1.0, steps=40)[:n]) for i, n in enumerate((12, 15, 18))}
    trials[9] = Trial([(s, 4.9) for s in range(1, 26)])
    stops = decide(trials, Mode.MIN, MEDIAN)
    assert [s.trial for s in stops] == [9] and "at step 12" in stops[0].reason


def test_median_in_max_mode_stops_the_low_accuracy_trial() -> None:
    acc = {i: Trial([(s, 0.5 + 0.01 * s) for s in range(1, 31)]) for i in range(3)}
    acc[7] = Trial([(s, 0.1) for s in range(1, 31)])
    stops = decide(acc, Mode.MAX, MEDIAN)
    assert [s.trial for s in stops] == [7]
    assert "0.1" in stops[0].reason


def test_finished_trials_count_but_are_never_stopped() -> None:
    trials = {i: Trial(curve(1.0 + 0.1 * i), running=False) for i in range(3)}
    trials[5] = Trial(curve(4.9), running=False)
    trials[6] = Trial(curve(4.9, steps=20))
    assert [s.trial for s in decide(trials, Mode.MIN, MEDIAN)] == [6]


def test_successive_halving_keeps_the_top_half_at_each_rung() -> None:
    assert rungs(10, 2, 45) == [10, 20, 40]
    trials = {i: Trial(curve(1.0 + i, steps=20)) for i in range(4)}
    stopped = {s.trial for s in decide(trials, Mode.MIN, HALVING)}
    assert stopped == {2, 3}  # of 4 at rung 10 and 20, keep 2
    reason = decide(trials, Mode.MIN, HALVING)[0].reason
    assert "rung 10" in reason and "top 1/2" in reason


def test_successive_halving_needs_eta_trials_at_a_rung() -> None:
    trials = {0: Trial(curve(1.0, steps=20)), 1: Trial(curve(3.0, steps=20))}
    lone = StopConfig(rule=Rule.SUCCESSIVE_HALVING, grace_steps=10, eta=3)
    assert decide(trials, Mode.MIN, lone) == []


def test_non_finite_values_are_ignored_and_incumbent_is_the_best() -> None:
    trials = {"a": Trial([(1, float("nan")), (2, 3.0)]), "b": Trial([(1, 2.0)])}
    assert incumbent(trials, Mode.MIN) == "b"
    assert incumbent(trials, Mode.MAX) == "a"
    assert incumbent({}, Mode.MIN) is None


histories = st.dictionaries(
    st.integers(0, 20),
    st.lists(st.tuples(st.integers(1, 200),
                       st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)),
             max_size=30),
    max_size=12,
)
configs = st.builds(StopConfig, rule=st.sampled_from(list(Rule)),
                    grace_steps=st.integers(1, 60), min_trials=st.integers(1, 5),
                    eta=st.integers(2, 4))


@settings(max_examples=300, deadline=None)
@given(histories, configs, st.sampled_from(list(Mode)), st.data())
def test_invariants(hist: dict[int, list[tuple[int, float]]], config: StopConfig, mode: Mode,
                    data: st.DataObject) -> None:
    running = {k: data.draw(st.booleans()) for k in hist}
    trials = {k: Trial(pts, running[k]) for k, pts in hist.items()}
    stops = decide(trials, mode, config)
    best = incumbent(trials, mode)
    sign = 1 if mode is Mode.MIN else -1
    best_value = min((sign * v for pts in hist.values() for _, v in pts), default=None)
    for stop in stops:
        pts = hist[stop.trial]
        assert running[stop.trial], "a finished trial was stopped"
        assert max(s for s, _ in pts) >= config.grace_steps, "stopped before the grace period"
        assert stop.trial != best, "stopped the best trial so far"
        assert min(sign * v for _, v in pts) > best_value  # not even one tied for best
        assert stop.reason
    assert len({s.trial for s in stops}) == len(stops)
    assert decide(trials, mode, config) == stops  # a pure function of its input
