"""Clusters for the twin: a ClusterSpec YAML, or a trace's own node list (openb).

The openb node list becomes a GPU-sharing cluster: every GPU may be shared,
in thousandths (``gpu_milli``), as Alibaba's cluster did. GPU models the
trace does not disclose (G1-G3) get catalog entries of their own, with the
figures of a V100-class GPU; they matter only for speed ratios.
"""

from __future__ import annotations

from pathlib import Path

from grace.core.topology import MILLI_UNITS, NodeInfo, Topology
from grace.sim.cluster_variants import with_fewer_nodes
from grace.sim.traces.openb import OpenbNode, load_openb_nodes
from grace.spec.gpus import BUILTIN_GPUS, GpuModel
from grace.spec.loader import load_cluster

OPENB_NODES_PER_LEAF = 32


def load_topology(path: Path | str, fmt: str | None = None,
                  fewer_nodes_percent: float = 0.0) -> Topology:
    """A Topology from a cluster YAML, or from an openb node-list CSV; with
    ``fewer_nodes_percent``, the YAML's cluster with that share of its nodes taken away
    (``sim.cluster_variants``)."""
    p = Path(path)
    if fewer_nodes_percent and p.suffix.lower() == ".csv":
        raise ValueError(f"--fewer-nodes applies to a cluster YAML, not the node list {p}; "
                         "drop it or give a cluster YAML")
    if p.suffix.lower() == ".csv":
        if fmt not in (None, "openb"):
            raise ValueError(
                f"--cluster {p}: a CSV cluster is only understood with --format openb "
                "(the openb node list); give a cluster YAML otherwise"
            )
        return topology_from_openb(load_openb_nodes(p), name=p.stem)
    return Topology.from_spec(with_fewer_nodes(load_cluster(p), fewer_nodes_percent))


def topology_from_openb(nodes: list[OpenbNode], name: str = "openb") -> Topology:
    catalog = dict(BUILTIN_GPUS)
    infos: list[NodeInfo] = []
    base = 0
    for i, n in enumerate(nodes):
        model = n.catalog_model or n.model
        if model not in catalog:
            v100 = BUILTIN_GPUS["V100-32GB"]
            catalog[model] = GpuModel(
                name=model, vram_gb=v100.vram_gb, bf16_tflops=v100.bf16_tflops,
                nvlink_gbps=v100.nvlink_gbps, board_watts=v100.board_watts,
                usd_per_hour=v100.usd_per_hour,
            )
        leaf = i // OPENB_NODES_PER_LEAF
        infos.append(NodeInfo(
            index=i, name=n.name, group=model, gpu_model=model, gpus=n.gpus, gpu_base=base,
            domain=i, leaf=leaf, pod=0, pool="openb", shareable_gpus=n.gpus,
            cpu_cores=n.cpu_milli // 1000, memory_gb=n.memory_mib / 1024,
        ))
        base += n.gpus
    return Topology(name=name, nodes=infos, catalog=catalog, slice_units=MILLI_UNITS)
