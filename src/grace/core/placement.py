"""Where a gang goes: topology-aware, all-or-nothing placement strategies.

A request is either ``count`` whole GPUs (optionally as ``nodes x per_node``)
or one slice of a GPU. Every strategy returns a complete ``Placement`` or
``None``: a gang is never placed in part.

Whole-GPU algorithm (``topology`` strategy, the default):

1. Fits in one node: best fit, the usable node with the fewest free GPUs that
   still holds the gang, so whole nodes stay free for multi-node gangs.
2. Fits in one rack-scale NVLink domain (NVL72): best-fit domain.
3. Otherwise whole nodes under as few leaf switches as possible: the single
   leaf with the least spare capacity that still holds the gang; failing
   that, the pod that needs the fewest leaves, taking its fullest-free leaves
   first and the tightest-fitting leaf last; failing that, the same across pods.
4. A job with a flexible shape (only ``gpus``) that cannot get whole nodes under
   one leaf takes partly free nodes under one leaf (fullest first) before whole
   nodes across leaves, and scatters across leaves only as a last resort.

Contention (``PlacementMode.CONTENTION``): when a gang must cross
leaves on an oversubscribed fabric, step 3 weighs candidate leaf sets (today's
fewest-leaves cover, and a cover taking the least loaded leaves first in each
pod that could hold the gang, else across pods) by the uplink load they would
leave with the gang added (``core.spine_load``):
the first set whose every uplink stays within capacity, with today's first;
if every set overloads some uplink, the one whose most loaded uplink is least
loaded, then the one adding the least demand beyond capacity. A gang that
fits one leaf, and every gang on a non-blocking fabric (where no uplink can be
over capacity), is placed exactly as by ``TOPOLOGY``.

Headroom (``PlacementMode.HEADROOM``, the policies' default): as contention, and under leaf
locality a gang that one leaf could hold but no leaf holds now crosses leaves
at once, instead of waiting for a leaf, when a set exists whose every uplink
stays within capacity with it added (on a non-blocking fabric, always).

Slices: best fit among GPUs already split; only when none fits is a whole
GPU opened, on the node with the fewest free GPUs, so whole GPUs stay free.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import StrEnum

from grace.core.capacity import FreeCapacity, GroupIndex, Placement, Slice
from grace.core.spine_load import SpineLoad


class PlacementMode(StrEnum):
    """How a gang that must cross leaves picks them (the policy's ``placement``)."""

    TOPOLOGY = "topology"  # fewest leaves, fullest first: the load on uplinks is not read
    CONTENTION = "contention"  # the same, unless that overloads an uplink a lighter set avoids
    # CONTENTION, and under leaf locality a gang one leaf could hold crosses leaves now,
    # rather than wait for a leaf, when every uplink it crosses stays within capacity
    HEADROOM = "headroom"


@dataclass(frozen=True, slots=True)
class WholeRequest:
    """``count`` whole GPUs; ``per_node`` fixes the shape (nodes x per_node)."""

    count: int
    per_node: int | None = None


@dataclass(frozen=True, slots=True)
class SliceRequest:
    """One slice: units of the cluster's slice scheme, and the profile name if MIG."""

    compute: int
    memory: int
    profile: str = ""


def place_whole(
    cap: FreeCapacity, g: GroupIndex, req: WholeRequest, exclude: frozenset[int] = frozenset(),
    leaf_locality: bool = False, spine: SpineLoad | None = None,
    mode: PlacementMode = PlacementMode.TOPOLOGY,
) -> Placement | None:
    """Place ``req`` inside one group, or return None.

    ``leaf_locality``: a gang that one leaf switch could hold never spans two, and
    no gang is scattered over partly free nodes across leaves; it waits instead.
    ``spine`` and ``mode``: the uplink load, and how a gang that crosses leaves
    weighs it (module docstring); read only once the gang must cross leaves, so
    the common placements pay nothing for them.
    """
    if req.count > g.free_total:
        return None
    per_node = req.per_node
    if per_node is None and req.count <= g.max_gpus:
        node = _best_fit_node(g, req.count, exclude)
        if node is not None:
            return Placement(gpus=tuple(sorted(cap.free_gpu_ids(node, req.count))))
        if not _has_domains(cap, g):
            return None  # a gang that fits one node waits for one rather than scatter
    if per_node is not None and per_node > g.max_gpus:
        return None
    if per_node is not None and req.count == per_node:
        node = _best_fit_node(g, per_node, exclude)
        return None if node is None else Placement(tuple(sorted(cap.free_gpu_ids(node, per_node))))
    if _has_domains(cap, g) and per_node is None:
        placed = _best_fit_domain(cap, g, req.count, exclude)
        if placed is not None:
            return placed
    shaped = per_node if per_node is not None else g.max_gpus
    nodes_needed = -(-req.count // shaped)
    remainder = req.count - (nodes_needed - 1) * shaped
    fits_one_leaf = nodes_needed <= g.nodes_per_leaf
    for across_leaves in (False, True):
        weigh, spilling = None, False
        if across_leaves:
            if mode is not PlacementMode.TOPOLOGY and spine is not None and spine.oversubscribed:
                weigh = spine  # on a non-blocking fabric no uplink can be past capacity
            spilling = leaf_locality and fits_one_leaf
            if spilling and (mode is not PlacementMode.HEADROOM or spine is None):
                return None
        chosen = _pick_nodes_by_leaf(cap, g, nodes_needed, shaped, remainder, exclude,
                                     across_leaves, weigh, spilling)
        if chosen is not None:
            gpus: list[int] = []
            for i, node in enumerate(chosen):
                take = remainder if i == len(chosen) - 1 else shaped
                gpus.extend(cap.free_gpu_ids(node, take))
            return Placement(gpus=tuple(sorted(gpus)))
        if per_node is not None or (across_leaves and leaf_locality):
            continue
        # flexible shape: partly free nodes under one leaf before whole nodes across leaves
        placed = _scatter(cap, g, req.count, exclude, one_leaf=not across_leaves)
        if placed is not None:
            return placed
    return None


def _has_domains(cap: FreeCapacity, g: GroupIndex) -> bool:
    return len(g.domains) < len(g.nodes)


def _best_fit_node(g: GroupIndex, count: int, exclude: frozenset[int]) -> int | None:
    buckets = g.nodes_by_free
    for k in range(count, g.max_gpus + 1):
        bucket = buckets[k]
        if not bucket:
            continue
        if not exclude:
            return next(iter(bucket))
        for node in bucket:
            if node not in exclude:
                return node
    return None


def _best_fit_domain(
    cap: FreeCapacity, g: GroupIndex, count: int, exclude: frozenset[int]
) -> Placement | None:
    best, best_free = None, None
    for d in g.domains:
        free = g.domain_free[d]
        if free >= count and (best_free is None or free < best_free):
            best, best_free = d, free
    if best is None:
        return None
    nodes = [n for n in cap.topo.domain_nodes[best]
             if cap.usable[n] and n not in exclude and cap.free_count[n] > 0]
    nodes.sort(key=lambda n: -cap.free_count[n])
    gpus: list[int] = []
    for n in nodes:
        gpus.extend(cap.free_gpu_ids(n, min(cap.free_count[n], count - len(gpus))))
        if len(gpus) == count:
            return Placement(gpus=tuple(sorted(gpus)))
    return None


def _leaf_capacity(cap: FreeCapacity, g: GroupIndex, leaf: int, per_node: int,
                   exclude: frozenset[int]) -> int:
    n = g.nodes_with_at_least(leaf, per_node)
    if exclude and n:
        for node in exclude:
            if (cap.topo.nodes[node].leaf == leaf and cap.usable[node]
                    and cap.node_group[node] is g and cap.free_count[node] >= per_node):
                n -= 1
    return n


def _pick_nodes_by_leaf(
    cap: FreeCapacity, g: GroupIndex, nodes_needed: int, per_node: int, last: int,
    exclude: frozenset[int], across_leaves: bool, spine: SpineLoad | None = None,
    within_capacity: bool = False,
) -> list[int] | None:
    """``nodes_needed - 1`` nodes with ``per_node`` free and a last one with ``last`` free.

    ``within_capacity``: across leaves, only a set whose uplinks all stay within
    capacity will do (always so when ``spine`` is None: a non-blocking fabric)."""
    caps = {}
    single: list[tuple[int, int]] = []
    for leaf in g.leaves:
        c = _leaf_capacity(cap, g, leaf, per_node, exclude)
        if last < per_node:
            c_last = _leaf_capacity(cap, g, leaf, last, exclude)
            if c >= nodes_needed - 1 and c_last >= nodes_needed:
                single.append((c_last, leaf))
        elif c >= nodes_needed:
            single.append((c, leaf))
        if c:
            caps[leaf] = c
    if single:
        leaves = [min(single)[1]]
    elif not across_leaves:
        return None
    else:
        # across leaves every node is asked for ``per_node`` free, the last one included
        if sum(caps.values()) < nodes_needed:
            return None
        leaves = _fewest_leaves(cap, caps, nodes_needed)
        if spine is not None:
            plan, over = _least_contended(cap, caps, nodes_needed, per_node, spine, leaves)
            if over and within_capacity:
                return None
            if plan is not None:
                return _pick_by_plan(g, plan, per_node, last, exclude)
    chosen: list[int] = []
    taken: set[int] = set()
    want = nodes_needed - 1
    for leaf in leaves:
        if len(chosen) >= want:
            break
        buckets = g.leaf_buckets[leaf]
        for k in range(per_node, g.max_gpus + 1):
            if len(chosen) >= want:
                break
            for node in buckets[k]:
                if node in exclude:
                    continue
                chosen.append(node)
                taken.add(node)
                if len(chosen) >= want:
                    break
    if len(chosen) < want:
        return None
    for leaf in leaves:  # the last node: best fit for what is left
        buckets = g.leaf_buckets[leaf]
        for k in range(last, g.max_gpus + 1):
            for node in buckets[k]:
                if node not in exclude and node not in taken:
                    chosen.append(node)
                    return chosen
    return None


def _fewest_leaves(cap: FreeCapacity, caps: dict[int, int], needed: int) -> list[int]:
    """Fewest leaves covering ``needed`` nodes, preferring one pod, tightest leaf last."""
    by_pod: dict[int, list[int]] = {}
    for leaf in caps:
        by_pod.setdefault(cap.topo.leaf_pod[leaf], []).append(leaf)
    best: list[int] | None = None
    for leaves in by_pod.values():
        picked = _greedy_cover(leaves, caps, needed)
        if picked is not None and (best is None or len(picked) < len(best)):
            best = picked
    if best is not None:
        return best
    picked = _greedy_cover(list(caps), caps, needed)
    assert picked is not None
    return picked


def _least_contended(cap: FreeCapacity, caps: dict[int, int], needed: int, per_node: int,
                     spine: SpineLoad, today: list[int],
                     ) -> tuple[list[tuple[int, int]] | None, bool]:
    """The leaf set (with nodes per leaf) whose uplinks stay within capacity, else the least
    overloaded, and whether it overloads one; the set is None when it is ``today``'s (the
    caller keeps its own node choice).

    Candidates: ``today``'s fewest-leaves cover, then a cover taking the least
    loaded leaves first in each pod that could hold the gang (else across pods).
    Each is scored by the uplinks it would cross with this gang added
    (``SpineLoad.cost``): overloaded at all; when
    so, how overloaded the worst is (this gang's own slowdown), then how much
    demand beyond capacity it adds (the slowdown it spreads); then candidate
    order. Today's comes first, so it stays whenever it overloads nothing. The
    scoring reads the load of the leaves involved only.
    """
    leaf_pod = cap.topo.leaf_pod
    by_pod: dict[int, list[int]] = {}
    for leaf in caps:
        by_pod.setdefault(leaf_pod[leaf], []).append(leaf)
    candidates = [_as_plan(today, caps, needed)]
    pods = [leaves for leaves in by_pod.values() if sum(caps[x] for x in leaves) >= needed]
    for leaves in pods or [list(caps)]:
        ordered = sorted(leaves, key=lambda x: (spine.leaf_ratio(x), -caps[x], x))
        candidates.append(_cover_in_order(ordered, caps, needed, per_node, spine))
    best_key: tuple[bool, float, float, int] | None = None
    best = 0
    for i, plan in enumerate(candidates):
        leaves_gpus = {leaf: n * per_node for leaf, n in plan}
        pods_gpus: dict[int, int] = {}
        for leaf, gpus in leaves_gpus.items():
            pods_gpus[leaf_pod[leaf]] = pods_gpus.get(leaf_pod[leaf], 0) + gpus
        if len(pods_gpus) == 1:
            pods_gpus = {}
        worst, excess = spine.cost(leaves_gpus, pods_gpus)
        over = worst > 1.0 + 1e-9
        key = (over, worst if over else 0.0, excess if over else 0.0, i)
        if best_key is None or key < best_key:
            best_key, best = key, i
    assert best_key is not None
    return (None if best == 0 else candidates[best]), best_key[0]


def _as_plan(leaves: list[int], caps: dict[int, int], needed: int) -> list[tuple[int, int]]:
    plan, remaining = [], needed
    for leaf in leaves:
        take = min(caps[leaf], remaining)
        plan.append((leaf, take))
        remaining -= take
    return plan


def _cover_in_order(ordered: list[int], caps: dict[int, int], needed: int, per_node: int,
                    spine: SpineLoad) -> list[tuple[int, int]]:
    """Leaves in ``ordered`` order, each giving all it has; the last one is, among the
    rest that cover what is left, the one left least loaded (then the tightest)."""
    plan: list[tuple[int, int]] = []
    remaining = needed
    for i, leaf in enumerate(ordered):
        if caps[leaf] >= remaining:
            tail = [x for x in ordered[i:] if caps[x] >= remaining]
            last = min(tail, key=lambda x: (spine.leaf_ratio(x, remaining * per_node), caps[x]))
            plan.append((last, remaining))
            return plan
        plan.append((leaf, caps[leaf]))
        remaining -= caps[leaf]
    raise AssertionError("the caller checked the leaves hold the gang")


def _pick_by_plan(g: GroupIndex, plan: list[tuple[int, int]], per_node: int, last: int,
                  exclude: frozenset[int]) -> list[int] | None:
    """``n`` nodes with ``per_node`` free from each (leaf, n) of ``plan``, best fit; the
    very last node best fits ``last`` GPUs in the plan's last leaf."""
    chosen: list[int] = []
    for j, (leaf, n) in enumerate(plan):
        buckets = g.leaf_buckets[leaf]
        final = j == len(plan) - 1
        want = len(chosen) + n - (1 if final else 0)
        for k in range(per_node, g.max_gpus + 1):
            for node in buckets[k]:
                if len(chosen) >= want:
                    break
                if node not in exclude:
                    chosen.append(node)
        if len(chosen) < want:
            return None
        if final:
            taken = set(chosen)
            for k in range(last, g.max_gpus + 1):
                for node in buckets[k]:
                    if node not in exclude and node not in taken:
                        chosen.append(node)
                        return chosen
            return None
    return None


def _greedy_cover(leaves: list[int], caps: dict[int, int], needed: int) -> list[int] | None:
    ordered = sorted(leaves, key=lambda leaf: -caps[leaf])
    picked: list[int] = []
    remaining = needed
    for i, leaf in enumerate(ordered):
        if caps[leaf] >= remaining:
            # tightest leaf that still covers what is left
            tail = [x for x in ordered[i:] if caps[x] >= remaining]
            picked.append(min(tail, key=lambda x: caps[x]))
            return picked
        picked.append(leaf)
        remaining -= caps[leaf]
    return None


def _scatter(cap: FreeCapacity, g: GroupIndex, count: int, exclude: frozenset[int],
             one_leaf: bool) -> Placement | None:
    """Any nodes, fullest-free first. ``one_leaf``: the tightest single leaf that holds
    the whole gang; otherwise across leaves, those with the most free GPUs first."""
    if not one_leaf:
        return _scatter_across(cap, g, count, exclude,
                               sorted(g.leaves, key=lambda leaf: -g.leaf_free[leaf]))
    fitting = sorted((free, leaf) for leaf, free in g.leaf_free.items() if free >= count)
    for _, leaf in fitting:
        placed = _scatter_across(cap, g, count, exclude, [leaf])
        if placed is not None:
            return placed
    return None


def _scatter_across(cap: FreeCapacity, g: GroupIndex, count: int, exclude: frozenset[int],
                    leaves: list[int]) -> Placement | None:
    gpus: list[int] = []
    for leaf in leaves:
        buckets = g.leaf_buckets[leaf]
        for k in range(g.max_gpus, 0, -1):
            for node in buckets[k]:
                if node in exclude:
                    continue
                gpus.extend(cap.free_gpu_ids(node, min(k, count - len(gpus))))
                if len(gpus) == count:
                    return Placement(gpus=tuple(sorted(gpus)))
    return None


def place_slice(
    cap: FreeCapacity, g: GroupIndex, req: SliceRequest, exclude: frozenset[int] = frozenset()
) -> Placement | None:
    """Best-fit a slice onto an already split GPU, else open the emptiest-node GPU."""
    partial = g.partial
    i = bisect.bisect_left(partial, (req.compute, req.memory, -1))
    topo = cap.topo
    while i < len(partial):
        _c, m, gpu = partial[i]
        if m >= req.memory and (not exclude or topo.gpu_node[gpu] not in exclude):
            return Placement(slices=(Slice(gpu, req.compute, req.memory, req.profile),))
        i += 1
    units = topo.slice_units
    if req.compute > units[0] or req.memory > units[1]:
        return None
    for k in range(1, g.max_gpus + 1):
        for node in g.share_by_free[k]:
            if node in exclude:
                continue
            free = cap.free_mask[node] & cap.share_mask[node]
            bit = (free & -free).bit_length() - 1
            gpu = topo.nodes[node].gpu_base + bit
            return Placement(slices=(Slice(gpu, req.compute, req.memory, req.profile),))
    return None
