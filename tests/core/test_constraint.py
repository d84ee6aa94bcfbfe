"""core.constraint: a step's phase times become one verdict (input, communication, checkpoint, compute)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grace.core.constraint import (
    Constraint,
    NetTier,
    PhaseShares,
    Thresholds,
    classify,
    gpus_by_constraint,
    placement_tier,
    shares_from_phases,
    tiers_of,
    tightest_tier,
)

from .builders import make_cluster

share = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
seconds = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


def shares(data: float = 0.0, comm: float = 0.0, ckpt: float = 0.0) -> PhaseShares:
    return PhaseShares(data, comm, ckpt)


# ---------------------------------------------------------------- named cases
def test_a_step_that_waits_mostly_for_batches_is_input_bound() -> None:
    v = classify(shares(data=0.62, comm=0.05))
    assert v.constraint is Constraint.INPUT and v.share == pytest.approx(0.62)
    assert v.label == "input-bound (storage read)" and v.detail == "data 62% of step"


def test_waits_under_every_threshold_leave_the_job_compute_bound() -> None:
    v = classify(shares(data=0.29, comm=0.29, ckpt=0.09))
    assert v.constraint is Constraint.COMPUTE and v.share == pytest.approx(1 - 0.29 - 0.29 - 0.09)


def test_the_largest_wait_over_its_threshold_names_the_constraint() -> None:
    assert classify(shares(data=0.31, ckpt=0.4)).constraint is Constraint.CHECKPOINT
    assert classify(shares(data=0.45, comm=0.35)).constraint is Constraint.INPUT
    assert classify(shares(data=0.10, comm=0.50)).constraint is Constraint.COMMUNICATION_INTERCONNECT


def test_communication_on_a_looser_placement_than_needed_blames_the_placement() -> None:
    v = classify(shares(comm=0.5), ideal_placement=False, tiers=(NetTier.POD, NetTier.LEAF))
    assert v.constraint is Constraint.COMMUNICATION_PLACEMENT
    assert v.detail == "comm 50% of step; pod, fits leaf"
    # the same waits on the tightest placement: the links themselves are the limit
    assert classify(shares(comm=0.5)).constraint is Constraint.COMMUNICATION_INTERCONNECT


def test_thresholds_are_checked_and_can_be_tightened() -> None:
    with pytest.raises(ValueError, match="threshold input"):
        Thresholds(input=0.0)
    assert classify(shares(data=0.2), thresholds=Thresholds(input=0.15)).constraint is Constraint.INPUT


def test_ddp_allreduce_counts_only_the_part_that_outlasts_backward_compute() -> None:
    # a DDP step (train_ddp.py's, measured): the all-reduce span sits inside backward
    phases = {"data": 0.0001, "forward": 0.004, "backward": 0.010, "allreduce": 0.006,
              "optimizer": 0.001, "sync": 0.001}
    s = shares_from_phases(phases, step_s=0.0152)
    assert s.estimated
    # backward beyond 2 x forward: 0.010 - 0.008 = 0.002 exposed of the 0.006 span
    wall = 0.0152 + 0.001
    assert s.communication == pytest.approx((0.002 + 0.001) / wall)
    assert s.allreduce_span == pytest.approx(0.006 / wall)


def test_an_allreduce_outside_backward_counts_whole() -> None:
    s = shares_from_phases({"forward": 0.2, "backward": 0.4, "allreduce": 0.3}, step_s=1.0)
    assert not s.estimated and s.communication == pytest.approx(0.3)


def test_sync_and_checkpoint_are_outside_step_s_so_the_wall_time_adds_them() -> None:
    s = shares_from_phases({"data": 0.5, "sync": 0.25, "checkpoint": 0.25}, step_s=1.5)
    assert (s.data, s.communication, s.checkpoint) == pytest.approx((0.25, 0.125, 0.125))


@pytest.mark.parametrize("bad", [{"data": -0.1}, {"data": float("nan")}, {"sync": float("inf")}])
def test_phases_a_runtime_cannot_mean_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="phase"):
        shares_from_phases(bad, step_s=1.0)
    with pytest.raises(ValueError, match="step_s"):
        shares_from_phases({}, step_s=0.0)


def test_tiers_on_a_cluster_of_two_leaves() -> None:
    topo = make_cluster(nodes=4, gpus=8, nodes_per_leaf=2)  # n0,n1 | n2,n3
    names = [n.name for n in topo.nodes]
    assert tightest_tier(1, 2, 1) is NetTier.NODE and tightest_tier(2, 2, 2) is NetTier.LEAF
    assert tightest_tier(3, 2, 2) is NetTier.POD and tightest_tier(5, 2, 2) is NetTier.CLUSTER
    assert placement_tier(topo, names[:1]) is NetTier.NODE
    assert placement_tier(topo, names[:2]) is NetTier.LEAF
    assert placement_tier(topo, [names[1], names[2]]) > NetTier.LEAF
    # 16 GPUs fit two nodes of one leaf; placed across leaves that is looser than needed
    actual, tightest = tiers_of(topo, [names[1], names[2]], 16, None)
    assert tightest is NetTier.LEAF and actual > tightest
    # 8 GPUs fit one node; a user who asked for 2 nodes gets a leaf as the tightest
    assert tiers_of(topo, names[:2], 8, None)[1] is NetTier.NODE
    assert tiers_of(topo, names[:2], 8, 2) == (NetTier.LEAF, NetTier.LEAF)


def test_cluster_gpus_per_constraint_cover_the_closed_set() -> None:
    got = gpus_by_constraint([(Constraint.INPUT, 8), (Constraint.COMPUTE, 4), (Constraint.INPUT, 1)])
    assert set(got) == set(Constraint) and got[Constraint.INPUT] == 9 and got[Constraint.UNKNOWN] == 0


# ---------------------------------------------------------------- properties
@settings(max_examples=200, deadline=None)
@given(share, share, share)
def test_shares_that_sum_above_one_or_go_negative_are_refused(d: float, c: float, k: float) -> None:
    if d + c + k > 1 + 1e-6:
        with pytest.raises(ValueError, match="add up"):
            PhaseShares(d, c, k)
    else:
        assert PhaseShares(d, c, k).compute >= 0
    with pytest.raises(ValueError, match="share data"):
        PhaseShares(-d - 1e-3, c, k)


@settings(max_examples=300, deadline=None)
@given(share, share, share, st.floats(min_value=0.0, max_value=1.0), st.booleans())
def test_raising_the_data_share_never_turns_input_bound_into_anything_else(
        d: float, c: float, k: float, more: float, ideal: bool) -> None:
    total = d + c + k
    if total > 1:  # scale into one step
        d, c, k = d / total, c / total, k / total
    before = classify(PhaseShares(d, c, k), ideal)
    raised = min(1.0 - c - k, d + more * (1.0 - c - k - d))
    after = classify(PhaseShares(max(d, raised), c, k), ideal)
    if before.constraint is Constraint.INPUT:
        assert after.constraint is Constraint.INPUT
    assert (after.constraint is Constraint.COMPUTE) <= (before.constraint is Constraint.COMPUTE)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["data", "h2d", "forward", "backward", "allreduce",
                                         "optimizer", "checkpoint", "sync"]), seconds),
       st.floats(min_value=1e-4, max_value=10.0))
def test_any_phases_a_runtime_reports_give_valid_shares_and_a_verdict(
        phases: dict[str, float], step_s: float) -> None:
    s = shares_from_phases(phases, step_s)  # PhaseShares validates itself
    assert s.communication <= (phases.get("allreduce", 0) + phases.get("sync", 0)) / (
        step_s + phases.get("sync", 0) + phases.get("checkpoint", 0)) + 1e-9
    assert classify(s).constraint is not Constraint.UNKNOWN
