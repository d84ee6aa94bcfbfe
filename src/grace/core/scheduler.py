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
   Because identical shapes place identically, a shape that did not fit is
   skipped whole for the rest of the cycle, so a cycle costs about
   (jobs started + queues), not (jobs waiting).
3. Each visited job passes quota, then the backfill reservations, then
   placement; if placement fails and the policy preempts, a trial preemption
   frees victims one by one until the job fits or is undone.
4. Under strict FIFO the first blocked job stops the cycle; under backfill it
   takes a reservation at its shadow time and later jobs may start only if
   they do not delay it.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from grace.core.capacity import Placement
from grace.core.decisions import (
    DecideResult,
    PendingReason,
    PreemptJob,
    PreemptReason,
    Reservation,
    StartJob,
    StopJob,
    StopReason,
)
from grace.core.jobs import JobId, PendingJob, RunningJob
from grace.core.placement import place_slice, place_whole
from grace.core.policies import las_level
from grace.core.quotas import QuotaCheck, check_quota
from grace.core.state import SchedulerState


@dataclass(slots=True)
class _Cycle:
    """Per-cycle scratch: trial usage and what has been ruled out already."""

    usage: dict[str, float]
    blocked_shapes: set[tuple]
    reservations: list[Reservation]
    freed: set[JobId]
    budget_used: dict[str, int]


def decide(state: SchedulerState, now: float) -> DecideResult:
    """One scheduling cycle. See the module docstring for the algorithm."""
    result = DecideResult()
    policy = state.policy
    cap = state.capacity
    fair = policy.fair_share
    cycle = _Cycle(
        usage={t: u.gpus for t, u in state.usage.items()},
        blocked_shapes=set(), reservations=[], freed=set(), budget_used={},
    )
    with cap.trial():
        _stop_expired(state, now, result, cycle)
        heap = _initial_heap(state, cycle)
        pointers: dict[tuple, int] = {}
        examined_beyond_block = 0
        blocked_any = False
        while heap:
            tkey, _skey, qk = heapq.heappop(heap)
            if fair:
                fresh = _tenant_key(state, cycle, qk[0])
                if fresh > tkey:
                    heapq.heappush(heap, (fresh, _skey, qk))
                    continue
            queue = state.queues[qk]
            ptr = pointers.get(qk, 0)
            job = state.pending[queue[ptr][1]]
            if blocked_any:
                examined_beyond_block += 1
                if examined_beyond_block > policy.backfill_depth:
                    break
            outcome = _try_job(state, job, now, result, cycle)
            if outcome is None:  # started
                ptr += 1
            elif outcome is PendingReason.HELD_FOR_RESERVATION:
                # Fits, but would delay a reservation: only jobs of this queue that end
                # before the shadow time may start; find them by estimate, not by scanning.
                result.reasons[job.id] = outcome
                _backfill_by_estimate(state, qk, now, result, cycle)
                result.shape_reasons[qk] = outcome
                ptr = len(queue)
            else:
                # the whole (tenant, shape) queue shares this outcome
                result.shape_reasons[qk] = outcome
                ptr = len(queue)
                if outcome is PendingReason.WAITING_FOR_CAPACITY:
                    result.reasons[job.id] = outcome
                    if policy.strict_head:
                        result.default_reason = PendingReason.BEHIND_QUEUE_HEAD
                        result.shape_reasons.pop(qk)
                        break
                    blocked_any = True
                    if policy.backfill:
                        _reserve(state, job, now, result, cycle)
            pointers[qk] = ptr
            if ptr < len(queue):
                heapq.heappush(heap, (_tenant_key(state, cycle, qk[0]) if fair else 0.0,
                                      queue[ptr][0], qk))
    result.reservations = cycle.reservations
    return result


def _backfill_by_estimate(state: SchedulerState, qk: tuple, now: float,
                          result: DecideResult, cycle: _Cycle) -> None:
    """Start this queue's jobs that end before every overlapping shadow time, shortest first."""
    by_est = state.queues_by_estimate[qk]
    started = {s.job_id for s in result.starts}
    for est, _key, jid in by_est:
        if est == math.inf:
            break
        if jid in started:
            continue
        job = state.pending[jid]
        if not _respects_reservations(job, now, cycle):
            break  # sorted by estimate: no later job ends sooner
        if _try_job(state, job, now, result, cycle) is not None:
            break


def _tenant_key(state: SchedulerState, cycle: _Cycle, tenant: str) -> float:
    return cycle.usage.get(tenant, 0.0) / state.quota(tenant).weight


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
        run = state.running[jid]
        result.stops.append(StopJob(jid, StopReason.TIMEOUT))
        _trial_release(state, run, cycle)


def _trial_release(state: SchedulerState, run: RunningJob, cycle: _Cycle) -> None:
    state.capacity.release(run.placement)
    cycle.usage[run.tenant] = cycle.usage.get(run.tenant, 0.0) - run.gpu_equivalents
    cycle.freed.add(run.id)


def _try_job(state: SchedulerState, job: PendingJob, now: float, result: DecideResult,
             cycle: _Cycle) -> PendingReason | None:
    """Start ``job`` in the trial if policy allows; else say why not."""
    policy = state.policy
    shape = job.shape
    if shape in cycle.blocked_shapes:
        return PendingReason.WAITING_FOR_CAPACITY
    borrowing = False
    gpus = job.gpu_equivalents
    if policy.quotas:
        verdict = check_quota(state.quota(job.tenant), cycle.usage.get(job.tenant, 0.0),
                              gpus, job.preemptible)
        if verdict == QuotaCheck.OVER:
            return PendingReason.OVER_QUOTA
        borrowing = verdict == QuotaCheck.BORROWING
    if cycle.reservations and not _respects_reservations(job, now, cycle):
        if _place(state, job) is not None:
            return PendingReason.HELD_FOR_RESERVATION
        cycle.blocked_shapes.add(shape)
        return PendingReason.WAITING_FOR_CAPACITY
    placement = _place(state, job)
    if placement is None and policy.preempts:
        placement = _preempt_for(state, job, now, result, cycle, borrowing)
    if placement is None:
        cycle.blocked_shapes.add(shape)
        if not state.groups_for(job) or all(
            not any(state.capacity.usable[n] for n in g.nodes) for _, g in state.groups_for(job)
        ):
            return PendingReason.NO_USABLE_NODES
        return PendingReason.WAITING_FOR_CAPACITY
    state.capacity.allocate(placement)
    cycle.usage[job.tenant] = cycle.usage.get(job.tenant, 0.0) + gpus
    result.starts.append(StartJob(job.id, placement, borrowing))
    for r in cycle.reservations:
        if r.models.intersection(job.models) and now + (job.estimate_s or math.inf) > r.shadow_s:
            idx = cycle.reservations.index(r)
            cycle.reservations[idx] = Reservation(r.job_id, r.models, r.shadow_s,
                                                  r.extra_gpus - gpus)
    return None


def _place(state: SchedulerState, job: PendingJob) -> Placement | None:
    cap = state.capacity
    for model, g in state.groups_for(job):
        if job.whole is not None:
            p = place_whole(cap, g, job.whole, job.exclude_nodes)
        else:
            p = place_slice(cap, g, job.slices[model], job.exclude_nodes)
        if p is not None:
            return p
    return None


def _respects_reservations(job: PendingJob, now: float, cycle: _Cycle) -> bool:
    """EASY rule: end before the shadow time, or fit in the GPUs the head won't need."""
    models = job.models
    for r in cycle.reservations:
        if not r.models.intersection(models):
            continue
        if job.estimate_s is not None and now + job.estimate_s <= r.shadow_s:
            continue
        if job.gpu_equivalents <= r.extra_gpus + 1e-9:
            continue
        return False
    return True


def _reserve(state: SchedulerState, job: PendingJob, now: float, result: DecideResult,
             cycle: _Cycle) -> None:
    models = frozenset(job.models)
    if any(r.models & models for r in cycle.reservations):
        return
    free_now = sum(g.free_total for _, g in state.groups_for(job))
    shadow, extra = state.shadow_time(models, job.gpu_equivalents, now, free_now)
    cycle.reservations.append(Reservation(job.id, models, shadow, extra))


def _victims(state: SchedulerState, job: PendingJob, now: float, cycle: _Cycle,
             borrowing: bool) -> list[tuple[RunningJob, PreemptReason]]:
    """Running jobs ``job`` may displace, cheapest to lose first."""
    policy = state.policy
    models = set(job.models)
    quota = state.quota(job.tenant)
    within_guarantee = (not borrowing and policy.quotas
                        and cycle.usage.get(job.tenant, 0.0) + job.gpu_equivalents
                        <= quota.guaranteed_gpus + 1e-9)
    job_level = las_level(job.attained_gpu_s)
    out: list[tuple[tuple, RunningJob, PreemptReason]] = []
    for run in state.running.values():
        if not run.preemptible or run.id in cycle.freed or not models.intersection(run.models):
            continue
        if run.tenant != job.tenant:
            budget = state.preemption_budget_left(run.tenant, now) - cycle.budget_used.get(
                run.tenant, 0)
            if budget <= 0:
                continue
        reason = None
        if policy.preempt_for_quota and within_guarantee and run.borrowing \
                and run.tenant != job.tenant:
            reason = PreemptReason.QUOTA_RECLAIM
        elif policy.preempt_for_priority and run.priority < job.priority:
            reason = PreemptReason.PRIORITY
        elif policy.preempt_for_las:
            attained = run.attained_gpu_s + run.gpu_equivalents * (now - run.start_s)
            if las_level(attained) > job_level:
                reason = PreemptReason.LEAST_ATTAINED_SERVICE
        if reason is not None:
            out.append(((run.priority, -run.start_s), run, reason))
    out.sort(key=lambda t: t[0])
    return [(run, reason) for _, run, reason in out]


def _preempt_for(state: SchedulerState, job: PendingJob, now: float, result: DecideResult,
                 cycle: _Cycle, borrowing: bool) -> Placement | None:
    """Trial preemption: free victims one by one until ``job`` fits, else undo."""
    victims = _victims(state, job, now, cycle, borrowing)
    if not victims:
        return None
    free = sum(g.free_total for _, g in state.groups_for(job))
    if free + sum(r.gpu_equivalents for r, _ in victims[: state.policy.max_victims]) \
            < job.gpu_equivalents:
        return None
    cap = state.capacity
    mark = cap.mark()
    usage_before = dict(cycle.usage)
    chosen: list[tuple[RunningJob, PreemptReason]] = []
    for run, reason in victims[: state.policy.max_victims]:
        _trial_release(state, run, cycle)
        chosen.append((run, reason))
        placement = _place(state, job)
        if placement is not None:
            for victim, why in chosen:
                result.preemptions.append(PreemptJob(victim.id, why, job.id))
                cycle.budget_used[victim.tenant] = cycle.budget_used.get(victim.tenant, 0) + 1
            return placement
    cap.rollback_to(mark)
    cycle.usage = usage_before
    for run, _ in chosen:
        cycle.freed.discard(run.id)
    return None
