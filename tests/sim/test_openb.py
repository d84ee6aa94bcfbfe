"""The openb packing experiment keeps CPU-only pods (as FGD does): they count as arrived
pods, add nothing to the arrived GPU load, and take CPU and memory on the node they land
on. ``--drop-cpu-only`` brings back the old setting, reported in ``pods_skipped``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from grace.cli.main import app
from grace.core.policies import get_policy
from grace.core.scheduler import decide
from grace.core.state import SchedulerState
from grace.sim.clusters import topology_from_openb
from grace.sim.cpu_only import place_cpu_only
from grace.sim.engine import TraceCompiler
from grace.sim.estimates import EstimateModel
from grace.sim.packing import load_packing_input, packing_experiment
from grace.sim.traces.model import TraceJob
from grace.sim.traces.openb import OpenbNode

POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")
POLICIES = ("grace", "easy-backfill")


def write_nodes(path: Path, rows: list[tuple[int, int, int]]) -> Path:
    """Nodes of (cpu_milli, memory_mib, gpus), all T4."""
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                    + "".join(f"n{i},{c},{m},{g},T4\n" for i, (c, m, g) in enumerate(rows)))
    return path


def write_pods(path: Path, rows: list[tuple[int, int, int]]) -> Path:
    """Pods of (cpu_milli, memory_mib, num_gpu); a GPU pod asks for whole GPUs."""
    path.write_text(POD_HEADER + "".join(
        f"p{i},{c},{m},{g},{1000 if g else 0},,LS,Running,{i},{i + 100},{i}\n"
        for i, (c, m, g) in enumerate(rows)))
    return path


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path]:
    """4 nodes of 8 GPUs; 10 one-GPU pods and 5 CPU-only pods, host needs far below the nodes'."""
    nodes = write_nodes(tmp_path / "nodes.csv", [(96_000, 393_216, 8)] * 4)
    pods = write_pods(tmp_path / "pods.csv", [(4_000, 8_000, 1)] * 10 + [(2_000, 4_000, 0)] * 5)
    return nodes, pods


@pytest.mark.parametrize("policy", POLICIES)
def test_cpu_only_pods_are_kept_and_do_not_count_as_gpu_load(small, policy):
    inp = load_packing_input(*small)
    assert sum(tj.gpus == 0 for tj in inp.trace.jobs) == 5
    r = packing_experiment(inp, policy, seed=3)

    assert r["pods_skipped"] == {}
    assert r["cpu_only_pods"] > 0 and r["cpu_only_placed"] == r["cpu_only_pods"]
    # sampling stops when the arrived GPU requests pass 130% of 32 GPUs: 42 one-GPU pods
    assert r["pods_arrived"] - r["cpu_only_pods"] == 42
    assert r["allocated_gpu_share"] == 1.0  # 32 GPU pods arrived by 100%, all placed
    assert r["pods_failed"] == 42 - 32


def test_drop_cpu_only_skips_them_and_says_so(small):
    r = packing_experiment(load_packing_input(*small, drop_cpu_only=True), "grace", seed=3)
    assert r["pods_skipped"] == {"cpu_only": 5}
    assert r["cpu_only_pods"] == 0 and r["pods_arrived"] == 42


@pytest.mark.parametrize("policy", POLICIES)
def test_a_cpu_only_pods_memory_keeps_a_later_gpu_pod_off_its_node(tmp_path, policy):
    """One 1-GPU node with 64 GiB: a CPU-only pod holding 60 GB leaves too little for a GPU
    pod asking 10 GB. Almost every sampled pod is CPU-only, so one lands before the GPU pod."""
    nodes = write_nodes(tmp_path / "nodes.csv", [(16_000, 65_536, 1)])
    pods = write_pods(tmp_path / "pods.csv", [(1_000, 60_000, 0)] * 30 + [(1_000, 10_000, 1)])
    kept = packing_experiment(load_packing_input(nodes, pods), policy, seed=0)
    dropped = packing_experiment(load_packing_input(nodes, pods, drop_cpu_only=True), policy, seed=0)

    assert kept["cpu_only_placed"] == 1  # the node holds one; every later one fails
    assert kept["pods_placed"] == 1 and kept["allocated_gpu_share"] == 0.0
    assert dropped["allocated_gpu_share"] == 1.0


@pytest.mark.parametrize("policy", POLICIES)
def test_a_cpu_only_pod_goes_where_it_strands_no_gpu(policy):
    """Two 1-GPU nodes, one GPU taken: a CPU-only pod with 50 GB goes on the taken node;
    on the other it would leave its free GPU without memory for a 10 GB GPU pod."""
    topo = topology_from_openb([OpenbNode(f"n{i}", 16_000, 65_536, 1, "T4", "T4") for i in range(2)])
    state = SchedulerState(topo, get_policy(policy))
    job = TraceCompiler(topo, EstimateModel.NONE, single_node=True).compile(
        TraceJob("g", 0.0, 10.0, 1, cpu_milli=1_000, memory_mib=10_000), 0, frozenset({0}))
    assert job is not None
    state.submit(job)
    taken = state.apply(decide(state, 0.0), 0.0)[0].placement.nodes(topo)[0]
    assert taken == 1  # the later node: taking the first one that fits would be wrong
    cpu_free = np.array([16_000, 16_000], dtype=np.int64)
    mem_free = np.array([65_536, 65_536], dtype=np.int64)
    cpu_free[taken] -= 1_000
    mem_free[taken] -= 10_000

    assert place_cpu_only(state, cpu_free, mem_free, 1_000, 50_000) == taken
    assert place_cpu_only(state, cpu_free, mem_free, 1_000, 60_000) == 1 - taken  # only it holds 60 GB
    assert place_cpu_only(state, cpu_free, mem_free, 1_000, 70_000) is None


def test_a_trace_without_gpu_pods_is_refused(tmp_path):
    nodes = write_nodes(tmp_path / "nodes.csv", [(16_000, 65_536, 1)])
    pods = write_pods(tmp_path / "pods.csv", [(1_000, 1_000, 0)] * 3)
    with pytest.raises(ValueError, match="no pod asks for a GPU"):
        packing_experiment(load_packing_input(nodes, pods), "grace", seed=0)


def test_cli_drop_cpu_only_flag(small, tmp_path):
    nodes, pods = small
    args = ["simulate", "--format", "openb", "--no-departures", "--seed", "3",
            "--cluster", str(nodes), "--trace", str(pods)]
    out = tmp_path / "kept.json"
    r = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert r.exit_code == 0, r.output
    kept = json.loads(out.read_text())
    assert kept["cpu_only_pods"] > 0 and kept["pods_skipped"] == {}

    r = CliRunner().invoke(app, [*args, "--drop-cpu-only", "--json", str(out)])
    assert r.exit_code == 0, r.output
    dropped = json.loads(out.read_text())
    assert dropped["cpu_only_pods"] == 0 and dropped["pods_skipped"] == {"cpu_only": 5}
    assert dropped["allocated_gpu_share"] == 1.0

    r = CliRunner().invoke(app, ["simulate", "--format", "openb", "--drop-cpu-only",
                                 "--cluster", str(nodes), "--trace", str(pods)])
    assert r.exit_code == 2 and "--no-departures" in r.output
