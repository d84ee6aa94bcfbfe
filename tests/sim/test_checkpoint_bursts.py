"""The twin's checkpoint-burst physics (sim.checkpoint_bursts): overlapping writes share the FS."""

from __future__ import annotations

import pytest

from grace.core.checkpoint import expected_ettr
from grace.core.checkpoint_stagger import CheckpointLoad, stagger
from grace.sim.checkpoint_bursts import burst_write_s, ettr_with_bursts


def test_a_job_alone_writes_at_its_own_rate() -> None:
    ld = CheckpointLoad(1, 600.0, 60.0, 10.0)
    assert burst_write_s([ld], {1: 0.0}, 1000.0) == {1: pytest.approx(60.0)}
    # a file system slower than the job's rate stretches the burst: 600 GB at 5 GB/s
    assert burst_write_s([ld], {1: 0.0}, 5.0) == {1: pytest.approx(120.0)}


def test_synchronized_bursts_share_the_bandwidth_and_staggered_ones_do_not() -> None:
    loads = [CheckpointLoad(i, 600.0, 60.0, 10.0) for i in range(4)]
    together = burst_write_s(loads, {}, 10.0)
    assert together == {i: pytest.approx(240.0) for i in range(4)}  # 4 x 600 GB at 10 GB/s
    spread = burst_write_s(loads, stagger(loads, 10.0), 10.0)
    assert spread == {i: pytest.approx(60.0) for i in range(4)}


def test_fair_share_gives_slow_writers_their_own_rate() -> None:
    # a 2 GB/s writer and a 20 GB/s one on 10 GB/s: max-min fair is 2 and 8
    slow = CheckpointLoad(1, 1200.0, 100.0, 2.0)  # 200 GB
    fast = CheckpointLoad(2, 1200.0, 10.0, 20.0)  # 200 GB
    out = burst_write_s([slow, fast], {}, 10.0)
    assert out[1] == pytest.approx(100.0)  # never slowed: its rate fits under the share
    assert out[2] == pytest.approx(200.0 / 8.0)


def test_a_burst_spilling_over_the_hyperperiod_is_counted() -> None:
    # job 2's burst starts 30 s before the period ends and runs past it
    loads = [CheckpointLoad(1, 600.0, 60.0, 10.0), CheckpointLoad(2, 600.0, 60.0, 10.0)]
    out = burst_write_s(loads, {1: 0.0, 2: 570.0}, 10.0)
    # job 2: 570..600 alone (300 GB), then at half rate with job 1's burst of 600: to 660;
    # job 1: 300 GB by 660 at half rate, the rest alone: to 690
    assert out == {1: pytest.approx(90.0), 2: pytest.approx(90.0)}


def test_ettr_falls_as_bursts_block_longer() -> None:
    ld = CheckpointLoad(1, 1800.0, 60.0, 10.0)
    mtbf = {1: 100_000.0}
    fast = ettr_with_bursts([ld], {1: 60.0}, {1: 8}, mtbf, 600.0)
    slow = ettr_with_bursts([ld], {1: 240.0}, {1: 8}, mtbf, 600.0)
    assert fast == pytest.approx(expected_ettr(1800.0, 60.0, 100_000.0, 600.0))
    assert slow < fast
