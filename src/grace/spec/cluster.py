"""ClusterSpec: the hardware and network a user describes once.

A cluster is node groups laid out on a tree network:

    GPU -> node (NVLink) -> [rack NVLink domain, e.g. NVL72] -> leaf switch
        -> spine -> [pod]

A node group is the shorthand that keeps a 2,048-node fat tree to a few lines:
``count`` identical nodes, ``nodes_per_leaf`` of them under each leaf switch,
``leaves_per_pod`` leaves per pod. Bandwidth per tier is given once under
``network``; the runtime model derives the cost of crossing each tier from it.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from grace.spec.gpus import BUILTIN_GPUS, GpuModel


class PoolKind(StrEnum):
    ON_PREM = "on-prem"
    COLO = "colo"
    CLOUD = "cloud"


class PoolSpec(BaseModel):
    """Where capacity comes from; a gang never spans two pools."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf breaks arithmetic later

    name: str = Field(min_length=1)
    kind: PoolKind = PoolKind.ON_PREM


class DegradedLinkSpec(BaseModel):
    """A node whose scale-out link delivers only ``factor`` of its bandwidth (a bad cable,
    a NIC that trained at a lower rate). The twin's data-path model slows every
    multi-node job placed on it: a ring all-reduce runs at its slowest link."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    node: str = Field(min_length=1)
    factor: float = Field(description="share of the link's bandwidth it still delivers: "
                          "0.85 = 15% less bandwidth; 1 = healthy")

    @field_validator("factor")
    @classmethod
    def _share(cls, v: float) -> float:
        if not 0.0 < v <= 1.0:
            raise ValueError(f"factor must be in (0, 1], the share of the link's bandwidth the "
                             f"node still gets (0.85 = 15% slower), got {v}; use 1 for a "
                             "healthy link or remove the entry")
        return v


class NetworkSpec(BaseModel):
    """Per-GPU bandwidth of each tier above the node.

    ``nic_gbps`` is the scale-out NIC per GPU in Gbit/s (InfiniBand NDR: 400).
    Oversubscription divides the bandwidth a GPU sees when its traffic crosses
    that tier: 1.0 is a non-blocking fat tree. ``degraded_links`` name nodes whose
    link is slower than ``nic_gbps`` (read only by the twin's opt-in data-path model).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf breaks arithmetic later

    nic_gbps: float = Field(default=400, gt=0)
    spine_oversubscription: float = Field(default=1.0, ge=1.0)
    pod_oversubscription: float = Field(default=1.0, ge=1.0)
    degraded_links: list[DegradedLinkSpec] = Field(default_factory=list)


class StorageSpec(BaseModel):
    """The shared file system every node reads datasets from and writes checkpoints to.

    Aggregate bandwidths in GB/s (bytes, not bits), as a storage vendor or ``grace bench
    storage`` reports them. ``nvme_read_gbps``: local NVMe per node; when given, input
    pipelines read staged datasets from it (shared by the jobs on that node) instead of
    the shared file system. Read only by the twin's opt-in data-path model.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    read_gbps: float = Field(gt=0, description="aggregate read bandwidth, GB/s")
    write_gbps: float = Field(gt=0, description="aggregate write bandwidth, GB/s")
    nvme_read_gbps: float | None = Field(default=None, gt=0,
                                         description="local NVMe read per node, GB/s")


class NodeGroupSpec(BaseModel):
    """``count`` identical nodes; the unit of the fat-tree shorthand."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf breaks arithmetic later

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    count: int = Field(default=1, ge=1, le=100_000)
    gpu: str
    gpus_per_node: int = Field(default=8, ge=1, le=72)
    cpu_cores: int = Field(default=96, ge=1)
    memory_gb: float = Field(default=1024, gt=0)
    nvme_tb: float = Field(default=0, ge=0)
    pool: str | None = None
    nodes_per_leaf: int = Field(default=32, ge=1)
    leaves_per_pod: int | None = Field(default=None, ge=1)
    nvlink_domain_nodes: int = Field(
        default=1, ge=1, description="nodes sharing one NVLink domain (18 for GB200 NVL72)"
    )
    mig_gpus_per_node: int = Field(
        default=0, ge=0, description="GPUs per node an operator allows to split into MIG slices"
    )
    names: list[str] | None = Field(
        default=None, description="explicit node names; default is <name>-<index>"
    )

    @model_validator(mode="after")
    def _consistent(self) -> NodeGroupSpec:
        if self.mig_gpus_per_node > self.gpus_per_node:
            raise ValueError(
                f"mig_gpus_per_node ({self.mig_gpus_per_node}) exceeds gpus_per_node "
                f"({self.gpus_per_node}); lower it"
            )
        if self.nodes_per_leaf % self.nvlink_domain_nodes != 0:
            raise ValueError(
                f"nodes_per_leaf ({self.nodes_per_leaf}) must be a multiple of "
                f"nvlink_domain_nodes ({self.nvlink_domain_nodes}) so a rack NVLink "
                "domain sits under one leaf switch"
            )
        if self.names is not None and len(self.names) != self.count:
            raise ValueError(
                f"names lists {len(self.names)} nodes but count is {self.count}; make them agree"
            )
        return self

    def node_names(self) -> list[str]:
        if self.names is not None:
            return list(self.names)
        width = max(2, len(str(self.count - 1)))
        return [f"{self.name}-{i:0{width}d}" for i in range(self.count)]


class ClusterSpec(BaseModel):
    """A whole cluster, validated as one unit: nothing half-loaded."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf breaks arithmetic later

    name: str = Field(min_length=1)
    pools: list[PoolSpec] = Field(default_factory=lambda: [PoolSpec(name="on-prem")], min_length=1)
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    gpu_models: list[GpuModel] = Field(
        default_factory=list, description="extra GPU models beyond the built-in catalog"
    )
    node_groups: list[NodeGroupSpec] = Field(min_length=1)
    storage: StorageSpec | None = None  # None: the file system is not modelled

    @model_validator(mode="after")
    def _references_resolve(self) -> ClusterSpec:
        """Cross-field checks; every problem is reported, one per line, as ``path: fix``."""
        catalog = self.catalog()
        problems: list[str] = []
        pool_names = [p.name for p in self.pools]
        if len(set(pool_names)) != len(pool_names):
            problems.append(f"pools: pool names must be unique, got {pool_names}")
        seen_groups: set[str] = set()
        seen_nodes: set[str] = set()
        for i, g in enumerate(self.node_groups):
            where = f"node_groups[{i}]"
            if g.gpu not in catalog:
                problems.append(
                    f"{where}.gpu: unknown GPU model {g.gpu!r}; use one of "
                    f"{sorted(catalog)} or add it under gpu_models"
                )
            elif g.mig_gpus_per_node and not catalog[g.gpu].supports_mig:
                problems.append(
                    f"{where}.mig_gpus_per_node: {g.gpu} has no MIG profiles; set it to 0"
                )
            if g.pool is not None and g.pool not in pool_names:
                problems.append(
                    f"{where}.pool: unknown pool {g.pool!r}; declare it under pools "
                    f"(known: {pool_names})"
                )
            if g.name in seen_groups:
                problems.append(f"{where}.name: duplicate node group name {g.name!r}; rename one")
            seen_groups.add(g.name)
            for n in g.node_names():
                if n in seen_nodes:
                    problems.append(f"{where}.names: node name {n!r} appears twice; rename one")
                    break
                seen_nodes.add(n)
        degraded: set[str] = set()
        for i, link in enumerate(self.network.degraded_links):
            where = f"network.degraded_links[{i}].node"
            if link.node not in seen_nodes:
                problems.append(f"{where}: unknown node {link.node!r}; use a node name from "
                                f"node_groups (e.g. {min(seen_nodes)!r})")
            elif link.node in degraded:
                problems.append(f"{where}: node {link.node!r} is listed twice; keep one entry")
            degraded.add(link.node)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def catalog(self) -> dict[str, GpuModel]:
        """Built-in GPU models plus this cluster's own additions."""
        merged = dict(BUILTIN_GPUS)
        merged.update({g.name: g for g in self.gpu_models})
        return merged

    def pool_of(self, group: NodeGroupSpec) -> str:
        return group.pool or self.pools[0].name

    @property
    def total_gpus(self) -> int:
        return sum(g.count * g.gpus_per_node for g in self.node_groups)

    @property
    def total_nodes(self) -> int:
        return sum(g.count for g in self.node_groups)
