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

The model, per node and per kind of request ``r`` (a GPU share or a whole-GPU
count, with host CPU and memory):

- ``fits_r``: the node could host one more ``r`` now: enough host CPU and memory,
  and a split GPU with room for the share, a free shareable GPU, or ``k`` free
  whole GPUs (a gang larger than the node needs all of its GPUs free);
- ``usable_r``: the GPU capacity an ``r`` could use there: the free whole GPUs
  for whole-GPU kinds; for shares, the free shareable GPUs plus the split GPUs
  with at least that much room (a sliver smaller than the share is useless to it).

With ``p_r`` the share of recent requests of kind ``r``, the node's usable
capacity is ``U = sum_r p_r * fits_r * usable_r`` and its fragmentation is its
free capacity minus ``U``. Every candidate for one job takes the same capacity,
so minimising the growth of fragmentation is minimising the loss of usable
capacity ``U(before) - U(after)``: that is the score. Ties go to the job's
preferred GPU model, then to the fuller node (best fit), then to node order.

What the scheduler knows, and nothing else:

- the request mix ``p_r`` is learned online (``DemandModel``): a histogram of the
  requests submitted so far, decayed with a half-life in requests, so it follows
  a changing workload; the trace is never read;
- host CPU and memory are those the started jobs asked for (``host_take``); the
  share of kind ``r`` whose host needs fit a node is read from cumulative tables
  over a grid of free CPU and free memory (the smaller of the two marginals);
- whether a job may use a node at all (``exclude_nodes``) is the driver's call,
  exactly as for best fit.

Cost: the score is vectorised over the nodes with numpy. Rows are recomputed
only for nodes whose capacity changed (``FreeCapacity.touched``) or whose host
use changed, and all rows when the request mix is refreshed (every
``refresh_every`` requests). Whole-GPU jobs on groups that cannot be split and
without host requests depend only on a node's free-GPU count: the buckets are
ranked by score once per refresh and walked like best fit, so they cost what
best fit costs.
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

Kind = tuple[int, int, int]  # (GPU compute units: a share < one GPU, else k whole GPUs; CPU milli; MiB)

_TIE = 1e-9  # scores closer than this (in GPU compute units) are a tie


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


class FragmentationIndex:
    """Scores candidate placements by the usable capacity they destroy; see the module doc."""

    def __init__(self, cap: FreeCapacity, demand: DemandModel | None = None,
                 refresh_every: int = 16, cpu_step_milli: int = 100, memory_step_mib: int = 256,
                 fill: str = "any", model: str = "fits") -> None:
        self.fill = "floor" if model == "count" else fill
        self.model = model
        topo = cap.topo
        self.cap = cap
        self.topo = topo
        self.demand = demand if demand is not None else DemandModel()
        self.refresh_every = refresh_every
        nodes = topo.nodes
        n = len(nodes)
        self.n = n
        self.width = max((x.gpus for x in nodes), default=1) or 1
        self.units = topo.slice_units[0]
        self.node_gpus: IntArray = np.array([x.gpus for x in nodes], dtype=np.int64)
        self.node_index: IntArray = np.arange(n, dtype=np.int64)
        self.gpu_base = [x.gpu_base for x in nodes]
        # host: capacity from the topology (0 = unknown: never a constraint)
        self.cpu_known: BoolArray = np.array([x.cpu_cores > 0 for x in nodes], dtype=np.bool_)
        self.mem_known: BoolArray = np.array([x.memory_gb > 0 for x in nodes], dtype=np.bool_)
        self.cpu_free: IntArray = np.array([x.cpu_cores * 1000 for x in nodes], dtype=np.int64)
        self.mem_free: IntArray = np.array([int(x.memory_gb * 1024) for x in nodes], dtype=np.int64)
        self.cpu_step = cpu_step_milli
        self.mem_step = memory_step_mib
        self.cpu_cells = int(self.cpu_free.max(initial=0)) // cpu_step_milli + 1
        self.mem_cells = int(self.mem_free.max(initial=0)) // memory_step_mib + 1
        self.host_held: dict[int, tuple[tuple[int, ...], int, int]] = {}
        # GPU state per node, mirrored from the capacity index
        self.free_whole: IntArray = np.zeros(n, dtype=np.int64)
        self.free_shareable: IntArray = np.zeros(n, dtype=np.int64)
        self.split: IntArray = np.full((n, self.width), -1, dtype=np.int64)  # free compute, -1: not split
        self.split_mem: IntArray = np.full((n, self.width), -1, dtype=np.int64)
        self.usable: BoolArray = np.zeros(n, dtype=np.bool_)
        self.shareable_group = {id(g): any(nodes[x].shareable_gpus for x in g.nodes)
                                for g in cap.groups.values()}
        self.uniform_group = {id(g): all(nodes[x].gpus == g.max_gpus for x in g.nodes)
                              for g in cap.groups.values()}
        self.group_id: IntArray = np.zeros(n, dtype=np.int64)
        for i, g in enumerate(cap.groups.values()):
            self.group_id[g.nodes] = i
        self._group_number = {id(g): i for i, g in enumerate(cap.groups.values())}
        self._rank_cache: dict[tuple[int, ...], IntArray] = {}
        self._excl_key: frozenset[int] | None = None
        self._excl: BoolArray = np.zeros(n, dtype=np.bool_)
        self._dirty_host: set[int] = set()
        self._snapshot_at = -1
        self._kinds: list[tuple[Kind, float]] = []
        self._bucket_rank: dict[tuple[int, int], list[tuple[float, int]]] = {}
        self.host_active = False
        self._load_rows(np.arange(n, dtype=np.int64))
        cap.touched = set()  # the capacity index records the nodes it changes from now on
        self._rebuild_mix()

    # ------------------------------------------------------------------ what the scheduler sees
    def observe(self, job: PendingJob) -> None:
        """A request arrived: count it in the mix."""
        self.demand.observe(self._gpu_units(job), job.cpu_milli, job.memory_mib)

    def host_take(self, job: PendingJob, placement: Placement) -> None:
        """A job started: its host CPU and memory are in use on its nodes until ``host_give``."""
        if not (job.cpu_milli or job.memory_mib):
            return
        nodes = tuple(placement.nodes(self.topo))
        if not nodes:
            return
        cpu, mem = job.cpu_milli // len(nodes), job.memory_mib // len(nodes)
        self.host_held[int(job.id)] = (nodes, cpu, mem)
        for x in nodes:
            self.cpu_free[x] -= cpu
            self.mem_free[x] -= mem
            self._dirty_host.add(x)

    def host_give(self, job_id: int) -> None:
        held = self.host_held.pop(int(job_id), None)
        if held is None:
            return
        nodes, cpu, mem = held
        for x in nodes:
            self.cpu_free[x] += cpu
            self.mem_free[x] += mem
            self._dirty_host.add(x)

    def _gpu_units(self, job: PendingJob) -> int:
        if job.whole is not None:
            return job.whole.count * self.units
        return min(s.compute for s in job.slices.values()) if job.slices else 0

    # ------------------------------------------------------------------ placement
    def place(self, job: PendingJob, groups: list[tuple[str, GroupIndex]]) -> Placement | None:
        """The placement on one node that loses the least usable capacity, or None.

        None also when the job is not a one-node job (a gang over nodes, a fixed
        shape of several nodes): the caller's topology-aware path places those.
        """
        if not groups:
            return None
        whole = job.whole
        if whole is not None:
            if whole.per_node not in (None, whole.count) or whole.count > self.width:
                return None
            if whole.count <= 0:
                return None
            if not any(g.free_total >= whole.count for _, g in groups):
                return None
            self._sync_mix()
            if not self._kinds:
                return None
            if not self.host_active and all(
                    self.uniform_group[id(g)] and not self.shareable_group[id(g)] for _, g in groups):
                return self._place_by_bucket(job, groups, whole.count)
            self._sync_rows()
            return self._place_whole(job, groups, whole.count)
        if not job.slices:
            return None
        self._sync_mix()
        self._sync_rows()
        if not self._kinds:
            return None
        ok, rank = self._candidates(job, groups)
        by_request: dict[tuple[int, int, str], list[int]] = {}
        for model, g in groups:
            req = job.slices.get(model)
            if req is not None and self.shareable_group[id(g)]:
                by_request.setdefault((req.compute, req.memory, req.profile), []).append(
                    self._group_number[id(g)])
        best: tuple[tuple[float, int, int, int, int], Placement] | None = None
        for (compute, memory, profile), gids in by_request.items():
            allowed = ok if len(by_request) == 1 else ok & np.isin(self.group_id, gids)
            found = self._place_slice(job, allowed, rank, compute, memory, profile)
            if found is not None and (best is None or _better(found[0], best[0])):
                best = found
        return None if best is None else best[1]

    def _place_by_bucket(self, job: PendingJob, groups: list[tuple[str, GroupIndex]],
                         count: int) -> Placement | None:
        """No split GPUs, no host needs: a node's score depends on its free count only."""
        exclude = job.exclude_nodes
        best: tuple[tuple[float, int, int, int, int], int] | None = None
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
        node = best[1]
        return Placement(gpus=tuple(sorted(self.cap.free_gpu_ids(node, count))))

    def _bucket_order(self, node_gpus: int, count: int) -> list[tuple[float, int]]:
        """(loss, free GPUs) for nodes of ``node_gpus`` GPUs, none split, best first."""
        key = (node_gpus, count)
        order = self._bucket_rank.get(key)
        if order is None:
            whole = [(min(int(k), node_gpus), float(p))
                     for k, p, is_whole in zip(self._k, self._pi, self._whole_col, strict=True)
                     if is_whole]
            count_model = self.model == "count"

            def usable(free: int) -> float:  # _usable for one node, none of its GPUs split
                if count_model:
                    return sum(p * (free // need) * need for need, p in whole) * self.units
                return sum(p for need, p in whole if free >= need) * free * self.units

            order = sorted((usable(f) - usable(f - count), f) for f in range(count, node_gpus + 1))
            self._bucket_rank[key] = order
        return order

    def _candidates(self, job: PendingJob, groups: list[tuple[str, GroupIndex]]
                    ) -> tuple[BoolArray, IntArray]:
        """Usable, allowed, not excluded nodes of ``groups``; each node's rank by its group."""
        key = tuple(self._group_number[id(g)] for _, g in groups)
        rank = self._rank_cache.get(key)
        if rank is None:
            order = np.full(len(self.cap.groups), -1, dtype=np.int64)
            for r, gid in enumerate(key):
                if order[gid] < 0:
                    order[gid] = r
            rank = order[self.group_id]
            self._rank_cache[key] = rank
        ok = self.usable & (rank >= 0)
        exclude = job.exclude_nodes
        if exclude:
            if exclude is not self._excl_key:
                self._excl = np.zeros(self.n, dtype=np.bool_)
                self._excl[np.fromiter(exclude, dtype=np.int64, count=len(exclude))] = True
                self._excl_key = exclude
            ok &= ~self._excl
        return ok, rank

    def _host_cells(self, idx: IntArray, cpu: int, mem: int) -> tuple[IntArray, IntArray]:
        c = np.clip((self.cpu_free[idx] - cpu) // self.cpu_step, 0, self.cpu_cells - 1)
        m = np.clip((self.mem_free[idx] - mem) // self.mem_step, 0, self.mem_cells - 1)
        c = np.where(self.cpu_known[idx], c, self.cpu_cells)
        m = np.where(self.mem_known[idx], m, self.mem_cells)
        return c, m

    def _host_fit(self, idx: IntArray, cpu: int, mem: int) -> FloatArray:
        c, m = self._host_cells(idx, cpu, mem)
        fit: FloatArray = np.minimum(self._cpu_table[c], self._mem_table[m])
        return fit

    def _place_whole(self, job: PendingJob, groups: list[tuple[str, GroupIndex]],
                     count: int) -> Placement | None:
        ok, rank = self._candidates(job, groups)
        idx = np.flatnonzero(ok & (self.free_whole >= count))
        if idx.size == 0:
            return None
        w = self.free_whole[idx] - count
        ws = np.minimum(self.free_shareable[idx], w)  # the highest GPUs go first
        h = (idx, job.cpu_milli, job.memory_mib)
        after = self._usable(w * self.units, w, ws, self._max_split[idx], self._room[idx], h,
                             self.node_gpus[idx])
        loss = self._u0[idx] - after
        pick = _choose(loss, rank[idx], self._free_units[idx], np.zeros(idx.size, np.int64), idx)
        node = int(idx[pick])
        return Placement(gpus=tuple(sorted(self.cap.free_gpu_ids(node, count))))

    def _place_slice(self, job: PendingJob, ok: BoolArray, rank: IntArray,
                     compute: int, memory: int, profile: str
                     ) -> tuple[tuple[float, int, int, int, int], Placement] | None:
        units = self.units
        # a fresh GPU: one shareable GPU becomes a split GPU with units - compute free
        fresh = np.flatnonzero(ok & (self.free_shareable >= 1))
        left = units - compute
        room_f = self._room[fresh] + self._fill(np.array(left))[None, :]
        max_f = np.maximum(self._max_split[fresh], left)
        w_f = self.free_whole[fresh] - 1
        ws_f = self.free_shareable[fresh] - 1
        # the tightest split GPU of the node that holds the slice
        fits = (self.split >= compute) & (self.split_mem >= memory)
        tight = np.where(fits, self.split, np.iinfo(np.int64).max)
        col_all = tight.argmin(axis=1)
        has = ok & fits.any(axis=1)
        split_nodes = np.flatnonzero(has)
        col = col_all[split_nodes]
        x = self.split[split_nodes, col]
        x2 = x - compute
        room_s = self._room[split_nodes] - self._fill(x) + self._fill(x2)
        after_split = self.split[split_nodes].copy()
        after_split[np.arange(split_nodes.size), col] = x2
        max_s = after_split.max(axis=1, initial=-1)
        idx = np.concatenate([split_nodes, fresh])
        if idx.size == 0:
            return None
        w = np.concatenate([self.free_whole[split_nodes], w_f])
        ws = np.concatenate([self.free_shareable[split_nodes], ws_f])
        room = np.concatenate([room_s, room_f])
        max_split = np.concatenate([max_s, max_f])
        h = (idx, job.cpu_milli, job.memory_mib)
        after = self._usable(w * units, w, ws, max_split, room, h, self.node_gpus[idx])
        loss = self._u0[idx] - after
        option = np.concatenate([np.zeros(split_nodes.size, np.int64), np.ones(fresh.size, np.int64)])
        pick = _choose(loss, rank[idx], self._free_units[idx], option, idx)
        node = int(idx[pick])
        if pick < split_nodes.size:
            gpu = self.gpu_base[node] + int(col[pick])
        else:
            free = self.cap.free_mask[node] & self.cap.share_mask[node]
            gpu = self.gpu_base[node] + (free & -free).bit_length() - 1
        key = (float(loss[pick]), int(rank[node]), int(self._free_units[node]), int(option[pick]), node)
        return key, Placement(slices=(Slice(gpu, compute, memory, profile),))

    # ------------------------------------------------------------------ the score
    def _usable(self, whole_units: IntArray, w: IntArray, ws: IntArray, max_split: IntArray,
                room: IntArray, host: tuple[IntArray, int, int] | None, node_gpus: IntArray
                ) -> FloatArray:
        """Expected usable capacity ``sum_r p_r * fits_r * usable_r`` of nodes in a given state.

        ``room[:, r]``: for share kinds, the free compute of split GPUs with at least
        the share free; ``host``: the nodes, and the CPU and memory taken from them
        (None: no host limits).
        """
        whole_col = self._whole_col
        need = np.minimum(self._k[None, :], node_gpus[:, None])
        if self.model == "count":
            return self._usable_count(w, ws, room, host, need)
        gpu_fit = np.where(whole_col[None, :], w[:, None] >= need,
                           (ws[:, None] >= 1) | (max_split[:, None] >= self._sizes[None, :]))
        usable = np.where(whole_col[None, :], whole_units[:, None], ws[:, None] * self._fresh + room)
        if host is None:
            out: FloatArray = (gpu_fit * usable) @ self._pi
        else:
            out = (self._host_fit(*host) * gpu_fit * usable).sum(axis=1)
        return out

    def _usable_count(self, w: IntArray, ws: IntArray, room: IntArray,
                      host: tuple[IntArray, int, int] | None, need: IntArray) -> FloatArray:
        need1 = np.maximum(need, 1)
        by_size = np.where(self._whole_col[None, :], (w[:, None] // need1) * need1 * self.units,
                           ws[:, None] * self._fresh + room)
        ks = self._kind_size
        gpu = by_size[:, ks]
        if host is None:
            out: FloatArray = gpu @ self._kind_p
            return out
        idx, cpu, mem = host
        big = 1 << 40
        cpu_left = np.maximum(self.cpu_free[idx] - cpu, 0)
        mem_left = np.maximum(self.mem_free[idx] - mem, 0)
        n_cpu = np.where(self._kind_cpu[None, :] > 0,
                         cpu_left[:, None] // np.maximum(self._kind_cpu, 1)[None, :], big)
        n_cpu = np.where(self.cpu_known[idx][:, None], n_cpu, big)
        n_mem = np.where(self._kind_mem[None, :] > 0,
                         mem_left[:, None] // np.maximum(self._kind_mem, 1)[None, :], big)
        n_mem = np.where(self.mem_known[idx][:, None], n_mem, big)
        per_pod = np.where(self._whole_col[ks][None, :], need1[:, ks] * self.units, self._sizes[ks][None, :])
        out = np.minimum(gpu, np.minimum(n_cpu, n_mem) * per_pod) @ self._kind_p
        return out

    def _fill(self, free: IntArray) -> IntArray:
        """``[..., r]``: the compute a stream of share kind ``r`` could use on GPUs with ``free``
        compute left (0 for whole-GPU kinds)."""
        x = np.maximum(free, 0)[..., None]
        s = self._share_sizes
        if self.fill == "floor":
            out: IntArray = (x // s) * s
        else:
            out = np.where(x >= s, x, 0)
        return out

    # ------------------------------------------------------------------ upkeep
    def _sync_mix(self) -> None:
        """Take a fresh request mix every ``refresh_every`` requests (each of the first ones)."""
        since = self.demand.observed - self._snapshot_at
        if since >= self.refresh_every or (since > 0 and self._snapshot_at < self.refresh_every):
            self._rebuild_mix()

    def _sync_rows(self) -> None:
        """Bring the mirrored rows, and the per-node terms of the score, up to date."""
        touched = self.cap.touched
        assert touched is not None, "the capacity index is not watched"
        if touched:
            self._load_rows(np.fromiter(touched, dtype=np.int64, count=len(touched)))
        if self._stale:
            self._stale = False
            if self._kinds:
                self._derive(np.arange(self.n, dtype=np.int64))
        elif touched or self._dirty_host:
            dirty = touched | self._dirty_host
            if self._kinds:
                self._derive(np.fromiter(dirty, dtype=np.int64, count=len(dirty)))
        touched.clear()
        self._dirty_host.clear()

    def _load_rows(self, rows: IntArray) -> None:
        cap = self.cap
        slice_free = cap.slice_free
        for x in rows.tolist():
            mask = cap.free_mask[x]
            self.free_whole[x] = cap.free_count[x]
            self.free_shareable[x] = (mask & cap.share_mask[x]).bit_count()
            self.usable[x] = cap.usable[x]
            base = self.gpu_base[x]
            row = self.split[x]
            row_mem = self.split_mem[x]
            row.fill(-1)
            row_mem.fill(-1)
            for i in range(self.topo.nodes[x].gpus):
                s = slice_free.get(base + i)
                if s is not None:
                    row[i] = s[0]
                    row_mem[i] = s[1]

    def _rebuild_mix(self) -> None:
        """Take the demand model's current mix: kinds, host tables, every node's score."""
        self._snapshot_at = self.demand.observed
        self._kinds = self.demand.mix()
        units = self.units
        sizes: dict[int, int] = {}
        for (gpu, _, _), _p in self._kinds:
            sizes.setdefault(gpu, len(sizes))
        ordered = sorted(sizes)
        col = {s: i for i, s in enumerate(ordered)}
        r = len(ordered)
        self._sizes = np.array(ordered, dtype=np.int64)
        self._whole_col = self._sizes >= units
        self._k = np.where(self._whole_col, self._sizes // units, 0).astype(np.int64)
        self._pi = np.zeros(r, dtype=np.float64)
        self._share_sizes = np.where(self._whole_col, 1 << 40, np.maximum(self._sizes, 1))
        self._fresh = self._fill(np.array(units))
        cpu_table = np.zeros((self.cpu_cells + 1, r), dtype=np.float64)
        mem_table = np.zeros((self.mem_cells + 1, r), dtype=np.float64)
        for (gpu, cpu, mem), p in self._kinds:
            c = col[gpu]
            self._pi[c] += p
            cpu_table[min(-(-cpu // self.cpu_step), self.cpu_cells), c] += p
            mem_table[min(-(-mem // self.mem_step), self.mem_cells), c] += p
        self._kind_size = np.array([col[g] for (g, _, _), _ in self._kinds], dtype=np.int64)
        self._kind_cpu = np.array([c for (_, c, _), _ in self._kinds], dtype=np.int64)
        self._kind_mem = np.array([m for (_, _, m), _ in self._kinds], dtype=np.int64)
        self._kind_p = np.array([p for _, p in self._kinds], dtype=np.float64)
        self._cpu_table = np.cumsum(cpu_table, axis=0)
        self._mem_table = np.cumsum(mem_table, axis=0)
        self.host_active = bool(
            any(cpu or mem for (_, cpu, mem), _ in self._kinds)
            and (self.cpu_known.any() or self.mem_known.any()))
        self._bucket_rank = {}
        self._room = np.zeros((self.n, r), dtype=np.int64)
        self._max_split = np.full(self.n, -1, dtype=np.int64)
        self._free_units = np.zeros(self.n, dtype=np.int64)
        self._u0 = np.zeros(self.n, dtype=np.float64)
        self._stale = True  # every node's terms, at the next _sync_rows

    def _derive(self, rows: IntArray) -> None:
        """Per-node terms of the score, for ``rows``, from the mirrored state."""
        split = self.split[rows]
        opened = np.where(split > 0, split, 0)
        self._room[rows] = self._fill(opened).sum(axis=1)
        self._max_split[rows] = split.max(axis=1, initial=-1)
        w = self.free_whole[rows]
        self._free_units[rows] = w * self.units + opened.sum(axis=1)
        h = (rows, 0, 0)
        self._u0[rows] = self._usable(w * self.units, w, self.free_shareable[rows],
                                      self._max_split[rows], self._room[rows], h, self.node_gpus[rows])

    def check(self) -> None:
        """Recompute every mirrored row from the capacity index and compare; for tests."""
        self._sync_mix()
        self._sync_rows()
        saved = (self.free_whole.copy(), self.free_shareable.copy(), self.split.copy(),
                 self.split_mem.copy(), self.usable.copy(), self._u0.copy())
        self._load_rows(np.arange(self.n, dtype=np.int64))
        if self._kinds:
            self._derive(np.arange(self.n, dtype=np.int64))
        now = (self.free_whole, self.free_shareable, self.split, self.split_mem, self.usable, self._u0)
        for a, b in zip(saved, now, strict=True):
            assert np.allclose(a, b), "fragmentation index out of date"


def _first_not_in(bucket: list[int], exclude: frozenset[int]) -> int | None:
    if not exclude:
        return bucket[0] if bucket else None
    for node in bucket:
        if node not in exclude:
            return node
    return None


def _better(a: tuple[float, int, int, int, int], b: tuple[float, int, int, int, int]) -> bool:
    """Is candidate key ``a`` (loss, rank, free units, option, node) better than ``b``?"""
    if a[0] < b[0] - _TIE:
        return True
    if a[0] > b[0] + _TIE:
        return False
    return a[1:] < b[1:]


def _choose(loss: FloatArray, rank: IntArray, free: IntArray, option: IntArray, node: IntArray) -> int:
    """Index of the best candidate: least loss, then preferred group, fuller node, option, node."""
    near = np.flatnonzero(loss <= loss.min() + _TIE)
    if near.size == 1:
        return int(near[0])
    order = np.lexsort((node[near], option[near], free[near], rank[near]))
    return int(near[order[0]])
