"""The policy engine's speed-ups change no decision: replays match the ones before them.

``decide`` is tuned for the twin's per-event cost (issue 20): a shadow walk keeps
released GPUs beside the capacity index, least-attained-service preemption skips a
level nobody stands above yet, the index moves a node between buckets in one step.
Each must decide exactly as the plain code did. This test replays a busy window of the
Philly list (jobs 60,000-63,000 by submission, on philly-busy with 75% of its nodes
taken away, so queues are deep, reservations and trial preemptions frequent) under
each policy those paths serve, and compares a digest of every outcome (the summary's
figures, each job's completion and queue time) with the one the code gave before the
speed-ups (recorded at commit 417fae2). A digest that moves means a decision moved:
find which, do not re-record it to pass. Slow (five replays, about 5 s): CI runs it;
run it by hand after touching ``core``: ``pytest tests/sim/test_replay_golden.py``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from grace.core.topology import Topology
from grace.sim.cluster_variants import with_fewer_nodes
from grace.sim.runner import ReplayInput, load_input, replay
from grace.sim.traces.model import Trace
from grace.spec.loader import load_cluster

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples/clusters/philly-busy.yaml"
WINDOW = (60_000, 63_000)
FEWER_NODES_PERCENT = 75.0
#: what varies with the machine or the checkout, not with a decision
NOT_DECISIONS = ("cluster", "trace", "wall_s", "events_per_s")
RECORDED = {
    "easy-backfill": "0e2b18a6d79c9f73",
    "fifo": "9578597727cf1c76",
    "grace": "a06e3e4eb1ea4863",
    "las": "98513f6c28936ca5",
    "priority": "e0092dd85655e4db",
}


@pytest.fixture(scope="module")
def window(traces_dir: Path) -> ReplayInput:
    inp = load_input(CLUSTER, traces_dir / "philly-pollux/philly.csv", "philly", None)
    jobs = sorted(inp.trace.jobs, key=lambda j: j.submit_s)
    inp.trace = Trace(jobs[WINDOW[0]:WINDOW[1]], inp.trace.report)
    inp.topo = Topology.from_spec(with_fewer_nodes(load_cluster(CLUSTER), FEWER_NODES_PERCENT))
    return inp


def digest(inp: ReplayInput, policy: str) -> str:
    result = replay(inp, policy)
    figures = {k: v for k, v in result.summary.items() if k not in NOT_DECISIONS}
    h = hashlib.sha256(json.dumps(figures, sort_keys=True, default=str).encode())
    h.update(np.asarray(result.jct_s, dtype=float).tobytes())
    h.update(np.asarray(result.queue_s, dtype=float).tobytes())
    return h.hexdigest()[:16]


@pytest.mark.slow
@pytest.mark.parametrize("policy", sorted(RECORDED))
def test_a_busy_window_replays_exactly_as_before_the_speed_ups(window: ReplayInput,
                                                               policy: str) -> None:
    assert digest(window, policy) == RECORDED[policy]
