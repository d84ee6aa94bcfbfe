"""Where a gang goes: best fit, leaf locality, shapes, models, pools and MIG slices.

Each test sets a scene with ``occupy`` (running jobs pinned on exact GPUs),
runs one ``decide`` and reads the placement it chose.
"""

from __future__ import annotations

import pytest

from grace.core import JobCompileError, PendingReason, Slice, compile_job, decide
from grace.core.placement import PlacementMode, SliceRequest
from grace.spec import JobSpec

from .builders import (
    A100,
    H100,
    L40S,
    check_index,
    make_cluster,
    make_job,
    make_state,
    node_gpus,
    nodes_of,
    occupy,
    per_node_counts,
    run_cycle,
    started,
    submit,
)

# ---------------------------------------------------------------------- one node: best fit


def test_8_gpu_job_goes_to_the_empty_node_not_the_partly_busy_one():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=2), node_gpus(topo, 0, 2))
    submit(state, make_job(1, gpus=8))

    result = decide(state, 0)

    assert nodes_of(topo, started(result)[1]) == [1]
    assert per_node_counts(topo, started(result)[1]) == {1: 8}


def test_2_gpu_job_best_fits_onto_the_node_with_exactly_2_free():
    topo = make_cluster(nodes=3, nodes_per_leaf=4)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=4), node_gpus(topo, 0, 4))  # node 0: 4 free
    occupy(state, make_job(101, gpus=6), node_gpus(topo, 1, 6))  # node 1: 2 free
    submit(state, make_job(1, gpus=2))  # node 2: 8 free

    result = decide(state, 0)

    assert nodes_of(topo, started(result)[1]) == [1]


def test_single_node_gang_waits_rather_than_scatter_over_partly_free_nodes():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=2), node_gpus(topo, 0, 2))
    occupy(state, make_job(101, gpus=2), node_gpus(topo, 1, 2))
    job = make_job(1, gpus=8)  # 12 GPUs free in all, but no node has 8
    submit(state, job)

    result = decide(state, 0)

    assert result.starts == []
    assert result.reason_for(job) is PendingReason.WAITING_FOR_CAPACITY


def test_flexible_multi_node_job_scatters_over_partly_free_nodes_as_last_resort():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=2), node_gpus(topo, 0, 2))
    occupy(state, make_job(101, gpus=2), node_gpus(topo, 1, 2))
    submit(state, make_job(1, gpus=12))

    result = decide(state, 0)

    assert per_node_counts(topo, started(result)[1]) == {0: 6, 1: 6}


def test_shaped_job_never_scatters():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=2), node_gpus(topo, 0, 2))
    occupy(state, make_job(101, gpus=2), node_gpus(topo, 1, 2))
    job = make_job(1, gpus=12, per_node=6)
    job_8x2 = make_job(2, gpus=16, per_node=8)
    submit(state, job_8x2)

    assert decide(state, 0).reason_for(job_8x2) is PendingReason.WAITING_FOR_CAPACITY
    state.withdraw(job_8x2.id)
    submit(state, job)
    assert per_node_counts(topo, started(decide(state, 0))[1]) == {0: 6, 1: 6}


def test_excluded_nodes_are_never_used():
    topo = make_cluster(nodes=3, nodes_per_leaf=4)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=6), node_gpus(topo, 0, 6))  # node 0 is the best fit
    submit(state, make_job(1, gpus=2, exclude={0}))

    result = decide(state, 0)

    assert 0 not in nodes_of(topo, started(result)[1])


# ---------------------------------------------------------------------- multi-node: leaves


def test_16_gpu_job_lands_on_two_nodes_under_one_leaf_even_if_lower_ids_span_leaves():
    # leaf 0 = nodes 0, 1 (node 0 has one GPU busy); leaf 1 = nodes 2, 3 (free)
    topo = make_cluster(nodes=4, nodes_per_leaf=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=1), node_gpus(topo, 0, 1))
    submit(state, make_job(1, gpus=16))

    placement = started(decide(state, 0))[1]

    assert nodes_of(topo, placement) == [2, 3]
    assert placement.leaves(topo) == {1}
    assert per_node_counts(topo, placement) == {2: 8, 3: 8}


def _two_half_free_leaves(policy, **overrides):
    """Leaves of 2 nodes; each leaf has one whole node free and one with 7 of 8 GPUs free."""
    topo = make_cluster(nodes=4, nodes_per_leaf=2)
    state = make_state(topo, policy, **overrides)
    occupy(state, make_job(100, gpus=1), node_gpus(topo, 0, 1))
    occupy(state, make_job(101, gpus=1), node_gpus(topo, 2, 1))
    return topo, state


def test_with_leaf_locality_a_gang_one_leaf_could_hold_waits_rather_than_span_two():
    # leaf locality without headroom: the uplinks' load is not asked
    _topo, state = _two_half_free_leaves("grace", placement=PlacementMode.CONTENTION)
    assert state.policy.leaf_locality
    job = make_job(1, gpus=16)
    submit(state, job)

    result = decide(state, 0)

    assert result.starts == []
    assert result.reason_for(job) is PendingReason.WAITING_FOR_CAPACITY


def test_by_default_leaf_locality_yields_to_a_non_blocking_spine_on_whole_nodes():
    # the grace policy's default (headroom): no uplink of a 1:1 fabric can be over
    # capacity, so the gang crosses now instead of waiting for a leaf
    topo, state = _two_half_free_leaves("grace")
    assert state.policy.placement is PlacementMode.HEADROOM
    submit(state, make_job(1, gpus=16))

    placement = started(decide(state, 0))[1]

    assert per_node_counts(topo, placement) == {1: 8, 3: 8}


def test_without_leaf_locality_the_gang_spans_two_leaves_on_whole_nodes():
    topo, state = _two_half_free_leaves("easy-backfill")
    assert not state.policy.leaf_locality
    submit(state, make_job(1, gpus=16))

    placement = started(decide(state, 0))[1]

    assert per_node_counts(topo, placement) == {1: 8, 3: 8}


def test_with_leaf_locality_a_gang_bigger_than_a_leaf_still_spans_leaves():
    topo, state = _two_half_free_leaves("grace")
    state.finish(100, 0)
    state.finish(101, 0)
    submit(state, make_job(1, gpus=24))  # 3 nodes; a leaf has 2

    placement = started(decide(state, 0))[1]

    assert len(placement.leaves(topo)) == 2


def test_shaped_2_by_8_gang_prefers_one_leaf_too():
    topo = make_cluster(nodes=4, nodes_per_leaf=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=1), node_gpus(topo, 1, 1))
    submit(state, make_job(1, gpus=16, per_node=8))

    placement = started(decide(state, 0))[1]

    assert placement.leaves(topo) == {1}


def test_shaped_job_gets_exactly_its_gpus_per_node_on_each_node():
    topo = make_cluster(nodes=4, nodes_per_leaf=4)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=4), node_gpus(topo, 0, 4))
    occupy(state, make_job(101, gpus=4), node_gpus(topo, 1, 4))
    submit(state, make_job(1, gpus=8, per_node=4))

    placement = started(decide(state, 0))[1]

    # 2 nodes x 4 GPUs, best fit: the half-busy nodes, leaving whole nodes 2 and 3 free
    assert per_node_counts(topo, placement) == {0: 4, 1: 4}


def test_shaped_job_on_an_empty_cluster_is_not_packed_onto_one_node():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo)
    submit(state, make_job(1, gpus=8, per_node=4))

    placement = started(decide(state, 0))[1]

    assert sorted(per_node_counts(topo, placement).values()) == [4, 4]


def _fill_leaves(state, topo, busy_per_leaf, per_leaf):
    """Occupy the first ``busy`` nodes of each leaf with one whole-node job per leaf."""
    jid = 1000
    for leaf, busy in enumerate(busy_per_leaf):
        gpus = [g for n in range(leaf * per_leaf, leaf * per_leaf + busy) for g in node_gpus(topo, n, 8)]
        if gpus:
            occupy(state, make_job(jid, gpus=len(gpus)), gpus)
            jid += 1


def test_64_node_gang_takes_the_two_emptiest_leaves():
    topo = make_cluster(nodes=160, nodes_per_leaf=32)  # 5 leaves of 32 nodes
    state = make_state(topo)
    _fill_leaves(state, topo, busy_per_leaf=[12, 0, 7, 0, 22], per_leaf=32)  # free 20,32,25,32,10
    submit(state, make_job(1, gpus=64 * 8))

    placement = started(decide(state, 0))[1]

    assert placement.leaves(topo) == {1, 3}
    assert set(per_node_counts(topo, placement).values()) == {8}
    assert len(placement.nodes(topo)) == 64


def test_64_node_gang_spans_the_fewest_leaves_and_the_tightest_last_leaf():
    topo = make_cluster(nodes=160, nodes_per_leaf=32)
    state = make_state(topo)
    _fill_leaves(state, topo, busy_per_leaf=[2, 4, 12, 22, 27], per_leaf=32)  # free 30,28,20,10,5
    submit(state, make_job(1, gpus=64 * 8))

    placement = started(decide(state, 0))[1]

    # 30 + 28 leave 6 nodes; the tightest leaf that still holds 6 is leaf 3 (10 free)
    assert placement.leaves(topo) == {0, 1, 3}
    assert len(placement.nodes(topo)) == 64


def test_gang_too_big_for_a_leaf_stays_inside_one_pod():
    # two pods: leaves 0, 1 in pod 0 and leaves 2, 3 in pod 1, two nodes per leaf
    topo = make_cluster(nodes=8, nodes_per_leaf=2, leaves_per_pod=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=1), node_gpus(topo, 0, 1))  # pod 0 has 3 whole nodes
    occupy(state, make_job(101, gpus=1), node_gpus(topo, 5, 1))  # pod 1 has 3 whole nodes
    submit(state, make_job(1, gpus=24))

    placement = started(decide(state, 0))[1]

    assert len({topo.nodes[n].pod for n in placement.nodes(topo)}) == 1
    assert len(placement.leaves(topo)) == 2


# ---------------------------------------------------------------------- GPU models and pools


def test_job_for_one_gpu_model_never_gets_another():
    topo = make_cluster(groups=[{"name": "h", "count": 1, "gpu": H100},
                                {"name": "a", "count": 1, "gpu": A100}])
    state = make_state(topo)
    occupy(state, make_job(100, gpus=8), node_gpus(topo, 0, 8))  # the H100 node is full
    job = make_job(1, gpus=4, models=(H100,))
    submit(state, job)

    result = decide(state, 0)

    assert result.starts == []
    assert result.reason_for(job) is PendingReason.WAITING_FOR_CAPACITY


def test_compiled_job_lists_fitting_models_cheapest_first():
    topo = make_cluster(groups=[{"name": "h", "count": 1, "gpu": H100},
                                {"name": "a", "count": 1, "gpu": A100},
                                {"name": "l", "count": 1, "gpu": L40S}])
    job = compile_job(JobSpec(name="ft", gpus=4, min_vram_gb=40), 1, 0.0, topo)
    assert job.models == (L40S, A100, H100)

    big = compile_job(JobSpec(name="big", gpus=4, min_vram_gb=60), 2, 0.0, topo)
    assert big.models == (A100, H100)

    named = compile_job(JobSpec(name="h", gpus=4, gpu_model=H100), 3, 0.0, topo)
    assert named.models == (H100,)


def test_preferred_model_first_then_the_next_when_the_first_is_full():
    topo = make_cluster(groups=[{"name": "h", "count": 1, "gpu": H100},
                                {"name": "a", "count": 1, "gpu": A100}])
    state = make_state(topo)
    submit(state, make_job(1, gpus=8, models=(A100, H100)))
    submit(state, make_job(2, gpus=8, models=(A100, H100), submit=1))

    placements = started(decide(state, 0))

    assert topo.nodes[nodes_of(topo, placements[1])[0]].gpu_model == A100
    assert topo.nodes[nodes_of(topo, placements[2])[0]].gpu_model == H100


def test_gang_never_mixes_gpu_models():
    topo = make_cluster(groups=[{"name": "h", "count": 1, "gpu": H100},
                                {"name": "a", "count": 1, "gpu": A100}])
    state = make_state(topo)
    job = make_job(1, gpus=16, models=(A100, H100))  # 16 GPUs free, but 8 of each
    submit(state, job)

    result = decide(state, 0)

    assert result.starts == []
    assert result.reason_for(job) is PendingReason.WAITING_FOR_CAPACITY


def test_gang_never_spans_two_pools():
    topo = make_cluster(pools=["onprem", "cloud"],
                        groups=[{"name": "p", "count": 1, "pool": "onprem"},
                                {"name": "c", "count": 1, "pool": "cloud"}])
    state = make_state(topo)
    too_big = make_job(1, gpus=16)
    fits = make_job(2, gpus=8, submit=1)
    submit(state, too_big, fits)

    result = decide(state, 0)

    assert result.reason_for(too_big) is PendingReason.WAITING_FOR_CAPACITY
    assert len({topo.nodes[n].pool for n in started(result)[2].nodes(topo)}) == 1


def test_job_restricted_to_a_pool_stays_in_it():
    topo = make_cluster(pools=["onprem", "cloud"],
                        groups=[{"name": "p", "count": 1, "pool": "onprem"},
                                {"name": "c", "count": 1, "pool": "cloud"}])
    state = make_state(topo)
    submit(state, make_job(1, gpus=8, pools=("cloud",)))

    placement = started(decide(state, 0))[1]

    assert {topo.nodes[n].pool for n in placement.nodes(topo)} == {"cloud"}


# ---------------------------------------------------------------------- MIG slices


def test_quarter_gpu_job_compiles_to_one_2g_slice():
    topo = make_cluster(nodes=1, mig=2)
    job = compile_job(JobSpec(name="nb", gpus=0.25, gpu_model=H100), 1, 0.0, topo)
    assert job.whole is None
    assert job.slices == {H100: SliceRequest(2, 2, "2g.20gb")}
    assert job.gpu_equivalents == pytest.approx(2 / 7)


def test_sub_gpu_job_on_a_cluster_without_mig_is_refused_with_a_fix():
    topo = make_cluster(nodes=1, mig=0)
    with pytest.raises(JobCompileError, match="mig_gpus_per_node"):
        compile_job(JobSpec(name="nb", gpus=0.25, gpu_model=H100), 1, 0.0, topo)


def test_slices_pack_onto_one_split_gpu_before_opening_another_and_whole_gpus_stay_free():
    topo = make_cluster(nodes=2, nodes_per_leaf=2, mig=2)
    state = make_state(topo)
    quarters = [make_job(i, gpus=0.25, submit=i) for i in range(1, 5)]  # 2g: 3 fit per GPU
    submit(state, *quarters)
    submit(state, make_job(10, gpus=8, submit=10))

    placements = started(run_cycle(state, 0))

    gpus = [placements[i].slices[0].gpu for i in range(1, 5)]
    assert gpus[0] == gpus[1] == gpus[2]  # packed onto the GPU already split
    assert gpus[3] != gpus[0]  # the fourth does not fit there: a second GPU opens
    assert {topo.gpu_node[g] for g in gpus} == {topo.gpu_node[gpus[0]]}  # on the same node
    assert nodes_of(topo, placements[10]) != [topo.gpu_node[gpus[0]]]  # 8 whole GPUs elsewhere
    assert len(placements[10].gpus) == 8
    check_index(state.capacity)


def test_slice_best_fits_onto_the_fullest_split_gpu():
    topo = make_cluster(nodes=1, mig=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=0.25), slices=[Slice(0, 2, 2)])  # GPU 0: 5 compute free
    occupy(state, make_job(101, gpus=0.25), slices=[Slice(1, 6, 6)])  # GPU 1: 1 compute free
    submit(state, make_job(1, gpus=1 / 7))  # a 1g slice

    placement = started(decide(state, 0))[1]

    assert placement.slices[0].gpu == 1


def test_whole_gpu_jobs_take_non_shareable_gpus_first():
    topo = make_cluster(nodes=1, mig=2)  # GPUs 0 and 1 may be split
    state = make_state(topo)
    submit(state, make_job(1, gpus=6))

    placement = started(run_cycle(state, 0))[1]

    assert placement.gpus == tuple(range(2, 8))
    submit(state, make_job(2, gpus=0.25))
    assert started(decide(state, 0))[2].slices[0].gpu in (0, 1)


def test_slice_job_waits_when_no_shareable_gpu_is_free():
    topo = make_cluster(nodes=1, mig=1)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=1), node_gpus(topo, 0, 1, high=False))  # GPU 0, the MIG one
    job = make_job(1, gpus=0.25)
    submit(state, job)

    result = decide(state, 0)

    assert result.starts == []
    assert result.reason_for(job) is PendingReason.WAITING_FOR_CAPACITY


def test_whole_gpus_and_slices_are_counted_back_after_jobs_finish():
    topo = make_cluster(nodes=2, nodes_per_leaf=2, mig=2)
    state = make_state(topo)
    submit(state, *(make_job(i, gpus=0.25) for i in range(1, 5)), make_job(9, gpus=12))
    run_cycle(state, 0)
    for jid in list(state.running):
        state.finish(jid, 10)

    check_index(state.capacity)
    assert state.capacity.free_gpus() == topo.total_gpus
    assert state.capacity.slice_free == {}


# ---------------------------------------------------------------------- drained nodes


def test_drained_node_gets_no_new_work():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=6), node_gpus(topo, 0, 6))
    state.set_node_usable(0, False)  # the best fit for a 2-GPU job, but drained
    submit(state, make_job(1, gpus=2))

    assert nodes_of(topo, started(decide(state, 0))[1]) == [1]


def test_job_whose_only_model_is_drained_says_no_usable_nodes():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo)
    state.set_node_usable(0, False)
    state.set_node_usable(1, False)
    job = make_job(1, gpus=1)
    submit(state, job)

    assert decide(state, 0).reason_for(job) is PendingReason.NO_USABLE_NODES


def test_slice_job_on_a_drained_node_can_finish():
    """Regression (failed on commit 1e6729b): FreeCapacity._set_slice deletes the GPU's entry
    from group.partial even when its node is unusable (set_usable(False) already took it out),
    so releasing a slice on a drained node raises IndexError or deletes another GPU's entry"""
    topo = make_cluster(nodes=1, mig=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=0.25), slices=[Slice(0, 2, 2)])
    state.set_node_usable(0, False)

    state.finish(100, 10)

    check_index(state.capacity)


def test_finishing_a_slice_job_on_a_drained_node_keeps_other_split_gpus_indexed():
    """Regression (failed on commit 1e6729b): FreeCapacity._set_slice removes a drained node's
    GPU from group.partial by bisect and deletes whatever entry is there, corrupting another
    node's split-GPU index"""
    topo = make_cluster(nodes=2, nodes_per_leaf=2, mig=2)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=0.25), slices=[Slice(0, 2, 2)])  # node 0
    occupy(state, make_job(101, gpus=0.25), slices=[Slice(8, 2, 2)])  # node 1
    state.set_node_usable(0, False)

    state.finish(100, 10)

    check_index(state.capacity)
    submit(state, make_job(1, gpus=0.25))
    assert started(decide(state, 10))[1].slices[0].gpu == 8  # packs next to job 101
