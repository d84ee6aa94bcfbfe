"""Cluster variants: a share of each node group's nodes taken away, whole NVLink domains kept."""

from __future__ import annotations

import pytest

from grace.core.topology import Topology
from grace.sim.cluster_variants import parse_percents, variant_label, with_fewer_nodes
from grace.spec.loader import parse_cluster


def cluster(**group: object) -> dict:
    return {"name": "c", "node_groups": [{"name": "a", "count": 10, "gpu": "H100-SXM",
                                          "gpus_per_node": 8, "nodes_per_leaf": 4, **group},
                                         {"name": "b", "count": 3, "gpu": "A100-80GB",
                                          "gpus_per_node": 4}]}


def test_each_group_loses_its_share_rounded_to_whole_nodes() -> None:
    spec = parse_cluster(cluster())
    assert [g.count for g in with_fewer_nodes(spec, 20).node_groups] == [8, 2]
    assert [g.count for g in with_fewer_nodes(spec, 90).node_groups] == [1, 1]  # one kept
    assert with_fewer_nodes(spec, 0) is spec
    topo = Topology.from_spec(with_fewer_nodes(spec, 20))
    assert topo.total_gpus == 8 * 8 + 2 * 4
    assert spec.node_groups[0].count == 10  # the original is untouched


def test_nvlink_domains_are_never_split_and_names_follow() -> None:
    spec = parse_cluster(cluster(count=8, nvlink_domain_nodes=4, names=[f"x{i}" for i in range(8)]))
    variant = with_fewer_nodes(spec, 30)  # 5.6 nodes -> 6 -> down to one 4-node domain
    assert variant.node_groups[0].count == 4
    assert variant.node_groups[0].node_names() == ["x0", "x1", "x2", "x3"]
    Topology.from_spec(variant)


@pytest.mark.parametrize(("text", "message"), [
    ("abc", "'abc' is not a number"), ("95", "outside 0 to 90"), ("-5", "outside 0 to 90"),
    ("10,10", "10% given twice"), (" , ", "no percent given"), ("nan", "outside 0 to 90")])
def test_bad_percents_name_the_flag_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="--fewer-nodes") as e:
        parse_percents(text)
    assert message in str(e.value)


def test_percents_and_labels() -> None:
    assert parse_percents("0, 10%,25") == [0.0, 10.0, 25.0]
    assert [variant_label(p) for p in (0.0, 12.5)] == ["all nodes", "-12.5% nodes"]
