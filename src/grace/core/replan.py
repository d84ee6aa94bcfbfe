"""Re-planning policies: each cycle decides the whole running set, not only who starts.

Tiresias (Gu et al., NSDI'19), as the Pollux artifact's simulator runs it, does
not place waiting jobs around running ones. Every scheduling round it takes all
active jobs, running or waiting, in queue order and admits them greedily while
the cluster has GPUs for them, skipping one that does not fit and going on with
the next; a running job left outside the admitted set is preempted (it keeps its
progress and attained service), an admitted waiting job starts. Queue order is
the attained-service level, then within level 0 submission order and within
higher levels the instant each job entered the level (a job demoted earlier
comes first), then job id.

Admission counts GPUs, not placements: spreading a gang over whatever nodes have
room is always possible (the nodes with the most free GPUs first, ties to the
lowest node index, a node's free GPUs taken before the next). So the admitted
set is what the queue order says it should be, whatever the fragmentation.

Grace's additions, which the published policy has no notion of: a job that may
not be preempted (``preemptible: false``) or whose tenant has spent its hourly
preemption budget keeps its GPUs and is admitted first; a job restricted to
some GPU models, pools or nodes counts against those; a sub-GPU job counts its
share and is placed as any sub-GPU job is.
"""

from __future__ import annotations

from grace.core.capacity import Placement
from grace.core.decisions import DecideResult, PendingReason, PreemptJob, PreemptReason, StartJob
from grace.core.jobs import JobId, PendingJob, RunningJob
from grace.core.placement import place_slice, place_whole
from grace.core.state import SchedulerState


def queue_key(state: SchedulerState, job: PendingJob | RunningJob, submit_s: float,
              now: float) -> tuple:
    """A job's place in the re-plan's order at ``now``."""
    if isinstance(job, RunningJob):
        attained = job.attained_gpu_s + job.gpu_equivalents * max(0.0, now - job.start_s)
        since = state.level_since(job, now)
    else:
        attained, since = job.attained_gpu_s, job.level_since_s
    level = state.policy.level(attained)
    return (level, since if level else 0.0, submit_s, job.id)


def decide_replan(state: SchedulerState, now: float) -> DecideResult:
    """One re-planning cycle; pure like ``core.scheduler.decide`` (a rolled-back trial)."""
    result = DecideResult(default_reason=PendingReason.WAITING_FOR_CAPACITY)
    with state.capacity.trial():
        expired = _stop_expired(state, now, result)
        left = _usable_gpus(state)
        order: list[tuple[tuple, bool, JobId]] = []  # (key, pinned, id); pinned first
        usable = state.capacity.usable
        for run in state.running.values():
            if run.id in expired:
                continue
            # kept whatever the order: jobs that may not be preempted, and jobs on a drained
            # node (its GPUs are outside the pool; draining decides when they stop)
            pinned = (not run.preemptible or state.preemption_budget_left(run.tenant, now) <= 0
                      or not all(usable[n] for n in run.placement.nodes(state.topo)))
            submit = run.job.submit_s if run.job is not None else run.start_s
            order.append(((not pinned, *queue_key(state, run, submit, now)), pinned, run.id))
        for job in state.pending.values():
            order.append(((True, *queue_key(state, job, job.submit_s, now)), False, job.id))
        order.sort()
        admitted: list[PendingJob] = []
        keep: set[JobId] = set()
        for _, pinned, jid in order:
            active = state.running.get(jid)
            models = active.models if active is not None else state.pending[jid].models
            need = (active.gpu_equivalents if active is not None
                    else state.pending[jid].gpu_equivalents)
            if pinned and active is not None:
                for n in active.placement.nodes(state.topo):
                    node = state.topo.nodes[n]
                    if usable[n]:
                        on = sum(1 for g in active.placement.gpus if state.topo.gpu_node[g] == n)
                        left[node.gpu_model] = left.get(node.gpu_model, 0.0) - on
                keep.add(jid)
                continue
            model = next((m for m in models if left.get(m, 0.0) >= need - 1e-9), None)
            if model is None:
                continue
            left[model] -= need
            if active is not None:
                keep.add(jid)
            else:
                admitted.append(state.pending[jid])
        displaced = sorted((r for r in state.running.values()
                            if r.id not in keep and r.id not in expired), key=lambda r: r.id)
        mark = state.capacity.mark()
        for run in displaced:
            state.capacity.release(run.placement)
        for job in admitted:
            placement = _place_spread(state, job)
            if placement is None:  # a per-node shape or excluded nodes it cannot have now
                result.reasons[job.id] = PendingReason.WAITING_FOR_CAPACITY
                continue
            state.capacity.allocate(placement)
            result.starts.append(StartJob(job.id, placement))
        if not result.starts:  # nothing would take the displaced jobs' GPUs: keep them
            state.capacity.rollback_to(mark)
            return result
        first = result.starts[0].job_id
        result.preemptions = [PreemptJob(r.id, PreemptReason.LEAST_ATTAINED_SERVICE, first)
                              for r in displaced]
    return result


def _stop_expired(state: SchedulerState, now: float, result: DecideResult) -> set[JobId]:
    from grace.core.decisions import StopJob, StopReason

    out: set[JobId] = set()
    for deadline, jid in state.deadlines:
        if deadline > now:
            break
        result.stops.append(StopJob(jid, StopReason.TIMEOUT))
        state.capacity.release(state.running[jid].placement)
        out.add(jid)
    return out


def _usable_gpus(state: SchedulerState) -> dict[str, float]:
    """Whole GPUs per model on nodes in service: the pool admission shares out."""
    cap = state.capacity
    out: dict[str, float] = {}
    for node in state.topo.nodes:
        if cap.usable[node.index]:
            out[node.gpu_model] = out.get(node.gpu_model, 0.0) + node.gpus
    return out


def _place_spread(state: SchedulerState, job: PendingJob) -> Placement | None:
    """The nodes with the most free GPUs first (lowest index on ties), each node's free
    GPUs taken before the next; jobs with a per-node shape or a GPU share are placed
    the ordinary way."""
    cap = state.capacity
    for model, g in state.groups_for(job):
        if job.whole is None:
            p = place_slice(cap, g, job.slices[model], job.exclude_nodes)
        elif job.whole.per_node:
            p = place_whole(cap, g, job.whole, job.exclude_nodes, False)
        else:
            p = _spread(state, g.nodes, job.whole.count, job.exclude_nodes)
        if p is not None:
            return p
    return None


def _spread(state: SchedulerState, nodes: list[int], count: int,
            exclude: frozenset[int]) -> Placement | None:
    cap = state.capacity
    free = {n: cap.free_count[n] for n in nodes
            if cap.usable[n] and n not in exclude and cap.free_count[n] > 0}
    if sum(free.values()) < count:
        return None
    gpus: list[int] = []
    while len(gpus) < count:
        node = min(free, key=lambda n: (-free[n], n))
        take = min(free[node], count - len(gpus))
        gpus.extend(cap.free_gpu_ids(node, take))
        free[node] -= take
    return Placement(gpus=tuple(sorted(gpus)))
