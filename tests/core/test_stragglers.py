"""Stragglers as a specification: one slow node is moved off, a slow job is not blamed on a node."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grace.core.stragglers import MoveJobOff, Straggler, StragglerDetector

GANG = [f"n{i}" for i in range(8)]


def window(slow: dict[str, float] | None = None, base: float = 1.0, gang=GANG) -> dict[str, float]:
    """Step times of one window: every node at ``base`` except those in ``slow`` (node -> factor)."""
    slow = slow or {}
    return {n: base * slow.get(n, 1.0) for n in gang}


def run(det: StragglerDetector, windows: list[dict[str, float]], job="job-1",
        start: int = 0) -> list[list[Straggler]]:
    return [det.observe(job, start + i, w) for i, w in enumerate(windows)]


def test_one_node_15_percent_slower_for_three_windows_is_flagged_once():
    det = StragglerDetector()
    out = run(det, [window({"n3": 1.15})] * 4)
    assert out[:2] == [[], []]
    (s,) = out[2]
    assert (s.job_id, s.node, s.windows) == ("job-1", "n3", 3)
    assert s.slowdown == pytest.approx(0.15)
    assert out[3] == []  # same episode: reported once


def test_the_decision_is_to_move_the_job_off_at_its_next_checkpoint():
    (s,) = run(StragglerDetector(), [window({"n3": 1.15})] * 3)[2]
    move = s.decision()
    assert isinstance(move, MoveJobOff) and move.at_checkpoint
    assert (move.job_id, move.node) == ("job-1", "n3")
    assert "15% slower" in move.reason and "next checkpoint" in move.reason


def test_two_slow_windows_are_not_enough():
    out = run(StragglerDetector(), [window({"n3": 1.15})] * 2 + [window()])
    assert out == [[], [], []]


def test_a_node_that_recovers_starts_counting_again():
    det = StragglerDetector()
    slow, ok = window({"n3": 1.15}), window()
    assert run(det, [slow, slow, ok, slow, slow]) == [[]] * 5  # the normal window reset the count
    assert [s.node for s in det.observe("job-1", 5, slow)] == ["n3"]


def test_a_new_episode_after_recovery_is_reported_again():
    det = StragglerDetector()
    slow, ok = window({"n3": 1.15}), window()
    out = run(det, [slow, slow, slow, ok, slow, slow, slow])
    assert [len(o) for o in out] == [0, 0, 1, 0, 0, 0, 1]


def test_a_whole_gang_that_gets_slower_is_not_a_straggler():
    det = StragglerDetector()
    out = run(det, [window()] * 3 + [window(base=1.4)] * 5)
    assert all(o == [] for o in out)


def test_slowness_shared_by_more_than_a_quarter_of_the_gang_blames_no_node():
    # 3 of 8 nodes 15% slower, e.g. a slow pipeline stage: shared cause, not three bad nodes
    out = run(StragglerDetector(), [window({"n0": 1.15, "n1": 1.15, "n2": 1.15})] * 5)
    assert all(o == [] for o in out)


def test_two_bad_nodes_in_a_gang_of_eight_are_both_flagged():
    out = run(StragglerDetector(), [window({"n0": 1.2, "n5": 1.3})] * 3)
    assert sorted(s.node for s in out[2]) == ["n0", "n5"]


@pytest.mark.parametrize("size", [1, 2])
def test_gangs_of_one_or_two_nodes_are_never_judged(size):
    gang = GANG[:size]
    out = run(StragglerDetector(), [window({"n0": 2.0}, gang=gang)] * 6)
    assert all(o == [] for o in out)


def test_a_gang_of_three_is_judged():
    out = run(StragglerDetector(), [window({"n0": 1.15}, gang=GANG[:3])] * 3)
    assert [s.node for s in out[2]] == ["n0"]


def test_jobs_are_tracked_separately():
    det = StragglerDetector()
    slow = window({"n3": 1.15})
    det.observe("a", 0, slow)
    det.observe("b", 0, window())
    det.observe("a", 1, slow)
    det.observe("b", 1, slow)
    assert [s.job_id for s in det.observe("a", 2, slow)] == ["a"]
    assert det.observe("b", 2, slow) == []


def test_a_gap_in_windows_breaks_the_streak_and_windows_must_increase():
    det = StragglerDetector()
    slow = window({"n3": 1.15})
    det.observe("j", 0, slow)
    det.observe("j", 1, slow)
    assert det.observe("j", 5, slow) == []  # windows 2-4 missing (a restart): not consecutive
    with pytest.raises(ValueError, match="windows must increase"):
        det.observe("j", 5, slow)
    det.forget("j")
    assert det.observe("j", 0, slow) == []  # a forgotten job starts over


def test_a_node_that_leaves_the_gang_loses_its_count():
    det = StragglerDetector()
    slow = window({"n3": 1.15})
    det.observe("j", 0, slow)
    det.observe("j", 1, slow)
    det.observe("j", 2, {n: t for n, t in slow.items() if n != "n3"})
    assert det.observe("j", 3, slow) == []


def test_threshold_and_window_count_are_configurable():
    det = StragglerDetector(threshold=0.25, windows=2)
    assert run(det, [window({"n3": 1.15})] * 4) == [[]] * 4
    out = run(det, [window({"n3": 1.3})] * 2, job="j2")
    assert [s.node for s in out[1]] == ["n3"]


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_step_times_must_be_positive_numbers(bad):
    with pytest.raises(ValueError, match="n0"):
        StragglerDetector().observe("j", 0, window({"n0": bad}))


# --------------------------------------------------------------- properties

TIMES = st.dictionaries(st.sampled_from(GANG), st.floats(0.5, 2.0), min_size=0, max_size=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(TIMES, min_size=1, max_size=12), st.sampled_from([0.25, 0.5, 2.0, 8.0]))
def test_uniform_rescaling_never_changes_who_is_flagged(windows, scale):
    """Only relative speed inside the gang matters (scales are powers of two: exact in floats)."""
    plain = run(StragglerDetector(), windows)
    scaled = run(StragglerDetector(), [{n: t * scale for n, t in w.items()} for w in windows])
    assert [[s.node for s in o] for o in plain] == [[s.node for s in o] for o in scaled]


@settings(max_examples=200, deadline=None)
@given(st.lists(TIMES, min_size=1, max_size=12), st.integers(1, 4))
def test_no_flag_before_enough_windows_and_at_most_once_per_episode(windows, k):
    det = StragglerDetector(windows=k)
    out = run(det, windows)
    assert all(o == [] for o in out[:k - 1])
    for i, flagged in enumerate(out):
        for s in flagged:
            assert s.windows == k and s.slowdown >= 0.10 - 1e-9
            # it was slow in each of the k windows ending here, and not reported in between
            assert all(s.node in det.slow_nodes(windows[j]) for j in range(i - k + 1, i + 1))
            assert all(s.node not in [x.node for x in out[j]] for j in range(i - k + 1, i))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(GANG[:2]), st.floats(0.1, 10.0)), max_size=10))
def test_small_gangs_are_never_flagged(windows):
    assert all(o == [] for o in run(StragglerDetector(windows=1), windows))
