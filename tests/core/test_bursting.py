"""Bursting policy: routing defaults, the spot bound, expected-cost choice, triggers, releases.

Worked numbers (restart_s 900 s and checkpoint_interval_s 3600 s, so a preemption
costs 0.25 h + 0.5 h = 0.75 h of the gang):

- 8 GPUs for 10 h on spot at 1 $/GPU-h, 0.2 preemptions per node-hour:
  restarts = 0.2 x 1 x 10 = 2; billed 10 + 2 x 0.75 = 11.5 h; 8 x 11.5 x 1 = 92 $.
- 16 GPUs (2 nodes) for 10 h on spot at 1 $/GPU-h, 1 preemption per node-hour:
  restarts = 1 x 2 x 10 = 20; billed 10 + 20 x 0.75 = 25 h; 16 x 25 x 1 = 400 $,
  against on-demand at 2 $/GPU-h: 16 x 10 x 2 = 320 $. On-demand wins at twice
  the sticker price.
- data gravity: 1,000 GB at 0.09 $/GB adds 90 $.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from grace.core import decide
from grace.core.bursting import (
    BurstDecisions,
    BurstJob,
    BurstPlan,
    CloudFleet,
    JobTraits,
    ProvisionNodes,
    ReleaseNodes,
    cheapest_offer,
    expected_cost_usd,
    held_back,
    plan_bursts,
    plan_releases,
    route,
    spot_allowed,
    wait_budget_s,
)
from grace.core.decisions import PendingReason
from grace.core.topology import Topology
from grace.spec.bursting import BurstingSpec, OfferKind
from grace.spec.cluster import PoolKind
from grace.spec.errors import SpecError
from grace.spec.job import WorkloadClass
from grace.spec.loader import parse_bursting, parse_cluster

from .builders import H100, make_job, make_state, occupy

HOUR = 3600.0


def hybrid(own: int = 2, spot: int = 4, od: int = 4, colo: int = 0) -> tuple[Topology, dict]:
    pools = [{"name": "own", "kind": "on-prem"}, {"name": "spot", "kind": "cloud"},
             {"name": "od", "kind": "cloud"}]
    groups = [{"name": "own", "count": own, "gpu": H100, "pool": "own"},
              {"name": "spot", "count": spot, "gpu": H100, "pool": "spot"},
              {"name": "od", "count": od, "gpu": H100, "pool": "od"}]
    if colo:
        pools.append({"name": "colo", "kind": "colo"})
        groups.append({"name": "colo", "count": colo, "gpu": H100, "pool": "colo"})
    spec = parse_cluster({"name": "hybrid", "pools": pools, "node_groups": groups})
    return Topology.from_spec(spec), {p.name: p.kind for p in spec.pools}


def offers(spot_price: float = 1.0, od_price: float = 2.0, rate: float = 0.2,
           spot_egress: float = 0.0, max_nodes: int = 4) -> list[dict]:
    return [
        {"name": "spot", "gpu": H100, "kind": "spot", "usd_per_gpu_hour": spot_price,
         "preemptions_per_hour": rate, "egress_usd_per_gb": spot_egress, "max_nodes": max_nodes},
        {"name": "od", "gpu": H100, "kind": "on-demand", "usd_per_gpu_hour": od_price,
         "max_nodes": max_nodes},
    ]


def make_plan(**spec: object) -> tuple[BurstPlan, Topology]:
    topo, kinds = hybrid()
    bursting = BurstingSpec.model_validate({"offers": offers(), **spec})
    return BurstPlan.build(bursting, topo, kinds), topo


# ----------------------------------------------------------------------------- spec
def test_defaults_route_experiments_to_spot_and_full_runs_to_reservations_only():
    spec = BurstingSpec()
    assert OfferKind.SPOT in spec.routes[WorkloadClass.EXPERIMENT].offers
    assert OfferKind.SPOT in spec.routes[WorkloadClass.SWEEP].offers
    assert set(spec.routes[WorkloadClass.FULL_RUN].offers) == {
        OfferKind.RESERVED_1Y, OfferKind.RESERVED_3Y}
    assert spec.sensitive_data_pools == [PoolKind.ON_PREM]
    assert spec.max_spot_runtime_s == 86_400


def test_spot_priced_above_on_demand_is_refused_naming_the_field():
    with pytest.raises(ValidationError, match=r"offers\[0\].usd_per_gpu_hour.*above on-demand"):
        BurstingSpec.model_validate({"offers": offers(spot_price=3.0, od_price=2.0)})


def test_full_runs_on_spot_and_preemptions_on_on_demand_are_refused_with_the_fix():
    with pytest.raises(ValidationError, match="full runs never go on spot"):
        BurstingSpec.model_validate({"routes": {
            c.value: {"pools": ["on-prem"], "offers": ["spot"]} for c in WorkloadClass}})
    bad = offers()
    bad[1]["preemptions_per_hour"] = 0.5
    with pytest.raises(ValidationError, match="only spot capacity is preempted"):
        BurstingSpec.model_validate({"offers": bad})


def test_loader_reads_kind_bursting_and_a_bursting_section_and_lists_bad_fields():
    spec = parse_bursting({"kind": "bursting", "queue_wait_threshold_s": "30m", "offers": offers()})
    assert spec.queue_wait_threshold_s == 1800 and len(spec.offers) == 2
    assert parse_bursting({"bursting": {"idle_release_s": 0}}).idle_release_s == 0
    with pytest.raises(SpecError) as e:
        parse_bursting({"kind": "bursting", "idle_release_s": "soon", "surprise": 1})
    paths = {p.path for p in e.value.problems}
    assert {"idle_release_s", "surprise"} <= paths


def test_offers_must_name_cloud_pools_with_matching_nodes():
    topo_spec = parse_cluster({"name": "c", "pools": [{"name": "own"}], "node_groups": [
        {"name": "own", "count": 1, "gpu": H100, "pool": "own"}]})
    problems = BurstingSpec.model_validate({"offers": offers()}).check_cluster(topo_spec)
    assert any("offers[0].pool" in p and "no pool 'spot'" in p for p in problems)


# ----------------------------------------------------------------------------- routing
def test_routing_defaults_by_class_sensitivity_and_runtime():
    plan, _ = make_plan()
    short = make_job(1, estimate=2 * HOUR)
    assert route(plan, short) == ("own", "spot", "od")
    full = make_job(2, estimate=5 * 24 * HOUR)
    full.workload_class = WorkloadClass.FULL_RUN
    assert route(plan, full) == ("own",)
    tune = make_job(3, estimate=2 * HOUR)
    tune.workload_class = WorkloadClass.FINE_TUNE
    assert route(plan, tune) == ("own", "spot", "od")
    assert route(plan, tune, JobTraits(sensitive_data=True)) == ("own",)


def test_spot_bound_uses_the_limit_then_the_estimate_and_refuses_unknown_runtimes():
    plan, _ = make_plan(max_spot_runtime_s=10 * HOUR)
    assert spot_allowed(plan.spec, make_job(1, estimate=9 * HOUR))
    assert not spot_allowed(plan.spec, make_job(2, estimate=11 * HOUR))
    assert not spot_allowed(plan.spec, make_job(3, estimate=1 * HOUR, limit=11 * HOUR))
    assert not spot_allowed(plan.spec, make_job(4))
    assert route(plan, make_job(5, estimate=2 * 24 * HOUR)) == ("own", "od")


# ----------------------------------------------------------------------------- expected cost
def test_expected_cost_on_worked_numbers():
    plan, _ = make_plan()
    spot, od = plan.offers["spot"], plan.offers["od"]
    assert expected_cost_usd(plan.spec, spot, 8, 10 * HOUR) == pytest.approx(92.0)
    assert expected_cost_usd(plan.spec, od, 8, 10 * HOUR) == pytest.approx(160.0)
    assert expected_cost_usd(plan.spec, od, 8, 10 * HOUR, dataset_gb=1000) == pytest.approx(160.0)


def test_preemption_risk_not_sticker_price_picks_the_offer():
    topo, kinds = hybrid()
    spec = BurstingSpec.model_validate({"offers": offers(rate=1.0)})
    plan = BurstPlan.build(spec, topo, kinds)
    job = make_job(1, gpus=16, estimate=10 * HOUR)
    job.pools = route(plan, job)
    offer, usd = cheapest_offer(plan, job)  # type: ignore[misc]
    assert offer.name == "od" and usd == pytest.approx(320.0)
    assert expected_cost_usd(spec, plan.offers["spot"], 16, 10 * HOUR) == pytest.approx(400.0)


def test_data_gravity_counts_in_the_choice():
    topo, kinds = hybrid()
    spec = BurstingSpec.model_validate({"offers": offers(spot_egress=0.09)})
    plan = BurstPlan.build(spec, topo, kinds)
    job = make_job(1, gpus=8, estimate=10 * HOUR)
    job.pools = route(plan, job)
    assert cheapest_offer(plan, job)[0].name == "spot"  # type: ignore[index]  # 92 $ vs 160 $
    heavy = JobTraits(dataset_gb=1000)  # spot: 92 + 90 = 182 $ > 160 $ on-demand
    offer, usd = cheapest_offer(plan, job, heavy)  # type: ignore[misc]
    assert offer.name == "od" and usd == pytest.approx(160.0)


# ----------------------------------------------------------------------------- triggers
def _busy_state(threshold_h: float, running_h: float):
    plan, topo = make_plan(queue_wait_threshold_s=threshold_h * HOUR)
    state = make_state(topo, "grace")
    for n in plan.offer_nodes(plan.offers["spot"]) + plan.offer_nodes(plan.offers["od"]):
        state.set_node_usable(n, False)
    # both owned nodes busy until running_h
    for i, node in enumerate((0, 1)):
        info = topo.nodes[node]
        occupy(state, make_job(100 + i, estimate=running_h * HOUR, pools=("own",)),
               gpus=tuple(range(info.gpu_base, info.gpu_base + 8)))
    job = make_job(1, estimate=2 * HOUR)
    job.pools = held_back(plan, route(plan, job))
    assert job.pools == ("own",)  # waits for owned capacity until the policy bursts it
    state.submit(job)
    return plan, topo, state, job


NOTHING = BurstDecisions()


def test_a_forecast_wait_over_the_threshold_rents_the_cheapest_offer():
    plan, _, state, job = _busy_state(threshold_h=1, running_h=5)
    result = decide(state, 0.0)
    assert result.reason_for(job) is PendingReason.WAITING_FOR_CAPACITY
    out = plan_bursts(state, plan, CloudFleet(), result.reason_for, 0.0)
    assert out.burst == [BurstJob(job.id, ("own", "spot", "od"))]
    assert out.provision == [
        ProvisionNodes("spot", 1, (job.id,), pytest.approx(8 * (2 + 0.4 * 0.75)))]


def test_a_job_burst_earlier_keeps_its_claim_without_a_second_rental():
    plan, _, state, job = _busy_state(threshold_h=1, running_h=5)
    reason = decide(state, 0.0).reason_for
    first = plan_bursts(state, plan, CloudFleet(), reason, 0.0)
    state.withdraw(job.id)
    job.pools = first.burst[0].pools
    job.shape = ()
    job.__post_init__()
    state.submit(job)
    coming = CloudFleet(provisioning={"spot": 1})
    assert plan_bursts(state, plan, coming, decide(state, 0.0).reason_for, 0.0) == NOTHING


def test_a_long_job_waits_within_its_runtime_budget():
    """Forecast wait 5 h: over the 1 h threshold, but within 0.5 x a 20 h runtime."""
    plan, _, state, job = _busy_state(threshold_h=1, running_h=5)
    state.withdraw(job.id)
    long = make_job(2, estimate=20 * HOUR)
    long.pools = held_back(plan, route(plan, long))
    state.submit(long)
    budget = plan.spec.model_copy(update={"wait_budget_per_runtime": 0.5})
    plan.spec = budget
    assert wait_budget_s(budget, long) == 10 * HOUR
    assert plan_bursts(state, plan, CloudFleet(), decide(state, 0.0).reason_for, 0.0) == NOTHING


def test_a_short_forecast_wait_rents_nothing_and_capacity_on_its_way_is_counted():
    plan, _, state, _ = _busy_state(threshold_h=6, running_h=5)
    assert plan_bursts(state, plan, CloudFleet(), decide(state, 0.0).reason_for, 0.0) == NOTHING
    plan, _, state, job = _busy_state(threshold_h=1, running_h=5)
    coming = CloudFleet(provisioning={"spot": 1})
    out = plan_bursts(state, plan, coming, decide(state, 0.0).reason_for, 0.0)
    assert out.provision == [] and [b.job_id for b in out.burst] == [job.id]


def test_over_quota_jobs_do_not_trigger_bursting():
    plan, _, state, _ = _busy_state(threshold_h=1, running_h=5)

    def over_quota(_job: object) -> PendingReason:
        return PendingReason.OVER_QUOTA

    assert plan_bursts(state, plan, CloudFleet(), over_quota, 0.0) == NOTHING


def test_full_runs_never_trigger_spot_or_on_demand():
    plan, _, state, job = _busy_state(threshold_h=0, running_h=50)
    state.withdraw(job.id)
    full = make_job(2, estimate=3 * 24 * HOUR)
    full.workload_class = WorkloadClass.FULL_RUN
    full.pools = route(plan, full)
    state.submit(full)
    assert plan_bursts(state, plan, CloudFleet(), decide(state, 0.0).reason_for, 0.0) == NOTHING


# ----------------------------------------------------------------------------- releases
def test_idle_nodes_are_released_after_the_timeout_and_busy_ones_kept():
    plan, _ = make_plan(idle_release_s=600)
    spot = plan.offer_nodes(plan.offers["spot"])
    fleet = CloudFleet(ready={spot[0]: 0.0, spot[1]: None, spot[2]: 500.0})
    assert plan_releases(plan, fleet, 599.0) == []
    assert plan_releases(plan, fleet, 600.0) == [ReleaseNodes("spot", (spot[0],))]
    assert plan_releases(plan, fleet, 1100.0) == [ReleaseNodes("spot", (spot[0], spot[2]))]


def test_reserved_nodes_are_never_released():
    topo, kinds = hybrid()
    spec = BurstingSpec.model_validate({"offers": [
        {"name": "od", "gpu": H100, "kind": "reserved-1y", "usd_per_gpu_hour": 1.5}]})
    plan = BurstPlan.build(spec, topo, kinds)
    node = plan.offer_nodes(plan.offers["od"])[0]
    assert plan_releases(plan, CloudFleet(ready={node: 0.0}), 1e9) == []


# ----------------------------------------------------------------------------- properties
classes = st.sampled_from(list(WorkloadClass))
runtimes = st.one_of(st.none(), st.floats(min_value=60, max_value=10 * 86_400))


@settings(max_examples=150, deadline=None)
@given(cls=classes, estimate=runtimes, limit=runtimes, sensitive=st.booleans(),
       bound_h=st.floats(min_value=1, max_value=72))
def test_no_spot_pool_for_a_job_whose_runtime_bound_exceeds_the_limit(
        cls, estimate, limit, sensitive, bound_h):
    plan, _ = make_plan(max_spot_runtime_s=bound_h * HOUR)
    job = make_job(1, estimate=estimate, limit=limit)
    job.workload_class = cls
    pools = route(plan, job, JobTraits(sensitive_data=sensitive))
    runtime = limit if limit is not None else estimate
    if "spot" in pools:
        assert runtime is not None and runtime <= bound_h * HOUR
        assert cls is not WorkloadClass.FULL_RUN and not sensitive
    if sensitive:
        assert pools == ("own",)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_no_gang_spans_pools_and_each_stays_in_its_routed_pools(data):
    topo, kinds = hybrid(own=data.draw(st.integers(1, 3)), spot=data.draw(st.integers(1, 3)),
                         od=data.draw(st.integers(1, 3)), colo=data.draw(st.integers(0, 2)))
    plan = BurstPlan.build(BurstingSpec.model_validate({"offers": offers()}), topo, kinds)
    state = make_state(topo, data.draw(st.sampled_from(["grace", "easy-backfill", "fifo"])))
    for i in range(data.draw(st.integers(1, 25))):
        job = make_job(i, gpus=data.draw(st.sampled_from([1, 2, 4, 8, 12, 16, 24, 32])),
                       estimate=data.draw(runtimes), submit=float(i))
        job.workload_class = data.draw(classes)
        job.pools = route(plan, job, JobTraits(sensitive_data=data.draw(st.booleans())))
        state.submit(job)
    for now in (0.0, 10.0):
        result = decide(state, now)
        for s in result.starts:
            pools = {topo.nodes[n].pool for n in s.placement.nodes(topo)}
            assert len(pools) == 1, f"job {s.job_id} spans pools {pools}"
            assert pools <= set(state.pending[s.job_id].pools or ())
        state.apply(result, now)
