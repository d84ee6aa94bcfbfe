"""The cluster as the scheduler sees it: flat arrays compiled once from a spec.

Every node gets an integer index, and every tier of the network (NVLink
domain, leaf switch, pod) an integer id, so placement works on ints and lists
rather than on names. The topology never changes while the scheduler runs;
what changes (free GPUs, drained nodes) lives in ``capacity.FreeCapacity``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grace.spec.cluster import ClusterSpec, NetworkSpec, StorageSpec
from grace.spec.gpus import MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, GpuModel

#: Capacity of one shareable GPU in (compute, memory) units, per sharing scheme.
MIG_UNITS = (MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES)
MILLI_UNITS = (1000, 1000)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node's static facts."""

    index: int
    name: str
    group: str
    gpu_model: str
    gpus: int
    gpu_base: int  # global index of this node's GPU 0
    domain: int  # NVLink domain id (the node itself unless rack-scale NVLink)
    leaf: int
    pod: int
    pool: str
    shareable_gpus: int  # GPUs 0..shareable_gpus-1 may be split into slices
    cpu_cores: int = 0
    memory_gb: float = 0.0


@dataclass
class Topology:
    """Static cluster layout with lookups by tier; built by ``from_spec``."""

    name: str
    nodes: list[NodeInfo]
    catalog: dict[str, GpuModel]
    network: NetworkSpec = field(default_factory=NetworkSpec)
    slice_units: tuple[int, int] = MIG_UNITS
    leaf_nodes: list[list[int]] = field(default_factory=list)
    domain_nodes: list[list[int]] = field(default_factory=list)
    leaf_pod: list[int] = field(default_factory=list)
    leaf_names: list[str] = field(default_factory=list)
    by_name: dict[str, int] = field(default_factory=dict)
    gpu_node: list[int] = field(default_factory=list)
    shareable_models: set[str] = field(default_factory=set)
    storage: StorageSpec | None = None  # the shared file system (the twin's data-path model)

    def __post_init__(self) -> None:
        n_leaves = 1 + max((n.leaf for n in self.nodes), default=-1)
        n_domains = 1 + max((n.domain for n in self.nodes), default=-1)
        self.leaf_nodes = [[] for _ in range(n_leaves)]
        self.domain_nodes = [[] for _ in range(n_domains)]
        self.leaf_pod = [0] * n_leaves
        for n in self.nodes:
            self.leaf_nodes[n.leaf].append(n.index)
            self.domain_nodes[n.domain].append(n.index)
            self.leaf_pod[n.leaf] = n.pod
            self.by_name[n.name] = n.index
            self.gpu_node.extend([n.index] * n.gpus)
            if n.shareable_gpus:
                self.shareable_models.add(n.gpu_model)
        self._max_node_gpus = max((n.gpus for n in self.nodes), default=0)
        if not self.leaf_names:
            self.leaf_names = [f"leaf-{i}" for i in range(n_leaves)]

    @property
    def max_node_gpus(self) -> int:
        return self._max_node_gpus

    @property
    def total_gpus(self) -> int:
        return len(self.gpu_node)

    @property
    def gpu_models(self) -> set[str]:
        return {n.gpu_model for n in self.nodes}

    def node_of_gpu(self, gpu: int) -> int:
        return self.gpu_node[gpu]

    def min_leaves_for(self, node_count: int, nodes_per_leaf: int | None = None) -> int:
        """Fewest leaf switches a gang of ``node_count`` nodes could span."""
        per_leaf = nodes_per_leaf or max(len(ns) for ns in self.leaf_nodes)
        return max(1, -(-node_count // per_leaf))

    @classmethod
    def from_spec(cls, spec: ClusterSpec) -> Topology:
        """Lay node groups out on the tree: leaves fill in order, pods group leaves."""
        catalog = spec.catalog()
        nodes: list[NodeInfo] = []
        leaf_names: list[str] = []
        gpu_base = 0
        leaf_id = pod_id = domain_id = 0
        for group in spec.node_groups:
            names = group.node_names()
            leaves_in_group = -(-group.count // group.nodes_per_leaf)
            per_pod = group.leaves_per_pod or leaves_in_group
            for i, name in enumerate(names):
                local_leaf = i // group.nodes_per_leaf
                nodes.append(
                    NodeInfo(
                        index=len(nodes),
                        name=name,
                        group=group.name,
                        gpu_model=group.gpu,
                        gpus=group.gpus_per_node,
                        gpu_base=gpu_base,
                        domain=domain_id + i // group.nvlink_domain_nodes,
                        leaf=leaf_id + local_leaf,
                        pod=pod_id + local_leaf // per_pod,
                        pool=spec.pool_of(group),
                        shareable_gpus=group.mig_gpus_per_node,
                        cpu_cores=group.cpu_cores,
                        memory_gb=group.memory_gb,
                    )
                )
                gpu_base += group.gpus_per_node
            leaf_names += [f"{group.name}-leaf{j}" for j in range(leaves_in_group)]
            leaf_id += leaves_in_group
            pod_id += -(-leaves_in_group // per_pod)
            domain_id += -(-group.count // group.nvlink_domain_nodes)
        return cls(name=spec.name, nodes=nodes, catalog=catalog, network=spec.network,
                   leaf_names=leaf_names, storage=spec.storage)
