"""``decide`` is pure for its caller: it reads the state, changes nothing, and repeats itself."""

from __future__ import annotations

import pytest

from grace.core import Slice, TenantQuota, decide

from .builders import (
    A100,
    H100,
    check_index,
    make_cluster,
    make_job,
    make_state,
    node_gpus,
    occupy,
    run_cycle,
    snapshot,
    started,
    submit,
)


def _busy_state(policy: str):
    """A cycle with something of everything: stops, reclaim, priority preemption, slices, drains."""
    topo = make_cluster(groups=[
        {"name": "h", "count": 4, "gpu": H100, "mig_gpus_per_node": 2, "nodes_per_leaf": 2},
        {"name": "a", "count": 2, "gpu": A100, "nodes_per_leaf": 2},
    ])
    quotas = {"owner": TenantQuota(guaranteed_gpus=16, borrow_limit_gpus=0),
              "borrower": TenantQuota(guaranteed_gpus=0, borrow_limit_gpus=32)}
    state = make_state(topo, policy, quotas)
    occupy(state, make_job(100, gpus=8, tenant="x", limit=50, estimate=40), node_gpus(topo, 0, 8))
    occupy(state, make_job(101, gpus=8, tenant="borrower", preemptible=True), node_gpus(topo, 1, 8),
           borrowing=True)
    occupy(state, make_job(102, gpus=6, tenant="x", preemptible=True, estimate=500), node_gpus(topo, 2, 6))
    mig_gpu = node_gpus(topo, 2, 1, high=False)[0]
    occupy(state, make_job(103, gpus=0.25, tenant="x"), slices=[Slice(mig_gpu, 2, 2)])
    occupy(state, make_job(104, gpus=8, tenant="x", models=(A100,), estimate=300), node_gpus(topo, 4, 8))
    state.set_node_usable(5, False)
    submit(
        state,
        make_job(1, gpus=8, tenant="owner", submit=1),
        make_job(2, gpus=8, tenant="y", priority=10, submit=2),
        make_job(3, gpus=0.25, tenant="y", submit=3),
        make_job(4, gpus=16, tenant="y", models=(A100, H100), submit=4),
        make_job(5, gpus=2, tenant="y", estimate=10, submit=5),
        make_job(6, gpus=4, tenant="y", estimate=10_000, submit=6),
        make_job(7, gpus=8, tenant="capped", submit=7),
    )
    return state


@pytest.mark.parametrize("policy", ["fifo", "easy-backfill", "priority", "las", "grace"])
def test_decide_leaves_the_state_unchanged(policy):
    state = _busy_state(policy)
    before = snapshot(state)

    result = decide(state, 60)

    assert result.changed
    assert snapshot(state) == before
    check_index(state.capacity)


@pytest.mark.parametrize("policy", ["fifo", "easy-backfill", "priority", "las", "grace"])
def test_decide_twice_gives_equal_results(policy):
    state = _busy_state(policy)

    assert decide(state, 60) == decide(state, 60)


def test_busy_cycle_exercises_stops_preemptions_and_slices():
    state = _busy_state("grace")

    result = decide(state, 60)

    assert [int(s.job_id) for s in result.stops] == [100]
    assert {int(p.job_id) for p in result.preemptions} >= {101}
    assert any(p.slices for p in started(result).values())


def test_applying_the_result_matches_what_decide_tried():
    state = _busy_state("grace")
    result = decide(state, 60)

    run_cycle(state, 60)  # the same decisions, now for real

    for s in result.starts:
        assert state.running[s.job_id].placement == s.placement
    for p in result.preemptions:
        assert p.job_id in state.pending
    check_index(state.capacity)


def test_decide_twice_picks_the_same_node():
    topo = make_cluster(nodes=3, gpus=1, nodes_per_leaf=4)
    state = make_state(topo)
    submit(state, make_job(1, gpus=1))

    first = decide(state, 0)
    second = decide(state, 0)

    assert first == second


def test_decide_leaves_bucket_order_unchanged():
    topo = make_cluster(nodes=3, gpus=1, nodes_per_leaf=4)
    state = make_state(topo)
    submit(state, make_job(1, gpus=1))
    group = next(iter(state.capacity.groups.values()))
    before = [list(b) for b in group.nodes_by_free]

    decide(state, 0)

    assert [list(b) for b in group.nodes_by_free] == before


def test_decide_does_not_drop_preemption_history():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "priority")
    occupy(state, make_job(100, gpus=8, tenant="b", preemptible=True), node_gpus(topo, 0, 8))
    state.record_preemption("b", 0.0)
    submit(state, make_job(1, gpus=8, tenant="a", priority=5))
    before = snapshot(state)

    decide(state, 4000)

    assert snapshot(state) == before


def test_decide_stops_a_timed_out_slice_job_on_a_drained_node():
    """Regression (failed on commit 1e6729b): decide's trial release of a slice job on a drained
    node goes through FreeCapacity._set_slice, which deletes the GPU from group.partial though
    the drain already removed it: decide raises IndexError when a MIG job on a drained node
    hits its runtime limit"""
    topo = make_cluster(nodes=1, mig=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=0.25, limit=10), slices=[Slice(0, 2, 2)])
    state.set_node_usable(0, False)
    before = snapshot(state)

    result = decide(state, 20)

    assert [int(s.job_id) for s in result.stops] == [100]
    assert snapshot(state) == before
