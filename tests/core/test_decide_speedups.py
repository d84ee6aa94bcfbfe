"""The shortcuts ``decide`` takes for speed answer as the plain computation would.

``core.las_ready`` says "nobody above this level yet" without walking the running
jobs; it may only say so when the walk would find nobody. ``FreeCapacity.set_free_masks``
gives a shadow walk's releases back at once; the index must end as it would after
each release in turn. (tests/sim/test_replay_golden.py checks whole replays.)
"""

from __future__ import annotations

import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from grace.core.capacity import FreeCapacity, Placement
from grace.core.jobs import JobId, RunningJob
from grace.core.las_ready import LevelReadiness, ready_at
from grace.core.policies import get_policy

from .builders import A100, make_cluster

GRACE = get_policy("grace")


def _above(run: RunningJob, level: int, now: float) -> bool:
    """The test ``scheduler._LevelScan`` applies, written out."""
    young = now - GRACE.las_min_run_s
    attained = run.attained_gpu_s + run.gpu_equivalents * (now - run.start_s)
    return run.start_s <= young and bisect.bisect_right(GRACE.las_thresholds, attained) > level


runs = st.lists(st.tuples(
    st.floats(0, 1e7), st.floats(0, 5e6), st.sampled_from([0.0, 0.25, 1.0, 8.0, 64.0]),
    st.booleans()), max_size=12)


@settings(max_examples=150, deadline=None)
@given(runs, st.floats(0, 2e7), st.integers(0, len(GRACE.las_thresholds)),
       st.integers(0, 12))
def test_none_above_is_said_only_when_no_running_job_is_above(specs, now, level, ended):
    running: dict[JobId, RunningJob] = {}
    ready = LevelReadiness(GRACE, running)
    ready.none_above(level, 0.0)  # built empty: later starts are pushed, not rebuilt
    for i, (start, attained, gpus, preemptible) in enumerate(specs):
        run = RunningJob(JobId(i), "t", Placement(), start, gpus, (A100,),
                         preemptible=preemptible, attained_gpu_s=attained)
        running[run.id] = run
        if preemptible:
            ready.started(run)
    for i in range(min(ended, len(specs))):
        running.pop(JobId(i), None)
    if ready.none_above(level, now):
        assert not any(_above(r, level, now) for r in running.values() if r.preemptible)


def test_a_job_is_ready_from_the_instant_it_crosses_the_level_and_has_run_long_enough():
    bound = GRACE.las_thresholds[0]
    run = RunningJob(JobId(1), "t", Placement(), 1000.0, 4.0, (A100,), attained_gpu_s=0.0)
    crossing = 1000.0 + bound / 4.0
    assert ready_at(GRACE, run, 0) == max(crossing, 1000.0 + GRACE.las_min_run_s)
    assert _above(run, 0, ready_at(GRACE, run, 0) + 1.0)
    idle = RunningJob(JobId(2), "t", Placement(), 0.0, 0.0, (A100,), attained_gpu_s=0.0)
    assert ready_at(GRACE, idle, 0) == float("inf")  # no GPUs: its service never grows


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_masks_given_back_at_once_leave_the_index_as_releases_one_by_one(data):
    topo = make_cluster(nodes=6, gpus=8, nodes_per_leaf=2, model=A100)
    one, batch = FreeCapacity(topo), FreeCapacity(topo)
    gpus = data.draw(st.lists(st.integers(0, topo.total_gpus - 1), unique=True, min_size=1))
    for cap in (one, batch):
        cap.allocate(Placement(gpus=tuple(gpus)))
    chunks = data.draw(st.lists(st.integers(1, 8), min_size=1))
    placements, i = [], 0
    for size in chunks:
        if i >= len(gpus):
            break
        placements.append(Placement(gpus=tuple(gpus[i:i + size])))
        i += size
    masks: dict[int, int] = {}
    for p in placements:
        one.release(p)
        for node, bits in batch.by_node(p):
            masks[node] = masks.get(node, batch.free_mask[node]) | bits
    batch.set_free_masks(masks)
    one.check_consistency()
    batch.check_consistency()
    assert batch.free_mask == one.free_mask
    for key, g in one.groups.items():
        h = batch.groups[key]
        assert (h.nodes_by_free, h.leaf_buckets, h.leaf_free, h.free_total) == (
            g.nodes_by_free, g.leaf_buckets, g.leaf_free, g.free_total)


def test_a_long_lived_state_keeps_its_readiness_heaps_bounded():
    """The live view keeps one state for months: entries of ended jobs must not pile up."""
    running: dict[JobId, RunningJob] = {}
    ready = LevelReadiness(GRACE, running)
    ready.none_above(0, 0.0)
    for i in range(5000):
        run = RunningJob(JobId(i), "t", Placement(), float(i), 1.0, (A100,), preemptible=True)
        running[run.id] = run
        ready.started(run)
        running.pop(JobId(i - 3), None)  # three run at a time
    assert len(ready._heaps[0]) <= 2 * len(running) + 64 + 1
    # and it still answers from the jobs that run: one of them is above level 0 by then
    assert not ready.none_above(0, 1e12)
