"""Tenant quotas, borrowing, quota reclaim, priority and LAS preemption, preemption budgets."""

from __future__ import annotations

import dataclasses

import pytest

from grace.core import PendingReason, PreemptJob, TenantQuota, decide, get_policy
from grace.core.decisions import PreemptReason

from .builders import (
    make_cluster,
    make_job,
    make_state,
    node_gpus,
    occupy,
    run_cycle,
    started,
    submit,
)

# ---------------------------------------------------------------------- guarantees and borrowing


@pytest.mark.parametrize("policy", ["priority", "grace"])
def test_tenant_at_its_guarantee_gets_over_quota_for_a_non_preemptible_job(policy):
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, policy, {"a": TenantQuota(guaranteed_gpus=8, borrow_limit_gpus=8)})
    occupy(state, make_job(100, gpus=8, tenant="a"), node_gpus(topo, 0, 8))
    job = make_job(1, gpus=4, tenant="a")
    submit(state, job)

    result = decide(state, 0)

    assert result.starts == []  # 8 GPUs are idle, but not the tenant's to take for good
    assert result.reason_for(job) is PendingReason.OVER_QUOTA


@pytest.mark.parametrize("policy", ["priority", "grace"])
def test_preemptible_job_borrows_up_to_the_borrow_limit(policy):
    topo = make_cluster(nodes=3, nodes_per_leaf=4)
    state = make_state(topo, policy, {"a": TenantQuota(guaranteed_gpus=8, borrow_limit_gpus=4)})
    occupy(state, make_job(100, gpus=8, tenant="a"), node_gpus(topo, 0, 8))
    first = make_job(1, gpus=4, tenant="a", preemptible=True, submit=1)
    second = make_job(2, gpus=4, tenant="a", preemptible=True, submit=2)
    submit(state, first, second)

    result = decide(state, 0)

    [start] = result.starts
    assert start.job_id == first.id
    assert start.borrowing
    assert result.reason_for(second) is PendingReason.OVER_QUOTA  # 8 + 4 + 4 > 8 + 4


def test_preemptible_job_inside_the_guarantee_is_not_borrowing():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "grace", {"a": TenantQuota(guaranteed_gpus=8, borrow_limit_gpus=8)})
    submit(state, make_job(1, gpus=8, tenant="a", preemptible=True))

    [start] = decide(state, 0).starts

    assert not start.borrowing


def test_policies_without_quotas_ignore_them():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "easy-backfill", {"a": TenantQuota(guaranteed_gpus=0, borrow_limit_gpus=0)})
    submit(state, make_job(1, gpus=8, tenant="a"))

    assert list(started(decide(state, 0))) == [1]


# ---------------------------------------------------------------------- quota reclaim


def _borrowed_cluster(policy="grace", borrower_budget=20):
    """Two nodes; the borrower holds both, one of them on borrowed quota."""
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    quotas = {
        "owner": TenantQuota(guaranteed_gpus=8, borrow_limit_gpus=0),
        "borrower": TenantQuota(guaranteed_gpus=8, borrow_limit_gpus=8,
                                preemptions_per_hour=borrower_budget),
    }
    state = make_state(topo, policy, quotas)
    submit(state, make_job(100, gpus=8, tenant="borrower", submit=0),
           make_job(101, gpus=8, tenant="borrower", preemptible=True, submit=1))
    result = run_cycle(state, 0)
    assert [s.borrowing for s in result.starts] == [False, True]
    return topo, state


@pytest.mark.parametrize("policy", ["priority", "grace"])
def test_owner_reclaims_its_guarantee_by_preempting_the_borrower_in_the_same_cycle(policy):
    _topo, state = _borrowed_cluster(policy)
    owner = make_job(1, gpus=8, tenant="owner", submit=10)
    submit(state, owner)

    result = decide(state, 10)

    assert result.preemptions == [PreemptJob(101, PreemptReason.QUOTA_RECLAIM, owner.id)]
    assert started(result)[1].gpus == state.running[101].placement.gpus  # the GPUs it freed
    state.apply(result, 10)
    assert set(state.running) == {100, 1}
    requeued = state.pending[101]
    assert requeued.restarts == 1
    assert requeued.attained_gpu_s == pytest.approx(8 * 10)
    assert state.preemption_budget_left("borrower", 10) == 19


def test_borrower_jobs_within_its_own_guarantee_are_not_reclaimed():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    quotas = {"owner": TenantQuota(guaranteed_gpus=8, borrow_limit_gpus=0),
              "borrower": TenantQuota(guaranteed_gpus=8, borrow_limit_gpus=8)}
    state = make_state(topo, "grace", quotas)
    occupy(state, make_job(100, gpus=8, tenant="borrower", preemptible=True), node_gpus(topo, 0, 8))
    occupy(state, make_job(101, gpus=8, tenant="other"), node_gpus(topo, 1, 8))
    owner = make_job(1, gpus=8, tenant="owner", submit=10)
    submit(state, owner)

    result = decide(state, 10)

    assert result.preemptions == []
    assert result.reason_for(owner) is PendingReason.WAITING_FOR_CAPACITY


def test_preemption_budget_stops_further_preemptions_until_the_hour_passes():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    quotas = {"owner": TenantQuota(guaranteed_gpus=16, borrow_limit_gpus=0),
              "borrower": TenantQuota(guaranteed_gpus=0, borrow_limit_gpus=16, preemptions_per_hour=1)}
    state = make_state(topo, "grace", quotas)
    submit(state, make_job(100, gpus=8, tenant="borrower", preemptible=True),
           make_job(101, gpus=8, tenant="borrower", preemptible=True, submit=1))
    assert all(s.borrowing for s in run_cycle(state, 0).starts)
    first = make_job(1, gpus=8, tenant="owner", submit=10)
    second = make_job(2, gpus=8, tenant="owner", submit=11)
    submit(state, first, second)

    result = run_cycle(state, 10)

    assert len(result.preemptions) == 1  # the budget allows one per hour
    assert list(started(result)) == [1]
    assert state.preemption_budget_left("borrower", 10) == 0

    assert run_cycle(state, 3000).preemptions == []
    assert decide(state, 3000).reason_for(second) is PendingReason.WAITING_FOR_CAPACITY

    later = run_cycle(state, 3611)
    assert [p.reason for p in later.preemptions] == [PreemptReason.QUOTA_RECLAIM]
    assert 2 in started(later)


def test_preemption_budget_holds_within_one_cycle_for_a_gang_needing_several_victims():
    """Regression (failed on commit 1e6729b): scheduler._victims filters victims by the tenant's
    budget once, before any is chosen, and _preempt_for then preempts as many of that tenant's
    jobs as the placement needs, so a tenant with preemptions_per_hour=1 loses two jobs in one
    cycle"""
    topo = make_cluster(nodes=1)
    quotas = {"owner": TenantQuota(guaranteed_gpus=8, borrow_limit_gpus=0),
              "borrower": TenantQuota(guaranteed_gpus=0, borrow_limit_gpus=8, preemptions_per_hour=1)}
    state = make_state(topo, "grace", quotas)
    submit(state, make_job(100, gpus=4, tenant="borrower", preemptible=True),
           make_job(101, gpus=4, tenant="borrower", preemptible=True, submit=1))
    run_cycle(state, 0)
    owner = make_job(1, gpus=8, tenant="owner", submit=10)
    submit(state, owner)

    result = decide(state, 10)

    assert result.preemptions == []  # it would take both borrower jobs; the budget allows one
    assert result.reason_for(owner) is PendingReason.WAITING_FOR_CAPACITY


def test_over_quota_job_does_not_stop_a_preemptible_job_of_the_same_shape_from_borrowing():
    """Regression (failed on commit 1e6729b): a (tenant, shape) queue shares one outcome, and
    the shape does not include preemptible, so a non-preemptible job that is OVER_QUOTA marks
    the whole queue OVER_QUOTA and a later preemptible job of the same shape that may borrow is
    never examined"""
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "grace", {"a": TenantQuota(guaranteed_gpus=8, borrow_limit_gpus=8)})
    occupy(state, make_job(100, gpus=8, tenant="a"), node_gpus(topo, 0, 8))
    stuck = make_job(1, gpus=8, tenant="a", submit=1)
    may_borrow = make_job(2, gpus=8, tenant="a", preemptible=True, submit=2)
    submit(state, stuck, may_borrow)

    result = decide(state, 10)

    assert result.reason_for(stuck) is PendingReason.OVER_QUOTA
    assert 2 in started(result)


def _reclaimed_once(policy):
    """The owner reclaimed one of two borrowed nodes; the borrower's job went back to the queue."""
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    quotas = {"owner": TenantQuota(guaranteed_gpus=16, borrow_limit_gpus=0),
              "borrower": TenantQuota(guaranteed_gpus=0, borrow_limit_gpus=16)}
    state = make_state(topo, policy, quotas)
    submit(state, make_job(100, gpus=8, tenant="borrower", preemptible=True),
           make_job(101, gpus=8, tenant="borrower", preemptible=True, submit=1))
    run_cycle(state, 0)
    submit(state, make_job(1, gpus=8, tenant="owner", submit=10))
    [reclaimed] = run_cycle(state, 10).preemptions
    [still_borrowed] = {100, 101} - {reclaimed.job_id}
    assert reclaimed.job_id in state.pending
    return state, still_borrowed


def test_owner_reclaim_is_not_blocked_by_the_requeued_borrower_job_of_the_same_shape():
    """Regression (failed on commit 1e6729b): cycle.blocked_shapes is keyed by shape only, so
    when one tenant's job of a shape fails (after trying preemption, with no victims it may
    take), every other tenant's job of the same shape is skipped as WAITING_FOR_CAPACITY
    without trying its own preemption: the borrower's requeued job (older submit time, equal
    fair share) fails first each cycle, so the owner, below its guarantee, can never reclaim
    the borrowed GPUs"""
    state, still_borrowed = _reclaimed_once(get_policy("grace"))
    state.policy = dataclasses.replace(state.policy, backfill=False)  # isolate from reservations
    second = make_job(2, gpus=8, tenant="owner", submit=20)  # the requeued job's shape
    submit(state, second)

    result = decide(state, 20)

    assert result.preemptions == [PreemptJob(still_borrowed, PreemptReason.QUOTA_RECLAIM, second.id)]


def test_reservation_does_not_stop_an_owner_reclaiming_its_guarantee():
    """Regression (failed on commit 1e6729b): scheduler._try_job checks backfill reservations
    before preemption and returns WAITING_FOR_CAPACITY when the job does not fit without
    preempting, so the reservation taken by the borrower's requeued (blocked) job stops the
    owner from reclaiming its guarantee, and the same holds for a higher-priority job behind
    any reservation"""
    state, still_borrowed = _reclaimed_once("grace")
    second = make_job(2, gpus=8, per_node=8, tenant="owner", submit=20)  # another shape
    submit(state, second)

    result = decide(state, 20)

    assert result.preemptions == [PreemptJob(still_borrowed, PreemptReason.QUOTA_RECLAIM, second.id)]


def test_high_priority_job_preempts_even_after_a_low_priority_job_of_the_same_shape_failed():
    """Regression (failed on commit 1e6729b): same cause (cycle.blocked_shapes keyed by shape
    only): a low-priority job of a tenant with less usage fails first, and a high-priority job
    of the same shape from another tenant never gets to preempt the low-priority preemptible
    job holding the GPUs"""
    topo = make_cluster(nodes=1)
    state = make_state(topo, "priority", backfill=False)  # isolate from reservations
    occupy(state, make_job(100, gpus=8, tenant="b", preemptible=True, priority=0), node_gpus(topo, 0, 8))
    low = make_job(1, gpus=8, tenant="a", priority=0, submit=1)  # tenant a uses less: goes first
    high = make_job(2, gpus=8, tenant="b", priority=10, submit=2)
    submit(state, low, high)

    result = decide(state, 10)

    assert result.preemptions == [PreemptJob(100, PreemptReason.PRIORITY, high.id)]


def test_high_priority_job_preempts_even_behind_a_backfill_reservation():
    """Regression (failed on commit 1e6729b): scheduler._try_job refuses a job that breaks a
    backfill reservation before trying preemption, so a high-priority job behind a blocked low-
    priority head never preempts"""
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "priority")
    occupy(state, make_job(100, gpus=8, tenant="b", preemptible=True), node_gpus(topo, 0, 8))
    occupy(state, make_job(101, gpus=8, tenant="c"), node_gpus(topo, 1, 8))
    head = make_job(1, gpus=16, tenant="a", submit=1)  # tenant a uses nothing: examined first
    high = make_job(2, gpus=8, tenant="b", priority=10, submit=2)
    submit(state, head, high)

    result = decide(state, 10)

    assert result.preemptions == [PreemptJob(100, PreemptReason.PRIORITY, high.id)]


# ---------------------------------------------------------------------- priority and LAS


@pytest.mark.parametrize("policy", ["priority", "grace"])
def test_higher_priority_job_preempts_a_lower_priority_preemptible_job(policy):
    topo = make_cluster(nodes=1)
    state = make_state(topo, policy)
    occupy(state, make_job(100, gpus=8, priority=0, preemptible=True), node_gpus(topo, 0, 8))
    high = make_job(1, gpus=8, priority=5, submit=10)
    submit(state, high)

    result = decide(state, 10)

    assert result.preemptions == [PreemptJob(100, PreemptReason.PRIORITY, high.id)]
    assert list(started(result)) == [1]


def test_higher_priority_job_never_preempts_a_non_preemptible_job():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "priority")
    occupy(state, make_job(100, gpus=8, priority=0, preemptible=False), node_gpus(topo, 0, 8))
    high = make_job(1, gpus=8, priority=5, submit=10)
    submit(state, high)

    result = decide(state, 10)

    assert result.preemptions == []
    assert result.reason_for(high) is PendingReason.WAITING_FOR_CAPACITY


def test_equal_priority_does_not_preempt():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "priority")
    occupy(state, make_job(100, gpus=8, priority=5, preemptible=True), node_gpus(topo, 0, 8))
    submit(state, make_job(1, gpus=8, priority=5, submit=10))

    assert decide(state, 10).preemptions == []


def test_preemption_that_cannot_make_room_preempts_nothing():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "priority")
    occupy(state, make_job(100, gpus=4, preemptible=True), node_gpus(topo, 0, 4))
    occupy(state, make_job(101, gpus=4), node_gpus(topo, 0, 8)[:4])
    occupy(state, make_job(102, gpus=8), node_gpus(topo, 1, 8))
    high = make_job(1, gpus=8, priority=5, submit=10)  # needs a whole node: none can be freed
    submit(state, high)

    result = decide(state, 10)

    assert result.preemptions == []
    assert result.reason_for(high) is PendingReason.WAITING_FOR_CAPACITY


def test_preemption_picks_the_lowest_priority_victim_first():
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "priority")
    occupy(state, make_job(100, gpus=8, priority=3, preemptible=True), node_gpus(topo, 0, 8))
    occupy(state, make_job(101, gpus=8, priority=1, preemptible=True), node_gpus(topo, 1, 8))
    submit(state, make_job(1, gpus=8, priority=5, submit=10))

    assert [p.job_id for p in decide(state, 10).preemptions] == [101]


def test_preemption_only_takes_victims_whose_gpus_the_job_uses():
    """Regression (failed on commit 1e6729b): scheduler._preempt_for releases victims one by one
    until the job fits and preempts every victim released so far, even those whose GPUs the
    final placement does not use: a 4-GPU job on a node that can never hold the 8-GPU gang is
    preempted for nothing"""
    topo = make_cluster(nodes=2, nodes_per_leaf=2)
    state = make_state(topo, "priority")
    occupy(state, make_job(101, gpus=8, preemptible=True), node_gpus(topo, 1, 8), now=0)
    occupy(state, make_job(100, gpus=4, preemptible=True), node_gpus(topo, 0, 4), now=5)  # newest
    occupy(state, make_job(102, gpus=4), node_gpus(topo, 0, 8)[:4], now=0)
    high = make_job(1, gpus=8, priority=5, submit=10)
    submit(state, high)

    result = decide(state, 10)

    used = set(started(result)[1].gpus)
    for p in result.preemptions:
        assert used & set(state.running[p.job_id].placement.gpus), f"job {p.job_id} preempted for nothing"


def test_las_preempts_a_job_that_has_had_more_service():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "las")
    occupy(state, make_job(100, gpus=8, preemptible=True, attained=9 * 3600), node_gpus(topo, 0, 8))
    newcomer = make_job(1, gpus=8, submit=10)
    submit(state, newcomer)

    result = decide(state, 10)

    assert result.preemptions == [PreemptJob(100, PreemptReason.LEAST_ATTAINED_SERVICE, newcomer.id)]


def test_las_does_not_preempt_a_job_at_the_same_service_level():
    topo = make_cluster(nodes=1)
    state = make_state(topo, "las")
    occupy(state, make_job(100, gpus=8, preemptible=True), node_gpus(topo, 0, 8))
    submit(state, make_job(1, gpus=8, submit=10))

    assert decide(state, 10).preemptions == []
