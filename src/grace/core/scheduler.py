"""``decide(state, now)``: the policy engine's one entry point.

Pure for its caller: it reads ``state`` (trying placements on the capacity
index inside a trial that is always rolled back), never reads a clock, and
returns a ``DecideResult``. The driver applies the result with
``state.apply``. The same function runs in the twin and in the live loop.

One cycle:

1. Jobs past their runtime limit are stopped (their GPUs count as free for
   the rest of the cycle).
2. Waiting jobs are visited in policy order: a k-way merge of per-(tenant,
   shape) queues, keyed by tenant fair share and each job's static order.
   Identical shapes place identically, so a shape that did not fit is skipped
   whole for the rest of the cycle: a cycle costs about (jobs started +
   queues), not (jobs waiting).
3. Each visited job passes quota, then placement (around GPUs held for
   reservations); a job that ends before a reservation's shadow time may also
   use the held GPUs; if it still does not fit and the policy preempts, a trial
   preemption frees victims until it fits, or is undone.
4. Under strict FIFO the first blocked job stops the cycle. Under backfill it
   takes a reservation: running jobs are released in the order they are
   expected to end, in the trial, until the job can be placed; that instant is
   its shadow time and that placement is held for it. GPUs of the placement
   that are free now are held (no later job may take them, unless it ends
   before the shadow time); the rest are busy now and free by then. So a
   backfilled job can never delay the reserved one, whatever the topology.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain, islice

from grace.core.capacity import FreeCapacity, Placement
from grace.core.decisions import (
    DecideResult,
    PendingReason,
    PreemptJob,
    PreemptReason,
    Reservation,
    StartJob,
    StartNote,
    StopJob,
    StopReason,
)
from grace.core.jobs import JobId, PendingJob, RunningJob
from grace.core.placement import place_slice, place_whole
from grace.core.policies import QueuePolicy
from grace.core.quotas import QuotaCheck, check_quota, fair_share
from grace.core.state import SchedulerState, victim_key


@dataclass(slots=True)
class _Hold:
    """A reservation's GPUs that are free now and kept free for it during this cycle."""

    reservation: Reservation
    gpus: tuple[int, ...]
    job: PendingJob
    _placement: Placement | None = None

    def placement(self) -> Placement:
        """``gpus`` as a placement, kept while they stay the same (its by-node masks are
        worked out once, not at every release and re-take of the hold)."""
        p = self._placement
        if p is None or p.gpus != self.gpus:
            p = self._placement = Placement(gpus=self.gpus)
        return p


@dataclass(slots=True)
class _Cycle:
    """Per-cycle scratch: trial usage and what has been ruled out already."""

    usage: dict[str, float]
    blocked: dict[tuple, PendingReason] = field(default_factory=dict)
    holds: list[_Hold] = field(default_factory=list)
    freed: set[JobId] = field(default_factory=set)
    budget_used: dict[str, int] = field(default_factory=dict)
    started: set[JobId] = field(default_factory=set)
    ends: list[tuple[float, JobId, Placement]] = field(default_factory=list)
    # blocked heads whose reservation is computed only once a later job could start:
    # in a full cluster, most cycles never need it
    unreserved: list[PendingJob] = field(default_factory=list)
    # attained-service level -> running jobs above it, in victim order (first need only)
    las_above: dict[int, _LevelScan] = field(default_factory=dict)


def decide(state: SchedulerState, now: float) -> DecideResult:
    """One scheduling cycle. See the module docstring for the algorithm."""
    if state.policy.replan:
        from grace.core.replan import decide_replan

        return decide_replan(state, now)
    result = DecideResult()
    policy = state.policy
    fair = policy.fair_share
    cycle = _Cycle(usage={t: u.gpus for t, u in state.usage.items()})
    with state.capacity.trial(), state.spine.trial():
        _stop_expired(state, now, result, cycle)
        heap = _initial_heap(state, cycle)
        pointers: dict[tuple, int] = {}
        examined_beyond_block = 0
        blocked_any = False
        while heap:
            tkey, skey, qk = heapq.heappop(heap)
            if fair:
                fresh = _tenant_key(state, cycle, qk[0])
                if fresh > tkey:
                    heapq.heappush(heap, (fresh, skey, qk))
                    continue
            queue = state.queues[qk]
            ptr = pointers.get(qk, 0)
            job = state.pending[queue[ptr][1]]
            if blocked_any:
                examined_beyond_block += 1
                if examined_beyond_block > policy.backfill_depth:
                    break
            outcome = _try_job(state, job, now, result, cycle)
            if outcome is None:
                ptr += 1
            else:
                result.reasons[job.id] = outcome
                result.shape_reasons[qk] = outcome
                ptr = len(queue)  # the rest of this (tenant, shape) queue shares the outcome
                if outcome is PendingReason.HELD_FOR_RESERVATION:
                    _backfill_short_jobs(state, qk, now, result, cycle)
                elif outcome is PendingReason.WAITING_FOR_CAPACITY:
                    if policy.strict_head:
                        result.default_reason = PendingReason.BEHIND_QUEUE_HEAD
                        del result.shape_reasons[qk]
                        break
                    blocked_any = True
                    if policy.backfill and job.whole is not None:
                        cycle.unreserved.append(job)
            pointers[qk] = ptr
            if ptr < len(queue):
                heapq.heappush(heap, (_tenant_key(state, cycle, qk[0]) if fair else 0.0,
                                      queue[ptr][0], qk))
    result.reservations = [h.reservation for h in cycle.holds]
    return result


def _tenant_key(state: SchedulerState, cycle: _Cycle, tenant: str) -> float:
    return fair_share(state.quota(tenant), cycle.usage.get(tenant, 0.0))


def _initial_heap(state: SchedulerState, cycle: _Cycle) -> list[tuple[float, tuple, tuple]]:
    fair = state.policy.fair_share
    heap = [((_tenant_key(state, cycle, qk[0]) if fair else 0.0), q[0][0], qk)
            for qk, q in state.queues.items()]
    heapq.heapify(heap)
    return heap


def _stop_expired(state: SchedulerState, now: float, result: DecideResult,
                  cycle: _Cycle) -> None:
    for deadline, jid in state.deadlines:
        if deadline > now:
            break
        result.stops.append(StopJob(jid, StopReason.TIMEOUT))
        _trial_release(state, state.running[jid], cycle)


def _trial_release(state: SchedulerState, run: RunningJob, cycle: _Cycle) -> None:
    state.capacity.release(run.placement)
    state.spine.remove(run.placement)
    cycle.usage[run.tenant] = cycle.usage.get(run.tenant, 0.0) - run.gpu_equivalents
    cycle.freed.add(run.id)


def _blocked_key(state: SchedulerState, job: PendingJob) -> tuple:
    """Jobs with equal keys fail alike. With preemption, who may be displaced depends on
    the tenant, priority and attained service too, not on the shape alone."""
    if state.policy.preempts:
        return (job.shape, job.tenant, job.priority, state.policy.level(job.attained_gpu_s))
    return job.shape


def _try_job(state: SchedulerState, job: PendingJob, now: float, result: DecideResult,
             cycle: _Cycle) -> PendingReason | None:
    """Start ``job`` in the trial if policy allows; else say why not."""
    policy = state.policy
    bkey = _blocked_key(state, job)
    known = cycle.blocked.get(bkey)
    if known is not None:
        return known
    borrowing = False
    if policy.quotas:
        verdict = check_quota(state.quota(job.tenant), cycle.usage.get(job.tenant, 0.0),
                              job.gpu_equivalents, job.preemptible)
        if verdict == QuotaCheck.OVER:
            return PendingReason.OVER_QUOTA
        borrowing = verdict == QuotaCheck.BORROWING
    placement = _place(state, job)
    if placement is not None and cycle.unreserved and _reserve_pending(state, job, now, cycle):
        placement = _place(state, job)  # again, around the GPUs now held
    if placement is None and cycle.holds and _fits_without_holds(state, job, cycle):
        placement = _place_in_holds(state, job, now, cycle)
        if placement is None:
            placement = _place_beside_reservations(state, job, now, cycle)
    if placement is None and policy.preempts:
        placement = _preempt_for(state, job, now, result, cycle, borrowing)
    if placement is None:
        reason = _why_not(state, job, cycle)
        if reason is not PendingReason.HELD_FOR_RESERVATION:
            cycle.blocked[bkey] = reason
        return reason
    _commit_start(state, job, placement, borrowing, result, cycle, now)
    return None


def _commit_start(state: SchedulerState, job: PendingJob, placement: Placement, borrowing: bool,
                  result: DecideResult, cycle: _Cycle, now: float) -> None:
    state.capacity.allocate(placement)
    spine = state.spine
    # later starts this cycle see its uplink load (undone when the cycle ends)
    notes = ((StartNote.CROSSES_LOADED_UPLINK,) if spine.add(placement) and spine.oversubscribed
             and spine.crosses_loaded_uplink(placement) else ())
    cycle.usage[job.tenant] = cycle.usage.get(job.tenant, 0.0) + job.gpu_equivalents
    result.starts.append(StartJob(job.id, placement, borrowing, notes))
    cycle.started.add(job.id)
    end = now + job.estimate_s if job.estimate_s is not None else math.inf
    bisect.insort(cycle.ends, (end, job.id, placement))
    for h in cycle.holds:  # GPUs still busy at a shadow time are no longer spare then
        r = h.reservation
        if end > r.shadow_s and r.models.intersection(job.models):
            h.reservation = Reservation(r.job_id, r.models, r.shadow_s,
                                        max(0.0, r.extra_gpus - job.gpu_equivalents))


def _why_not(state: SchedulerState, job: PendingJob, cycle: _Cycle) -> PendingReason:
    if not any(g.usable_nodes for _, g in state.groups_for(job)):
        return PendingReason.NO_USABLE_NODES
    if cycle.holds and _fits_without_holds(state, job, cycle):
        return PendingReason.HELD_FOR_RESERVATION
    return PendingReason.WAITING_FOR_CAPACITY


def _place(state: SchedulerState, job: PendingJob) -> Placement | None:
    cap = state.capacity
    locality = state.policy.leaf_locality
    spine, mode = state.spine, state.policy.placement
    if state.packer is not None:  # one-node jobs: least fragmentation (core.fragmentation)
        p = state.packer.place(job, state.groups_for(job))
        if p is not None:
            return p
    for model, g in state.groups_for(job):
        if job.whole is not None:
            p = place_whole(cap, g, job.whole, job.exclude_nodes, locality, spine, mode)
        else:
            p = place_slice(cap, g, job.slices[model], job.exclude_nodes)
        if p is not None:
            return p
    return None


# --------------------------------------------------------------------------- reservations
def _reserve_pending(state: SchedulerState, job: PendingJob, now: float, cycle: _Cycle) -> bool:
    """Compute the reservations of blocked heads that ``job`` competes with; True if any."""
    models = set(job.models)
    due = [h for h in cycle.unreserved if models.intersection(h.models)]
    for head in due:
        cycle.unreserved.remove(head)
        _reserve(state, head, now, cycle)
    return bool(due)


def _reserve(state: SchedulerState, job: PendingJob, now: float, cycle: _Cycle) -> None:
    """Find the blocked job's shadow time and placement; hold the part that is free now."""
    models = frozenset(job.models)
    if job.whole is None or any(h.reservation.models & models for h in cycle.holds):
        return  # one reservation per GPU-model set (EASY); sub-GPU jobs need none
    shadow, placement, spare = _shadow(state, job, now, cycle)
    hold = _Hold(Reservation(job.id, models, shadow, spare), (), job)
    _hold(state, hold, placement)
    cycle.holds.append(hold)


def _hold(state: SchedulerState, hold: _Hold, placement: Placement | None) -> None:
    held = tuple(g for g in placement.gpus if _gpu_free(state, g)) if placement else ()
    if held:
        state.capacity.allocate(Placement(gpus=held))
    hold.gpus = held


def _shadow(state: SchedulerState, job: PendingJob, now: float, cycle: _Cycle,
            by: float = math.inf) -> tuple[float, Placement | None, float]:
    """Release running jobs (in the trial) in expected-end order until ``job`` fits.

    Returns (shadow time, the placement it would get then, GPUs free then beyond
    its need); (inf, None, 0) when jobs without estimates hold the GPUs it needs,
    or when it would not fit by ``by`` (a caller that only asks "still by then?"
    need not release the rest of the cluster to learn "no").

    For a job that fits on one node, releases are first kept as node masks beside
    the index (``_Released``) and given to it only when a placement is tried: most
    walks release dozens of jobs to place once or never, and keeping the index's
    buckets up to date for each release, then rolling it back, was most of the cost.
    """
    cap = state.capacity
    models = frozenset(job.models)
    mark = cap.mark()
    free = sum(g.free_total for _, g in state.groups_for(job))
    need = job.gpu_equivalents
    result: tuple[float, Placement | None, float] = (math.inf, None, 0.0)
    single, failed = _single_node_count(state, job), False
    pending = _Released(cap, single) if single is not None else None
    running_jobs = state.running
    freed = cycle.freed
    running = ((end, jid, None) for end, jid in state.ends if jid not in freed) if freed \
        else ((end, jid, None) for end, jid in state.ends)
    ends = heapq.merge(running, cycle.ends) if cycle.ends else running
    for end, jid, started_placement in ends:
        if end == math.inf or end > by:
            break
        if started_placement is None:
            run = running_jobs[jid]
            if not models.intersection(run.models):
                continue
            released = run.placement
        else:
            released = started_placement
        if pending is not None and not released.slices:
            newly = pending.add(released)
        else:
            if pending is not None:
                pending.give_back()
            cap.release(released)
            newly = _may_newly_fit(state, single, released)
        free += len(released.gpus)
        if free >= need and (not failed or newly):
            if pending is not None:
                pending.give_back()
            placement = _place(state, job)
            if placement is not None:
                result = (max(end, now), placement, free - need)
                break
            failed = True
    cap.rollback_to(mark)
    return result


class _Released:
    """GPUs released during a shadow walk but not yet given to the capacity index.

    ``add`` records a placement's GPUs as free node masks and says whether a node it
    touched now has ``single`` free GPUs (``_may_newly_fit``, on the masks); ``give_back``
    hands them to the index at once, one change per node, before a placement is tried.
    The index ends the same as after releasing each job in turn: its buckets are sorted,
    so the order of changes leaves no trace.
    """

    __slots__ = ("cap", "masks", "single")

    def __init__(self, cap: FreeCapacity, single: int) -> None:
        self.cap = cap
        self.single = single
        self.masks: dict[int, int] = {}

    def add(self, placement: Placement) -> bool:
        cap, masks, single = self.cap, self.masks, self.single
        fits = False
        for node, bits in cap.by_node(placement):
            mask = masks.get(node)
            if mask is None:
                mask = cap.free_mask[node]
            assert mask & bits == 0, "released a GPU that was free"
            mask |= bits
            masks[node] = mask
            if mask.bit_count() >= single:
                fits = True
        return fits

    def give_back(self) -> None:
        if self.masks:
            self.cap.set_free_masks(self.masks)
            self.masks = {}


def _single_node_count(state: SchedulerState, job: PendingJob) -> int | None:
    """GPUs ``job`` needs on one node when its only placements are one node's GPUs.

    Then, once a placement has failed and only some nodes' GPUs were freed
    since, it can newly fit only on one of those nodes: a cheap test that skips
    the placement search while releasing jobs one by one (reservations, trial
    preemptions). None when the job may span nodes (or NVLink domains).
    """
    whole = job.whole
    if whole is None or whole.per_node not in (None, whole.count):
        return None
    for _, g in state.groups_for(job):
        if whole.count > g.max_gpus or len(g.domains) < len(g.nodes):
            return None
    return whole.count


def _may_newly_fit(state: SchedulerState, single: int | None, released: Placement) -> bool:
    if single is None:
        return True
    cap = state.capacity
    gpu_node = cap.topo.gpu_node
    nodes = {gpu_node[g] for g in released.gpus} | {gpu_node[s.gpu] for s in released.slices}
    return any(cap.free_count[n] >= single for n in nodes)


def _place_beside_reservations(state: SchedulerState, job: PendingJob, now: float,
                               cycle: _Cycle) -> Placement | None:
    """EASY's second rule, checked exactly: a job may take held GPUs if, with it running,
    every reservation it touches still gets its GPUs by the same shadow time."""
    touched = [h for h in cycle.holds if h.gpus and h.reservation.models & set(job.models)]
    if not touched or any(job.gpu_equivalents > h.reservation.extra_gpus + 1e-9 for h in touched):
        return None
    cap = state.capacity
    mark = cap.mark()
    for h in touched:
        cap.release(h.placement())
    placement = _place(state, job)
    if placement is not None:
        cap.allocate(placement)
        end = now + job.estimate_s if job.estimate_s is not None else math.inf
        cycle.ends.append((end, job.id, placement))
        cycle.ends.sort(key=lambda e: e[0])
        redo = []
        for h in touched:
            redo.append((h, _shadow(state, h.job, now, cycle, by=h.reservation.shadow_s)))
            if redo[-1][1][0] > h.reservation.shadow_s:
                break  # this one would be delayed: the job may not take held GPUs
        cycle.ends.remove((end, job.id, placement))
        if len(redo) == len(touched) and all(r[0] <= h.reservation.shadow_s for h, r in redo):
            cap.release(placement)
            for h, (_shadow_s, p, spare) in redo:
                r = h.reservation
                # _commit_start will take the job's own GPUs off the spare count again
                h.reservation = Reservation(r.job_id, r.models, r.shadow_s,
                                            spare + job.gpu_equivalents)
                _hold(state, h, p)
            # the new holds must have left the job's GPUs free for _commit_start
            if _place_is_valid(state, placement):
                return placement
    cap.rollback_to(mark)
    return None


def _gpu_free(state: SchedulerState, gpu: int) -> bool:
    cap = state.capacity
    node = cap.topo.gpu_node[gpu]
    return bool(cap.free_mask[node] >> (gpu - cap.topo.nodes[node].gpu_base) & 1)


def _place_in_holds(state: SchedulerState, job: PendingJob, now: float,
                    cycle: _Cycle) -> Placement | None:
    """A job that ends before a reservation's shadow time may use the GPUs held for it."""
    if job.estimate_s is None:
        return None
    cap = state.capacity
    usable = [h for h in cycle.holds if h.gpus and h.reservation.models & set(job.models)
              and now + job.estimate_s <= h.reservation.shadow_s]
    if not usable:
        return None
    for h in usable:
        cap.release(h.placement())
    placement = _place(state, job)
    taken = (set(placement.gpus) | {s.gpu for s in placement.slices}) if placement else set()
    for h in usable:
        h.gpus = tuple(g for g in h.gpus if g not in taken)
        if h.gpus:
            cap.allocate(h.placement())
    return placement


def _fits_without_holds(state: SchedulerState, job: PendingJob, cycle: _Cycle) -> bool:
    cap = state.capacity
    holds = [h for h in cycle.holds if h.gpus and h.reservation.models & set(job.models)]
    if not holds:
        return False
    mark = cap.mark()  # undone at once: the cycle's own rollback has nothing left to undo
    for h in holds:
        cap.release(h.placement())
    fits = _place(state, job) is not None
    cap.rollback_to(mark)
    return fits


def _backfill_short_jobs(state: SchedulerState, qk: tuple, now: float,
                         result: DecideResult, cycle: _Cycle) -> None:
    """The queue's head would delay a reservation; start its jobs that end in time, shortest
    first (found through the by-estimate index, not by scanning the queue)."""
    for est, _key, jid in state.queues_by_estimate[qk]:
        if est == math.inf:
            break
        if jid in cycle.started:
            continue
        if not any(now + est <= h.reservation.shadow_s for h in cycle.holds if h.gpus):
            break  # sorted by estimate: no later job ends sooner
        job = state.pending[jid]
        if _try_job(state, job, now, result, cycle) is not None:
            break


# --------------------------------------------------------------------------- preemption
def _victims(state: SchedulerState, job: PendingJob, now: float, cycle: _Cycle,
             borrowing: bool) -> Iterable[tuple[RunningJob, PreemptReason]]:
    """Running jobs ``job`` may displace, cheapest to lose first."""
    policy = state.policy
    if not state.preemptible_by_priority:
        return []
    models = set(job.models)
    quota = state.quota(job.tenant)
    within_guarantee = (not borrowing and policy.quotas
                        and cycle.usage.get(job.tenant, 0.0) + job.gpu_equivalents
                        <= quota.guaranteed_gpus + 1e-9)
    could_reclaim = policy.preempt_for_quota and within_guarantee and state.preemptible_borrowing
    could_outrank = policy.preempt_for_priority and min(state.preemptible_by_priority) < job.priority
    if not (could_reclaim or could_outrank or policy.preempt_for_las):
        return []
    job_level = policy.level(job.attained_gpu_s)
    if not (could_reclaim or could_outrank):
        return _las_victims(state, job_level, models, now, cycle)
    out: list[tuple[tuple, RunningJob, PreemptReason]] = []
    for run in state.running.values():
        if not run.preemptible or run.id in cycle.freed or not models.intersection(run.models):
            continue
        reason = None
        if policy.preempt_for_quota and within_guarantee and run.borrowing \
                and run.tenant != job.tenant:
            reason = PreemptReason.QUOTA_RECLAIM
        elif policy.preempt_for_priority and run.priority < job.priority:
            reason = PreemptReason.PRIORITY
        elif policy.preempt_for_las and _las_preemptible(policy, run, now) \
                and _running_level(policy, run, now) > job_level:
            reason = PreemptReason.LEAST_ATTAINED_SERVICE
        if reason is not None:
            out.append((victim_key(run), run, reason))
    out.sort(key=lambda t: t[0])
    return [(run, reason) for _, run, reason in out]


def _running_level(policy: QueuePolicy, run: RunningJob, now: float) -> int:
    return policy.level(run.attained_gpu_s + run.gpu_equivalents * (now - run.start_s))


def _las_preemptible(policy: QueuePolicy, run: RunningJob, now: float) -> bool:
    """Has ``run`` held its GPUs long enough to pay back what a preemption costs it?

    A preempted job checkpoints and later pays a restart on every GPU; one
    preempted again minutes after it restarted loses that over and over. Not
    displacing an attempt younger than ``las_min_run_s`` bounds the loss to a
    share of the attempt that the policy names.
    """
    return now - run.start_s >= policy.las_min_run_s


def _las_victims(state: SchedulerState, job_level: int, models: set[str], now: float,
                 cycle: _Cycle) -> Iterator[tuple[RunningJob, PreemptReason]]:
    """Running jobs in a higher attained-service level than ``job_level``, cheapest first.

    Which running jobs are above a level is the same for every waiting job of a
    cycle, so it is found once per cycle and level (in the state's standing
    victim order, so nothing is sorted), not once per waiting job: with
    thousands running and waiting, that scan was most of the cycle. The scan is
    lazy (``_LevelScan``): a trial preemption reads a few victims, not every one.
    """
    scan = cycle.las_above.get(job_level)
    if scan is None:
        if state.las_ready.none_above(job_level, now):
            return
        scan = cycle.las_above[job_level] = _LevelScan(state, job_level, now)
    freed, found = cycle.freed, scan.found
    i = 0
    while i < len(found) or scan.more():
        run = found[i]
        i += 1
        if run.id not in freed and models.intersection(run.models):
            yield run, PreemptReason.LEAST_ATTAINED_SERVICE


class _LevelScan:
    """Running jobs above one attained-service level, in victim order, found as far as
    read: ``found`` grows by one per ``more`` until the victim order is exhausted (it
    does not change during a cycle: trial releases are kept in ``_Cycle.freed``)."""

    __slots__ = ("bounds", "found", "level", "now", "order", "pos", "running", "young")

    def __init__(self, state: SchedulerState, level: int, now: float) -> None:
        policy = state.policy
        self.bounds, self.young = policy.las_thresholds, now - policy.las_min_run_s
        self.level, self.now = level, now
        self.order, self.running = state.victim_order, state.running
        self.pos = 0
        self.found: list[RunningJob] = []

    def more(self) -> bool:
        """Find the next job above the level; False if there is none."""
        order, running, young, now = self.order, self.running, self.young, self.now
        bounds, level = self.bounds, self.level
        while self.pos < len(order):
            run = running[order[self.pos][1]]
            self.pos += 1
            if run.start_s <= young and bisect.bisect_right(  # policy.level, inlined
                    bounds, run.attained_gpu_s + run.gpu_equivalents * (now - run.start_s)) > level:
                self.found.append(run)
                return True
        return False


def _budget_left(state: SchedulerState, tenant: str, now: float, cycle: _Cycle) -> int:
    return state.preemption_budget_left(tenant, now) - cycle.budget_used.get(tenant, 0)


def _preempt_for(state: SchedulerState, job: PendingJob, now: float, result: DecideResult,
                 cycle: _Cycle, borrowing: bool) -> Placement | None:
    """Trial preemption: free victims one by one until ``job`` fits, else undo.

    Only victims whose GPUs the final placement uses are preempted; each
    victim's tenant must have preemption budget left, counting this cycle.
    """
    victims = iter(_victims(state, job, now, cycle, borrowing))
    limit = state.policy.max_victims
    first = list(islice(victims, limit))
    if not first:
        return None
    free = sum(g.free_total for _, g in state.groups_for(job))
    if free + sum(r.gpu_equivalents for r, _ in first) < job.gpu_equivalents:
        return None
    cap = state.capacity
    mark = cap.mark()
    charged: dict[str, int] = {}
    single = _single_node_count(state, job)
    chosen: list[tuple[RunningJob, PreemptReason]] = []
    placement = None
    for run, reason in chain(first, victims):
        if len(chosen) >= limit:
            break
        if run.tenant != job.tenant and \
                _budget_left(state, run.tenant, now, cycle) - charged.get(run.tenant, 0) <= 0:
            continue
        cap.release(run.placement)
        chosen.append((run, reason))
        charged[run.tenant] = charged.get(run.tenant, 0) + (run.tenant != job.tenant)
        if _may_newly_fit(state, single, run.placement):  # the last _place failed
            placement = _place(state, job)
            if placement is not None:
                break
    cap.rollback_to(mark)
    if placement is None:
        return None
    used = set(placement.gpus) | {s.gpu for s in placement.slices}
    for run, reason in chosen:
        run_gpus = set(run.placement.gpus) | {s.gpu for s in run.placement.slices}
        if run_gpus & used:
            _trial_release(state, run, cycle)
            result.preemptions.append(PreemptJob(run.id, reason, job.id))
            if run.tenant != job.tenant:
                cycle.budget_used[run.tenant] = cycle.budget_used.get(run.tenant, 0) + 1
    if _place_is_valid(state, placement):
        return placement
    return _place(state, job)


def _place_is_valid(state: SchedulerState, placement: Placement) -> bool:
    """After releasing only the victims the placement uses, is every GPU it names free?"""
    cap = state.capacity
    for g in placement.gpus:
        if not _gpu_free(state, g):
            return False
    for s in placement.slices:
        cur = cap.slice_free.get(s.gpu)
        if cur is None:
            if not _gpu_free(state, s.gpu):
                return False
        elif cur[0] < s.compute or cur[1] < s.memory:
            return False
    return True
