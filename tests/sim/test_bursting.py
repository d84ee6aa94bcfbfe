"""Cloud bursting in the twin: rented nodes arrive late, cost money, get preempted, go back.

The scene: 2 owned H100 nodes, 4 spot and 4 on-demand nodes to rent; ten 4-hour
8-GPU experiments arrive a minute apart with a 3-day full run. Owned capacity
alone runs them two at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from grace.cli.main import app
from grace.core.decisions import DecideResult
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.sim.bursting import pool_kinds_of
from grace.sim.engine import SimConfig, Simulation
from grace.sim.traces.model import TraceJob
from grace.spec.bursting import BurstingSpec
from grace.spec.job import WorkloadClass
from grace.spec.loader import parse_cluster

H100 = "H100-SXM"
HOUR = 3600.0
CLUSTER = parse_cluster({
    "name": "hybrid", "pools": [{"name": "own", "kind": "on-prem"},
                                {"name": "spot", "kind": "cloud"},
                                {"name": "od", "kind": "cloud"}],
    "node_groups": [{"name": "own", "count": 2, "gpu": H100, "pool": "own"},
                    {"name": "spot", "count": 4, "gpu": H100, "pool": "spot"},
                    {"name": "od", "count": 4, "gpu": H100, "pool": "od"}]})
TOPO = Topology.from_spec(CLUSTER)
# the limits their users asked for (the scheduler's estimates): round values with room
JOBS = [TraceJob(str(i), i * 60.0, 4 * HOUR, 8, limit_s=8 * HOUR) for i in range(10)] + [
    TraceJob("full", 30.0, 3 * 24 * HOUR, 8, workload_class=WorkloadClass.FULL_RUN,
             limit_s=7 * 24 * HOUR)]


def bursting(**over: object) -> BurstingSpec:
    return BurstingSpec.model_validate({
        "queue_wait_threshold_s": 600, "check_interval_s": 60, "idle_release_s": 600,
        "offers": [
            {"name": "spot", "gpu": H100, "kind": "spot", "usd_per_gpu_hour": 2.0,
             "preemptions_per_hour": 0.2, "provisioning_delay_s": 300},
            {"name": "od", "gpu": H100, "kind": "on-demand", "usd_per_gpu_hour": 6.0,
             "provisioning_delay_s": 300}],
        **over})


def replay(spec: BurstingSpec | None, seed: int = 1,
           jobs: list[TraceJob] = JOBS) -> tuple[Simulation, dict, list[tuple[str, set[str]]]]:
    sim = Simulation(TOPO, jobs, SimConfig(policy=get_policy("grace"), bursting=spec,
                                           pool_kinds=pool_kinds_of(CLUSTER), seed=seed))
    sim.metrics.set_horizon(600.0)
    placed: list[tuple[str, set[str]]] = []
    apply = sim._apply

    def recording_apply(result: DecideResult, now: float) -> None:
        for s in result.starts:
            pools = {TOPO.nodes[n].pool for n in s.placement.nodes(TOPO)}
            placed.append((sim.jobs[s.job_id].trace.job_id, pools))
        apply(result, now)

    sim._apply = recording_apply  # type: ignore[method-assign]
    return sim, sim.run().summary, placed


def test_bursting_lowers_average_jct_and_spends_money():
    _, off, placed_off = replay(bursting(enabled=False))
    _, on, placed_on = replay(bursting())
    assert any(pools != {"own"} for _, pools in placed_on)
    assert off["cloud_usd"] == 0 and off["burst_jobs"] == 0 and off["cloud_gpu_hours"] == 0
    assert all(pools == {"own"} for _, pools in placed_off)
    assert on["jobs_completed"] == off["jobs_completed"] == len(JOBS)
    assert on["avg_jct_s"] < 0.7 * off["avg_jct_s"]
    assert on["cloud_usd"] > 0 and on["burst_jobs"] >= 5
    assert on["cloud_usd"] == pytest.approx(sum(on["cloud_usd_by_kind"].values()))


def test_cloud_gpus_are_not_the_clusters_own_in_gpu_allocation():
    _, on, _ = replay(bursting())
    assert 0 < on["gpu_allocation"] <= 1.0


def test_full_runs_stay_on_owned_nodes_and_gangs_never_span_pools():
    _, _, placed = replay(bursting())
    assert all(len(pools) == 1 for _, pools in placed)
    assert [pools for name, pools in placed if name == "full"] == [{"own"}]


def test_spot_preemptions_restart_from_checkpoint_and_every_job_still_completes():
    _, on, _ = replay(bursting(checkpoint_interval_s=1800, restart_s=600), seed=3)
    assert on["spot_preemptions"] > 0
    assert on["restarts"] >= 1 and on["jobs_failed"] == 0
    assert on["jobs_completed"] == len(JOBS)
    # resumed jobs kept committed work: each restart loses at most its restart time and one
    # checkpoint interval of an 8-GPU gang
    assert 0 < on["lost_gpu_hours"] <= on["restarts"] * 8 * (1800 + 600) / HOUR


def test_a_run_repeats_exactly_with_its_seed_and_differs_with_another():
    timing = {"wall_s", "events_per_s"}
    a = {k: v for k, v in replay(bursting(), seed=7)[1].items() if k not in timing}
    b = {k: v for k, v in replay(bursting(), seed=7)[1].items() if k not in timing}
    c = {k: v for k, v in replay(bursting(), seed=8)[1].items() if k not in timing}
    assert a == b
    assert a != c


def test_a_burst_is_billed_from_ready_to_release_after_the_idle_timeout():
    """b waits behind a 10-hour gang (asking 12 h) holding both owned nodes: forecast wait
    12 h > 600 s,
    so at t=10 one spot node is rented; ready at 310 (300 s delay), b runs 310-3910, the
    node idles 600 s and is released at 4510: 4200 s x 8 GPUs x 2 $/GPU-h = 18.67 $."""
    spec = bursting()
    spec.offers[0].preemptions_per_hour = 0.0  # exact figures: no preemption
    jobs = [TraceJob("a", 0.0, 10 * HOUR, 16, limit_s=12 * HOUR),
            TraceJob("b", 10.0, 1 * HOUR, 8, limit_s=2 * HOUR)]
    sim, on, placed = replay(spec, jobs=jobs)
    assert dict(placed)["b"] == {"spot"}
    b = next(j for j in sim.jobs.values() if j.trace.job_id == "b")
    assert (b.first_start_s, b.end_s) == (310.0, 3910.0)
    assert on["cloud_gpu_hours"] == pytest.approx(8 * 4200 / HOUR)
    assert on["cloud_usd"] == pytest.approx(8 * 2.0 * 4200 / HOUR)
    assert on["cloud_usd_by_kind"] == {"spot": pytest.approx(8 * 2.0 * 4200 / HOUR)}
    assert on["burst_jobs"] == 1 and on["cloud_nodes_provisioned"] == 1


def test_grace_simulate_with_bursting_reports_cloud_spend(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text("submit,duration,gpus\n" + "".join(
        f"{i * 60},{4 * HOUR:.0f},8\n" for i in range(6)))
    cluster = tmp_path / "hybrid.yaml"
    cluster.write_text(yaml.safe_dump({"kind": "cluster", **CLUSTER.model_dump(mode="json")}))
    burst = tmp_path / "bursting.yaml"
    burst.write_text(yaml.safe_dump({"kind": "bursting", **bursting().model_dump(mode="json")}))
    out, html = tmp_path / "run.json", tmp_path / "run.html"
    args = ["simulate", "--cluster", str(cluster), "--trace", str(trace), "--format", "csv",
            "--columns", "submit=submit,duration=duration,gpus=gpus", "--json", str(out)]
    r = CliRunner().invoke(app, [*args, "--bursting", str(burst), "--html", str(html)])
    assert r.exit_code == 0, r.output
    summary = json.loads(out.read_text())
    assert summary["cloud_usd"] > 0 and summary["burst_jobs"] > 0
    assert summary["bursting"]["offers"] == ["spot", "od"]
    assert "cloud spend" in r.output and "cloud spend" in html.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: bursting\noffers:\n  - {name: x, gpu: H100-SXM, kind: spot, "
                   "usd_per_gpu_hour: 1}\n")
    r = CliRunner().invoke(app, [*args, "--bursting", str(bad)])
    assert r.exit_code == 2 and "no pool 'x'" in r.output


def test_no_job_longer_than_the_spot_bound_ever_starts_on_spot():
    """Mixed lengths around a 6-hour bound: only jobs known to end within it get spot."""
    jobs = [TraceJob(f"j{i}", i * 60.0, (2 + 2 * (i % 5)) * HOUR, 8) for i in range(12)]
    _, on, placed = replay(bursting(max_spot_runtime_s=6 * HOUR), jobs=jobs)
    length = {j.job_id: j.duration_s for j in jobs}
    on_spot = {name for name, pools in placed if pools == {"spot"}}
    assert on_spot and all(length[name] <= 6 * HOUR for name in on_spot)
    assert any(pools == {"od"} for _, pools in placed)  # the long ones burst on demand
    assert on["jobs_completed"] == len(jobs)


def test_the_twins_cloud_changes_the_replay_only_through_the_effects_it_returns():
    """``TwinCloud`` reads the state it is given and returns effects; the calls themselves
    leave the simulation as it was, and every kind of effect turns up in a replay with
    spot preemptions."""
    spec = bursting(checkpoint_interval_s=1800, restart_s=600)
    sim = Simulation(TOPO, JOBS, SimConfig(policy=get_policy("grace"), bursting=spec,
                                           pool_kinds=pool_kinds_of(CLUSTER), seed=3))
    cloud = sim.cloud
    assert cloud is not None
    seen: set[str] = set()

    def looks() -> tuple:
        state = sim.state
        return (len(sim.events), tuple(state.capacity.usable), sim.metrics.rented_gpus,
                tuple((j.id, j.pools) for j in state.pending.values()),
                {k: sorted(v) for k, v in state.queues.items()},
                {n: sorted(v) for n, v in sim.node_jobs.items()},
                tuple(j.outcome for j in sim.jobs.values()))

    def checked(call: Callable[..., list]) -> Callable[..., list]:
        def wrapper(*args: object, **kwargs: object) -> list:
            before = looks()
            effects = call(*args, **kwargs)
            assert looks() == before
            seen.update(type(e).__name__ for e in effects)
            return effects
        return wrapper

    cloud.due = checked(cloud.due)  # type: ignore[method-assign]
    cloud.after_cycle = checked(cloud.after_cycle)  # type: ignore[method-assign]
    summary = sim.run().summary
    assert summary["spot_preemptions"] > 0 and summary["jobs_completed"] == len(JOBS)
    assert seen == {"WakeAt", "SetNodesUsable", "PreemptSpot", "RouteJob", "CountRentedGpus"}
