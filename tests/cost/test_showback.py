"""Showback: worked examples, tenants adding up to the cluster, and both producers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grace.control.live.context import JobDirs
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import AttemptState, JobState
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.cost.showback import JobUsage, UsageFigures, showback
from grace.cost.showback_live import live_usage, lost_share, phase_shares
from grace.cost.showback_twin import twin_usage
from grace.sim.engine import SimConfig, Simulation
from grace.sim.traces.model import TraceJob
from grace.spec.job import JobSpec
from grace.spec.loader import parse_cluster

H = 3600.0


def test_a_job_split_into_useful_work_and_losses_and_priced() -> None:
    u = JobUsage("1", "vision", gpus=4, usd_per_gpu_hour=2.0, queue_hours=0.5,
                 allocated_gpu_hours=10.0, failure_gpu_hours=2.0, data_sync_gpu_hours=1.0,
                 checkpoint_gpu_hours=0.5)
    f = UsageFigures()
    f.add(u)
    assert f.useful_gpu_hours == pytest.approx(6.5)  # 10 - 2 - 1 - 0.5
    assert f.useful_share == pytest.approx(0.65)
    assert f.allocated_usd == pytest.approx(20.0)  # 10 GPU-h x $2
    assert f.failure_usd == pytest.approx(4.0)
    assert f.queue_gpu_hours == pytest.approx(2.0)  # waited 0.5 h for 4 GPUs
    assert f.queue_usd == pytest.approx(4.0)


def test_rolling_window_counts_the_share_of_held_time_inside_it() -> None:
    # 8 GPU-h held evenly over hours 0..4; the 1-day window ending at hour 26 sees hours 2..4
    u = JobUsage("1", "a", gpus=2, usd_per_gpu_hour=1.0, queue_hours=0.0,
                 allocated_gpu_hours=8.0, data_sync_gpu_hours=2.0, intervals=((0.0, 4 * H),))
    report = showback([u], now=26 * H, capacity_gpus=10)
    day = report["windows"]["1d"]
    assert day["allocated_gpu_hours"] == pytest.approx(4.0)  # half the held time
    assert day["useful_gpu_hours"] == pytest.approx(3.0)  # half of 8 - 2
    assert day["effective_utilization"] == pytest.approx(3.0 / 240.0)  # 10 GPUs x 24 h
    assert report["windows"]["7d"]["allocated_gpu_hours"] == pytest.approx(8.0)


usage = st.builds(
    lambda job, tenant, gpus, rate, q, alloc, shares, start, span: JobUsage(
        str(job), tenant, gpus, rate, q, alloc, alloc * shares[0], alloc * shares[1],
        alloc * shares[2], ((start, start + span),)),
    st.integers(0, 10_000), st.sampled_from(["vision", "nlp", "speech", "rl"]),
    st.floats(0.1, 64), st.floats(0, 20), st.floats(0, 100), st.floats(0, 1e4),
    st.tuples(*[st.floats(0, 0.33)] * 3), st.floats(0, 30 * 86_400), st.floats(1, 10 * 86_400))


@settings(max_examples=60, deadline=None)
@given(st.lists(usage, max_size=40))
def test_tenants_add_up_to_the_cluster_totals(usages: list[JobUsage]) -> None:
    report = showback(usages, now=30 * 86_400.0, capacity_gpus=1024)
    totals = report["totals"]
    for key, total in totals.items():
        if key == "useful_share":
            continue
        assert sum(t[key] for t in report["tenants"].values()) == pytest.approx(total, rel=1e-9,
                                                                                abs=1e-6)
        assert sum(j[key] for j in report["jobs"]) == pytest.approx(total, rel=1e-9, abs=1e-6)
    for window in report["windows"].values():
        for key in ("allocated_gpu_hours", "useful_gpu_hours"):
            assert sum(t[key] for t in window["tenants"].values()) == pytest.approx(
                window[key], rel=1e-9, abs=1e-6)
        assert window["useful_gpu_hours"] <= window["allocated_gpu_hours"] + 1e-6


# ---------------------------------------------------------------- the twin
def _topo() -> Topology:
    return Topology.from_spec(parse_cluster({
        "name": "t", "node_groups": [{"name": "n", "count": 4, "gpu": "H100-SXM",
                                      "gpus_per_node": 8, "nodes_per_leaf": 2}]}))


def test_twin_showback_from_a_replay() -> None:
    limit = {"limit_s": 4 * 3600.0}  # what each user asked for: room to spare, no timeout
    jobs = [TraceJob("one", 0.0, 3600.0, 1, "a", **limit),
            TraceJob("node", 0.0, 7200.0, 8, "b", **limit),
            TraceJob("multi", 0.0, 3600.0, 16, "b", **limit),
            TraceJob("late", 0.0, 3600.0, 32, "a", **limit)]
    sim = Simulation(_topo(), jobs, SimConfig(policy=get_policy("fifo")))
    sim.metrics.set_horizon(1.0)
    result = sim.run()
    by_job = {u.job: u for u in twin_usage(result.jobs, usd_per_gpu_hour=2.0)}
    one, node, multi, late = by_job["one"], by_job["node"], by_job["multi"], by_job["late"]
    assert one.allocated_gpu_hours == pytest.approx(1.0) and one.data_sync_gpu_hours == 0
    # 8 GPUs for 2 h inside one node: 10% of the step is gradient exchange
    assert node.allocated_gpu_hours == pytest.approx(16.0)
    assert node.data_sync_gpu_hours == pytest.approx(1.6)
    # 16 GPUs over two nodes of one leaf: placed ideally, 20% communicating
    assert multi.data_sync_gpu_hours == pytest.approx(0.2 * 16.0)
    # the 32-GPU job waits for the other three to finish (2 h) and then runs 1 h
    assert late.queue_hours == pytest.approx(2.0)
    assert late.allocated_gpu_hours == pytest.approx(32.0)
    report = showback(by_job.values(), now=3 * H, capacity_gpus=32)
    assert report["totals"]["allocated_usd"] == pytest.approx(2.0 * (1 + 16 + 16 + 32))


# ---------------------------------------------------------------- live
def test_phase_shares_and_lost_share() -> None:
    recs = [{"step": 150, "step_s": 1.0, "phases": {"data": 0.1, "allreduce": 0.1,
                                                    "checkpoint": 0.05}},
            {"step": 150, "step_s": 2.0, "phases": {"data": 0.2, "sync": 0.4}}]
    wait, ckpt = phase_shares(recs)
    assert wait == pytest.approx((0.2 + 0.3) / 2)  # ranks: 0.2/1.0 and 0.6/2.0
    assert ckpt == pytest.approx(0.025)


def test_live_showback_from_the_store(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'grace.sqlite'}")
    t0 = 1_700_000_000.0
    spec = JobSpec.model_validate({"name": "train", "tenant": "vision", "gpus": 4,
                                   "command": ["python", "train.py"]})
    with store.transaction() as s:
        job = repo.add_job(s, spec, t0)
        job_id = job.id
        placement = [{"node": "a100-00", "gpus": [0, 1, 2, 3]}]
        a1 = repo.start_attempt(s, job, placement, "local", "h1", t0 + 600)  # waited 10 min
        repo.end_attempt(s, a1, AttemptState.FAILED, t0 + 600 + 3 * H)  # ran 3 h, failed
        repo.note_failure_and_requeue(s, job, t0 + 600 + 3 * H, "node failed")
        a2 = repo.start_attempt(s, job, placement, "local", "h2", t0 + 1200 + 3 * H,
                                resumed_from="/x/checkpoints/step-000000100")
        repo.end_attempt(s, a2, AttemptState.SUCCEEDED, t0 + 1200 + 5 * H)  # 2 h, done
        repo.set_job_state(s, job, JobState.COMPLETED, t0 + 1200 + 5 * H)
    with store.read() as s:
        adir = JobDirs(tmp_path, repo.store_id(s)).job(job_id)
    for n, rec in ((1, {"step": 150, "step_s": 1.0, "phases": {"data": 0.1}}),
                   (2, {"step": 300, "step_s": 1.0, "phases": {"allreduce": 0.2}})):
        (adir / f"attempt-{n}").mkdir(parents=True)
        (adir / f"attempt-{n}" / "progress-rank0.json").write_text(json.dumps(rec))
    with store.transaction() as s:
        attempts = list(repo.get_job(s, job_id).attempts)
        # attempt 1 went from step 0 to 150; attempt 2 resumed from 100: 50 of 150 steps lost
        assert lost_share(attempts[0], attempts[1], [{"step": 150}]) == pytest.approx(1 / 3)
        usages = live_usage(s, tmp_path, t0 + 10 * H, 0.0, lambda node: 2.0)
    store.close()
    (u,) = usages
    assert u.allocated_gpu_hours == pytest.approx(20.0)  # 4 GPUs x (3 h + 2 h)
    assert u.failure_gpu_hours == pytest.approx(4.0)  # a third of attempt 1's 12 GPU-h
    # the rest of attempt 1 (8 GPU-h) waited 10% on data; attempt 2 (8 GPU-h) 20% on all-reduce
    assert u.data_sync_gpu_hours == pytest.approx(0.8 + 1.6)
    assert u.queue_hours == pytest.approx(20 / 60)  # 10 min before each attempt
    assert u.usd_per_gpu_hour == 2.0
