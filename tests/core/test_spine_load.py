"""Uplink load (``core.spine_load``) and placement that weighs it.

The bookkeeping: a start and a finish cancel exactly, ``decide`` leaves the load
as it found it, and after any sequence of starts and finishes the load equals a
recount from the running placements. The placement: a gang that must cross
leaves on an oversubscribed fabric goes where the uplinks are least loaded; on a
non-blocking fabric, or with ``PlacementMode.TOPOLOGY``, it goes where it always did.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from grace.core import Placement, SchedulerState, Topology, decide, get_policy
from grace.core.placement import PlacementMode
from grace.core.spine_load import SpineLoad
from grace.spec import parse_cluster

from .builders import make_job, node_gpus, nodes_of, occupy, run_cycle, started, submit


def fabric(spine: float = 4.0, pod: float = 1.0, leaves: int = 4, nodes_per_leaf: int = 2,
           leaves_per_pod: int | None = None, gpus: int = 8) -> Topology:
    """``leaves`` leaves of ``nodes_per_leaf`` H100 nodes, NIC 400 Gbit/s per GPU."""
    group: dict[str, Any] = {"name": "g", "count": leaves * nodes_per_leaf, "gpu": "H100-SXM",
                             "gpus_per_node": gpus, "nodes_per_leaf": nodes_per_leaf}
    if leaves_per_pod is not None:
        group["leaves_per_pod"] = leaves_per_pod
    return Topology.from_spec(parse_cluster({
        "name": "fabric", "node_groups": [group],
        "network": {"nic_gbps": 400, "spine_oversubscription": spine,
                    "pod_oversubscription": pod}}))


def whole_nodes(topo: Topology, *nodes: int) -> tuple[int, ...]:
    return tuple(g for n in nodes for g in node_gpus(topo, n, topo.nodes[n].gpus))


def state_on(topo: Topology, mode: PlacementMode = PlacementMode.CONTENTION,
             policy: str = "easy-backfill") -> SchedulerState:
    return SchedulerState(topo, dataclasses.replace(get_policy(policy), placement=mode))


def loads(state: SchedulerState) -> tuple[list[int], list[int]]:
    return list(state.spine.leaf_load), list(state.spine.pod_load)


# ---------------------------------------------------------------------- bookkeeping


def test_a_gang_inside_one_leaf_loads_no_uplink():
    topo = fabric()
    state = state_on(topo)
    occupy(state, make_job(1, gpus=16), whole_nodes(topo, 0, 1))  # both nodes of leaf 0
    assert loads(state) == ([0, 0, 0, 0], [0])


def test_a_gang_across_leaves_loads_each_leaf_by_its_gpus_there_and_finishing_undoes_it():
    topo = fabric()
    state = state_on(topo)
    occupy(state, make_job(1, gpus=24), whole_nodes(topo, 0, 1, 2))  # leaf 0: 2 nodes, leaf 1: 1
    assert loads(state) == ([16, 8, 0, 0], [0])  # one pod: the pod tier is not crossed
    load, capacity = state.spine.leaf_gbps(0)
    assert (load, capacity) == (16 * 400, 16 * 400 / 4)  # GPUs x NIC; leaf's NICs / 4
    assert state.spine.crosses_loaded_uplink(state.running[make_job(1).id].placement)
    state.finish(make_job(1).id, 10.0)
    assert loads(state) == ([0, 0, 0, 0], [0])


def test_a_gang_across_pods_also_loads_the_pods_uplinks():
    topo = fabric(spine=1.0, pod=2.0, leaves=4, leaves_per_pod=2)
    state = state_on(topo)
    occupy(state, make_job(1, gpus=24), whole_nodes(topo, 3, 4, 5))  # leaf 1 | leaf 2 (pod 1)
    assert loads(state) == ([0, 8, 16, 0], [8, 16])
    assert state.spine.pod_capacity == [32 / 2, 32 / 2]
    assert state.spine.oversubscribed


def test_decide_leaves_the_load_as_it_found_it_even_when_it_starts_crossing_gangs():
    topo = fabric()
    state = state_on(topo)
    occupy(state, make_job(100, gpus=24), whole_nodes(topo, 0, 1, 2))
    submit(state, make_job(1, gpus=24), make_job(2, gpus=8))
    before = loads(state)
    result = decide(state, 0.0)
    assert len(result.starts) == 2
    assert loads(state) == before
    state.apply(result, 0.0)
    fresh = SpineLoad.recount(topo, [r.placement for r in state.running.values()])
    assert loads(state) == (fresh.leaf_load, fresh.pod_load)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5), st.integers(0, 10**6)),
                min_size=1, max_size=40))
def test_load_after_any_starts_and_finishes_equals_a_recount_from_scratch(ops):
    """Random gangs of 1..5 whole nodes started on random free nodes, random ones finished:
    the incrementally kept load is always the recount of the running placements."""
    topo = fabric(spine=3.0, pod=2.0, leaves=6, nodes_per_leaf=2, leaves_per_pod=2)
    state = state_on(topo)
    next_id = 0
    for is_start, size, pick in ops:
        free = [n.index for n in topo.nodes if state.capacity.free_count[n.index] == n.gpus]
        if is_start and len(free) >= size:
            chosen = [free[(pick + 7 * i) % len(free)] for i in range(len(free))]
            nodes = list(dict.fromkeys(chosen))[:size]
            next_id += 1
            occupy(state, make_job(next_id, gpus=8 * size), whole_nodes(topo, *nodes))
        elif state.running:
            victim = sorted(state.running)[pick % len(state.running)]
            state.finish(victim, 1.0)
        fresh = SpineLoad.recount(topo, [r.placement for r in state.running.values()])
        assert state.spine.leaf_load == fresh.leaf_load
        assert state.spine.pod_load == fresh.pod_load
    for jid in list(state.running):
        state.finish(jid, 2.0)
    assert not any(state.spine.leaf_load) and not any(state.spine.pod_load)


# ---------------------------------------------------------------------- placement


def _loaded_scene(mode: PlacementMode, spine: float = 4.0) -> tuple[Topology, Placement]:
    """Leaves of 2 nodes. A running 3-node gang loads leaf 0 (2 nodes) and leaf 1 (1 node);
    free: node 3 (leaf 1), leaves 2 and 3 whole. A new 3-node gang must cross leaves."""
    topo = fabric(spine=spine)
    state = state_on(topo, mode)
    occupy(state, make_job(100, gpus=24), whole_nodes(topo, 0, 1, 2))
    submit(state, make_job(1, gpus=24))
    return topo, started(run_cycle(state, 0.0))[1]


def test_a_gang_that_must_cross_leaves_avoids_the_loaded_leaf():
    topo, placed = _loaded_scene(PlacementMode.CONTENTION)
    # leaf 2 whole, and the unloaded leaf 3 rather than node 3 under the loaded leaf 1
    assert {topo.nodes[n].leaf for n in nodes_of(topo, placed)} == {2, 3}


def test_today_s_placement_takes_the_tightest_leaf_whatever_its_uplink_carries():
    topo, placed = _loaded_scene(PlacementMode.TOPOLOGY)
    assert nodes_of(topo, placed) == [3, 4, 5]  # node 3 is leaf 1's last free node


def test_on_a_non_blocking_fabric_the_load_changes_nothing():
    _, contention = _loaded_scene(PlacementMode.CONTENTION, spine=1.0)
    _, today = _loaded_scene(PlacementMode.TOPOLOGY, spine=1.0)
    assert contention == today


def test_a_gang_that_fits_one_leaf_goes_to_the_tightest_leaf_as_before():
    topo = fabric(nodes_per_leaf=4, leaves=2)
    state = state_on(topo)
    occupy(state, make_job(100, gpus=16), whole_nodes(topo, 1, 5))  # loads leaves 0 and 1
    occupy(state, make_job(101, gpus=8), whole_nodes(topo, 0))  # leaf 0: 2 free, leaf 1: 3
    submit(state, make_job(1, gpus=16))
    assert {topo.nodes[n].leaf for n in nodes_of(topo, started(decide(state, 0.0))[1])} == {0}


def test_two_crossing_gangs_of_one_cycle_see_each_other_s_load():
    """The second start of a cycle reads the load the first one added (in the trial)."""
    topo = fabric(leaves=6)
    state = state_on(topo)
    # leaves 0..2 keep one free node each; leaves 3..5 are free
    occupy(state, make_job(100, gpus=24), whole_nodes(topo, 0, 2, 4))
    submit(state, make_job(1, gpus=24), make_job(2, gpus=24, submit=1.0))
    result = run_cycle(state, 0.0)
    first, second = ({topo.nodes[n].leaf for n in nodes_of(topo, started(result)[j])}
                     for j in (1, 2))
    assert first == {3, 4}  # leaf 3 whole, and one node of the unloaded leaf 4
    # leaf 4's uplink now carries the first gang: its last node is no lighter than leaf 0's
    assert second == {5, 0}
    assert loads(state)[0] == SpineLoad.recount(
        topo, [r.placement for r in state.running.values()]).leaf_load


def test_the_grace_policy_places_with_headroom_by_default():
    assert get_policy("grace").placement is PlacementMode.HEADROOM


# ---------------------------------------------------------------------- headroom (the default)


def _no_leaf_holds_the_gang(mode: PlacementMode, loaded: bool, spine: float = 2.0) -> bool:
    """Two leaves of 4 nodes, one node free in each; a 2-node gang under the grace policy
    (leaf locality). Leaf uplinks carry 32 / 2 = 16 GPUs' NICs. ``loaded``: the running
    jobs cross leaves and leave leaf 0's uplinks at 24 GPUs, past capacity."""
    topo = fabric(spine=spine, leaves=2, nodes_per_leaf=4)
    state = state_on(topo, mode, policy="grace")
    busy = [(0, 1, 4), (2, 5, 6)] if loaded else [(0, 1, 2), (4, 5, 6)]
    for i, nodes in enumerate(busy):
        occupy(state, make_job(100 + i, gpus=24), whole_nodes(topo, *nodes))
    submit(state, make_job(1, gpus=16))
    return 1 in started(decide(state, 0.0))


def test_under_leaf_locality_the_gang_waits_for_a_leaf_unless_headroom_lets_it_cross():
    assert not _no_leaf_holds_the_gang(PlacementMode.CONTENTION, loaded=False)
    assert not _no_leaf_holds_the_gang(PlacementMode.TOPOLOGY, loaded=False)
    assert _no_leaf_holds_the_gang(PlacementMode.HEADROOM, loaded=False)


def test_headroom_never_pushes_an_uplink_past_capacity():
    assert not _no_leaf_holds_the_gang(PlacementMode.HEADROOM, loaded=True)
    # non-blocking: no uplink can be past capacity, so the gang crosses at once
    assert _no_leaf_holds_the_gang(PlacementMode.HEADROOM, loaded=True, spine=1.0)


def test_a_start_across_an_overloaded_uplink_carries_a_typed_note():
    from grace.core.decisions import StartNote

    topo = fabric()
    state = state_on(topo)
    occupy(state, make_job(100, gpus=24), whole_nodes(topo, 0, 1, 2))
    submit(state, make_job(1, gpus=24), make_job(2, gpus=8))
    notes = {int(s.job_id): s.notes for s in decide(state, 0.0).starts}
    # every 3-node set overloads a 4:1 leaf uplink (2 nodes = 16 GPUs > 4); one node does not
    assert notes == {1: (StartNote.CROSSES_LOADED_UPLINK,), 2: ()}


def _scene(mode: PlacementMode, spine: float, running: list[list[int]], gang: int,
           ) -> tuple[SchedulerState, Placement | None]:
    topo = fabric(spine=spine, leaves=4, nodes_per_leaf=3)
    state = state_on(topo, mode)
    for i, nodes in enumerate(running):
        occupy(state, make_job(100 + i, gpus=8 * len(nodes)), whole_nodes(topo, *nodes))
    submit(state, make_job(1, gpus=8 * gang))
    return state, started(decide(state, 0.0)).get(1)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([1.0, 2.0, 4.0]), st.permutations(range(12)),
       st.lists(st.integers(1, 4), max_size=4), st.integers(2, 6))
def test_contention_never_leaves_the_gang_a_worse_uplink_than_today(spine, order, sizes, gang):
    """Random running gangs on whole nodes, then a gang of 2..6 nodes (leaves hold 3).
    On a non-blocking fabric both modes place it alike; otherwise contention places it
    alike whenever today's choice overloads no uplink, and never meets a worse uplink."""
    running, at = [], 0
    for size in sizes:
        if at + size <= len(order):
            running.append(list(order[at:at + size]))
            at += size
    today_state, today = _scene(PlacementMode.TOPOLOGY, spine, running, gang)
    _, mine = _scene(PlacementMode.CONTENTION, spine, running, gang)
    assert (today is None) == (mine is None)
    if today is None or mine is None:
        return
    load = today_state.spine  # the load before the gang starts (decide changed nothing)
    today_worst, _ = load.cost(*load.span(today))
    mine_worst, _ = load.cost(*load.span(mine))
    if spine == 1.0 or today_worst <= 1.0:
        assert mine == today
    assert mine_worst <= today_worst + 1e-9
