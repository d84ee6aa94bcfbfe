"""How loaded each leaf's and each pod's uplinks are, from where running gangs sit.

Core knows placements, not physics. What it can say from a placement alone:
a gang inside one leaf switch never uses that leaf's uplinks; a gang that
spans leaves sends traffic up from every leaf it touches, so it loads each of
those leaves' uplinks by the NIC bandwidth of its GPUs there (every GPU has
its own scale-out NIC, ``network.nic_gbps``; for a gang on whole nodes this is
its nodes there times the node's NIC bandwidth). A gang that spans pods loads
each pod's uplinks the same way. Capacity is what the fabric gives a leaf:
its GPUs' NIC bandwidth divided by ``spine_oversubscription``; a pod's is its
GPUs' NIC bandwidth divided by both oversubscriptions (the per-GPU tiers of
``sim.runtime_model``).

Loads are kept in GPUs (multiply by ``nic_gbps`` for Gbit/s), integers, so a
start and a finish cancel exactly and the load after any sequence of them
equals a recount from scratch (a property test holds that). ``SchedulerState``
keeps one ``SpineLoad`` up to date on start and finish, at a cost per node of
the job, never a scan of the running jobs; ``decide`` adds the jobs it starts
within a cycle inside ``trial()``, which undoes them when the cycle ends.

On a non-blocking fabric (both oversubscriptions 1.0) no uplink can be over
capacity (a leaf's load is at most its own GPUs), so ``oversubscribed`` is
False and placement ignores the load: it is exactly the topology strategy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from grace.core.capacity import Placement
from grace.core.topology import Topology


class SpineLoad:
    """Uplink load per leaf and per pod, in GPUs of gangs that cross that tier."""

    __slots__ = ("_log", "leaf_capacity", "leaf_load", "nic_gbps", "oversubscribed",
                 "pod_capacity", "pod_load", "topo")

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        net = topo.network
        self.nic_gbps = net.nic_gbps
        n_pods = 1 + max(topo.leaf_pod, default=-1)
        leaf_gpus = [sum(topo.nodes[n].gpus for n in nodes) for nodes in topo.leaf_nodes]
        pod_gpus = [0] * n_pods
        for leaf, gpus in enumerate(leaf_gpus):
            pod_gpus[topo.leaf_pod[leaf]] += gpus
        spine, pod = net.spine_oversubscription, net.pod_oversubscription
        self.leaf_capacity = [g / spine for g in leaf_gpus]
        self.pod_capacity = [g / (spine * pod) for g in pod_gpus]
        self.oversubscribed = spine > 1.0 or pod > 1.0
        self.leaf_load = [0] * len(leaf_gpus)
        self.pod_load = [0] * n_pods
        self._log: list[tuple[int, Placement]] | None = None

    # ------------------------------------------------------------------ bookkeeping
    def span(self, placement: Placement) -> tuple[dict[int, int], dict[int, int]]:
        """GPUs of ``placement`` per leaf and per pod; both empty when it stays in one leaf,
        the pods empty when it stays in one pod (a tier it does not cross carries nothing)."""
        by_node = placement.by_node
        if len(by_node) < 2:  # most gangs: one node (by_node is set once allocated)
            if by_node or not placement.gpus:
                return {}, {}  # slices sit on one GPU each; whole GPUs alone never cross
            placement.nodes(self.topo)  # fills by_node once
            by_node = placement.by_node
            if len(by_node) < 2:
                return {}, {}
        nodes = self.topo.nodes
        leaves: dict[int, int] = {}
        for node, bits in by_node:
            leaf = nodes[node].leaf
            leaves[leaf] = leaves.get(leaf, 0) + bits.bit_count()
        if len(leaves) == 1:
            return {}, {}
        leaf_pod = self.topo.leaf_pod
        pods: dict[int, int] = {}
        for leaf, gpus in leaves.items():
            pods[leaf_pod[leaf]] = pods.get(leaf_pod[leaf], 0) + gpus
        return leaves, (pods if len(pods) > 1 else {})

    def add(self, placement: Placement) -> bool:
        """A gang started on ``placement``: load the uplinks it crosses; True if any."""
        return self._change(placement, 1)

    def remove(self, placement: Placement) -> bool:
        """A gang on ``placement`` ended: the exact inverse of ``add``."""
        return self._change(placement, -1)

    def _change(self, placement: Placement, sign: int) -> bool:
        if len(placement.by_node) == 1:
            return False  # the common case, decided without a call
        leaves, pods = self.span(placement)
        if not leaves:
            return False
        if self._log is not None:
            self._log.append((sign, placement))
        for leaf, gpus in leaves.items():
            self.leaf_load[leaf] += sign * gpus
            assert self.leaf_load[leaf] >= 0, "removed a gang that was never added"
        for pod, gpus in pods.items():
            self.pod_load[pod] += sign * gpus
        return True

    @contextmanager
    def trial(self) -> Iterator[None]:
        """Every add and remove inside is undone on exit (``decide``'s cycle)."""
        assert self._log is None, "nested trial"
        self._log = []
        try:
            yield
        finally:
            log, self._log = self._log, None
            for sign, placement in reversed(log):
                self._change(placement, -sign)

    @classmethod
    def recount(cls, topo: Topology, placements: Iterable[Placement]) -> SpineLoad:
        """The load of these running placements, computed from scratch."""
        load = cls(topo)
        for p in placements:
            load.add(p)
        return load

    # ------------------------------------------------------------------ queries
    def leaf_ratio(self, leaf: int, extra_gpus: int = 0) -> float:
        """Load over capacity of ``leaf``'s uplinks with ``extra_gpus`` more crossing them."""
        return (self.leaf_load[leaf] + extra_gpus) / self.leaf_capacity[leaf]

    def pod_ratio(self, pod: int, extra_gpus: int = 0) -> float:
        return (self.pod_load[pod] + extra_gpus) / self.pod_capacity[pod]

    def cost(self, leaves: dict[int, int], pods: dict[int, int]) -> tuple[float, float]:
        """What a gang with this span (GPUs per leaf, per pod) would meet and add:
        the load over capacity of the most loaded uplink it crosses, counting itself
        (its own slowdown), and the GPUs of demand it adds beyond capacity, summed
        over those uplinks (the slowdown it spreads to the gangs it shares them with)."""
        worst, excess = 0.0, 0.0
        for leaf, gpus in leaves.items():
            load, capacity = self.leaf_load[leaf], self.leaf_capacity[leaf]
            worst = max(worst, (load + gpus) / capacity)
            excess += max(0.0, load + gpus - capacity) - max(0.0, load - capacity)
        for pod, gpus in pods.items():
            load, capacity = self.pod_load[pod], self.pod_capacity[pod]
            worst = max(worst, (load + gpus) / capacity)
            excess += max(0.0, load + gpus - capacity) - max(0.0, load - capacity)
        return worst, excess

    def crosses_loaded_uplink(self, placement: Placement) -> bool:
        """Does a running (already added) gang cross an uplink loaded past its capacity?"""
        leaves, pods = self.span(placement)
        return (any(self.leaf_ratio(leaf) > 1.0 + 1e-9 for leaf in leaves)
                or any(self.pod_ratio(pod) > 1.0 + 1e-9 for pod in pods))

    def leaf_gbps(self, leaf: int) -> tuple[float, float]:
        """(load, capacity) of ``leaf``'s uplinks in Gbit/s."""
        return self.leaf_load[leaf] * self.nic_gbps, self.leaf_capacity[leaf] * self.nic_gbps
