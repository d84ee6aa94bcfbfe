"""Jobs as the policy engine sees them: compiled once from a JobSpec or a trace row.

``PendingJob`` carries everything ``decide`` needs in plain fields, resolved
against the cluster up front (which GPU models fit, the slice shape on each),
so the scheduling loop does no spec parsing, unit conversion or catalog lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NewType

from grace.core.capacity import Placement
from grace.core.placement import SliceRequest, WholeRequest
from grace.core.sizing import fitting_models, vram_need_gb
from grace.core.topology import MIG_UNITS, Topology
from grace.spec.job import JobSpec, WorkloadClass

JobId = NewType("JobId", int)


@dataclass(slots=True)
class PendingJob:
    """A job waiting to start; ``shape`` groups jobs that place identically."""

    id: JobId
    tenant: str
    submit_s: float
    whole: WholeRequest | None
    slices: dict[str, SliceRequest]  # per GPU model, for sub-GPU jobs
    models: tuple[str, ...]  # acceptable GPU models, preferred first
    priority: int = 0
    workload_class: WorkloadClass = WorkloadClass.EXPERIMENT
    estimate_s: float | None = None
    limit_s: float | None = None
    preemptible: bool = False
    allow_mixed: bool = False
    exclude_nodes: frozenset[int] = frozenset()
    attained_gpu_s: float = 0.0
    # when the job entered its current attained-service level (core.replan orders a
    # level's jobs by it); 0 for the first level
    level_since_s: float = 0.0
    restarts: int = 0
    shape: tuple = field(default=())
    pools: tuple[str, ...] | None = None
    # host CPU and memory the job asks for, where known (0: unknown); fragmentation-aware
    # packing scores with them, exclude_nodes decides whether a node may take the job
    cpu_milli: int = 0
    memory_mib: int = 0

    def __post_init__(self) -> None:
        if not self.shape:
            self.shape = (
                self.whole.count if self.whole else 0,
                self.whole.per_node if self.whole else None,
                tuple(sorted((m, s.compute, s.memory) for m, s in self.slices.items())),
                self.models, self.allow_mixed, self.exclude_nodes, self.pools, self.preemptible,
            )

    def reshaped(self, **changes: object) -> PendingJob:
        """A copy with ``changes`` applied and its queue shape derived again.

        Every field that places a job differently (excluded nodes, pools, models)
        is part of ``shape``; a copy that kept the old shape would queue with jobs
        that place differently. Drivers change a job only through this.
        """
        return replace(self, shape=(), **changes)  # type: ignore[arg-type]

    def update(self, **changes: object) -> None:
        """``reshaped`` in place, for a job no queue holds (withdraw it first)."""
        for name, value in changes.items():
            setattr(self, name, value)
        self.shape = ()
        self.__post_init__()

    @property
    def gpu_equivalents(self) -> float:
        """GPUs this job counts against quotas: slices count by compute share."""
        if self.whole is not None:
            return float(self.whole.count)
        s = next(iter(self.slices.values()))
        units = MIG_UNITS[0] if s.profile else 1000
        return s.compute / units


@dataclass(slots=True)
class RunningJob:
    """A job holding GPUs; ``expected_end_s`` feeds backfill reservations."""

    id: JobId
    tenant: str
    placement: Placement
    start_s: float
    gpu_equivalents: float
    models: tuple[str, ...]
    priority: int = 0
    preemptible: bool = False
    borrowing: bool = False
    estimate_s: float | None = None
    limit_s: float | None = None
    attained_gpu_s: float = 0.0
    level_since_s: float = 0.0
    job: PendingJob | None = None  # what to requeue if it is preempted or fails

    @property
    def expected_end_s(self) -> float:
        run = self.estimate_s or self.limit_s
        return self.start_s + run if run else float("inf")

    @property
    def deadline_s(self) -> float:
        return self.start_s + self.limit_s if self.limit_s else float("inf")


class JobCompileError(ValueError):
    """The job can never run on this cluster; the message says why and what to change."""


def compile_job(
    spec: JobSpec, job_id: int, submit_s: float, topo: Topology
) -> PendingJob:
    """Resolve a JobSpec against a cluster: acceptable models, slice shapes, limits."""
    available = {m: topo.catalog[m] for m in topo.gpu_models}
    models = fitting_models(spec, available)
    need = vram_need_gb(spec)
    if not models:
        raise JobCompileError(
            f"no GPU model in cluster {topo.name!r} fits job {spec.name!r} "
            f"(needs {need:.0f} GB per GPU)" if need else
            f"GPU model {spec.gpu_model!r} is not in cluster {topo.name!r}; "
            f"it has {sorted(available)}"
        )
    slices: dict[str, SliceRequest] = {}
    whole: WholeRequest | None = None
    assert spec.gpus is not None
    wants_slice = spec.gpus < 1 or (
        spec.gpus == 1 and need is not None and spec.gpu_model is None
        and any(topo.catalog[m].smallest_mig_profile_for(need) and
                topo.catalog[m].smallest_mig_profile_for(need).compute_slices < 7  # type: ignore[union-attr]
                for m in models if _has_shareable(topo, m))
    )
    if wants_slice:
        for m in models:
            gm = topo.catalog[m]
            if not gm.supports_mig or not _has_shareable(topo, m):
                continue
            candidates = [p for p in gm.mig_profiles
                          if (need is None or p.memory_gb >= need)
                          and p.compute_slices / 7 >= min(spec.gpus, 1) - 1e-9]
            if candidates:
                p = min(candidates, key=lambda p: (p.compute_slices, p.memory_slices))
                slices[m] = SliceRequest(p.compute_slices, p.memory_slices, p.name)
        if not slices:
            if spec.gpus < 1:
                raise JobCompileError(
                    f"job {spec.name!r} asks for {spec.gpus:g} of a GPU but cluster "
                    f"{topo.name!r} has no MIG-enabled GPUs that fit; ask for gpus: 1 or set "
                    "mig_gpus_per_node on a node group"
                )
        else:
            models = [m for m in models if m in slices]
    if not slices:
        whole = WholeRequest(int(spec.gpus), spec.gpus_per_node)
        biggest = topo.max_node_gpus
        if whole.per_node and whole.per_node > biggest:
            raise JobCompileError(
                f"job {spec.name!r} asks {whole.per_node} GPUs per node; the largest node in "
                f"{topo.name!r} has {biggest}; lower gpus_per_node"
            )
        if whole.count > topo.total_gpus:
            raise JobCompileError(
                f"job {spec.name!r} asks {whole.count} GPUs; cluster {topo.name!r} has "
                f"{topo.total_gpus}; lower gpus"
            )
    return PendingJob(
        id=JobId(job_id), tenant=spec.tenant, submit_s=submit_s, whole=whole, slices=slices,
        models=tuple(models), priority=spec.priority, workload_class=spec.workload_class,
        estimate_s=spec.runtime_estimate, limit_s=spec.runtime_limit,
        preemptible=spec.preemptible, allow_mixed=spec.allow_mixed_models,
    )


def _has_shareable(topo: Topology, model: str) -> bool:
    return model in topo.shareable_models
