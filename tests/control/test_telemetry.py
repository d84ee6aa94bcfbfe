"""The heartbeat log behind /metrics and the dashboard's curves: what it keeps and forgets."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grace.observe.telemetry import HeartbeatLog


def rec(step: int, step_s: float = 1.0, steps: int = 10, **phases: Any) -> dict[str, Any]:
    return {"step": step, "step_s": step_s, "steps": steps, "phases": phases, "loss": 1.0,
            "at": 1000.0 + step}


def test_phase_totals_add_steps_times_seconds_and_survive_a_new_attempt() -> None:
    log = HeartbeatLog()
    log.add(7, 1, 0, "n1", [rec(10, data=0.2), rec(20, data=0.4)], received_at=5.0)
    assert log.phase_totals(7) == {"data": pytest.approx(6.0)}
    log.add(7, 2, 0, "n2", [rec(5, data=0.1)], received_at=6.0)  # restarted from a checkpoint
    assert log.phase_totals(7)["data"] == pytest.approx(7.0)  # a counter: it never falls
    assert set(log.latest(7)) == {0} and log.snapshot([7])[7].attempt == 2
    log.add(7, 1, 1, "n1", [rec(30, data=9.0)])  # a late batch of the ended attempt: ignored
    assert log.phase_totals(7)["data"] == pytest.approx(7.0)
    assert [p.attempt for p in log.series(7)] == [1, 1, 2]


def test_values_a_job_cannot_mean_are_left_out() -> None:
    log = HeartbeatLog()
    bad: list[Any] = [{"step": "x", "step_s": float("nan"), "steps": True,
                       "phases": {"data": -1, "forward": "fast", "mine": 3.0}}, "not a record"]
    log.add(1, 1, 0, "n", bad, received_at=1.0)
    assert log.phase_totals(1) == {}
    point = log.series(1)[0]
    assert point.step == 0 and point.step_s is None and point.phases == {}


def test_the_last_heard_time_is_the_servers_not_the_jobs() -> None:
    log = HeartbeatLog()
    log.add(1, 1, 0, "n", [rec(1) | {"at": 9e12}], received_at=100.0)
    assert log.snapshot([1])[1].last_at == 100.0


def test_it_remembers_at_most_max_jobs_least_recently_heard_first_out() -> None:
    log = HeartbeatLog(max_jobs=3)
    for job in (1, 2, 3):
        log.add(job, 1, 0, "n", [rec(1)])
    log.add(1, 1, 0, "n", [rec(2)])  # heard again: now the newest
    log.add(4, 1, 0, "n", [rec(1)])
    assert log.series(2) == [] and all(log.series(j) for j in (1, 3, 4))


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=3000))
def test_curves_stay_bounded_and_keep_the_first_and_the_newest_points(n: int) -> None:
    log = HeartbeatLog(max_points=200)
    for step in range(1, n + 1):
        log.add(1, 1, 0, "n", [rec(step)])
    steps = [p.step for p in log.series(1)]
    assert len(steps) <= 200 and steps == sorted(steps)
    assert steps[0] == 1 and steps[-1] == n


def test_checkpoint_saves_are_handed_on_once_from_rank_0_only() -> None:
    seen: list[Any] = []
    log = HeartbeatLog(on_checkpoint=seen.append)
    save = {"checkpoints": [{"step": 4, "seconds": 2.5, "bytes": 1024}, {"seconds": "x"}]}
    log.add(1, 1, 1, "n", [rec(4) | save])
    log.add(1, 1, 0, "n", [rec(4) | save])
    assert [(s.step, s.seconds, s.size_bytes) for s in seen] == [(4, 2.5, 1024)]
