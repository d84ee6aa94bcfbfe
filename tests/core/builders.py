"""Small builders so each scheduler test reads as one scenario.

``make_cluster`` and ``make_job`` build the inputs, ``run_cycle`` plays the
driver (``decide`` then ``state.apply``), ``occupy`` pins a running job on
exact GPUs to set a scene, and ``check_index`` recounts every capacity index
from the masks (stricter than ``FreeCapacity.check_consistency``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from grace.core import (
    DecideResult,
    JobId,
    PendingJob,
    Placement,
    QueuePolicy,
    SchedulerState,
    Slice,
    TenantQuota,
    Topology,
    decide,
    get_policy,
)
from grace.core.capacity import FreeCapacity
from grace.core.placement import SliceRequest, WholeRequest
from grace.spec import BUILTIN_GPUS, parse_cluster

H100 = "H100-SXM"
A100 = "A100-80GB"
L40S = "L40S"


def make_cluster(
    nodes: int = 4,
    gpus: int = 8,
    nodes_per_leaf: int = 2,
    model: str = H100,
    mig: int = 0,
    groups: Sequence[dict[str, Any]] | None = None,
    pools: Sequence[str] | None = None,
    leaves_per_pod: int | None = None,
    name: str = "test",
) -> Topology:
    """A Topology compiled from a cluster spec.

    Without ``groups``: one group of ``nodes`` identical nodes. With ``groups``:
    each dict is a node group; missing fields get the defaults above.
    """
    if groups is None:
        groups = [{"name": "g", "count": nodes}]
    node_groups = []
    for i, g in enumerate(groups):
        spec = {
            "name": g.get("name", f"g{i}"),
            "count": g.get("count", nodes),
            "gpu": g.get("gpu", model),
            "gpus_per_node": g.get("gpus_per_node", gpus),
            "nodes_per_leaf": g.get("nodes_per_leaf", nodes_per_leaf),
            "mig_gpus_per_node": g.get("mig_gpus_per_node", mig),
        }
        for key in ("pool", "leaves_per_pod", "nvlink_domain_nodes"):
            if key in g:
                spec[key] = g[key]
        if leaves_per_pod is not None and "leaves_per_pod" not in spec:
            spec["leaves_per_pod"] = leaves_per_pod
        node_groups.append(spec)
    data: dict[str, Any] = {"name": name, "node_groups": node_groups}
    if pools is not None:
        data["pools"] = [{"name": p} for p in pools]
    return Topology.from_spec(parse_cluster(data))


def mig_request(model: str, gpus: float) -> SliceRequest:
    """The smallest MIG profile of ``model`` with at least ``gpus`` of its compute."""
    profiles = [p for p in BUILTIN_GPUS[model].mig_profiles if p.compute_slices / 7 >= gpus - 1e-9]
    p = min(profiles, key=lambda p: (p.compute_slices, p.memory_slices))
    return SliceRequest(p.compute_slices, p.memory_slices, p.name)


def make_job(
    id: int,
    gpus: float = 8,
    tenant: str = "a",
    per_node: int | None = None,
    submit: float = 0.0,
    estimate: float | None = None,
    limit: float | None = None,
    priority: int = 0,
    preemptible: bool = False,
    models: Sequence[str] = (H100,),
    exclude: Iterable[int] = (),
    pools: Sequence[str] | None = None,
    attained: float = 0.0,
) -> PendingJob:
    """A PendingJob; ``gpus < 1`` makes it a one-slice MIG job on every model given."""
    whole = None
    slices: dict[str, SliceRequest] = {}
    if gpus < 1:
        slices = {m: mig_request(m, gpus) for m in models}
    else:
        whole = WholeRequest(int(gpus), per_node)
    return PendingJob(
        id=JobId(id), tenant=tenant, submit_s=submit, whole=whole, slices=slices,
        models=tuple(models), priority=priority, estimate_s=estimate, limit_s=limit,
        preemptible=preemptible, exclude_nodes=frozenset(exclude),
        pools=tuple(pools) if pools is not None else None, attained_gpu_s=attained,
    )


def make_state(
    topo: Topology, policy: str | QueuePolicy = "grace",
    quotas: dict[str, TenantQuota] | None = None, **overrides: Any,
) -> SchedulerState:
    """A state under a named policy; ``overrides`` change policy fields (``backfill=False``)."""
    p = get_policy(policy) if isinstance(policy, str) else policy
    if overrides:
        p = dataclasses.replace(p, **overrides)
    return SchedulerState(topo, p, quotas)


def submit(state: SchedulerState, *jobs: PendingJob) -> None:
    for job in jobs:
        state.submit(job)


def run_cycle(state: SchedulerState, now: float) -> DecideResult:
    """One driver step: decide, then apply; returns the decisions."""
    result = decide(state, now)
    state.apply(result, now)
    return result


def node_gpus(topo: Topology, node: int, count: int, high: bool = True) -> tuple[int, ...]:
    """``count`` global GPU ids of ``node``, from the top (as whole jobs take them) or bottom."""
    info = topo.nodes[node]
    ids = range(info.gpu_base, info.gpu_base + info.gpus)
    picked = list(reversed(ids))[:count] if high else list(ids)[:count]
    return tuple(sorted(picked))


def occupy(
    state: SchedulerState, job: PendingJob, gpus: Sequence[int] = (),
    slices: Sequence[Slice] = (), now: float = 0.0, borrowing: bool = False,
) -> None:
    """Submit ``job`` and start it on exactly these GPUs (a scene, not a decision)."""
    state.submit(job)
    state.start(job.id, Placement(gpus=tuple(sorted(gpus)), slices=tuple(slices)), now, borrowing)


def started(result: DecideResult) -> dict[int, Placement]:
    return {int(s.job_id): s.placement for s in result.starts}


def nodes_of(topo: Topology, placement: Placement) -> list[int]:
    return sorted(placement.nodes(topo))


def per_node_counts(topo: Topology, placement: Placement) -> dict[int, int]:
    out: dict[int, int] = {}
    for g in placement.gpus:
        n = topo.gpu_node[g]
        out[n] = out.get(n, 0) + 1
    return out


def check_index(cap: FreeCapacity) -> None:
    """Rebuild every index of ``cap`` from masks, usable flags and slice tables."""
    cap.check_consistency()
    topo = cap.topo
    for g in cap.groups.values():
        by_free: list[set[int]] = [set() for _ in range(g.max_gpus + 1)]
        share: list[set[int]] = [set() for _ in range(g.max_gpus + 1)]
        leaf_buckets = {leaf: [set() for _ in range(g.max_gpus + 1)] for leaf in g.leaves}
        domain_free = dict.fromkeys(g.domains, 0)
        partial = []
        for n in g.nodes:
            info = topo.nodes[n]
            mask = cap.free_mask[n]
            assert mask >> info.gpus == 0, f"node {n}: free bits beyond its GPUs"
            assert cap.free_count[n] == mask.bit_count()
            for gpu in range(info.gpu_base, info.gpu_base + info.gpus):
                if gpu in cap.slice_free:
                    assert not mask >> (gpu - info.gpu_base) & 1, f"GPU {gpu} is split and free"
                    if cap.usable[n]:
                        c, m = cap.slice_free[gpu]
                        partial.append((c, m, gpu))
            if not cap.usable[n]:
                continue
            c = cap.free_count[n]
            by_free[c].add(n)
            leaf_buckets[info.leaf][c].add(n)
            domain_free[info.domain] += c
            if mask & cap.share_mask[n]:
                share[c].add(n)
        assert [set(b) for b in g.nodes_by_free] == by_free, g.key
        assert [set(b) for b in g.share_by_free] == share, g.key
        assert {leaf: [set(b) for b in bs] for leaf, bs in g.leaf_buckets.items()} == leaf_buckets
        assert g.domain_free == domain_free
        assert g.partial == sorted(partial), (g.key, g.partial, sorted(partial))


def snapshot(state: SchedulerState) -> tuple:
    """Everything ``decide`` may read, as plain values, to compare before and after."""
    cap = state.capacity
    groups = {
        key: (
            g.free_total, [list(b) for b in g.nodes_by_free], [list(b) for b in g.share_by_free],
            {leaf: [list(b) for b in bs] for leaf, bs in g.leaf_buckets.items()},
            {leaf: g.leaf_ge(leaf) for leaf in g.leaves}, dict(g.leaf_free),
            dict(g.domain_free), list(g.partial),
        )
        for key, g in cap.groups.items()
    }
    return (
        list(cap.free_mask), list(cap.free_count), list(cap.usable), dict(cap.slice_free),
        dict(cap.slice_count), groups, cap._log,
        {jid: repr(job) for jid, job in state.pending.items()},
        {qk: list(q) for qk, q in state.queues.items()},
        {jid: repr(run) for jid, run in state.running.items()},
        {t: (u.gpus, list(u.preemption_times)) for t, u in state.usage.items()},
        list(state.ends), list(state.deadlines), dict(state.quotas),
        list(state.spine.leaf_load), list(state.spine.pod_load),
    )
