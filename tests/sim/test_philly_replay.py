"""The whole Philly job list on the Philly-size clusters: the twin's headline claims.

Slow (about a minute per policy, the policies replayed at once on the cores there are:
``sim.parallel``): run in CI, skipped with ``-m "not slow"``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grace.sim.parallel import ReplayRun, replay_many
from grace.sim.runner import ReplayInput, load_input

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def busy(traces_dir: Path) -> ReplayInput:
    return load_input(REPO / "examples/clusters/philly-busy.yaml",
                      traces_dir / "philly-pollux/philly.csv", "philly", None)


@pytest.mark.slow
def test_grace_beats_easy_backfill_and_fifo_on_philly_busy(busy: ReplayInput) -> None:
    fifo, easy, grace = (r.summary for r in replay_many(
        busy, [ReplayRun(p, p) for p in ("fifo", "easy-backfill", "grace")], keep_jobs=False))
    for s in (fifo, easy, grace):  # users' time limits (the default): estimates and kills
        assert s["estimates"] == "user"
        assert s["jobs"] == 82_247
        assert s["jobs_completed"] + s["jobs_timed_out"] == 82_247
        assert 0 < s["jobs_timed_out"] < 0.05 * 82_247  # the users who asked for too little
    assert grace["avg_jct_s"] < easy["avg_jct_s"]
    assert grace["p99_queue_s"] < easy["p99_queue_s"]
    assert grace["avg_jct_s"] * 2 <= fifo["avg_jct_s"]
    assert grace["multi_leaf_share"] <= easy["multi_leaf_share"]
