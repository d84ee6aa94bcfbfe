"""What users write: GPU catalog, ClusterSpec, JobSpec, and their loaders."""

from grace.spec.cluster import ClusterSpec, NetworkSpec, NodeGroupSpec, PoolKind, PoolSpec
from grace.spec.errors import SpecError, SpecProblem
from grace.spec.gpus import BUILTIN_GPUS, GpuModel, MigProfile
from grace.spec.job import JobSpec, ModelSizeSpec, WorkloadClass
from grace.spec.loader import load_cluster, load_jobs, parse_cluster, parse_jobs

__all__ = [
    "BUILTIN_GPUS", "ClusterSpec", "GpuModel", "JobSpec", "MigProfile", "ModelSizeSpec",
    "NetworkSpec", "NodeGroupSpec", "PoolKind", "PoolSpec", "SpecError", "SpecProblem",
    "WorkloadClass", "load_cluster", "load_jobs", "parse_cluster", "parse_jobs",
]
