"""Invariants of ``decide`` on random clusters and random job streams.

Each example builds a random cluster (1-3 node groups of 1-16 nodes, 1-8 GPUs
per node, 1-4 nodes per leaf, some MIG GPUs, one or two pools), picks a policy
and tenant quotas, then drives several cycles: submit random jobs (whole,
shaped, sub-GPU; preemptible or not; with or without estimates and limits),
finish random running jobs, drain and undrain random nodes, then
``decide`` + ``apply``. After every cycle it checks, against an independent
model of which GPUs and slices are in use:

- ``decide`` changed nothing (the contents of every index, queue and usage);
- replaying the decisions in order (stops, then for each start its victims and
  the start) never gives a GPU twice and never overfills a split GPU;
- each start is one complete gang: its exact GPU count (and per-node shape) or
  one slice, on one GPU model it accepts, in one pool, on usable, allowed nodes;
- a gang that one node (or one leaf switch) could hold at that moment is put
  on one node (one leaf); under a policy with ``leaf_locality``, a gang no
  bigger than a leaf never spans two, unless (``placement: headroom``, the
  default) no leaf holds it at that moment;
- preemptions are of preemptible jobs, for a job that starts and uses the victim's GPUs,
  for a stated reason, within each victim tenant's preemptions-per-hour budget;
- quotas: non-borrowing usage within the guarantee, all usage within guarantee
  plus borrow limit, and only preemptible jobs borrow;
- every job left waiting has a reason; the capacity index matches the running jobs.

Set ``GRACE_PROPERTY_EXAMPLES`` to run more examples (default sized for CI).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grace.core import (
    POLICIES,
    DecideResult,
    JobId,
    PendingJob,
    Placement,
    SchedulerState,
    TenantQuota,
    Topology,
    decide,
)
from grace.core.decisions import PreemptReason
from grace.core.placement import PlacementMode, WholeRequest

from .builders import A100, H100, L40S, check_index, make_cluster, make_state, mig_request, snapshot

EXAMPLES = int(os.environ.get("GRACE_PROPERTY_EXAMPLES", "200"))
TENANTS = ("a", "b", "c")
MIG_MODELS = {H100, A100}
EPS = 1e-6
#: A short sub-GPU job placed on GPUs held for a reservation crashes decide (known bug, see
#: test_short_slice_job_may_backfill_onto_gpus_held_for_a_reservation): until it is fixed,
#: sub-GPU jobs here carry no estimate, so they never backfill into held GPUs.
AVOID_SLICES_IN_HOLDS = True
ANY_BOOL = st.booleans()

# ---------------------------------------------------------------------- strategies


@st.composite
def node_groups(draw, index: int, max_nodes: int) -> dict:
    gpus = draw(st.integers(1, 8))
    model = draw(st.sampled_from([H100, A100, L40S]))
    mig = draw(st.integers(0, min(gpus, 2))) if model in MIG_MODELS else 0
    return {
        "name": f"g{index}", "count": draw(st.integers(1, max_nodes)), "gpu": model,
        "gpus_per_node": gpus, "nodes_per_leaf": draw(st.integers(1, 4)),
        "mig_gpus_per_node": mig, "pool": draw(st.sampled_from(["p0", "p1"])),
    }


@st.composite
def cluster_specs(draw, max_groups: int = 3, max_nodes: int = 16) -> list[dict]:
    """Node groups as plain dicts (a short falsifying example); ``build`` makes the topology."""
    n = draw(st.integers(1, max_groups))
    return [draw(node_groups(i, max_nodes)) for i in range(n)]


def build(groups: list[dict]) -> Topology:
    return make_cluster(groups=groups, pools=["p0", "p1"])


quotas_st = st.dictionaries(
    st.sampled_from(TENANTS),
    st.builds(
        TenantQuota,
        guaranteed_gpus=st.sampled_from([0.0, 2.0, 4.0, 8.0, 16.0, math.inf]),
        borrow_limit_gpus=st.sampled_from([0.0, 4.0, 8.0, math.inf]),
        weight=st.sampled_from([1.0, 2.0, 3.0]),
        preemptions_per_hour=st.integers(0, 3),
    ),
)


@st.composite
def jobs(draw, topo: Topology, job_id: int, now: float,
         preemptible: st.SearchStrategy[bool] = ANY_BOOL) -> PendingJob:
    models_here = sorted(topo.gpu_models)
    models = draw(st.lists(st.sampled_from(models_here), min_size=1, max_size=len(models_here),
                           unique=True))
    shareable = [m for m in models if m in topo.shareable_models]
    max_gpus = max(n.gpus for n in topo.nodes)
    kind = draw(st.sampled_from(["whole", "whole", "shaped", "slice"]))
    whole = None
    slices = {}
    if kind == "slice" and shareable:
        fraction = draw(st.sampled_from([1 / 7, 0.25, 0.5, 0.75]))
        slices = {m: mig_request(m, fraction) for m in shareable}
        models = shareable
    elif kind == "shaped":
        per_node = draw(st.integers(1, max_gpus))
        whole = WholeRequest(per_node * draw(st.integers(1, 3)), per_node)
    else:
        whole = WholeRequest(draw(st.integers(1, 2 * max_gpus + 2)))
    estimate = draw(st.none() | st.integers(10, 600).map(float))
    if slices and AVOID_SLICES_IN_HOLDS:
        estimate = None
    limit = draw(st.none() | st.integers(10, 900).map(float))
    if estimate is not None and limit is not None and estimate > limit:
        estimate, limit = limit, estimate
    pools_here = sorted({n.pool for n in topo.nodes})
    pools = draw(st.none() | st.none() | st.sampled_from([(p,) for p in pools_here] + [("p0", "p1")]))
    exclude = draw(st.sampled_from([frozenset()] * 3) |
                   st.frozensets(st.integers(0, len(topo.nodes) - 1), max_size=3))
    return PendingJob(
        id=JobId(job_id), tenant=draw(st.sampled_from(TENANTS)), submit_s=now, whole=whole,
        slices=slices, models=tuple(models), priority=draw(st.integers(0, 2)),
        estimate_s=estimate, limit_s=limit, preemptible=draw(preemptible),
        exclude_nodes=exclude, pools=pools,
        attained_gpu_s=draw(st.sampled_from([0.0, 0.0, 2 * 3600.0, 10 * 3600.0])),
    )


# ---------------------------------------------------------------------- an independent GPU ledger


@dataclass
class Ledger:
    """Which whole GPUs are free and how full each split GPU is, kept by hand."""

    topo: Topology
    free: dict[int, set[int]] = field(default_factory=dict)
    split: dict[int, list[int]] = field(default_factory=dict)  # gpu -> [compute, memory, users]

    @classmethod
    def of(cls, state: SchedulerState) -> Ledger:
        topo = state.topo
        led = cls(topo, {n.index: set(range(n.gpu_base, n.gpu_base + n.gpus)) for n in topo.nodes})
        for run in state.running.values():
            led.take(run.placement, f"running job {run.id}")
        return led

    def take(self, p: Placement, who: str) -> None:
        units = self.topo.slice_units
        for g in p.gpus:
            node = self.topo.gpu_node[g]
            assert g in self.free[node], f"{who}: GPU {g} given twice"
            self.free[node].discard(g)
        for s in p.slices:
            if s.gpu not in self.split:
                node = self.topo.gpu_node[s.gpu]
                assert s.gpu in self.free[node], f"{who}: slice on GPU {s.gpu}, which is not free"
                assert s.gpu - self.topo.nodes[node].gpu_base < self.topo.nodes[node].shareable_gpus, \
                    f"{who}: slice on GPU {s.gpu}, which may not be split"
                self.free[node].discard(s.gpu)
                self.split[s.gpu] = [0, 0, 0]
            used = self.split[s.gpu]
            used[0] += s.compute
            used[1] += s.memory
            used[2] += 1
            assert used[0] <= units[0] and used[1] <= units[1], f"{who}: GPU {s.gpu} split past its units"

    def give(self, p: Placement) -> None:
        for g in p.gpus:
            self.free[self.topo.gpu_node[g]].add(g)
        for s in p.slices:
            used = self.split[s.gpu]
            used[0] -= s.compute
            used[1] -= s.memory
            used[2] -= 1
            if used[2] == 0:
                del self.split[s.gpu]
                self.free[self.topo.gpu_node[s.gpu]].add(s.gpu)

    def matches(self, state: SchedulerState) -> None:
        cap = state.capacity
        units = self.topo.slice_units
        for n in self.topo.nodes:
            bits = {n.gpu_base + i for i in range(n.gpus) if cap.free_mask[n.index] >> i & 1}
            assert bits == self.free[n.index], f"node {n.index}: index says free {bits}"
        assert cap.slice_free == {g: (units[0] - c, units[1] - m) for g, (c, m, _) in self.split.items()}
        assert cap.slice_count == {g: users for g, (_, _, users) in self.split.items()}


# ---------------------------------------------------------------------- the checks


def _group_nodes(topo: Topology, key: tuple[str, str]) -> list[int]:
    return [n.index for n in topo.nodes if (n.pool, n.gpu_model) == key]


def _check_start(state: SchedulerState, led: Ledger, job: PendingJob, p: Placement,
                 usable: list[bool], reservations: list) -> None:
    topo = state.topo
    nodes = p.nodes(topo)
    keys = {(topo.nodes[n].pool, topo.nodes[n].gpu_model) for n in nodes}
    assert len(keys) == 1, f"job {job.id} spans pools or models: {keys}"
    [key] = keys
    pool, model = key
    assert model in job.models, f"job {job.id} got {model}, accepts {job.models}"
    assert job.pools is None or pool in job.pools
    assert all(usable[n] for n in nodes), f"job {job.id} placed on a drained node"
    assert not set(nodes) & job.exclude_nodes, f"job {job.id} placed on an excluded node"
    if job.whole is None:
        assert p.gpus == () and len(p.slices) == 1, f"job {job.id}: not one slice"
        req = job.slices[model]
        assert (p.slices[0].compute, p.slices[0].memory) == (req.compute, req.memory)
        return
    count, per_node = job.whole.count, job.whole.per_node
    assert p.slices == () and len(p.gpus) == count == len(set(p.gpus)), f"job {job.id}: wrong count"
    per = {n: sum(1 for g in p.gpus if topo.gpu_node[g] == n) for n in nodes}
    if per_node is not None:
        assert set(per.values()) == {per_node}, f"job {job.id}: shape {per} is not x{per_node}"
    if state.policy.replan:
        return  # re-planning (Tiresias) spreads over the freest nodes by definition (core.replan)
    # locality, judged on what was free when decide placed this job
    allowed = [n for n in _group_nodes(topo, key) if usable[n] and n not in job.exclude_nodes]
    free = {n: len(led.free[n]) for n in allowed}
    group_max = max(topo.nodes[n].gpus for n in _group_nodes(topo, key))
    if (per_node is None and count <= group_max) or per_node == count:
        assert len(nodes) == 1, f"job {job.id} fits one node but got {per}"
        return
    shaped = per_node or group_max
    needed = -(-count // shaped)
    last = count - (needed - 1) * shaped
    group = set(_group_nodes(topo, key))
    leaf_size = max(sum(1 for n in leaf if n in group) for leaf in topo.leaf_nodes)
    # leaf locality waits for a leaf; under ``headroom`` (the default) a gang that no leaf
    # holds now may cross instead (when the uplinks have room: tests/core/test_spine_load),
    # but never while some leaf holds it (judged below)
    waits = state.policy.placement is not PlacementMode.HEADROOM
    if state.policy.leaf_locality and needed <= leaf_size and waits:
        assert len(p.leaves(topo)) == 1, f"job {job.id} could fit one leaf but spans {per}"
    if any(r.models & set(job.models) for r in reservations):
        return  # GPUs held for a backfill reservation are not visible here: not judged
    for leaf_nodes in topo.leaf_nodes:
        here = [n for n in leaf_nodes if n in free]
        holds_all_but_one = sum(free[n] >= shaped for n in here) >= needed - 1
        if holds_all_but_one and sum(free[n] >= last for n in here) >= needed:
            assert len(p.leaves(topo)) == 1, (
                f"job {job.id} fits leaf of {here} but spans {per}; free {free}; "
                f"reservations {reservations}")
            return


def _check_cycle(state: SchedulerState, result: DecideResult, now: float, usable: list[bool]) -> None:
    pending = state.pending
    started = {s.job_id: s for s in result.starts}
    assert len(started) == len(result.starts), "a job started twice"
    for job in pending.values():
        reason = result.reason_for(job)
        assert (reason is None) == (job.id in started), f"job {job.id}: reason {reason}"
    for s in result.starts:
        assert s.job_id in pending, f"started job {s.job_id} was not waiting"
    stopped = {s.job_id for s in result.stops}
    for jid in stopped:
        assert state.running[jid].deadline_s <= now
    for jid, run in state.running.items():
        if run.deadline_s <= now:
            assert jid in stopped, f"job {jid} is past its limit but was not stopped"
    victims_of: dict[JobId, list] = {}
    for p in result.preemptions:
        assert p.job_id in state.running and p.job_id not in stopped
        assert p.for_job in started, f"job {p.job_id} preempted for job {p.for_job}, which did not start"
        victim, job = state.running[p.job_id], pending[p.for_job]
        assert victim.preemptible, f"non-preemptible job {victim.id} preempted"
        if p.reason is PreemptReason.PRIORITY:
            assert victim.priority < job.priority
        elif p.reason is PreemptReason.QUOTA_RECLAIM:
            assert victim.borrowing and victim.tenant != job.tenant
        victims_of.setdefault(p.for_job, []).append(victim)
        taken = set(started[p.for_job].placement.gpus) | {x.gpu for x in started[p.for_job].placement.slices}
        held = set(victim.placement.gpus) | {x.gpu for x in victim.placement.slices}
        assert taken & held, f"job {victim.id} preempted for job {p.for_job}, which uses none of its GPUs"
    assert len({p.job_id for p in result.preemptions}) == len(result.preemptions)
    charged: dict[str, int] = {}
    for p in result.preemptions:
        victim_tenant = state.running[p.job_id].tenant
        if victim_tenant != pending[p.for_job].tenant:
            charged[victim_tenant] = charged.get(victim_tenant, 0) + 1
    for tenant, n in charged.items():
        assert n <= state.preemption_budget_left(tenant, now), f"{tenant}: {n} preemptions over budget"

    # replay the cycle in decide's own order on the independent ledger
    led = Ledger.of(state)
    for jid in stopped:
        led.give(state.running[jid].placement)
    for s in result.starts:
        for victim in victims_of.get(s.job_id, []):
            led.give(victim.placement)
        _check_start(state, led, pending[s.job_id], s.placement, usable, result.reservations)
        led.take(s.placement, f"job {s.job_id}")
        if s.borrowing:
            assert pending[s.job_id].preemptible


def _check_after_apply(state: SchedulerState) -> None:
    check_index(state.capacity)
    Ledger.of(state).matches(state)
    for tenant, used in state.usage.items():
        assert abs(used.gpus - sum(r.gpu_equivalents for r in state.running.values()
                                   if r.tenant == tenant)) < EPS
    if not state.policy.quotas:
        return
    for tenant, quota in state.quotas.items():
        runs = [r for r in state.running.values() if r.tenant == tenant]
        own = sum(r.gpu_equivalents for r in runs if not r.borrowing)
        total = sum(r.gpu_equivalents for r in runs)
        assert own <= quota.guaranteed_gpus + EPS, f"{tenant}: {own} over guarantee"
        assert total <= quota.max_gpus + EPS, f"{tenant}: {total} over guarantee + borrow"
        assert all(r.preemptible for r in runs if r.borrowing)


# ---------------------------------------------------------------------- the driver


def _quiet_snapshot(state: SchedulerState, now: float) -> tuple:
    # decide may prune preemption history older than an hour (a known, separately tested
    # bug: test_decide_does_not_drop_preemption_history); prune it first so purity is exact
    for tenant in list(state.usage):
        state.preemption_budget_left(tenant, now)
    return snapshot(state)


@dataclass(frozen=True)
class Stream:
    """How a driven run looks: cycles, jobs per cycle, drains, and job traits."""

    cycles: int = 6
    max_new: int = 4
    max_finish: int = 3
    max_drains: int = 2
    preemptible: st.SearchStrategy[bool] = ANY_BOOL


def _one_cycle(state: SchedulerState, now: float) -> None:
    usable = list(state.capacity.usable)
    before = _quiet_snapshot(state, now)
    result = decide(state, now)
    assert snapshot(state) == before, "decide changed the state"
    check_index(state.capacity)
    # not checked here: decide(state, now) == result. A decide reorders nodes inside the
    # capacity buckets, so a second call may pick another, equally good node (known bug,
    # see test_decide_twice_picks_the_same_node)
    _check_cycle(state, result, now, usable)
    state.apply(result, now)
    _check_after_apply(state)


def _drive(data, topo: Topology, policy: str, quotas: dict[str, TenantQuota], stream: Stream) -> None:
    state = make_state(topo, policy, quotas)
    now = 0.0
    next_id = 1
    for _ in range(stream.cycles):
        if state.running:
            done = data.draw(st.lists(st.sampled_from(sorted(state.running)), unique=True,
                                      max_size=stream.max_finish))
            for job_id in done:
                state.finish(job_id, now)
        for _ in range(data.draw(st.integers(0, stream.max_drains))):
            node = data.draw(st.integers(0, len(topo.nodes) - 1))
            state.set_node_usable(node, data.draw(st.booleans()))
        for _ in range(data.draw(st.integers(0, stream.max_new))):
            state.submit(data.draw(jobs(topo, next_id, now, stream.preemptible)))
            next_id += 1
        _one_cycle(state, now)
        now += data.draw(st.sampled_from([0.0, 5.0, 60.0, 300.0, 1000.0]))


_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}


@pytest.mark.slow  # 5-12 s each: CI runs them (make test), make test-fast does not
@settings(max_examples=EXAMPLES, **_SETTINGS)
@given(groups=cluster_specs(), policy=st.sampled_from(sorted(POLICIES)), quotas=quotas_st,
       cycles=st.integers(1, 8), data=st.data())
def test_decide_invariants_hold_over_random_cycles(groups, policy, quotas, cycles, data):
    _drive(data, build(groups), policy, quotas, Stream(cycles=cycles))


@pytest.mark.slow  # 5-12 s each: CI runs them (make test), make test-fast does not
@settings(max_examples=max(20, EXAMPLES // 3), **_SETTINGS)
@given(groups=cluster_specs(), data=st.data())
def test_busy_cluster_under_the_default_policy(groups, data):
    """Many jobs per cycle, few completions: placement under pressure, backfill, preemption."""
    _drive(data, build(groups), "grace", {}, Stream(cycles=6, max_new=10, max_finish=2))


@pytest.mark.slow  # 5-12 s each: CI runs them (make test), make test-fast does not
@settings(max_examples=max(20, EXAMPLES // 3), **_SETTINGS)
@given(groups=cluster_specs(max_groups=2, max_nodes=4),
       policy=st.sampled_from(["priority", "grace"]),
       guaranteed=st.lists(st.sampled_from([0.0, 1.0, 2.0, 4.0, 8.0]), min_size=3, max_size=3),
       budget=st.integers(0, 4), data=st.data())
def test_quotas_hold_while_tenants_borrow_and_reclaim(groups, policy, guaranteed, budget, data):
    """Small clusters, every tenant with a small guarantee and unlimited borrowing, mostly
    preemptible jobs: borrowing, quota reclaim and preemption budgets all happen."""
    quotas = {t: TenantQuota(guaranteed_gpus=g, borrow_limit_gpus=math.inf,
                             preemptions_per_hour=budget) for t, g in zip(TENANTS, guaranteed, strict=True)}
    stream = Stream(cycles=8, max_new=5, max_finish=1, max_drains=1,
                    preemptible=st.sampled_from([True, True, True, False]))
    _drive(data, build(groups), policy, quotas, stream)


@pytest.mark.slow  # 5-12 s each: CI runs them (make test), make test-fast does not
@settings(max_examples=max(20, EXAMPLES // 4), **_SETTINGS)
@given(groups=cluster_specs(max_groups=2, max_nodes=4), data=st.data())
def test_las_preemption_keeps_the_invariants(groups, data):
    """Least-attained-service on small clusters: jobs with more service get preempted."""
    stream = Stream(cycles=8, max_new=5, max_finish=1, max_drains=1,
                    preemptible=st.sampled_from([True, True, False]))
    _drive(data, build(groups), "las", {}, stream)
