"""Queue policies: FIFO, EASY backfill, ordering, runtime limits and pending reasons."""

from __future__ import annotations

import math

import pytest

from grace.core import PendingReason, StopJob, TenantQuota, decide, get_policy
from grace.core.decisions import StopReason

from .builders import (
    A100,
    H100,
    make_cluster,
    make_job,
    make_state,
    node_gpus,
    occupy,
    run_cycle,
    started,
    submit,
)


def drive(state, start_at: float = 0.0, until: float = 1e9) -> dict[int, float]:
    """Run the cluster like the twin does: each running job ends at start + estimate.

    A cycle runs at time 0 and after every completion. Returns each job's start time.
    """
    starts: dict[int, float] = {}
    now = start_at
    for s in run_cycle(state, now).starts:
        starts[int(s.job_id)] = now
    while state.running:
        now = min(r.start_s + (r.estimate_s or math.inf) for r in state.running.values())
        if now > until:
            break
        for jid, r in list(state.running.items()):
            if r.start_s + (r.estimate_s or math.inf) <= now:
                state.finish(jid, now)
        for s in run_cycle(state, now).starts:
            starts[int(s.job_id)] = now
    return starts


# ---------------------------------------------------------------------- FIFO


def test_fifo_blocked_head_blocks_a_small_job_behind_it():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "fifo")
    occupy(state, make_job(100, gpus=8), node_gpus(topo, 0, 8))
    head = make_job(1, gpus=16, submit=1)
    small = make_job(2, gpus=4, submit=2, tenant="b")
    submit(state, head, small)

    result = decide(state, 10)

    assert result.starts == []
    assert result.reason_for(head) is PendingReason.WAITING_FOR_CAPACITY
    assert result.reason_for(small) is PendingReason.BEHIND_QUEUE_HEAD


def test_fifo_starts_jobs_in_submit_order_while_they_fit():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "fifo")
    jobs = [make_job(i, gpus=g, submit=i) for i, g in [(3, 8), (1, 4), (2, 4), (4, 8)]]
    submit(state, *jobs)

    result = decide(state, 0)

    assert [int(s.job_id) for s in result.starts] == [1, 2, 3]
    assert result.reason_for(jobs[3]) is PendingReason.WAITING_FOR_CAPACITY


def test_fifo_job_whose_model_is_all_drained_does_not_block_the_queue():
    """Regression (failed on commit 1e6729b): scheduler._try_job marks a shape blocked when it
    had NO_USABLE_NODES, so the next tenant's job of the same shape gets WAITING_FOR_CAPACITY
    from cycle.blocked_shapes; under fifo that stops the cycle and blocks every job behind it,
    while the first tenant's job did not"""
    topo = make_cluster(groups=[{"name": "h", "count": 1, "gpu": H100},
                                {"name": "a", "count": 1, "gpu": A100}])
    state = make_state(topo, "fifo")
    state.set_node_usable(1, False)  # the only A100 node
    on_a100_a = make_job(1, gpus=4, models=(A100,), tenant="a", submit=1)
    on_a100_b = make_job(2, gpus=4, models=(A100,), tenant="b", submit=2)
    on_h100 = make_job(3, gpus=4, models=(H100,), tenant="a", submit=3)
    submit(state, on_a100_a, on_a100_b, on_h100)

    result = decide(state, 0)

    assert result.reason_for(on_a100_a) is PendingReason.NO_USABLE_NODES
    assert result.reason_for(on_a100_b) is PendingReason.NO_USABLE_NODES
    assert 3 in started(result)


# ---------------------------------------------------------------------- EASY backfill


def _backfill_scene():
    """Node 0 busy until t=100; a 16-GPU head waits; a short and a long 4-GPU job behind it."""
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "easy-backfill")
    occupy(state, make_job(100, gpus=8, estimate=100), node_gpus(topo, 0, 8))
    head = make_job(1, gpus=16, submit=1, estimate=1000)
    short = make_job(2, gpus=4, submit=2, estimate=50)  # ends at 50, before the shadow time
    long = make_job(3, gpus=4, submit=3, estimate=500)  # would end at 500, after it
    submit(state, head, short, long)
    return state, head, short, long


def test_easy_backfill_short_job_backfills_and_long_one_is_held_for_the_head():
    state, head, _short, long = _backfill_scene()

    result = decide(state, 0)

    assert list(started(result)) == [2]
    assert result.reason_for(head) is PendingReason.WAITING_FOR_CAPACITY
    assert result.reason_for(long) is PendingReason.HELD_FOR_RESERVATION
    [reservation] = result.reservations
    assert reservation.job_id == head.id
    assert reservation.shadow_s == 100


def test_easy_backfill_head_starts_no_later_than_its_shadow_time():
    state, *_ = _backfill_scene()

    starts = drive(state)

    assert starts[2] == 0
    assert starts[1] <= 100
    assert starts[3] >= starts[1]


def test_easy_backfill_job_without_estimate_is_held_when_it_would_delay_the_head():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "easy-backfill")
    occupy(state, make_job(100, gpus=8, estimate=100), node_gpus(topo, 0, 8))
    head = make_job(1, gpus=16, submit=1)
    unknown = make_job(2, gpus=4, submit=2)
    submit(state, head, unknown)

    result = decide(state, 0)

    assert result.reason_for(unknown) is PendingReason.HELD_FOR_RESERVATION


def test_easy_backfill_job_may_use_gpus_the_head_will_not_need():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "easy-backfill")
    occupy(state, make_job(100, gpus=8, estimate=100), node_gpus(topo, 0, 8))
    head = make_job(1, gpus=12, submit=1)  # at t=100, 16 GPUs are free: 4 to spare
    extra = make_job(2, gpus=4, submit=2)  # no estimate, but fits in the spare 4
    submit(state, head, extra)

    result = decide(state, 0)

    assert 2 in started(result)
    assert result.reservations[0].shadow_s == 100
    assert result.reservations[0].extra_gpus == 0  # the 4 spare GPUs went to job 2
    state.apply(result, 0)
    state.finish(100, 100)
    assert 1 in started(decide(state, 100))  # and the head still starts at its shadow time


def test_easy_backfill_never_delays_the_head_past_its_shadow_time_when_gpus_are_fragmented():
    """Regression (failed on commit 1e6729b): SchedulerState.shadow_time counts free GPUs, not
    placeable ones: with 6 free GPUs on each of two nodes an 8-GPU head gets shadow=now and
    extra_gpus=4, so a 4-GPU job of any length backfills onto the GPUs the head needs at t=100
    and delays it past its shadow time"""
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "easy-backfill")
    occupy(state, make_job(100, gpus=2, estimate=100), node_gpus(topo, 0, 2))
    occupy(state, make_job(101, gpus=2, estimate=1000), node_gpus(topo, 1, 2))
    head = make_job(1, gpus=8, submit=1)  # fits on node 0 once job 100 ends at t=100
    long = make_job(2, gpus=4, submit=2, estimate=10_000)
    submit(state, head, long)

    starts = drive(state)

    assert starts[1] <= 100


def test_easy_backfill_shadow_time_does_not_count_a_stopped_job_twice():
    """Regression (failed on commit 1e6729b): SchedulerState.shadow_time walks state.ends, which
    still holds jobs this cycle stopped (or preempted) and whose GPUs decide already counts as
    free, so they are counted twice: the head gets shadow_s=now instead of 1000 and a 10^6 s
    job backfills in front of it"""
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "easy-backfill")
    occupy(state, make_job(100, gpus=8, estimate=50, limit=100), node_gpus(topo, 0, 8))
    occupy(state, make_job(101, gpus=4, estimate=1000), node_gpus(topo, 1, 4))
    head = make_job(1, gpus=16, submit=1)  # needs job 101's GPUs: shadow time 1000
    long = make_job(2, gpus=4, submit=2, estimate=10**6)
    submit(state, head, long)

    result = decide(state, 100)  # job 100 is past its limit and is stopped

    assert result.stops
    assert result.reservations[0].shadow_s == 1000
    assert result.reason_for(long) is PendingReason.HELD_FOR_RESERVATION


def test_backfill_depth_leaves_jobs_not_examined():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "easy-backfill", backfill_depth=1)
    occupy(state, make_job(100, gpus=8, estimate=100), node_gpus(topo, 0, 8))
    jobs = [make_job(i, gpus=8 - i, submit=i) for i in range(1, 5)]  # distinct shapes
    submit(state, *jobs)

    result = decide(state, 0)

    assert result.reason_for(jobs[0]) is PendingReason.WAITING_FOR_CAPACITY
    assert result.reason_for(jobs[3]) is PendingReason.NOT_EXAMINED


# ---------------------------------------------------------------------- ordering


def test_priority_policy_starts_the_higher_priority_job_first():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "priority")
    low = make_job(1, gpus=8, submit=0)
    high = make_job(2, gpus=8, submit=5, priority=10)
    submit(state, low, high)

    result = decide(state, 10)

    assert list(started(result)) == [2]


def test_fair_share_serves_the_tenant_using_less_first():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "priority")
    occupy(state, make_job(100, gpus=8, tenant="a"), node_gpus(topo, 0, 8))
    a_job = make_job(1, gpus=8, tenant="a", submit=0)
    b_job = make_job(2, gpus=8, tenant="b", submit=5)
    submit(state, a_job, b_job)

    assert list(started(decide(state, 10))) == [2]


def test_fair_share_weights_divide_usage():
    topo = make_cluster(nodes=3, nodes_per_leaf=4)
    quotas = {"a": TenantQuota(weight=4.0), "b": TenantQuota(weight=1.0)}
    state = make_state(topo, "priority", quotas)
    occupy(state, make_job(100, gpus=8, tenant="a"), node_gpus(topo, 0, 8))
    occupy(state, make_job(101, gpus=4, tenant="b"), node_gpus(topo, 1, 4))
    # a: 8 / 4 = 2 per weight, b: 4 / 1 = 4: a is further below its share
    submit(state, make_job(1, gpus=8, tenant="a", submit=5), make_job(2, gpus=8, tenant="b"))

    assert list(started(decide(state, 10))) == [1]


def test_grace_policy_starts_smaller_gangs_first_at_equal_priority():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "grace")
    big = make_job(1, gpus=8, submit=0)
    small = make_job(2, gpus=2, submit=5)
    submit(state, big, small)

    result = decide(state, 10)

    assert list(started(result)) == [2]
    assert result.reason_for(big) is PendingReason.WAITING_FOR_CAPACITY


def test_las_policy_starts_the_job_with_less_attained_service_first():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "las")
    veteran = make_job(1, gpus=8, submit=0, attained=10 * 3600)
    newcomer = make_job(2, gpus=8, submit=5)
    submit(state, veteran, newcomer)

    assert list(started(decide(state, 10))) == [2]


def test_unknown_policy_name_lists_the_choices():
    with pytest.raises(ValueError, match="easy-backfill"):
        get_policy("round-robin")


# ---------------------------------------------------------------------- runtime limits


def test_job_past_its_runtime_limit_is_stopped_and_its_gpus_reused_in_the_same_cycle():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "fifo")
    occupy(state, make_job(100, gpus=8, limit=100), node_gpus(topo, 0, 8))
    waiting = make_job(1, gpus=8, submit=1)
    submit(state, waiting)

    early = decide(state, 99)
    assert early.stops == []
    assert early.reason_for(waiting) is PendingReason.WAITING_FOR_CAPACITY

    result = run_cycle(state, 100)

    assert result.stops == [StopJob(100, StopReason.TIMEOUT)]
    assert started(result)[1].gpus == node_gpus(topo, 0, 8)
    assert set(state.running) == {1}


def test_only_jobs_past_their_limit_are_stopped():
    topo = make_cluster(nodes=1)
    state = make_state(topo)
    occupy(state, make_job(100, gpus=2, limit=100), node_gpus(topo, 0, 2), now=0)
    occupy(state, make_job(101, gpus=2, limit=100), node_gpus(topo, 0, 4)[:2], now=50)
    occupy(state, make_job(102, gpus=2), node_gpus(topo, 0, 6)[:2], now=0)

    result = decide(state, 120)

    assert [int(s.job_id) for s in result.stops] == [100]


# ---------------------------------------------------------------------- reasons


def test_every_waiting_job_has_a_reason_and_only_started_jobs_have_none():
    topo = make_cluster(groups=[{"name": "h", "count": 2, "gpu": H100},
                                {"name": "a", "count": 1, "gpu": A100}])
    state = make_state(topo, "priority", {"capped": TenantQuota(guaranteed_gpus=4, borrow_limit_gpus=0)})
    state.set_node_usable(2, False)  # the A100 node
    occupy(state, make_job(100, gpus=8, tenant="a", estimate=100), node_gpus(topo, 0, 8))
    jobs = {
        "over": make_job(1, gpus=8, tenant="capped", submit=1),
        "head": make_job(2, gpus=16, tenant="a", submit=2),
        "short": make_job(3, gpus=2, tenant="a", submit=3, estimate=10),
        "long": make_job(4, gpus=4, tenant="a", submit=4, estimate=1000),
        "drained": make_job(5, gpus=1, tenant="a", submit=5, models=(A100,)),
        "same-shape": make_job(6, gpus=16, tenant="a", submit=6),
    }
    submit(state, *jobs.values())

    result = decide(state, 0)

    assert result.reason_for(jobs["over"]) is PendingReason.OVER_QUOTA
    assert result.reason_for(jobs["head"]) is PendingReason.WAITING_FOR_CAPACITY
    assert result.reason_for(jobs["short"]) is None
    assert result.reason_for(jobs["long"]) is PendingReason.HELD_FOR_RESERVATION
    assert result.reason_for(jobs["drained"]) is PendingReason.NO_USABLE_NODES
    assert result.reason_for(jobs["same-shape"]) is PendingReason.WAITING_FOR_CAPACITY
    starts = started(result)
    for job in state.pending.values():
        assert (result.reason_for(job) is None) == (int(job.id) in starts)


def test_short_slice_job_may_backfill_onto_gpus_held_for_a_reservation():
    topo = make_cluster(nodes=1, mig=1)
    state = make_state(topo, "easy-backfill")
    occupy(state, make_job(100, gpus=4, estimate=100), node_gpus(topo, 0, 4))
    head = make_job(1, gpus=8, submit=1)  # held: GPUs 0-3 now, the rest at t=100
    short = make_job(2, gpus=0.25, submit=2, estimate=10)  # ends long before t=100
    submit(state, head, short)

    result = decide(state, 0)

    assert list(started(result)) == [2]
    assert result.reason_for(head) is PendingReason.WAITING_FOR_CAPACITY
