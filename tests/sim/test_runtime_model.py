"""The runtime model: placement and GPU model stretch a trace's duration, as documented."""

from __future__ import annotations

import pytest

from grace.core.capacity import Placement
from grace.core.topology import Topology
from grace.sim.runtime_model import TIER_LEAF, TIER_NODE, TIER_POD, RuntimeModel
from grace.spec.loader import parse_cluster


def fat_tree(spine: float = 1.0, pod: float = 1.0) -> Topology:
    return Topology.from_spec(parse_cluster({
        "name": "t",
        "network": {"nic_gbps": 400, "spine_oversubscription": spine, "pod_oversubscription": pod},
        "node_groups": [{"name": "h", "count": 8, "gpu": "H100-SXM", "nodes_per_leaf": 2,
                         "leaves_per_pod": 2},
                        {"name": "a", "count": 2, "gpu": "A100-80GB", "nodes_per_leaf": 2}]}))


def gpus_on(topo: Topology, nodes: list[int], per_node: int) -> Placement:
    out = []
    for n in nodes:
        base = topo.nodes[n].gpu_base
        out.extend(range(base, base + per_node))
    return Placement(gpus=tuple(out))


def test_ideal_tiers_by_gang_size():
    m = RuntimeModel.for_topology(fat_tree())
    assert m.ideal_tier(8) == TIER_NODE
    assert m.ideal_tier(16) == TIER_LEAF
    assert m.ideal_tier(32) == TIER_POD


def test_a_well_placed_gang_runs_at_trace_speed():
    topo = fat_tree(spine=2.0)
    m = RuntimeModel.for_topology(topo)
    assert m.run_time(topo, gpus_on(topo, [0, 1], 8), 1000.0) == pytest.approx(1000.0)


def test_crossing_an_oversubscribed_spine_costs_comm_share_times_penalty():
    topo = fat_tree(spine=2.0)
    m = RuntimeModel.for_topology(topo)
    across = gpus_on(topo, [1, 2], 8)  # node 1 in leaf 0, node 2 in leaf 1
    # 20% communication, spine gives half the leaf bandwidth: 1 + 0.2 * (2 - 1)
    assert m.run_time(topo, across, 1000.0) == pytest.approx(1200.0)


def test_non_blocking_spine_costs_nothing():
    topo = fat_tree(spine=1.0)
    m = RuntimeModel.for_topology(topo)
    assert m.slowdown(topo, gpus_on(topo, [1, 2], 8)) == pytest.approx(1.0)


def test_splitting_a_node_sized_job_pays_nvlink_over_nic():
    topo = fat_tree()
    m = RuntimeModel.for_topology(topo)
    split = gpus_on(topo, [0, 1], 4)  # 8 GPUs that fit one node, spread over two
    nvlink, nic = 900.0, 400 / 8
    assert m.slowdown(topo, split) == pytest.approx(1 + 0.10 * (nvlink / nic - 1))


def test_slower_gpu_model_stretches_by_tflops_ratio():
    topo = fat_tree()
    m = RuntimeModel.for_topology(topo)  # reference: the most common model, H100
    a100_node = next(n.index for n in topo.nodes if n.gpu_model == "A100-80GB")
    assert m.run_time(topo, gpus_on(topo, [a100_node], 8), 100.0) == pytest.approx(100 * 989 / 312)


def test_cross_pod_tier_uses_pod_oversubscription():
    topo = fat_tree(spine=1.0, pod=4.0)
    m = RuntimeModel.for_topology(topo)
    assert m.actual_tier(topo, gpus_on(topo, [0, 4], 8)) > TIER_POD - 1
    assert m.slowdown(topo, gpus_on(topo, [0, 4], 8)) == pytest.approx(1 + 0.2 * 3)
