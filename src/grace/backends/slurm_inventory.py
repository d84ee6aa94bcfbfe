"""What a Slurm cluster has, as Grace sees it: nodes, GPUs, partitions, switches, states.

A user points Grace at an existing Slurm cluster and types nothing twice:
``scontrol -o show node`` gives each node's GRES, CPUs, memory, partitions,
state and reason; ``scontrol show topology`` gives the switch tree. They become
a :class:`~grace.spec.cluster.ClusterSpec` with one node group per leaf switch
(and per hardware shape under it), so Grace's topology-aware placement sees the
same leaves Slurm's ``topology/tree`` does.

GRES without a type (``gpu:8``) says nothing about the model; such GPUs get
``default_gpu`` (a ClusterSpec option the user can change). A typed GRES
(``gpu:h100:8``) is matched to the catalog by name, ignoring case and
punctuation, so ``h100`` finds ``H100-SXM`` and ``a100`` finds ``A100-80GB``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from grace.backends.slurm_cli import SlurmCli, expand_hostlist, parse_record
from grace.spec.cluster import ClusterSpec, NodeGroupSpec
from grace.spec.gpus import BUILTIN_GPUS

DEFAULT_GPU = "A100-80GB"
#: Prefix of every reason Grace writes into Slurm: how Grace tells its own drains from others'.
GRACE_REASON_PREFIX = "grace:"
#: Slurm node state flags that take a node out of service.
OUT_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED", "DOWN", "FAIL", "NOT_RESPONDING",
                       "INVALID", "INVALID_REG", "MAINTENANCE", "REBOOT_REQUESTED", "POWERED_DOWN"})


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # the base state, lower case: idle, allocated, mixed, down, ...
    flags: frozenset[str]  # DRAIN, NOT_RESPONDING, ... (upper case, as Slurm prints them)
    reason: str  # without Slurm's "[user@time]" suffix
    gpus: int
    gpu_type: str | None
    cpus: int
    memory_mb: int
    partitions: tuple[str, ...]

    @property
    def out_of_service(self) -> bool:
        """Drained, draining, down or failing: Grace must not place work here."""
        return self.state in ("down", "drained", "draining", "fail", "future", "unknown") \
            or bool(self.flags & OUT_FLAGS)

    @property
    def drained_by_grace(self) -> bool:
        return self.reason.startswith(GRACE_REASON_PREFIX)


@dataclass(frozen=True)
class Switch:
    name: str
    level: int
    nodes: tuple[str, ...]


def parse_gres(gres: str) -> tuple[int, str | None]:
    """``gpu:h100:8(S:0-1),nic:2`` -> (8, "h100"); no GPU GRES -> (0, None)."""
    total, kind = 0, None
    for item in gres.split(","):
        item = re.sub(r"\(.*?\)", "", item).strip()
        parts = item.split(":")
        if not parts or parts[0] != "gpu":
            continue
        count = parts[-1]
        if len(parts) >= 3:
            kind = parts[1]
        elif len(parts) == 2 and not count.isdigit():  # gpu:h100 means one of them
            kind, count = count, "1"
        total += int(count) if count.isdigit() else 1
    return total, kind


def parse_node(line: str) -> SlurmNode:
    """One line of ``scontrol -o show node``."""
    reason = ""
    head, sep, tail = line.partition(" Reason=")
    if sep:  # the last field, and free text: it may itself hold "key=value"
        reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", tail).strip()
    rec = parse_record(head)
    state, *flags = rec.get("State", "UNKNOWN").split("+")
    gpus, kind = parse_gres(rec.get("Gres", ""))
    parts = rec.get("Partitions", "")
    return SlurmNode(
        name=rec["NodeName"],
        state=state.rstrip("*~#%!$@^-").lower(),
        flags=frozenset(f.upper() for f in flags),
        reason=reason,
        gpus=gpus,
        gpu_type=kind,
        cpus=int(rec.get("CPUTot", "1") or 1),
        memory_mb=int(rec.get("RealMemory", "1") or 1),
        partitions=tuple(p for p in parts.split(",") if p and p != "(null)"),
    )


def parse_topology(text: str) -> list[Switch]:
    """``scontrol show topology`` lines -> switches (level 0 = leaves)."""
    out = []
    for line in text.splitlines():
        rec = parse_record(line.strip())
        if "SwitchName" in rec:
            out.append(Switch(rec["SwitchName"], int(rec.get("Level", "0") or 0),
                              tuple(expand_hostlist(rec.get("Nodes", "")))))
    return out


def read_nodes(cli: SlurmCli) -> list[SlurmNode]:
    return [parse_node(line) for line in cli.run("scontrol", "-o", "show", "node").splitlines()
            if line.startswith("NodeName=")]


def read_topology(cli: SlurmCli) -> list[Switch]:
    """The switches, or none when the cluster has no topology plugin (one flat leaf)."""
    return parse_topology(cli.run("scontrol", "show", "topology", check=False))


def catalog_gpu(kind: str | None, default_gpu: str, known: Iterable[str] = BUILTIN_GPUS) -> str:
    """The catalog model a GRES type names; ``default_gpu`` for an untyped or unknown one."""
    if not kind:
        return default_gpu
    norm = re.sub(r"[^a-z0-9]", "", kind.lower())
    names = {re.sub(r"[^a-z0-9]", "", k.lower()): k for k in known}
    if norm in names:
        return names[norm]
    prefixed = sorted(v for k, v in names.items() if k.startswith(norm))
    return prefixed[0] if prefixed else default_gpu


def cluster_spec(nodes: list[SlurmNode], switches: list[Switch], name: str = "slurm",
                 default_gpu: str = DEFAULT_GPU, partition: str | None = None) -> ClusterSpec:
    """Nodes under each leaf switch become node groups (one per hardware shape per leaf).

    Nodes without GPUs are left out (Grace places GPU gangs), as are nodes
    outside ``partition`` when one is given. Nodes no leaf names share one
    group-per-shape of their own, as a flat cluster would.
    """
    chosen = [n for n in nodes if n.gpus > 0 and (partition is None or partition in n.partitions)]
    if not chosen:
        where = f" in partition {partition!r}" if partition else ""
        raise ValueError(f"no node with a GPU GRES{where}: check `scontrol show node` (Gres=gpu:N)")
    leaf_of: dict[str, str] = {}
    for sw in sorted(switches, key=lambda s: s.name):
        if sw.level == 0:
            for member in sw.nodes:
                leaf_of.setdefault(member, sw.name)
    groups: dict[tuple[str, str, int, int, int], list[str]] = {}
    for n in chosen:
        shape = (catalog_gpu(n.gpu_type, default_gpu), n.gpus, n.cpus, n.memory_mb)
        groups.setdefault((leaf_of.get(n.name, "flat"), *shape), []).append(n.name)
    specs = []
    for (leaf, gpu, gpus, cpus, mem), names in sorted(groups.items()):
        suffix = "" if sum(k[0] == leaf for k in groups) == 1 else f"-{gpu.lower()}-{gpus}"
        specs.append(NodeGroupSpec(
            name=re.sub(r"[^A-Za-z0-9_.-]", "-", f"{leaf}{suffix}"), count=len(names), gpu=gpu,
            gpus_per_node=gpus, cpu_cores=cpus, memory_gb=max(mem / 1024, 1 / 1024),
            nodes_per_leaf=len(names), names=names))
    return ClusterSpec(name=name, node_groups=specs)


def import_cluster(cli: SlurmCli, name: str = "slurm", default_gpu: str = DEFAULT_GPU,
                   partition: str | None = None) -> ClusterSpec:
    """The live cluster as a ClusterSpec (two Slurm calls)."""
    return cluster_spec(read_nodes(cli), read_topology(cli), name, default_gpu, partition)
