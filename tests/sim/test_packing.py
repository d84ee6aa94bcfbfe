"""The FGD packing experiment on a slice of the openb cluster: fragmentation-aware packing
(policy ``grace``) allocates at least as much as best fit (``easy-backfill``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grace.sim.clusters import topology_from_openb
from grace.sim.packing import packing_experiment
from grace.sim.runner import ReplayInput
from grace.sim.traces.openb import load_openb_nodes, load_openb_pods

OPENB = "alibaba-gpu-v2023-openb/csv"


@pytest.fixture(scope="module")
def small_openb(traces_dir: Path) -> ReplayInput:
    """Every sixth node of the openb GPU cluster (200 nodes, all its GPU models), all its pods,
    CPU-only ones included (as the experiment runs by default)."""
    nodes_csv = traces_dir / OPENB / "openb_node_list_gpu_node.csv"
    pods_csv = traces_dir / OPENB / "openb_pod_list_default.csv"
    if not nodes_csv.is_file() or not pods_csv.is_file():
        pytest.skip(f"openb trace not found under {traces_dir / OPENB}")
    nodes = load_openb_nodes(nodes_csv)[::6][:200]
    return ReplayInput(topology_from_openb(nodes, name="openb-200"),
                       load_openb_pods(pods_csv, keep_cpu_only=True), str(nodes_csv), str(pods_csv))


@pytest.mark.parametrize("seed", [1, 2])
def test_fragmentation_aware_packing_allocates_at_least_as_much_as_best_fit(small_openb, seed):
    best_fit = packing_experiment(small_openb, "easy-backfill", seed)
    grace = packing_experiment(small_openb, "grace", seed)

    assert small_openb.topo.total_gpus > 900
    assert grace["pods_arrived"] > 1000 and grace["pods_placed"] > 800
    assert grace["cpu_only_pods"] == best_fit["cpu_only_pods"] > 100  # same seed, same pods
    for run in (best_fit, grace):
        assert 0.5 < run["allocated_gpu_share"] <= run["allocated_gpu_share_at_130"] <= 1.0
    assert grace["allocated_gpu_share"] >= best_fit["allocated_gpu_share"]
