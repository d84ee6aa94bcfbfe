"""``queue_order`` (what ``grace priority`` shows) is the order ``decide`` visits waiting
jobs in: whatever the priorities, tenants, usage and attained service, the job the next
cycle starts when one GPU is free is the list's head, under every policy; without fair
share the first k started are its first k."""

from __future__ import annotations

import random

import pytest

from grace.core import TenantQuota
from grace.core.queue_view import queue_order
from grace.core.quotas import fair_share

from .builders import make_cluster, make_job, make_state, run_cycle, submit

TENANTS = ("a", "b", "c")


def _scene(policy: str, seed: int, free: int):
    """One 8-GPU node, ``8 - free`` GPUs held by non-preemptible jobs of random tenants,
    and 12 waiting one-GPU jobs with random priorities, tenants, submit times, service."""
    rng = random.Random(seed)
    state = make_state(make_cluster(nodes=1, gpus=8), policy,
                       quotas={t: TenantQuota(weight=rng.choice((1.0, 2.0))) for t in TENANTS})
    held = [make_job(100 + i, gpus=1, tenant=rng.choice(TENANTS)) for i in range(8 - free)]
    submit(state, *held)
    run_cycle(state, 0.0)
    assert len(state.running) == 8 - free
    submit(state, *(make_job(i, gpus=1, tenant=rng.choice(TENANTS), submit=rng.uniform(1, 50),
                             priority=rng.choice((0, 0, 1, 5)),
                             attained=rng.choice((0.0, 20 * 3600.0))) for i in range(1, 13)))
    return state


@pytest.mark.parametrize("policy", ["fifo", "easy-backfill", "priority", "las", "grace"])
def test_the_head_of_the_list_is_the_job_decide_starts(policy: str) -> None:
    for seed in range(25):
        state = _scene(policy, seed, free=1)
        order = queue_order(state)
        assert [e.position for e in order] == list(range(1, 13))
        started = [s.job_id for s in run_cycle(state, 60.0).starts]
        assert started == [order[0].job_id], (seed, started, order[:3])


@pytest.mark.parametrize("policy", ["fifo", "easy-backfill"])
def test_without_fair_share_the_first_k_started_are_the_first_k_listed(policy: str) -> None:
    for seed in range(10):
        state = _scene(policy, seed, free=4)
        order = queue_order(state)
        started = [s.job_id for s in run_cycle(state, 60.0).starts]
        assert started == [e.job_id for e in order[:4]], seed


def test_factors_are_the_policys_key_and_the_tenants_fair_share() -> None:
    state = _scene("grace", 3, free=1)
    for e in queue_order(state):
        job = state.pending[e.job_id]
        assert [f.name for f in e.factors] == ["priority", "las", "size", "submit"]
        values = {f.name: f.value for f in e.factors}
        assert values["priority"] == job.priority and values["submit"] == job.submit_s
        assert values["las"] == state.policy.level(job.attained_gpu_s)
        assert e.fair_share == fair_share(state.quota(job.tenant), e.tenant_gpus)
