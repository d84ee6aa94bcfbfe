"""``core.health.HealthMonitor`` on the store: the live driver's half of one health policy.

The twin holds one monitor for a whole replay. The live control plane restarts,
fails over to a standby and takes operator actions through the API, so its
monitor must not be the only copy of anything: each use loads it from the
store (node rows: state, holder, reset, lemon, counted failures, drains the
breaker deferred; breaker events; Grace's automatic drains still in the
breaker's window), asks it, and writes back every transition it made, in the
same transaction. The decisions are the monitor's own, so live and the twin
decide alike; ``tests/contract`` holds them to it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from grace.control.store import audit, exclusions
from grace.control.store import repository as repo
from grace.control.store.models import BreakerEvent, Node, NodeEvent
from grace.core.health import (
    GRACE,
    IN_SERVICE,
    BreakerConfig,
    BreakerRecord,
    BreakerTripped,
    DrainNode,
    HealthDecision,
    HealthMonitor,
    HealthTable,
    LemonConfig,
    LemonFlagged,
    NodeHealthRecord,
    NodeState,
    RestartJobs,
    ReturnNode,
    RunDiagnostic,
)

log = logging.getLogger("grace.health")


@dataclass(frozen=True)
class HealthConfig:
    """The rules the live monitor is built with (the twin's ``SimConfig`` has the same)."""

    table: HealthTable = field(default_factory=HealthTable.default)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    lemons: LemonConfig = field(default_factory=LemonConfig)


@dataclass
class HealthEffects:
    """What the monitor decided that the reconciler carries out after the transaction."""

    restarts: list[RestartJobs] = field(default_factory=list)
    drains: list[DrainNode] = field(default_factory=list)  # told to the executing system
    diagnostics: list[RunDiagnostic] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)  # back in service: exclusions heal
    breaker: list[BreakerTripped] = field(default_factory=list)
    lemons: list[LemonFlagged] = field(default_factory=list)

    def take(self, decisions: Iterable[HealthDecision]) -> None:
        for d in decisions:
            if isinstance(d, RestartJobs):
                self.restarts.append(d)
            elif isinstance(d, DrainNode):
                self.drains.append(d)
            elif isinstance(d, RunDiagnostic):
                self.diagnostics.append(d)
            elif isinstance(d, ReturnNode):
                self.returned.append(d.node)
            elif isinstance(d, BreakerTripped):
                self.breaker.append(d)
            elif isinstance(d, LemonFlagged):
                self.lemons.append(d)


def _record(row: Node) -> NodeHealthRecord:
    return NodeHealthRecord(NodeState(row.state), row.holder, bool(row.reset_pending),
                            tuple(float(t) for t in row.failure_times or ()), bool(row.lemon),
                            bool(row.deferred))


def load_monitor(session: Session, config: HealthConfig, now: float,
                 lock: bool = True) -> HealthMonitor:
    """The monitor as the store remembers it. ``lock``: hold the node rows until commit
    (PostgreSQL), so the API and the reconciler never interleave two monitors' writes."""
    query = select(Node).order_by(Node.name)
    rows = list(session.scalars(query.with_for_update() if lock else query))
    last = session.scalars(select(BreakerEvent).order_by(BreakerEvent.id.desc()).limit(1)).first()
    opened = last is not None and last.what == "tripped"
    since = max(now - config.breaker.window_s, last.at if last is not None else -1e300)
    drains = session.scalars(select(NodeEvent.at).where(
        NodeEvent.actor == GRACE, NodeEvent.to_state == NodeState.DRAINING,
        NodeEvent.at > since)).all()
    return HealthMonitor.restore({r.name: _record(r) for r in rows},
                                 BreakerRecord(opened, tuple(drains)), config.table,
                                 config.breaker, config.lemons)


def save_monitor(session: Session, monitor: HealthMonitor, breaker_was_open: bool,
                 now: float, trip_message: str = "", token_id: str | None = None) -> None:
    """Write what ``monitor`` changed since ``load_monitor``: each transition as a node event
    (with its actor), each node's memory, a breaker trip or reset; each also as an audit
    entry (``token_id``: the operator's token, for the moves not made by Grace itself)."""
    rows = {r.name: r for r in repo.nodes(session)}
    for name, row in rows.items():
        for t in monitor.history(name):
            reason = t.reason
            if t.from_state is NodeState.DRAINING and t.to_state is NodeState.DRAINED and row.reason:
                reason = f"{row.reason} (its last job left)"  # why it was drained stays in view
            session.add(NodeEvent(node=name, at=t.at, from_state=t.from_state,
                                  to_state=t.to_state, reason=reason, actor=t.actor))
            repo.audit_node_move(session, name, t.from_state, t.to_state, reason, t.actor, t.at,
                                 None if t.actor == GRACE else token_id)
            row.state, row.reason, row.actor, row.updated_at = t.to_state, reason, t.actor, t.at
            if t.to_state in IN_SERVICE and t.from_state not in IN_SERVICE:
                exclusions.heal(session, name, t.at, f"{name} is back in service: {t.reason}")
        rec = monitor.record(name)
        row.holder, row.reset_pending, row.lemon, row.deferred = (
            rec.holder, rec.reset, rec.lemon, rec.deferred)
        if list(row.failure_times or ()) != list(rec.failures):
            row.failure_times = list(rec.failures)
        if rec.state not in (NodeState.DIAGNOSING,):
            row.diagnostic_level = row.diagnostic_due = None
    if monitor.breaker_open != breaker_was_open:
        what = "tripped" if monitor.breaker_open else "reset"
        at, actor, _ = monitor.breaker_log[-1] if monitor.breaker_log else (now, GRACE, what)
        message = trip_message if monitor.breaker_open else ""
        session.add(BreakerEvent(at=at, actor=actor, what=what, message=message))
        audit.append(session, actor, audit.AuditAction.BREAKER_TRIPPED if monitor.breaker_open
                     else audit.AuditAction.BREAKER_RESET, audit.BREAKER_TARGET,
                     audit.AuditOutcome.OK, at, None if actor == GRACE else token_id,
                     {"message": message} if message else None)


def breaker_message(session: Session) -> BreakerEvent | None:
    """The breaker's last event if it is open now (for ``grace nodes`` and the API)."""
    last = session.scalars(select(BreakerEvent).order_by(BreakerEvent.id.desc()).limit(1)).first()
    return last if last is not None and last.what == "tripped" else None


__all__ = ["HealthConfig", "HealthEffects", "breaker_message", "load_monitor", "save_monitor"]
