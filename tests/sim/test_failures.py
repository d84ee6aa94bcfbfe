"""Failures in the twin: calibrated rates, lemons, restarts and lost GPU-hours."""

from __future__ import annotations

import pytest

from grace.core.checkpoint import expected_ettr, job_mtbf_s
from grace.core.topology import Topology
from grace.sim.failures import LLAMA3_CAUSES, FailureModel, draw_failures
from grace.sim.runner import ReplayInput, replay
from grace.sim.traces.synthetic import generate
from grace.sim.whatif import WhatIfInput, run_whatif
from grace.spec.loader import parse_cluster


def cluster(nodes: int) -> Topology:
    return Topology.from_spec(parse_cluster({"name": "f", "node_groups": [
        {"name": "n", "count": nodes, "gpu": "H100-SXM", "nodes_per_leaf": 8}]}))


def test_llama3_causes_add_up_to_419_and_hardware_drains():
    assert sum(c.count for c in LLAMA3_CAUSES) == 419
    drains = {c.name for c in LLAMA3_CAUSES if c.drains_node}
    assert sum(c.count for c in LLAMA3_CAUSES if c.drains_node) == 356
    # Meta: ~78% confirmed hardware; host maintenance also takes the node out
    hardware = sum(c.count for c in LLAMA3_CAUSES
                   if c.drains_node and c.name != "unplanned host maintenance")
    assert hardware / 419 == pytest.approx(0.78, abs=0.01)
    assert "software bug" not in drains and "faulty GPU" in drains


def test_failure_counts_match_the_calibrated_rate_and_repeat_per_seed():
    topo = cluster(512)  # 4,096 GPUs
    model = FailureModel(gpu_mtbf_h=10_000)
    horizon = 100 * 86_400.0
    a, _ = draw_failures(topo, model, horizon, seed=1)
    b, _ = draw_failures(topo, model, horizon, seed=1)
    c, _ = draw_failures(topo, model, horizon, seed=2)
    assert a == b and a != c
    expected = 4096 * horizon / 3600 / 10_000  # ~983
    assert len(a) == pytest.approx(expected, rel=0.1)


def test_lemons_fail_more_and_the_fleet_average_holds():
    topo = cluster(1000)
    model = FailureModel(gpu_mtbf_h=20_000, lemon_share=0.02, lemon_factor=20)
    failures, lemons = draw_failures(topo, model, 200 * 86_400.0, seed=3)
    assert len(lemons) == 20
    per_lemon = sum(f.node in lemons for f in failures) / len(lemons)
    per_other = sum(f.node not in lemons for f in failures) / (1000 - len(lemons))
    assert per_lemon > 8 * per_other
    expected = 8000 * 200 * 24 / 20_000
    assert len(failures) == pytest.approx(expected, rel=0.1)


def test_single_long_job_twin_agrees_with_the_closed_form_within_a_point():
    # 256 GPUs, per-GPU MTBF 4,000 h: the job fails every ~15.6 h, ~90 times in 60 days
    inp = WhatIfInput(gpus=256, days=60, intervals_min=(10.0, 60.0, None), checkpoint_s=60,
                      restart_s=600, gpu_mtbf_h=4000, spare_nodes=4, replicates=4, seed=11)
    result = run_whatif(inp)
    assert result["mtbf_h"] == pytest.approx(job_mtbf_s(256, 4000) / 3600)
    for row in result["rows"]:
        assert abs(row["ettr_sim"] - row["ettr_model"]) < 0.01, row
        assert row["ettr_model"] == pytest.approx(expected_ettr(
            row["interval_s"], 60, job_mtbf_s(256, 4000), 600))
    auto = result["rows"][-1]
    assert auto["interval_min"] == "auto"
    assert auto["ettr_sim"] >= max(r["ettr_sim"] for r in result["rows"]) - 0.005
    # without spares every hardware failure also waits for the repair
    for with_spares, without in zip(result["rows"], result["rows_without_spares"], strict=True):
        assert without["ettr_sim"] < with_spares["ettr_sim"]


def test_replay_with_failures_reports_restarts_and_lost_gpu_hours_per_tenant():
    topo = cluster(8)
    trace = generate(400, seed=4, cluster_gpus=topo.total_gpus, load=0.7)
    inp = ReplayInput(topo, trace, "c", "synthetic")
    model = FailureModel(gpu_mtbf_h=200, repair_s=3600)
    s = replay(inp, "grace", seed=2, failures=model).summary
    assert s["node_failures"] > 0 and s["restarts"] > 0
    assert s["lost_gpu_hours"] > 0
    tenants = s["tenants"]
    assert sum(t["restarts"] for t in tenants.values()) == s["job_failures"]
    assert sum(t["lost_gpu_hours"] for t in tenants.values()) == pytest.approx(s["lost_gpu_hours"])
    assert s["jobs_completed"] + s["jobs_failed"] + s["jobs_timed_out"] + s["jobs_unfinished"] \
        == len(trace.jobs)


def test_the_twin_follows_the_health_table_and_its_overrides():
    from grace.core.health import HealthTable
    from grace.core.policies import get_policy
    from grace.sim.engine import SimConfig, Simulation
    from grace.sim.failures import FailureCause
    from grace.sim.traces.model import TraceJob

    topo = cluster(4)
    software = (FailureCause("software bug", 1, False, "job-crashed"),)
    jobs = [TraceJob("long", 0.0, 30 * 86_400.0, 32, preemptible=False)]

    def run(table: HealthTable | None) -> dict:
        model = FailureModel(gpu_mtbf_h=500, causes=software, repair_s=3600)
        sim = Simulation(topo, jobs, SimConfig(policy=get_policy("grace"), failures=model,
                                               health_table=table, until_s=10 * 86_400.0))
        sim.metrics.set_horizon(10 * 86_400.0)
        return sim.run().summary

    default = run(None)
    assert default["job_failures"] > 0
    # application errors restart the job where it is: no node ever leaves service, so a
    # 32-GPU job on a 32-GPU cluster keeps running
    assert default["lemons_flagged"] > 0  # app-level errors still count toward lemons
    drained = run(HealthTable.default().with_overrides({"job-crashed": "drain-and-diagnose"}))
    # now every failure drains a node for an hour and the full-cluster job must wait
    assert drained["gpu_allocation"] < default["gpu_allocation"]


def test_a_wave_of_hardware_failures_trips_the_circuit_breaker():
    from grace.core.policies import get_policy
    from grace.sim.engine import SimConfig, Simulation
    from grace.sim.traces.model import TraceJob

    topo = cluster(10)
    hardware = (LLAMA3_CAUSES[0],)  # faulty GPU: drain and reset
    model = FailureModel(gpu_mtbf_h=2, causes=hardware, repair_s=7200)
    jobs = [TraceJob(str(i), 0.0, 86_400.0, 8) for i in range(10)]
    sim = Simulation(topo, jobs, SimConfig(policy=get_policy("grace"), failures=model,
                                           until_s=86_400.0))
    sim.metrics.set_horizon(86_400.0)
    s = sim.run().summary
    assert s["breaker_trips"] == 1  # trips once and stays open until a person resets it
    assert sim.health is not None and sim.health.breaker_open
