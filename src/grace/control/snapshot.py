"""The store's rows as ``core``'s snapshot: one SchedulerState per reconcile cycle.

Compiled jobs are cached by (id, version): parsing a JobSpec and resolving it
against the cluster is the expensive part, and a job's spec never changes
after submission. The cache is only a cache; the store stays the truth.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from grace.core.capacity import FreeCapacity, Placement, Slice
from grace.core.fragmentation import DemandModel, observe_arrival
from grace.core.jobs import JobCompileError, JobId, PendingJob, compile_job
from grace.core.policies import QueuePolicy
from grace.core.quotas import TenantQuota
from grace.core.state import SchedulerState
from grace.core.topology import Topology
from grace.spec.job import JobSpec
from grace.spec.text_limits import STORED


@dataclass(frozen=True)
class GangNode:
    """One node of a placement as the store keeps it: a name and local GPU slots.

    ``slices`` are the slots of ``gpus`` the job only shares (MIG or fractional), as
    (slot, compute units, memory units, profile): without them a restart of the
    snapshot would take two jobs sharing one GPU for two jobs holding it whole.
    """

    node: str
    gpus: tuple[int, ...]
    slices: tuple[tuple[int, int, int, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The store's form (an entry of ``Attempt.placement_json``)."""
        out: dict[str, Any] = {"node": self.node, "gpus": list(self.gpus)}
        if self.slices:
            out["slices"] = [{"gpu": g, "compute": c, "memory": m, "profile": p}
                             for g, c, m, p in self.slices]
        return out


def placement_to_nodes(topo: Topology, placement: Placement) -> list[GangNode]:
    by_node: dict[int, list[int]] = {}
    sliced: dict[int, list[tuple[int, int, int, str]]] = {}
    for g in placement.gpus:
        n = topo.gpu_node[g]
        by_node.setdefault(n, []).append(g - topo.nodes[n].gpu_base)
    for s in placement.slices:
        n = topo.gpu_node[s.gpu]
        local = s.gpu - topo.nodes[n].gpu_base
        by_node.setdefault(n, []).append(local)
        sliced.setdefault(n, []).append((local, s.compute, s.memory, s.profile))
    return [GangNode(topo.nodes[n].name, tuple(sorted(gs)), tuple(sliced.get(n, ())))
            for n, gs in by_node.items()]


def nodes_to_placement(topo: Topology, nodes: list[dict[str, Any]]) -> Placement:
    gpus: list[int] = []
    slices: list[Slice] = []
    for entry in nodes:
        info = topo.nodes[topo.by_name[entry["node"]]]
        shared = entry.get("slices") or ()
        slots = {s["gpu"] for s in shared}
        gpus.extend(info.gpu_base + g for g in entry["gpus"] if g not in slots)
        slices.extend(Slice(info.gpu_base + s["gpu"], int(s["compute"]), int(s["memory"]),
                            s.get("profile") or "") for s in shared)
    return Placement(gpus=tuple(sorted(gpus)), slices=tuple(slices))


class JobCompiler:
    """JobSpec JSON to PendingJob, cached per job version."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self._cache: dict[tuple[int, int, tuple[str, ...]], PendingJob] = {}

    def compile(self, job_id: int, version: int, spec_json: dict[str, Any], submitted_at: float,
                exclude: list[str] | None = None) -> PendingJob:
        # the excluded nodes are part of the key: a job moved off a straggler keeps its
        # restart count (its version here) but must not be placed from the old entry
        key = (job_id, version, tuple(sorted(exclude or ())))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        spec = JobSpec.model_validate(spec_json, context=STORED)  # accepted at submit
        job = compile_job(spec, job_id, submitted_at, self.topo)
        if exclude:
            ids = frozenset(self.topo.by_name[n] for n in exclude if n in self.topo.by_name)
            job.update(exclude_nodes=ids)
        self._cache[key] = job
        return job

    def check(self, spec: JobSpec) -> None:
        """Raise JobCompileError if the job can never run on this cluster."""
        compile_job(spec, 0, 0.0, self.topo)

    def forget(self, keep: set[int]) -> None:
        for key in [k for k in self._cache if k[0] not in keep]:
            del self._cache[key]


#: A live attempt for ``build_state``: (job, placement, started at[, borrowing]).
RunningEntry = tuple[PendingJob, Placement, float] | tuple[PendingJob, Placement, float, bool]


class DemandTracker:
    """The request mix of fragmentation-aware packing, kept across cycles.

    The twin's one ``SchedulerState`` sees every arrival once, in order; live builds
    a state per cycle, so this tracker observes each job of the store once, in id
    (submission) order: ``catch_up`` on the jobs newer than the last it saw. On a
    restart it starts empty and its first ``catch_up`` reads the whole store, so the
    mix is the same as if the control plane had never stopped.
    """

    def __init__(self, topo: Topology) -> None:
        self.demand = DemandModel()
        self.units = topo.slice_units[0]
        self.last_id = 0

    def catch_up(self, jobs: Iterable[tuple[int, PendingJob | None]]) -> None:
        """``jobs``: (id, compiled job or None if it does not compile), ids ascending."""
        for job_id, pj in jobs:
            if job_id <= self.last_id:
                continue
            if pj is not None:
                observe_arrival(self.demand, pj, self.units)
            self.last_id = job_id


def build_state(topo: Topology, policy: QueuePolicy, quotas: dict[str, TenantQuota],
                running: Sequence[RunningEntry],
                pending: list[PendingJob], unusable_nodes: set[str],
                ending: Iterable[RunningEntry] = (),
                preemptions: dict[str, list[float]] | None = None,
                demand: DemandModel | None = None) -> SchedulerState:
    """A fresh SchedulerState: running gangs allocated, waiting jobs queued, drained nodes out.

    ``ending`` are live attempts of jobs already stopped or preempted: they hold their
    GPUs until the backend reports them ended, except GPUs that a start in the same
    cycle was already given (``decide`` counts a victim's GPUs as free at once).
    ``preemptions`` (tenant -> times in the last hour) and ``demand`` are the core state
    that must outlive one cycle; the driver keeps them (the store, a ``DemandTracker``).
    """
    state = SchedulerState(topo, policy, quotas, demand)
    state.restore_preemptions(preemptions or {})
    for node in unusable_nodes:
        if node in topo.by_name:
            state.set_node_usable(topo.by_name[node], False)
    for job, placement, started_at, *borrowing in running:
        state.submit(job)
        state.start(JobId(job.id), placement, started_at, bool(borrowing and borrowing[0]))
    for job, placement, started_at, *borrowing in ending:
        if _free(state.capacity, placement):
            state.submit(job)
            state.start(JobId(job.id), placement, started_at, bool(borrowing and borrowing[0]))
    for job in pending:
        state.submit(job)
    return state


def _free(cap: FreeCapacity, placement: Placement) -> bool:
    """Is every GPU and slice of ``placement`` still free in ``cap``?"""
    topo = cap.topo
    for g in (*placement.gpus, *(s.gpu for s in placement.slices)):
        node = topo.gpu_node[g]
        if cap.free_mask[node] >> (g - topo.nodes[node].gpu_base) & 1:
            continue
        cur = cap.slice_free.get(g)
        if cur is None or g in placement.gpus:
            return False
        s = next(s for s in placement.slices if s.gpu == g)
        if cur[0] < s.compute or cur[1] < s.memory:
            return False
    return True


__all__ = ["DemandTracker", "GangNode", "JobCompileError", "JobCompiler", "build_state", "nodes_to_placement",
           "placement_to_nodes"]
