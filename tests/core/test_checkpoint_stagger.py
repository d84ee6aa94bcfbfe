"""Checkpoint staggering (core.checkpoint_stagger): phases that keep bursts under the FS.

Each case names what the policy promises: phases in range, bursts spread where the
file system cannot take them together, running jobs left where they are, equal
answers for equal inputs, and never a higher peak than all bursts at once.
"""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grace.core.checkpoint_stagger import (
    CHECKPOINT_BYTES_PER_PARAM,
    CheckpointLoad,
    CheckpointPhasing,
    checkpoint_gb,
    harmonic_interval,
    hyperperiod_s,
    job_load,
    peak_demand,
    phase_for,
    stagger,
)


def load(job_id: int, interval_s: float = 600.0, write_s: float = 60.0,
         write_gbps: float = 10.0) -> CheckpointLoad:
    return CheckpointLoad(job_id, interval_s, write_s, write_gbps)


def test_ten_equal_jobs_that_fill_the_fs_alone_take_turns() -> None:
    # each writes 60 s at the whole FS's rate every 600 s: exactly one fits at a time
    loads = [load(i) for i in range(10)]
    phases = stagger(loads, fs_write_gbps=10.0)
    assert sorted(phases.values()) == [60.0 * i for i in range(10)]
    assert peak_demand(loads, phases) == 10.0
    assert peak_demand(loads, {}) == 100.0  # all at phase 0


def test_phases_lie_in_the_interval_and_keep_the_fixed_ones() -> None:
    loads = [load(1, 1200.0), load(2, 600.0), load(3, 2400.0, 30.0, 5.0)]
    phases = stagger(loads, 10.0, fixed={1: 300.0})
    assert set(phases) == {2, 3}  # running job 1 keeps its phase: not returned
    for ld in loads[1:]:
        assert 0.0 <= phases[ld.job_id] < ld.interval_s
    # job 2's bursts (every 600 s) avoid job 1's at 300 s (mod 1200)
    assert phases[2] % 600.0 != 300.0


def test_equal_inputs_give_equal_phases_and_ties_go_by_job_id() -> None:
    loads = [load(i) for i in (5, 3, 9, 1)]
    a = stagger(loads, 10.0)
    b = stagger(list(reversed(loads)), 10.0)
    assert a == b
    assert a[1] == 0.0 and a[3] == 60.0  # equal loads: the lowest id goes first


def test_largest_writer_is_placed_first() -> None:
    loads = [load(1, write_gbps=2.0), load(2, write_gbps=8.0)]
    phases = stagger(loads, 10.0)
    assert phases[2] == 0.0  # the larger one took the first slot


def test_harmonic_intervals_divide_each_other() -> None:
    assert harmonic_interval(30.0) == 60.0
    assert harmonic_interval(330.0) == 240.0  # log2(5.5) rounds to 2
    assert harmonic_interval(4600.0) == 3840.0
    loads = [load(1, harmonic_interval(700.0)), load(2, harmonic_interval(5000.0))]
    assert hyperperiod_s(loads) == max(ld.interval_s for ld in loads)


def test_checkpoint_size_from_the_model_else_per_gpu() -> None:
    assert checkpoint_gb(8, params_b=70.0) == pytest.approx(70.0 * CHECKPOINT_BYTES_PER_PARAM)
    assert checkpoint_gb(16) == pytest.approx(2 * checkpoint_gb(8))  # 7B on 8 GPUs each
    ld = job_load(1, 8, 600.0, 50.0, params_b=7.0)
    assert ld.write_gbps == pytest.approx(98.0 / 50.0)


def test_phase_for_each_phasing() -> None:
    new = load(7, 600.0)
    running = {1: (load(1, 600.0), 0.0)}
    assert phase_for(CheckpointPhasing.SYNCHRONIZED, new, 1234.0, running, 10.0) == 0.0
    assert phase_for(CheckpointPhasing.START, new, 1234.0, running, 10.0) == 1234.0 % 600.0
    assert phase_for(CheckpointPhasing.STAGGERED, new, 1234.0, running, 10.0) == 60.0
    # no file-system figure: nothing to stagger against, so its own start
    assert phase_for(CheckpointPhasing.STAGGERED, new, 1234.0, running, None) == 1234.0 % 600.0


@pytest.mark.parametrize(("field", "value"), [("interval_s", 0.0), ("write_s", -1.0),
                                             ("write_gbps", math.inf)])
def test_bad_loads_name_the_field(field: str, value: float) -> None:
    kw = {"interval_s": 600.0, "write_s": 60.0, "write_gbps": 1.0, field: value}
    with pytest.raises(ValueError, match=f"CheckpointLoad.{field} of job 3"):
        CheckpointLoad(3, **kw)


def test_bad_bandwidth_is_refused() -> None:
    with pytest.raises(ValueError, match="fs_write_gbps"):
        stagger([load(1)], 0.0)


loads_st = st.lists(
    st.builds(lambda k, w, r: (k, w, r), st.integers(0, 6), st.floats(1.0, 120.0),
              st.floats(0.1, 100.0)),
    min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(loads_st, st.floats(0.5, 2.0))
def test_peak_never_exceeds_the_unstaggered_peak(rows, fs_share: float) -> None:
    loads = [CheckpointLoad(i, 60.0 * 2 ** k, min(w, 60.0 * 2 ** k), r)
             for i, (k, w, r) in enumerate(rows)]
    fs = fs_share * max(ld.write_gbps for ld in loads)
    phases = stagger(loads, fs)
    assert set(phases) == {ld.job_id for ld in loads}
    assert all(0.0 <= phases[ld.job_id] < ld.interval_s for ld in loads)
    assert peak_demand(loads, phases) <= peak_demand(loads, {}) + 1e-9


@settings(max_examples=40, deadline=None)
@given(loads_st)
def test_with_ample_bandwidth_any_phases_fit(rows) -> None:
    loads = [CheckpointLoad(i, 60.0 * 2 ** k, min(w, 60.0 * 2 ** k), r)
             for i, (k, w, r) in enumerate(rows)]
    ample = sum(ld.write_gbps for ld in loads)
    phases = stagger(loads, ample)
    assert peak_demand(loads, phases) <= ample + 1e-9
    assert peak_demand(loads, {}) <= ample + 1e-9  # so phases change nothing there


@pytest.mark.slow
def test_two_thousand_running_jobs_are_phased_within_seconds() -> None:
    loads = [CheckpointLoad(i, harmonic_interval(300.0 + 37.0 * (i % 997)),
                            1.0 + (i * 7) % 60, 1.0 + (i * 13) % 500) for i in range(2000)]
    t0 = time.perf_counter()
    phases = stagger(loads, 2000.0)
    took = time.perf_counter() - t0
    assert len(phases) == 2000
    assert took < 10.0, f"stagger of 2,000 jobs took {took:.1f} s"
    assert peak_demand(loads, phases) < peak_demand(loads, {}) / 10
