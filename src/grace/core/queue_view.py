"""Where each waiting job stands in the engine's order, and why: ``grace priority`` (sprio).

``decide`` visits waiting jobs as a k-way merge of per-(tenant, shape) queues keyed by
``(fair-share key of the tenant, the job's static key)``: the fair-share key is
``quotas.fair_share`` (GPUs held over weight) when the policy has fair share, else 0, and
the static key is ``QueuePolicy.static_key`` (the fields of ``policy.order``, then the job
id), which ``SchedulerState`` computed when the job was queued. Here the same keys are
read from the same state, not computed again, and sorted: the result is the order the
next cycle visits the queue in at today's usage. Within a cycle each start raises its
tenant's usage, so under fair share a tenant's later jobs may move back; a job visited
early can still wait when it does not fit (its pending reason says why).

Pure: no clock, no I/O; it reads ``state`` and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from grace.core.jobs import JobId
from grace.core.quotas import fair_share
from grace.core.state import SchedulerState


@dataclass(frozen=True)
class QueueFactor:
    """One field of the policy's order for one job, as ``decide`` compares it (lower goes
    first): ``priority`` is negated there, so ``value`` is the job's priority and
    ``key`` what is compared."""

    name: str  # a field of QueuePolicy.order: priority, las, size, submit
    value: float
    key: float


@dataclass(frozen=True)
class QueueEntry:
    """A waiting job's place in the order and the factors that put it there."""

    position: int  # 1: visited first
    job_id: JobId
    tenant: str
    #: the tenant's fair-share key (GPUs held / weight) when the policy orders tenants by
    #: it, else None (every tenant compares equal)
    fair_share: float | None
    tenant_gpus: float  # GPUs the tenant holds now
    weight: float
    factors: tuple[QueueFactor, ...]
    attained_gpu_s: float  # service attained so far (the ``las`` field's input)


def queue_order(state: SchedulerState) -> list[QueueEntry]:
    """Every waiting job of ``state`` in the order ``decide`` visits them, with its factors."""
    policy = state.policy
    shares = {t: fair_share(state.quota(t), state.usage[t].gpus if t in state.usage else 0.0)
              for t in {qk[0] for qk in state.queues}}
    keyed: list[tuple[float, tuple, JobId]] = []
    for (tenant, _shape), queue in state.queues.items():
        tkey = shares[tenant] if policy.fair_share else 0.0
        keyed.extend((tkey, skey, jid) for skey, jid in queue)
    keyed.sort()
    out: list[QueueEntry] = []
    for position, (_, skey, jid) in enumerate(keyed, start=1):
        job = state.pending[jid]
        factors = tuple(
            QueueFactor(name, -key if name == "priority" else key, key)
            for name, key in zip(policy.order, skey, strict=False))
        usage = state.usage[job.tenant].gpus if job.tenant in state.usage else 0.0
        out.append(QueueEntry(position, jid, job.tenant,
                              shares[job.tenant] if policy.fair_share else None, usage,
                              state.quota(job.tenant).weight, factors, job.attained_gpu_s))
    return out


__all__ = ["QueueEntry", "QueueFactor", "queue_order"]
