"""Phase timers: what they add up, and (loosely) what they cost. The real figure: benchmarks/runtime.py."""

from __future__ import annotations

import threading
import time

from grace.runtime.timers import PhaseTimers


def test_phases_accumulate_per_step_and_reset() -> None:
    t = PhaseTimers()
    with t.phase("forward"):
        time.sleep(0.01)
    with t.phase("forward"):
        time.sleep(0.01)
    with t.phase("data"):
        pass
    got = t.collect()
    assert set(got) == {"forward", "data"}
    assert 0.015 < got["forward"] < 0.5
    assert got["data"] < 0.01
    assert t.collect() == {}  # the next step starts from nothing


def test_time_from_other_threads_is_added() -> None:
    t = PhaseTimers()
    threads = [threading.Thread(target=t.add, args=("allreduce", 0.25)) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert t.collect() == {"allreduce": 1.0}


def test_disabled_timers_record_nothing() -> None:
    t = PhaseTimers(enabled=False)
    with t.phase("forward"):
        pass
    t.add("allreduce", 1.0)
    assert t.collect() == {}


def test_overhead_is_microseconds_per_phase() -> None:
    """Loose bound (CI machines are noisy): a timed block costs well under 20 us."""
    t = PhaseTimers()
    n = 20_000
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            with t.phase("forward"):
                pass
        best = min(best, (time.perf_counter() - start) / n)
        t.collect()
    assert best < 20e-6, f"{best * 1e6:.2f} us per phase"
