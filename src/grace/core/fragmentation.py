"""Fragmentation-aware packing: put each job where it wastes the least future capacity.

Best fit fills the fullest node that holds a job. On a GPU-sharing cluster that
is not enough: a 0.8-GPU pod that opens a fresh GPU leaves a 0.2 sliver few
pods can use, and a CPU-hungry pod on a node with spare GPUs but little spare
CPU strands those GPUs for everyone. The idea here is the one of Weng et al.,
"Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation
Gradient Descent" (USENIX ATC'23): free GPU capacity is worth what the jobs
that will arrive can use of it, so place each job where the *expected
fragmentation* of the cluster grows the least. (This is an independent
implementation of that concept, not their code.)

The model. A request *kind* is a GPU share (or a count of whole GPUs) with the
host CPU and memory it asks for. For a node and a kind:

- the GPU capacity the kind could use there: for whole-GPU kinds, the node's
  free whole GPUs if there are enough of them (a gang larger than the node
  needs them all); for shares, what a stream of that share could fill of the
  free shareable GPUs and of what is left on split GPUs: the largest multiple of
  the share that fits in each (a sliver smaller than the share is useless to it,
  and 0.5 left is worth 0.4 to 0.2-shares);
- the host limit. FGD's rule (``host_rule="one"``) counts all of that capacity
  if the host has CPU and memory for one more pod of the kind, none otherwise.
  The default (``host_rule="pods"``) counts at most what the pods the host can
  still feed would take: a node with 8 free GPUs and CPU for one more 1-GPU pod
  offers that kind 1 GPU, not 8. This sees CPU stranding coming before it
  happens, which matters most when CPU is scarce: in the openb packing
  experiment (``sim.packing``, ``benchmarks/twin_openb.py``) with the trace's
  CPU-only pods also taking host CPU and memory (placed by ``place_host``), it
  allocated 95.29% of the GPUs at 100% arrived against 95.20% with FGD's rule
  (means of seeds 42-46; per seed the two rules trade places).

With ``p_k`` the share of recent requests of kind ``k``, a node's *usable*
capacity is ``U = sum_k p_k * usable_k``; its expected fragmentation is its
free capacity minus ``U``. Every candidate for one job takes the same capacity,
so minimising the growth of fragmentation is minimising the loss of usable
capacity ``U(before) - U(after)``: that is the score. Candidates are every
allowed node with room, and on it either the tightest split GPU that holds a
share or a fresh GPU. Ties go to the job's preferred GPU model, then to the
fuller node (best fit), then to the tighter GPU, then to node order.

What the scheduler knows, and nothing else:

- the request mix ``p_k`` is learned online (``DemandModel``): a histogram of the
  requests submitted so far, decayed with a half-life counted in requests, so it
  follows a changing workload; no trace is read;
- host CPU and memory in use are what the started jobs asked for
  (``host_take``/``host_give``, called by ``SchedulerState``);
- whether a job may use a node at all (``exclude_nodes``) is the driver's call,
  exactly as for best fit; this module only ranks the allowed candidates.

Cost: the score is vectorised over nodes with numpy. A node's row is recomputed
only when its capacity (``FreeCapacity.touched``) or host use changed, and
every row when the request mix is refreshed (every ``refresh_every`` requests).
Whole-GPU jobs on groups that cannot be split, with no host needs in the mix,
depend only on a node's free-GPU count: the buckets are ranked once per refresh
and walked like best fit, so they cost what best fit costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from grace.core.capacity import FreeCapacity, GroupIndex, Placement, Slice

if TYPE_CHECKING:
    from grace.core.jobs import PendingJob

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: a request kind: (GPU compute units, a share below one GPU or k whole GPUs; CPU milli; MiB)
Kind = tuple[int, int, int]
#: a candidate's order: (loss, group rank, free units of its node, GPU free before, node)
Key = tuple[float, int, int, int, int]

_TIE = 1e-9  # losses closer than this (in GPU compute units) are a tie
_NO_LIMIT = 1e15  # host room of a node whose CPU or memory size is unknown


class DemandModel:
    """A decaying histogram of the requests seen: kind -> weight.

    Each new request weighs ``2 ** (1 / half_life)`` times the one before, so a
    request ``half_life`` requests old counts half as much as the newest.
    """

    def __init__(self, half_life: float = 2000.0) -> None:
        self.half_life = half_life
        self.weights: dict[Kind, float] = {}
        self.observed = 0
        self._increment = 1.0
        self._growth = 2.0 ** (1.0 / half_life) if half_life > 0 else 1.0

    def observe(self, gpu_units: int, cpu_milli: int = 0, memory_mib: int = 0) -> None:
        if gpu_units <= 0:
            return
        key = (gpu_units, max(0, cpu_milli), max(0, memory_mib))
        self.weights[key] = self.weights.get(key, 0.0) + self._increment
        self.observed += 1
        self._increment *= self._growth
        if self._increment > 1e150:  # rescale; forget kinds that no longer weigh anything
            scale = 1.0 / self._increment
            self.weights = {k: w * scale for k, w in self.weights.items() if w * scale > 1e-12}
            self._increment = 1.0

    def mix(self) -> list[tuple[Kind, float]]:
        """Kinds and their shares of recent requests (summing to 1)."""
        total = sum(self.weights.values())
        if total <= 0:
            return []
        return sorted((k, w / total) for k, w in self.weights.items())


def gpu_units(job: PendingJob, units: int) -> int:
    """A request's size in slice units (a whole GPU is ``units``), as the mix counts it."""
    if job.whole is not None:
        return job.whole.count * units
    return min((s.compute for s in job.slices.values()), default=0)


def observe_arrival(demand: DemandModel, job: PendingJob, units: int) -> None:
    """Count a submitted job in ``demand`` (what ``FragmentationIndex.observe`` does)."""
    demand.observe(gpu_units(job, units), job.cpu_milli, job.memory_mib)


class FragmentationIndex:
    """Ranks one-node placements by the usable capacity they destroy; see the module doc."""

    def __init__(self, cap: FreeCapacity, demand: DemandModel | None = None,
                 refresh_every: int = 16, host_rule: str = "pods") -> None:
        if host_rule not in ("pods", "one"):
            raise ValueError(f"host_rule must be 'pods' or 'one', not {host_rule!r}")
        topo = cap.topo
        nodes = topo.nodes
        n = len(nodes)
        self.cap = cap
        self.topo = topo
        self.demand = demand if demand is not None else DemandModel()
        self.refresh_every = refresh_every
        self.host_rule = host_rule
        self.n = n
        self.width = max((x.gpus for x in nodes), default=1) or 1
        self.units = topo.slice_units[0]
        self.node_gpus: IntArray = np.array([x.gpus for x in nodes], dtype=np.int64)
        self.gpu_base = [x.gpu_base for x in nodes]
        # host: sizes from the topology (0: unknown, never a limit), use from host_take/give
        self.cpu_known: BoolArray = np.array([x.cpu_cores > 0 for x in nodes], dtype=np.bool_)
        self.mem_known: BoolArray = np.array([x.memory_gb > 0 for x in nodes], dtype=np.bool_)
        self.cpu_free: IntArray = np.array([x.cpu_cores * 1000 for x in nodes], dtype=np.int64)
        self.mem_free: IntArray = np.array([int(x.memory_gb * 1024) for x in nodes], dtype=np.int64)
        self.cpu_size: IntArray = np.maximum(self.cpu_free, 1)
        self.mem_size: IntArray = np.maximum(self.mem_free, 1)
        self.host_held: dict[int, tuple[tuple[int, ...], int, int]] = {}
        # GPU state per node, mirrored from the capacity index
        self.free_whole: IntArray = np.zeros(n, dtype=np.int64)
        self.free_shareable: IntArray = np.zeros(n, dtype=np.int64)
        self.split: IntArray = np.full((n, self.width), -1, dtype=np.int64)  # free compute; -1: whole
        self.split_mem: IntArray = np.full((n, self.width), -1, dtype=np.int64)
        self.usable: BoolArray = np.zeros(n, dtype=np.bool_)
        groups = list(cap.groups.values())
        self._group_number = {id(g): i for i, g in enumerate(groups)}
        self.group_id: IntArray = np.zeros(n, dtype=np.int64)
        for i, g in enumerate(groups):
            self.group_id[g.nodes] = i
        self.shareable_group = {id(g): any(nodes[x].shareable_gpus for x in g.nodes) for g in groups}
        self.uniform_group = {id(g): all(nodes[x].gpus == g.max_gpus for x in g.nodes) for g in groups}
        self._rank_cache: dict[tuple[int, ...], IntArray] = {}
        self._excl_key: frozenset[int] | None = None
        self._excl: BoolArray = np.zeros(n, dtype=np.bool_)
        self._dirty_host: set[int] = set()
        self._bucket_rank: dict[tuple[int, int], list[tuple[float, int]]] = {}
        self._snapshot_at = -1
        self._stale = True
        self.host_active = False
        self._load_rows(np.arange(n, dtype=np.int64))
        cap.touched = set()  # the capacity index records the nodes it changes from now on
        self._rebuild_mix()

    # ------------------------------------------------------------------ what the scheduler tells it
    def observe(self, job: PendingJob) -> None:
        """A request was submitted: count it in the mix."""
        observe_arrival(self.demand, job, self.units)

    def host_take(self, job: PendingJob, placement: Placement) -> None:
        """A job started: its host CPU and memory are in use on its nodes until ``host_give``."""
        if not (job.cpu_milli or job.memory_mib):
            return
        nodes = tuple(placement.nodes(self.topo))
        if not nodes:
            return
        self.hold_host(int(job.id), nodes, job.cpu_milli // len(nodes), job.memory_mib // len(nodes))

    def hold_host(self, key: int, nodes: tuple[int, ...], cpu_milli: int, memory_mib: int) -> None:
        """``cpu_milli`` and ``memory_mib`` on each of ``nodes`` are in use until ``host_give(key)``.

        ``host_take`` for a job with GPUs; a driver that also places pods asking for
        no GPU (``place_host``, the twin's packing experiment) records them here."""
        self.host_held[key] = (nodes, cpu_milli, memory_mib)
        for x in nodes:
            self.cpu_free[x] -= cpu_milli
            self.mem_free[x] -= memory_mib
            self._dirty_host.add(x)

    def host_give(self, job_id: int) -> None:
        """A job ended: its host CPU and memory are free again."""
        held = self.host_held.pop(int(job_id), None)
        if held is None:
            return
        nodes, cpu, mem = held
        for x in nodes:
            self.cpu_free[x] += cpu
            self.mem_free[x] += mem
            self._dirty_host.add(x)

    def _gpu_units(self, job: PendingJob) -> int:
        return gpu_units(job, self.units)

    # ------------------------------------------------------------------ placement
    def place(self, job: PendingJob, groups: list[tuple[str, GroupIndex]]) -> Placement | None:
        """The one-node placement that loses the least usable capacity, or None.

        None also when the job is not a one-node job (a gang over nodes, a fixed
        shape of several nodes) or nothing is known of the mix yet: the caller's
        own path places those.
        """
        whole = job.whole
        if whole is not None:
            count = whole.count
            if count <= 0 or count > self.width or whole.per_node not in (None, count):
                return None
            if not any(g.free_total >= count for _, g in groups):
                return None
            self._sync_mix()
            if not self._kinds:
                return None
            if not self.host_active and all(
                    self.uniform_group[id(g)] and not self.shareable_group[id(g)] for _, g in groups):
                return self._place_by_bucket(job, groups, count)
            self._sync_rows()
            return self._place_whole(job, groups, count)
        if not job.slices or not groups:
            return None
        self._sync_mix()
        if not self._kinds:
            return None
        self._sync_rows()
        ok, rank = self._candidates(job, groups)
        by_request: dict[tuple[int, int, str], list[int]] = {}
        for model, g in groups:
            req = job.slices.get(model)
            if req is not None and self.shareable_group[id(g)]:
                by_request.setdefault((req.compute, req.memory, req.profile), []).append(
                    self._group_number[id(g)])
        best: tuple[Key, Placement] | None = None
        for (compute, memory, profile), gids in by_request.items():
            allowed = ok if len(by_request) == 1 else ok & np.isin(self.group_id, gids)
            found = self._place_slice(job, allowed, rank, compute, memory, profile)
            if found is not None and (best is None or _better(found[0], best[0])):
                best = found
        return None if best is None else best[1]

    def place_host(self, cpu_milli: int, memory_mib: int,
                   exclude: frozenset[int] = frozenset()) -> int | None:
        """The node for a pod that asks for host CPU and memory but no GPU, or None.

        Such a pod takes nothing the GPU score sees directly, yet it can strand GPUs:
        with a node's CPU or memory gone, its free GPUs feed fewer pods. So the same
        score ranks it: the node whose usable capacity (host limits included) drops
        the least. Many nodes tie at no loss; among them the pod goes where the host
        is least needed by GPUs: the node with the fewest free GPU units (a node whose
        GPUs are all taken first: its CPU is of no use to GPU pods any more), then the
        most host room per free GPU unit left, then node order. Nodes whose CPU or
        memory size is unknown are never a limit."""
        self._sync_mix()
        self._sync_rows()
        cpu_ok = ~self.cpu_known | (self.cpu_free >= cpu_milli)
        mem_ok = ~self.mem_known | (self.mem_free >= memory_mib)
        ok = self.usable & cpu_ok & mem_ok
        if exclude:
            ok[np.fromiter(exclude, dtype=np.int64, count=len(exclude))] = False
        idx = np.flatnonzero(ok)
        if idx.size == 0:
            return None
        if self._kinds and self.host_active:
            after = self._usable(self.free_whole[idx], self.free_shareable[idx], self._room[idx],
                                 (idx, cpu_milli, memory_mib), self.node_gpus[idx])
            loss = self._u0[idx] - after
        else:
            loss = np.zeros(idx.size, dtype=np.float64)
        near = idx[loss <= loss.min() + _TIE]
        free = self._free_units[near] if self._kinds else self.free_whole[near] * self.units
        slack = _host_slack((self.cpu_free[near] - cpu_milli) / self.cpu_size[near],
                            (self.mem_free[near] - memory_mib) / self.mem_size[near],
                            self.cpu_known[near], self.mem_known[near], free)
        order = np.lexsort((near, -slack, free))
        return int(near[order[0]])

    def _place_by_bucket(self, job: PendingJob, groups: list[tuple[str, GroupIndex]],
                         count: int) -> Placement | None:
        """No split GPUs, no host needs: a node's loss depends on its free-GPU count only."""
        exclude = job.exclude_nodes
        best: tuple[Key, int] | None = None
        for rank, (_model, g) in enumerate(groups):
            if g.free_total < count:
                continue
            for loss, free in self._bucket_order(g.max_gpus, count):
                if best is not None and loss > best[0][0] + _TIE:
                    break
                node = _first_not_in(g.nodes_by_free[free], exclude)
                if node is None:
                    continue
                key = (loss, rank, free, 0, node)
                if best is None or _better(key, best[0]):
                    best = (key, node)
                break
        if best is None:
            return None
        return Placement(gpus=tuple(sorted(self.cap.free_gpu_ids(best[1], count))))

    def _bucket_order(self, node_gpus: int, count: int) -> list[tuple[float, int]]:
        """(loss, free GPUs) of taking ``count`` from a node of ``node_gpus``, none split."""
        key = (node_gpus, count)
        order = self._bucket_rank.get(key)
        if order is None:
            whole = [(min(int(k), node_gpus), float(p))
                     for k, p, is_whole in zip(self._k, self._pi, self._whole_col, strict=True)
                     if is_whole]

            def usable(free: int) -> float:  # _usable of one such node, without host limits
                return sum(p for need, p in whole if free >= need) * free * self.units

            order = sorted((usable(f) - usable(f - count), f) for f in range(count, node_gpus + 1))
            self._bucket_rank[key] = order
        return order

    def _candidates(self, job: PendingJob, groups: list[tuple[str, GroupIndex]]
                    ) -> tuple[BoolArray, IntArray]:
        """Usable, allowed, not excluded nodes; each node's rank by its group (-1: not allowed)."""
        key = tuple(self._group_number[id(g)] for _, g in groups)
        rank = self._rank_cache.get(key)
        if rank is None:
            order = np.full(len(self._group_number), -1, dtype=np.int64)
            for r, gid in enumerate(key):
                if order[gid] < 0:
                    order[gid] = r
            rank = order[self.group_id]
            self._rank_cache[key] = rank
        ok = self.usable & (rank >= 0)
        exclude = job.exclude_nodes
        if exclude:
            if exclude is not self._excl_key:  # the same job is placed again and again in a cycle
                self._excl = np.zeros(self.n, dtype=np.bool_)
                self._excl[np.fromiter(exclude, dtype=np.int64, count=len(exclude))] = True
                self._excl_key = exclude
            ok &= ~self._excl
        return ok, rank

    def _place_whole(self, job: PendingJob, groups: list[tuple[str, GroupIndex]],
                     count: int) -> Placement | None:
        ok, rank = self._candidates(job, groups)
        idx = np.flatnonzero(ok & (self.free_whole >= count))
        if idx.size == 0:
            return None
        w = self.free_whole[idx] - count
        ws = np.minimum(self.free_shareable[idx], w)  # whole jobs take the highest GPUs first
        after = self._usable(w, ws, self._room[idx], (idx, job.cpu_milli, job.memory_mib),
                             self.node_gpus[idx])
        loss = self._u0[idx] - after
        pick = _choose(loss, rank[idx], self._free_units[idx], np.zeros(idx.size, np.int64), idx)
        node = int(idx[pick])
        return Placement(gpus=tuple(sorted(self.cap.free_gpu_ids(node, count))))

    def _place_slice(self, job: PendingJob, ok: BoolArray, rank: IntArray,
                     compute: int, memory: int, profile: str) -> tuple[Key, Placement] | None:
        units = self.units
        # the tightest split GPU of each node that holds the slice
        fits = (self.split >= compute) & (self.split_mem >= memory)
        tight = np.where(fits, self.split, np.iinfo(np.int64).max)
        split_nodes = np.flatnonzero(ok & fits.any(axis=1))
        col = tight.argmin(axis=1)[split_nodes]
        x = self.split[split_nodes, col]
        room_s = self._room[split_nodes] - self._fill(x) + self._fill(x - compute)
        # or a fresh GPU, which becomes a split GPU with units - compute left
        if compute <= units and memory <= self.topo.slice_units[1]:
            fresh = np.flatnonzero(ok & (self.free_shareable >= 1))
        else:
            fresh = np.zeros(0, dtype=np.int64)
        room_f = self._room[fresh] + self._fill(np.array(units - compute))[None, :]
        idx = np.concatenate([split_nodes, fresh])
        if idx.size == 0:
            return None
        w = np.concatenate([self.free_whole[split_nodes], self.free_whole[fresh] - 1])
        ws = np.concatenate([self.free_shareable[split_nodes], self.free_shareable[fresh] - 1])
        after = self._usable(w, ws, np.concatenate([room_s, room_f]),
                             (idx, job.cpu_milli, job.memory_mib), self.node_gpus[idx])
        loss = self._u0[idx] - after
        before = np.concatenate([x, np.full(fresh.size, units + 1, np.int64)])  # tighter first
        pick = _choose(loss, rank[idx], self._free_units[idx], before, idx)
        node = int(idx[pick])
        if pick < split_nodes.size:
            gpu = self.gpu_base[node] + int(col[pick])
        else:
            free = self.cap.free_mask[node] & self.cap.share_mask[node]
            gpu = self.gpu_base[node] + (free & -free).bit_length() - 1
        key = (float(loss[pick]), int(rank[node]), int(self._free_units[node]), int(before[pick]), node)
        return key, Placement(slices=(Slice(gpu, compute, memory, profile),))

    # ------------------------------------------------------------------ the score
    def _usable(self, w: IntArray, ws: IntArray, room: IntArray,
                host: tuple[IntArray, int, int], node_gpus: IntArray) -> FloatArray:
        """``U = sum_k p_k * usable_k`` of nodes in a given state (see the module doc).

        ``w``, ``ws``: free whole and free shareable GPUs; ``room[:, s]``: for share
        sizes, what shares of that size could fill of the split GPUs; ``host``:
        the nodes, and the CPU and memory taken from them.
        """
        units = self.units
        whole_col = self._whole_col[None, :]
        need = np.maximum(np.minimum(self._k[None, :], node_gpus[:, None]), 1)
        gpu = np.where(whole_col, (w[:, None] >= need) * w[:, None] * units,
                       ws[:, None] * self._fresh[None, :] + room)  # per size
        if not self.host_active:
            out: FloatArray = gpu @ self._pi
            return out
        idx, cpu, mem = host
        # pods of each kind the host can still feed (+ 0.5 keeps floor exact, and lets a
        # kind that asks for nothing fit anywhere)
        cpu_left = np.where(self.cpu_known[idx], np.maximum(self.cpu_free[idx] - cpu, 0), _NO_LIMIT)
        mem_left = np.where(self.mem_known[idx], np.maximum(self.mem_free[idx] - mem, 0), _NO_LIMIT)
        pods = np.minimum(np.divide.outer(cpu_left + 0.5, self._kind_cpu),
                          np.divide.outer(mem_left + 0.5, self._kind_mem))
        np.floor(pods, out=pods)
        by_kind = gpu[:, self._kind_size]
        if self.host_rule == "pods":
            per_pod = np.where(whole_col, need * units, self._sizes[None, :])
            pods *= per_pod[:, self._kind_size]
            np.minimum(pods, by_kind, out=pods)
        else:
            pods = (pods >= 1) * by_kind
        out = pods @ self._kind_p
        return out

    def _fill(self, free: IntArray) -> IntArray:
        """``[..., s]``: what shares of size ``s`` could fill of GPUs with ``free`` compute
        left: the largest multiple of ``s`` that fits (0 for whole-GPU sizes)."""
        x = np.maximum(free, 0)[..., None]
        out: IntArray = x // self._share_sizes * self._share_sizes
        return out

    # ------------------------------------------------------------------ upkeep
    def _sync_mix(self) -> None:
        """Take a fresh request mix every ``refresh_every`` requests (each of the first ones)."""
        since = self.demand.observed - self._snapshot_at
        if since >= self.refresh_every or (since > 0 and self._snapshot_at < self.refresh_every):
            self._rebuild_mix()

    def _sync_rows(self) -> None:
        """Bring the mirrored rows, and each node's usable capacity, up to date."""
        touched = self.cap.touched
        assert touched is not None, "the capacity index is not watched"
        if touched:
            self._load_rows(np.fromiter(touched, dtype=np.int64, count=len(touched)))
        if self._stale:
            self._stale = False
            if self._kinds:
                self._derive(np.arange(self.n, dtype=np.int64))
        elif (touched or self._dirty_host) and self._kinds:
            dirty = touched | self._dirty_host
            self._derive(np.fromiter(dirty, dtype=np.int64, count=len(dirty)))
        touched.clear()
        self._dirty_host.clear()

    def _load_rows(self, rows: IntArray) -> None:
        cap = self.cap
        slice_free = cap.slice_free
        nodes = self.topo.nodes
        for x in rows.tolist():
            self.free_whole[x] = cap.free_count[x]
            self.free_shareable[x] = (cap.free_mask[x] & cap.share_mask[x]).bit_count()
            self.usable[x] = cap.usable[x]
            row = self.split[x]
            row_mem = self.split_mem[x]
            row.fill(-1)
            row_mem.fill(-1)
            base = self.gpu_base[x]
            for i in range(nodes[x].gpus):
                s = slice_free.get(base + i)
                if s is not None:
                    row[i], row_mem[i] = s

    def _rebuild_mix(self) -> None:
        """Take the demand model's current mix; every node's terms are redone lazily."""
        self._snapshot_at = self.demand.observed
        self._kinds = self.demand.mix()
        units = self.units
        sizes = sorted({gpu for (gpu, _, _), _ in self._kinds})
        col = {s: i for i, s in enumerate(sizes)}
        self._sizes: IntArray = np.array(sizes, dtype=np.int64)
        self._whole_col: BoolArray = self._sizes >= units
        self._k: IntArray = np.where(self._whole_col, self._sizes // units, 0).astype(np.int64)
        self._share_sizes: IntArray = np.where(self._whole_col, 1 << 40, np.maximum(self._sizes, 1))
        self._fresh: IntArray = self._fill(np.array(units))
        self._kind_size: IntArray = np.array([col[g] for (g, _, _), _ in self._kinds], dtype=np.int64)
        self._kind_p: FloatArray = np.array([p for _, p in self._kinds], dtype=np.float64)
        self._pi: FloatArray = np.bincount(self._kind_size, weights=self._kind_p,
                                           minlength=len(sizes)).astype(np.float64)
        # host needs per kind, as divisors (a kind that asks for nothing: a tiny one)
        self._kind_cpu: FloatArray = np.array([max(c, 0) or 1e-12 for (_, c, _), _ in self._kinds],
                                              dtype=np.float64)
        self._kind_mem: FloatArray = np.array([max(m, 0) or 1e-12 for (_, _, m), _ in self._kinds],
                                              dtype=np.float64)
        self.host_active = bool(
            (self.cpu_known.any() and any(c for (_, c, _), _ in self._kinds))
            or (self.mem_known.any() and any(m for (_, _, m), _ in self._kinds)))
        self._bucket_rank = {}
        self._room: IntArray = np.zeros((self.n, len(sizes)), dtype=np.int64)
        self._free_units: IntArray = np.zeros(self.n, dtype=np.int64)
        self._u0: FloatArray = np.zeros(self.n, dtype=np.float64)
        self._stale = True

    def _derive(self, rows: IntArray) -> None:
        """Each node's terms of the score, for ``rows``, from the mirrored state."""
        split = self.split[rows]
        w = self.free_whole[rows]
        self._room[rows] = self._fill(split).sum(axis=1)
        self._free_units[rows] = w * self.units + np.maximum(split, 0).sum(axis=1)
        self._u0[rows] = self._usable(w, self.free_shareable[rows], self._room[rows], (rows, 0, 0),
                                      self.node_gpus[rows])

    def check(self) -> None:
        """Recompute every row from the capacity index and compare; for tests."""
        self._sync_mix()
        self._sync_rows()
        mirrored = (self.free_whole.copy(), self.free_shareable.copy(), self.split.copy(),
                    self.split_mem.copy(), self.usable.copy(), self._room.copy(), self._u0.copy())
        self._load_rows(np.arange(self.n, dtype=np.int64))
        if self._kinds:
            self._derive(np.arange(self.n, dtype=np.int64))
        fresh = (self.free_whole, self.free_shareable, self.split, self.split_mem, self.usable,
                 self._room, self._u0)
        for a, b in zip(mirrored, fresh, strict=True):
            assert np.allclose(a, b, rtol=0.0, atol=1e-6), "fragmentation index out of date"


def _host_slack(cpu_left: FloatArray, mem_left: FloatArray, cpu_known: BoolArray,
                mem_known: BoolArray, free_units: IntArray) -> FloatArray:
    """Host room left (shares of the node's size) per free GPU unit, the scarcer of CPU and
    memory; inf where there is no limit or no free GPU."""
    per = np.maximum(free_units, 1).astype(np.float64)
    cpu = np.where(cpu_known, cpu_left / per, np.inf)
    mem = np.where(mem_known, mem_left / per, np.inf)
    out: FloatArray = np.where(free_units > 0, np.minimum(cpu, mem), np.inf)
    return out


def _first_not_in(bucket: list[int], exclude: frozenset[int]) -> int | None:
    if not exclude:
        return bucket[0] if bucket else None
    for node in bucket:
        if node not in exclude:
            return node
    return None


def _better(a: Key, b: Key) -> bool:
    """Is candidate ``a`` better than ``b``: less loss, then the rest of the key, smaller first."""
    if a[0] < b[0] - _TIE:
        return True
    if a[0] > b[0] + _TIE:
        return False
    return a[1:] < b[1:]


def _choose(loss: FloatArray, rank: IntArray, free: IntArray, before: IntArray,
            node: IntArray) -> int:
    """Index of the best candidate: least loss, then preferred group, fuller node, tighter
    GPU, node order."""
    near = np.flatnonzero(loss <= loss.min() + _TIE)
    if near.size == 1:
        return int(near[0])
    order = np.lexsort((node[near], before[near], free[near], rank[near]))
    return int(near[order[0]])
