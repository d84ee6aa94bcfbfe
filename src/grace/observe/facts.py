"""What /metrics reports about the cluster, read from the store in one transaction.

The store, not the reconciler's memory, is the source: a standby control plane
serves the same figures as the leader, and a restarted one loses none. Every
read is a grouped query or one pass over the live attempts, so its cost grows
with running jobs and nodes, not with the history (the showback figures, which
do read history, are refreshed on a slower clock: see ``metrics``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import aliased

from grace.control.node_health import breaker_message
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import LIVE_ATTEMPT_STATES, Attempt, HealthSignalRow, Job, JobState
from grace.core.decisions import PendingReason

_TYPED_REASONS = frozenset(r.value for r in PendingReason)


@dataclass(frozen=True, slots=True)
class LiveAttempt:
    """A starting or running attempt: who holds which GPUs since when."""

    job_id: int
    tenant: str
    number: int
    started_at: float
    gpus: float
    placement: tuple[tuple[str, tuple[int, ...]], ...]  # (node, local GPU slots)
    #: the spec's ``nodes`` (None: only GPUs asked), for the tightest tier it could have had
    nodes_asked: int | None = None


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    state: str
    reason: str | None


@dataclass
class ClusterFacts:
    """One consistent reading of the store."""

    now: float
    nodes: list[NodeFacts] = field(default_factory=list)
    live: list[LiveAttempt] = field(default_factory=list)
    jobs: Counter[tuple[str, str]] = field(default_factory=Counter)  # (state, tenant)
    pending: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tenant, reason)
    restarts: Counter[str] = field(default_factory=Counter)  # cause
    signals: Counter[tuple[str, str]] = field(default_factory=Counter)  # (node, kind)
    breaker_open: bool = False
    quotas: dict[str, float | None] = field(default_factory=dict)  # tenant -> guaranteed GPUs


def pending_reason_label(reason: str | None) -> str:
    """A pending job's reason as a closed label value: a PendingReason, else ``other``
    (a launch failure's message, say, would make the label set unbounded)."""
    return reason if reason in _TYPED_REASONS else "other"


def read_facts(store: Store, now: float) -> ClusterFacts:
    facts = ClusterFacts(now)
    with store.read() as s:
        facts.nodes = [NodeFacts(n.name, str(n.state), n.reason) for n in repo.nodes(s)]
        # columns, not ORM objects: 1,000 live attempts load in milliseconds, specs untouched
        for job_id, tenant, number, started_at, gpus, placement, asked in s.execute(
                select(Attempt.job_id, Job.tenant, Attempt.number, Attempt.started_at, Attempt.gpus,
                       Attempt.placement_json, Job.spec_json["nodes"].as_integer())
                .join(Job, Job.id == Attempt.job_id)
                .where(Attempt.state.in_(list(LIVE_ATTEMPT_STATES))).order_by(Attempt.job_id)):
            facts.live.append(LiveAttempt(
                job_id, tenant, number, started_at, gpus,
                tuple((str(e.get("node")), tuple(int(g) for g in e.get("gpus", ())))
                      for e in placement if isinstance(e, dict)),
                int(asked) if isinstance(asked, int) and asked > 0 else None))
        for state, tenant, n in s.execute(select(Job.state, Job.tenant, func.count())
                                          .group_by(Job.state, Job.tenant)):
            facts.jobs[(str(state), tenant)] = int(n)
        for tenant, reason, n in s.execute(select(Job.tenant, Job.reason, func.count())
                                           .where(Job.state == JobState.PENDING)
                                           .group_by(Job.tenant, Job.reason)):
            facts.pending[(tenant, pending_reason_label(reason))] += int(n)
        facts.restarts = _restarts(s)
        for node, kind, n in s.execute(select(HealthSignalRow.node, HealthSignalRow.kind, func.count())
                                       .group_by(HealthSignalRow.node, HealthSignalRow.kind)):
            facts.signals[(node, kind)] = int(n)
        facts.breaker_open = breaker_message(s) is not None
        facts.quotas = {t.name: t.guaranteed_gpus for t in repo.tenants(s)}
    return facts


def _restarts(s: Any) -> Counter[str]:
    """Attempts that were followed by another, by why the earlier one ended: a restart
    after a failure (its failure kind), a preemption, a move off a straggler or a drain
    (the end cause the control plane asked for), or an attempt lost with the control plane."""
    later = aliased(Attempt)
    followed = select(later.id).where(and_(later.job_id == Attempt.job_id,
                                           later.number == Attempt.number + 1)).exists()
    cause = func.coalesce(Attempt.end_cause, Attempt.failure_kind, Attempt.state)
    out: Counter[str] = Counter()
    for why, n in s.execute(select(cause, func.count()).where(followed).group_by(cause)):
        out[str(why)] += int(n)
    return out
