"""``grace bench net``'s parts that need no ranks: sizes, factors, rows, the report, the
table at 80 columns and the choice of nodes for a placement."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from grace.bench.launch import Placement, choose_nodes
from grace.bench.net import (
    Backend,
    BenchError,
    NetReport,
    NetResult,
    Op,
    busbw_factor,
    check_memory,
    element_count,
    figure,
    format_size,
    merge_reports,
    net_table,
    parse_ops,
    parse_rank_counts,
    parse_size,
    parse_sizes,
    resolve_backend,
)
from grace.core.topology import Topology
from grace.spec.cluster import ClusterSpec, NodeGroupSpec

K, M, G = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize(("text", "expected"), [
    ("1K", K), ("1k", K), ("64M", 64 * M), ("1G", G), ("4096", 4096), ("2KB", 2 * K),
    (" 8 M ", 8 * M), ("1GiB", G),
])
def test_sizes_are_binary_units_like_nccl_tests(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "1X", "K", "-1K", "1.5M", "2"])
def test_a_bad_size_names_the_flag_and_the_fix(bad: str) -> None:
    with pytest.raises(BenchError, match="--sizes"):
        parse_size(bad)


def test_a_range_is_every_power_of_two_between_its_ends() -> None:
    assert parse_sizes("1K..1M") == [K << i for i in range(11)]
    assert parse_sizes("1K..1G")[-1] == G and len(parse_sizes("1K..1G")) == 21
    assert parse_sizes("4K..4K") == [4 * K]


def test_a_list_is_sorted_without_repeats() -> None:
    assert parse_sizes("1M,1K,1M,64M") == [K, M, 64 * M]


def test_a_range_that_runs_backwards_is_refused() -> None:
    with pytest.raises(BenchError, match="smaller size first"):
        parse_sizes("1M..1K")


def test_ops_parse_in_order_and_unknown_ones_name_the_choices() -> None:
    assert parse_ops("allreduce,all_gather,reduce-scatter,allreduce") == [
        Op.ALLREDUCE, Op.ALLGATHER, Op.REDUCESCATTER]
    with pytest.raises(BenchError, match=r"--ops: unknown collective 'broadcast'.*allreduce"):
        parse_ops("broadcast")


@pytest.mark.parametrize(("op", "n", "factor"), [
    (Op.ALLREDUCE, 2, 1.0), (Op.ALLREDUCE, 4, 1.5), (Op.ALLREDUCE, 8, 1.75),
    (Op.ALLGATHER, 4, 0.75), (Op.REDUCESCATTER, 4, 0.75), (Op.ALLGATHER, 2, 0.5),
    (Op.ALLREDUCE, 1, 0.0),
])
def test_busbw_factors_are_nccl_tests(op: Op, n: int, factor: float) -> None:
    # nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n
    assert busbw_factor(op, n) == pytest.approx(factor)


def test_a_row_is_bytes_over_time_in_gigabytes_per_second() -> None:
    row = NetResult.from_time(Op.ALLREDUCE, 64 * M, ranks=4, nodes=1, seconds=0.01)
    assert row.algbw_gbps == pytest.approx(64 * M / 0.01 / 1e9)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 2 * 3 / 4)
    assert row.latency_us == pytest.approx(10_000.0)
    gather = NetResult.from_time(Op.ALLGATHER, 64 * M, ranks=4, nodes=1, seconds=0.01)
    assert gather.busbw_gbps == pytest.approx(gather.algbw_gbps * 3 / 4)


def test_split_ops_use_a_whole_share_per_rank() -> None:
    assert element_count(Op.ALLREDUCE, 1000, 3) == 250
    assert element_count(Op.ALLGATHER, 1000, 3) == 249  # 83 floats per rank
    assert element_count(Op.REDUCESCATTER, 4, 4) == 4  # never under one float per rank


def test_the_json_has_the_interface_keys() -> None:
    rows = [NetResult.from_time(op, s, 4, 1, 1e-3) for op in Op for s in (K, M)]
    d = NetReport(results=rows, backend=Backend.GLOO, ranks=4, nodes=1, launcher="local").to_json()
    assert {"results", "backend", "ranks", "nodes", "launcher", "host"} <= set(d)
    assert d["backend"] == "gloo"
    assert set(d["results"][0]) >= {"op", "bytes", "ranks", "nodes", "algbw_gbps",
                                    "busbw_gbps", "latency_us"}
    assert d["results"][0]["op"] == "allreduce"


def test_the_table_fits_80_columns_with_every_figure_whole() -> None:
    rows = [NetResult.from_time(op, s, 128, 16, t) for op in Op
            for s, t in ((K, 3e-5), (G, 0.02123456))]
    report = NetReport(results=rows, backend=Backend.NCCL, ranks=128, nodes=16,
                       launcher="slurm")
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(net_table(report, 80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    big = rows[1]
    assert figure(big.busbw_gbps) in text and "reducescatter" in text and "1G" in text


@pytest.mark.parametrize(("text", "expected"), [
    ("4", [4]), ("2,8,4,4", [2, 4, 8]), ("2..8", [2, 4, 8]), ("2..6", [2, 4, 6]), ("3..3", [3]),
])
def test_rank_counts_are_a_count_a_list_or_a_range(text: str, expected: list[int]) -> None:
    assert parse_rank_counts(text) == expected


@pytest.mark.parametrize("bad", ["1", "0,2", "8..2", "four", "2..x", ""])
def test_bad_rank_counts_name_the_flag(bad: str) -> None:
    with pytest.raises(BenchError, match="--ranks"):
        parse_rank_counts(bad)


def test_a_sweep_over_rank_counts_is_one_report_with_a_ranks_column() -> None:
    reports = [NetReport(results=[NetResult.from_time(Op.ALLREDUCE, s, n, 1, 1e-3 * n)
                                  for s in (K, M)],
                         backend=Backend.GLOO, ranks=n, nodes=1, launcher="local")
               for n in (4, 2)]
    merged = merge_reports(reports)
    d = merged.to_json()
    assert d["ranks"] == 4 and d["rank_counts"] == [2, 4]
    assert [r["ranks"] for r in d["results"]] == [2, 2, 4, 4]  # smallest count first
    # busbw keeps each row's own factor: 2(n-1)/n of its rank count
    two, four = d["results"][1], d["results"][3]
    assert two["busbw_gbps"] == pytest.approx(two["algbw_gbps"] * 1.0)
    assert four["busbw_gbps"] == pytest.approx(four["algbw_gbps"] * 1.5)
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(net_table(merged, 80))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "ranks" in text.splitlines()[1] + text.splitlines()[2] and "2,4 ranks" in text


@pytest.mark.parametrize(("x", "text"), [(0.000335, "0.000335"), (0.209, "0.209"),
                                          (12.44, "12.4"), (183.2, "183"), (0.0, "0")])
def test_figures_keep_three_significant_digits(x: float, text: str) -> None:
    assert figure(x) == text


def test_format_size_round_trips() -> None:
    for s in parse_sizes("1K..1G"):
        assert parse_size(format_size(s)) == s
    assert format_size(1000) == "1000B"


def test_sizes_that_would_not_fit_in_memory_are_refused_naming_the_flag() -> None:
    with pytest.raises(BenchError, match="--sizes: 1024G x 4 ranks"):
        check_memory([1 << 40], local_ranks=4, cuda=False)
    check_memory([K], local_ranks=4, cuda=False)
    check_memory([1 << 40], local_ranks=4, cuda=True)  # a GPU's memory is its own business


def test_nccl_needs_cuda_and_auto_follows_it() -> None:
    assert resolve_backend(Backend.AUTO, cuda=False) is Backend.GLOO
    assert resolve_backend(Backend.AUTO, cuda=True) is Backend.NCCL
    with pytest.raises(BenchError, match="--backend nccl needs CUDA"):
        resolve_backend(Backend.NCCL, cuda=False)


def two_leaves() -> Topology:
    """The CI Slurm's shape (.ci/slurm-up.sh): leaf1 = n1, n2; leaf2 = n3, n4."""
    groups = [NodeGroupSpec(name=leaf, count=2, gpu="A100-80GB", gpus_per_node=8,
                            nodes_per_leaf=2, names=names)
              for leaf, names in (("leaf1", ["n1", "n2"]), ("leaf2", ["n3", "n4"]))]
    return Topology.from_spec(ClusterSpec(name="ci", node_groups=groups))


def test_same_leaf_keeps_the_nodes_under_one_switch() -> None:
    topo = two_leaves()
    assert choose_nodes(topo, 2, Placement.SAME_LEAF) == ["n1", "n2"]
    assert choose_nodes(topo, 2, Placement.SAME_LEAF, usable={"n2", "n3", "n4"}) == ["n3", "n4"]


def test_cross_leaf_deals_nodes_over_the_leaves() -> None:
    topo = two_leaves()
    assert choose_nodes(topo, 2, Placement.CROSS_LEAF) == ["n1", "n3"]
    assert choose_nodes(topo, 4, Placement.CROSS_LEAF) == ["n1", "n3", "n2", "n4"]


@pytest.mark.parametrize(("nodes", "placement", "usable", "message"), [
    (3, Placement.SAME_LEAF, None, "--placement same-leaf: no leaf .* has 3 usable nodes"),
    (2, Placement.SAME_LEAF, {"n1", "n3"}, "lower --nodes to 1 or use --placement cross-leaf"),
    (1, Placement.CROSS_LEAF, None, "--placement cross-leaf: one node"),
    (2, Placement.CROSS_LEAF, {"n1", "n2"}, "--placement cross-leaf: .* one leaf"),
    (5, Placement.CROSS_LEAF, None, "--nodes 5: .* only 4 usable"),
])
def test_a_placement_that_cannot_be_honoured_says_which_flag_to_change(
        nodes: int, placement: Placement, usable: set[str] | None, message: str) -> None:
    with pytest.raises(BenchError, match=message):
        choose_nodes(two_leaves(), nodes, placement, usable=usable)


def test_the_sample_cluster_places_by_its_own_leaves() -> None:
    from grace.spec.loader import load_cluster

    lab = Topology.from_spec(load_cluster(Path(__file__).parents[2] / "examples/clusters/lab.yaml"))
    same = choose_nodes(lab, 2, Placement.SAME_LEAF)
    cross = choose_nodes(lab, 2, Placement.CROSS_LEAF)
    leaf = {n.name: n.leaf for n in lab.nodes}
    assert leaf[same[0]] == leaf[same[1]]
    assert leaf[cross[0]] != leaf[cross[1]]
