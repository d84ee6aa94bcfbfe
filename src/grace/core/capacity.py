"""Free capacity, indexed so a placement touches a few buckets, not every node.

``FreeCapacity`` is the one mutable structure the policy engine reads. It keeps,
for every (pool, GPU model) group:

- usable nodes bucketed by their number of free whole GPUs, cluster-wide and
  per leaf switch (best fit on a node is a walk up the buckets); each bucket is
  a sorted list of node ids, so the same free state always gives the same
  choice, whatever history led to it (``decide`` is repeatable);
- per leaf, how many usable nodes have at least k free GPUs, for every k
  (a leaf's capacity for an n x g gang is one list lookup);
- GPUs opened for slices (MIG or fractional sharing), sorted by their free
  units (best fit on a slice is one bisect).

Decisions are tried on the live index and undone: ``trial()`` records every
change so ``rollback`` restores the exact previous state. That keeps
``decide`` pure for its caller without copying 16,384 GPUs per cycle.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from grace.core.topology import Topology

GroupKey = tuple[str, str]  # (pool, gpu model)


@dataclass(frozen=True, slots=True)
class Slice:
    """Part of one GPU: ``compute`` and ``memory`` units of the GPU's slice scheme."""

    gpu: int
    compute: int
    memory: int
    profile: str = ""


@dataclass(frozen=True, slots=True)
class Placement:
    """Which GPUs a job got: whole GPUs by global index, plus any slices.

    ``by_node`` (node, bitmask of its GPUs) is filled in by ``FreeCapacity`` the
    first time it is needed, so allocating and releasing a 16,384-GPU gang again
    and again (trial preemptions, shadow times) costs per node, not per GPU.
    """

    gpus: tuple[int, ...] = ()
    slices: tuple[Slice, ...] = ()
    by_node: tuple[tuple[int, int], ...] = field(default=(), compare=False, repr=False)

    def nodes(self, topo: Topology) -> list[int]:
        if self.gpus and not self.by_node:
            object.__setattr__(self, "by_node", _group_by_node(topo, self.gpus))
        seen: dict[int, None] = {n: None for n, _ in self.by_node}
        for s in self.slices:
            seen[topo.gpu_node[s.gpu]] = None
        return list(seen)

    def gpu_equivalents(self, topo: Topology) -> float:
        units = topo.slice_units[0]
        return len(self.gpus) + sum(s.compute / units for s in self.slices)

    def leaves(self, topo: Topology) -> set[int]:
        return {topo.nodes[n].leaf for n in self.nodes(topo)}


def _group_by_node(topo: Topology, gpus: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    by_node: dict[int, int] = {}
    gpu_node = topo.gpu_node
    nodes = topo.nodes
    for gpu in gpus:
        node = gpu_node[gpu]
        by_node[node] = by_node.get(node, 0) | (1 << (gpu - nodes[node].gpu_base))
    return tuple(by_node.items())


def _remove(bucket: list[int], node: int) -> None:
    del bucket[bisect.bisect_left(bucket, node)]


insort = bisect.insort
bisect_left = bisect.bisect_left


class GroupIndex:
    """Buckets of one (pool, model) group's usable nodes by free whole GPUs."""

    __slots__ = (
        "domain_free", "domains", "free_total", "key", "leaf_buckets", "leaf_free",
        "leaves", "max_gpus", "nodes", "nodes_by_free", "nodes_per_leaf", "partial", "share_by_free",
        "usable_nodes",
    )

    def __init__(self, key: GroupKey, max_gpus: int) -> None:
        self.key = key
        self.max_gpus = max_gpus
        self.nodes: list[int] = []
        self.leaves: list[int] = []
        self.nodes_per_leaf = 0
        self.usable_nodes = 0  # nodes not drained: "no usable nodes" without a scan
        self.domains: list[int] = []
        self.free_total = 0
        self.nodes_by_free: list[list[int]] = [[] for _ in range(max_gpus + 1)]
        self.leaf_buckets: dict[int, list[list[int]]] = {}
        self.leaf_free: dict[int, int] = {}
        self.domain_free: dict[int, int] = {}
        self.share_by_free: list[list[int]] = [[] for _ in range(max_gpus + 1)]
        self.partial: list[tuple[int, int, int]] = []  # (free compute, free memory, gpu)

    def nodes_with_at_least(self, leaf: int, k: int) -> int:
        """Usable nodes under ``leaf`` with at least ``k`` free GPUs."""
        buckets = self.leaf_buckets[leaf]
        return sum(len(buckets[i]) for i in range(k, self.max_gpus + 1))

    def leaf_ge(self, leaf: int) -> list[int]:
        return [self.nodes_with_at_least(leaf, k) for k in range(self.max_gpus + 1)]


class FreeCapacity:
    """Free whole GPUs and slices, with usable-node flags, plus an undo log."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        nodes = topo.nodes
        self.free_mask = [(1 << n.gpus) - 1 for n in nodes]
        self.free_count = [n.gpus for n in nodes]
        self.share_mask = [(1 << n.shareable_gpus) - 1 for n in nodes]
        self.usable = [True] * len(nodes)
        self._leaf = [n.leaf for n in nodes]
        self._domain = [n.domain for n in nodes]
        self.slice_free: dict[int, tuple[int, int]] = {}
        self.slice_count: dict[int, int] = {}
        self.groups: dict[GroupKey, GroupIndex] = {}
        self.node_group: list[GroupIndex] = []
        self._log: list[tuple] | None = None
        # nodes changed since a watcher (core.fragmentation) last looked; None: not watched
        self.touched: set[int] | None = None
        max_by_key: dict[GroupKey, int] = {}
        for n in nodes:
            k = (n.pool, n.gpu_model)
            max_by_key[k] = max(max_by_key.get(k, 0), n.gpus)
        for k, m in max_by_key.items():
            self.groups[k] = GroupIndex(k, m)
        for n in nodes:
            g = self.groups[(n.pool, n.gpu_model)]
            self.node_group.append(g)
            g.nodes.append(n.index)
            g.usable_nodes += 1
            if n.leaf not in g.leaf_buckets:
                g.leaves.append(n.leaf)
                g.leaf_buckets[n.leaf] = [[] for _ in range(g.max_gpus + 1)]
                g.leaf_free[n.leaf] = 0
            if n.domain not in g.domain_free:
                g.domains.append(n.domain)
                g.domain_free[n.domain] = 0
            self._index_add(n.index, n.gpus)
        for g in self.groups.values():
            g.nodes_per_leaf = max(
                sum(1 for n in topo.leaf_nodes[leaf] if self.node_group[n] is g) for leaf in g.leaves)

    # ------------------------------------------------------------------ index upkeep
    def _index_add(self, node: int, count: int) -> None:
        g = self.node_group[node]
        leaf = self._leaf[node]
        insort(g.nodes_by_free[count], node)
        insort(g.leaf_buckets[leaf][count], node)
        g.leaf_free[leaf] += count
        g.domain_free[self._domain[node]] += count
        g.free_total += count
        if self.free_mask[node] & self.share_mask[node]:
            insort(g.share_by_free[count], node)

    def _index_remove(self, node: int, count: int) -> None:
        g = self.node_group[node]
        leaf = self._leaf[node]
        bucket = g.nodes_by_free[count]
        del bucket[bisect_left(bucket, node)]
        bucket = g.leaf_buckets[leaf][count]
        del bucket[bisect_left(bucket, node)]
        g.leaf_free[leaf] -= count
        g.domain_free[self._domain[node]] -= count
        g.free_total -= count
        if self.free_mask[node] & self.share_mask[node]:
            _remove(g.share_by_free[count], node)

    def _set_mask(self, node: int, mask: int) -> None:
        old_mask = self.free_mask[node]
        if self._log is not None:
            self._log.append(("mask", node, old_mask))
        if self.touched is not None:
            self.touched.add(node)
        usable = self.usable[node]
        if usable:
            self._index_remove(node, self.free_count[node])
        self.free_mask[node] = mask
        self.free_count[node] = mask.bit_count()
        if usable:
            self._index_add(node, self.free_count[node])

    def _set_slice(self, gpu: int, value: tuple[int, int] | None, users: int) -> None:
        g = self.node_group[self.topo.gpu_node[gpu]]
        old = self.slice_free.get(gpu)
        if self._log is not None:
            self._log.append(("slice", gpu, old, self.slice_count.get(gpu, 0)))
        if self.touched is not None:
            self.touched.add(self.topo.gpu_node[gpu])
        indexed = self.usable[self.topo.gpu_node[gpu]]  # drained nodes are out of the index
        if old is not None:
            if indexed:
                i = bisect.bisect_left(g.partial, (old[0], old[1], gpu))
                del g.partial[i]
            del self.slice_free[gpu]
            del self.slice_count[gpu]
        if value is not None:
            self.slice_free[gpu] = value
            self.slice_count[gpu] = users
            if indexed:
                bisect.insort(g.partial, (value[0], value[1], gpu))

    def set_usable(self, node: int, usable: bool) -> None:
        """Take a node out of (or back into) placement; its running work is untouched."""
        if self.usable[node] == usable:
            return
        if self._log is not None:
            self._log.append(("usable", node, self.usable[node]))
        if self.touched is not None:
            self.touched.add(node)
        g = self.node_group[node]
        base = self.topo.nodes[node].gpu_base
        opened = [gpu for gpu in range(base, base + self.topo.nodes[node].gpus)
                  if gpu in self.slice_free]
        g.usable_nodes += 1 if usable else -1
        if usable:
            self.usable[node] = True
            self._index_add(node, self.free_count[node])
            for gpu in opened:
                c, m = self.slice_free[gpu]
                bisect.insort(g.partial, (c, m, gpu))
        else:
            self._index_remove(node, self.free_count[node])
            self.usable[node] = False
            for gpu in opened:
                c, m = self.slice_free[gpu]
                del g.partial[bisect.bisect_left(g.partial, (c, m, gpu))]

    # ------------------------------------------------------------------ allocate / release
    def by_node(self, placement: Placement) -> tuple[tuple[int, int], ...]:
        """The placement's whole GPUs as (node, bitmask) pairs (slices not included)."""
        if placement.gpus and not placement.by_node:
            object.__setattr__(placement, "by_node", _group_by_node(self.topo, placement.gpus))
        return placement.by_node

    def set_free_masks(self, masks: dict[int, int]) -> None:
        """Set nodes' free-GPU masks at once (a shadow walk's releases, given back
        together: one index change per node instead of one per released job)."""
        for node, mask in masks.items():
            if mask != self.free_mask[node]:
                self._set_mask(node, mask)

    def allocate(self, placement: Placement) -> None:
        """Mark a placement's GPUs and slices used. Caller guarantees they are free."""
        topo = self.topo
        for node, bits in self.by_node(placement):
            assert self.free_mask[node] & bits == bits, "GPU given twice"
            self._set_mask(node, self.free_mask[node] & ~bits)
        for s in placement.slices:
            cur = self.slice_free.get(s.gpu)
            if cur is None:
                node = topo.gpu_node[s.gpu]
                bit = 1 << (s.gpu - topo.nodes[node].gpu_base)
                assert self.free_mask[node] & bit, "slice on a GPU that is not free"
                self._set_mask(node, self.free_mask[node] & ~bit)
                cur, users = topo.slice_units, 0
            else:
                users = self.slice_count[s.gpu]
            assert cur[0] >= s.compute and cur[1] >= s.memory, "slice over capacity"
            self._set_slice(s.gpu, (cur[0] - s.compute, cur[1] - s.memory), users + 1)

    def release(self, placement: Placement) -> None:
        """Give a placement's GPUs and slices back."""
        topo = self.topo
        for node, bits in self.by_node(placement):
            assert self.free_mask[node] & bits == 0, "released a GPU that was free"
            self._set_mask(node, self.free_mask[node] | bits)
        for s in placement.slices:
            cur = self.slice_free[s.gpu]
            users = self.slice_count[s.gpu] - 1
            if users == 0:
                self._set_slice(s.gpu, None, 0)
                node = topo.gpu_node[s.gpu]
                bit = 1 << (s.gpu - topo.nodes[node].gpu_base)
                self._set_mask(node, self.free_mask[node] | bit)
            else:
                self._set_slice(s.gpu, (cur[0] + s.compute, cur[1] + s.memory), users)

    # ------------------------------------------------------------------ trials
    @contextmanager
    def trial(self) -> Iterator[None]:
        """Every change inside is undone on exit; nested trials are not allowed."""
        assert self._log is None, "nested trial"
        self._log = []
        try:
            yield
        finally:
            self.rollback_to(0)
            self._log = None

    def mark(self) -> int:
        """A point to roll back to inside a trial (for a trial preemption)."""
        assert self._log is not None
        return len(self._log)

    def rollback_to(self, mark: int) -> None:
        log = self._log
        assert log is not None
        self._log = None  # undoing logs nothing
        try:
            while len(log) > mark:
                entry = log.pop()
                if entry[0] == "mask":
                    self._set_mask(entry[1], entry[2])
                elif entry[0] == "slice":
                    self._set_slice(entry[1], entry[2], entry[3])
                else:
                    self.set_usable(entry[1], entry[2])
        finally:
            self._log = log

    # ------------------------------------------------------------------ queries
    def free_gpus(self, key: GroupKey | None = None) -> int:
        if key is not None:
            g = self.groups.get(key)
            return g.free_total if g else 0
        return sum(g.free_total for g in self.groups.values())

    def free_gpu_ids(self, node: int, count: int, prefer_high: bool = True) -> list[int]:
        """``count`` free GPU ids on ``node``; high indexes first keep shareable ones free."""
        info = self.topo.nodes[node]
        mask = self.free_mask[node]
        if count == info.gpus and mask == (1 << count) - 1:
            return list(range(info.gpu_base + count - 1, info.gpu_base - 1, -1))
        order = range(info.gpus - 1, -1, -1) if prefer_high else range(info.gpus)
        out = []
        for i in order:
            if mask >> i & 1:
                out.append(info.gpu_base + i)
                if len(out) == count:
                    break
        return out

    def check_consistency(self) -> None:
        """Recount every index from the masks; for tests."""
        for key, g in self.groups.items():
            total = 0
            for leaf in g.leaves:
                ge = [0] * (g.max_gpus + 1)
                free = 0
                for node in self.topo.leaf_nodes[leaf]:
                    if self.node_group[node] is not g or not self.usable[node]:
                        continue
                    c = self.free_mask[node].bit_count()
                    assert c == self.free_count[node]
                    assert node in g.leaf_buckets[leaf][c]
                    for k in range(c + 1):
                        ge[k] += 1
                    free += c
                assert ge == g.leaf_ge(leaf), (key, leaf, ge, g.leaf_ge(leaf))
                assert free == g.leaf_free[leaf]
                total += free
            assert total == g.free_total
            assert g.usable_nodes == sum(self.usable[n] for n in g.nodes)
            assert g.partial == sorted(g.partial)
