"""How long a job runs on the GPUs it got: placement and GPU model stretch a trace's duration.

Model (written out with its assumptions in docs/twin.md):

    run_s = base_s * speed_factor(model) * (1 + comm_share * (link_penalty - 1))

- ``base_s`` is the duration recorded in the trace, taken as the job's run time
  on the reference GPU model when placed as tightly as its size allows.
- ``speed_factor`` = reference model BF16 TFLOP/s / this model's; 1.0 on a
  homogeneous cluster.
- ``comm_share`` is the share of a step spent in gradient exchange when the gang
  is tightly placed (defaults: 0 for one GPU, 10% inside a node, 20% across nodes;
  a job may set its own).
- ``link_penalty`` = bandwidth of the tier the job *could* have stayed within /
  bandwidth of the slowest tier it actually crosses, per GPU:
  NVLink (catalog) > node NIC (``network.nic_gbps`` / 8 GB/s) > spine (NIC /
  ``spine_oversubscription``) > pod (spine / ``pod_oversubscription``).

So a gang that needed two nodes under one leaf but landed across a 2:1
oversubscribed spine, with 20% of its step communicating, runs 1.2x longer.
Sub-GPU (MIG or fractional) jobs run at the trace's duration: the trace
measured them at that share.
"""

from __future__ import annotations

from dataclasses import dataclass

from grace.core.capacity import Placement
from grace.core.topology import Topology

TIER_NODE, TIER_LEAF, TIER_POD, TIER_CLUSTER = 0, 1, 2, 3


@dataclass(frozen=True)
class RuntimeModel:
    """Per-cluster constants for stretching run times; build with ``for_topology``."""

    tier_gbps: tuple[float, float, float, float]  # per GPU: nvlink (slowest model), leaf, spine, pod
    gpus_per_node: int
    nodes_per_leaf: int
    leaves_per_pod: int
    reference_tflops: float
    model_tflops: dict[str, float]
    model_nvlink_gbps: dict[str, float]
    comm_share_node: float = 0.10
    comm_share_multi: float = 0.20

    @classmethod
    def for_topology(cls, topo: Topology, reference_model: str | None = None) -> RuntimeModel:
        net = topo.network
        counts: dict[str, int] = {}
        for n in topo.nodes:
            counts[n.gpu_model] = counts.get(n.gpu_model, 0) + n.gpus
        ref = reference_model or max(counts, key=lambda m: counts[m])
        nvlink = min(topo.catalog[m].nvlink_gbps for m in counts)
        nic = net.nic_gbps / 8.0
        spine = nic / net.spine_oversubscription
        pod = spine / net.pod_oversubscription
        per_leaf = max(len(ns) for ns in topo.leaf_nodes)
        pods: dict[int, set[int]] = {}
        for leaf, p in enumerate(topo.leaf_pod):
            pods.setdefault(p, set()).add(leaf)
        return cls(
            tier_gbps=(max(nvlink, nic), nic, spine, pod),
            gpus_per_node=max(n.gpus for n in topo.nodes),
            nodes_per_leaf=per_leaf,
            leaves_per_pod=max(len(v) for v in pods.values()),
            reference_tflops=topo.catalog[ref].bf16_tflops,
            model_tflops={m: topo.catalog[m].bf16_tflops for m in counts},
            model_nvlink_gbps={m: max(topo.catalog[m].nvlink_gbps, nic) for m in counts},
        )

    def ideal_tier(self, gpus: int) -> int:
        """The tightest tier a gang of ``gpus`` could fit in."""
        if gpus <= self.gpus_per_node:
            return TIER_NODE
        nodes = -(-gpus // self.gpus_per_node)
        if nodes <= self.nodes_per_leaf:
            return TIER_LEAF
        if nodes <= self.nodes_per_leaf * self.leaves_per_pod:
            return TIER_POD
        return TIER_CLUSTER

    def actual_tier(self, topo: Topology, placement: Placement) -> int:
        nodes = placement.nodes(topo)
        if len(nodes) <= 1:
            return TIER_NODE
        leaves = {topo.nodes[n].leaf for n in nodes}
        if len(leaves) == 1:
            return TIER_LEAF
        pods = {topo.leaf_pod[leaf] for leaf in leaves}
        return TIER_POD if len(pods) == 1 else TIER_CLUSTER

    def slowdown(self, topo: Topology, placement: Placement, comm_share: float | None = None) -> float:
        """Multiplier on run time from placement alone (1.0 when placed ideally)."""
        gpus = len(placement.gpus)
        if gpus <= 1:
            return 1.0
        ideal = self.ideal_tier(gpus)
        actual = self.actual_tier(topo, placement)
        if actual <= ideal:
            return 1.0
        share = comm_share if comm_share is not None else (
            self.comm_share_node if ideal == TIER_NODE else self.comm_share_multi)
        ideal_bw = self.tier_gbps[ideal]
        if ideal == TIER_NODE:
            model = topo.nodes[topo.gpu_node[placement.gpus[0]]].gpu_model
            ideal_bw = self.model_nvlink_gbps.get(model, ideal_bw)
        penalty = ideal_bw / self.tier_gbps[actual]
        return 1.0 + share * (penalty - 1.0)

    def run_time(self, topo: Topology, placement: Placement, base_s: float,
                 comm_share: float | None = None) -> float:
        """Seconds the job takes on this placement (``base_s`` on the reference, ideally placed)."""
        gpus = placement.gpus or tuple(s.gpu for s in placement.slices)
        model = topo.nodes[topo.gpu_node[gpus[0]]].gpu_model
        speed = self.reference_tflops / self.model_tflops.get(model, self.reference_tflops)
        return base_s * speed * self.slowdown(topo, placement, comm_share)
