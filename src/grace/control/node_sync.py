"""Node states both ways between Grace's store and an executing system that has its own.

Slurm keeps node states of its own, and people change them there (``scontrol
update state=drain``), as does Slurm itself (a node that stops answering goes
``DOWN``). Grace's health model must see that, and Slurm must see Grace's
drains, or each would schedule onto nodes the other took out. Each reconcile
cycle compares the two and moves whichever is behind:

- out in Slurm, for a reason that is not Grace's -> ``draining`` in Grace, held
  by ``slurm``, with Slurm's state and reason (its jobs finish or fail as Slurm
  decides; the reconciler makes it ``drained`` when they have left);
- back in service in Slurm, and out in Grace only because of Slurm (held by
  ``slurm``) -> ``returned`` in Grace;
- out in Grace (signal, API or CLI drain) but in service in Slurm -> drained in
  Slurm with Grace's reason, prefixed ``grace:`` so the next cycle knows it is ours;
- back in service in Grace, still drained in Slurm by Grace -> resumed in Slurm.

Backends without node states of their own (local) are left out: the check is
the ``node_states`` capability.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from grace.control.node_health import HealthConfig, load_monitor, save_monitor
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import NodeEvent
from grace.core.health import IN_SERVICE, NodeState

log = logging.getLogger("grace.node_sync")

#: The actor Grace records for moves it copies from the executing system.
EXTERNAL_ACTOR = "slurm"


def _described(node: Any) -> str:
    flags = "+".join(sorted(node.flags))
    state = f"{node.state}+{flags}" if flags else node.state
    return state + (f": {node.reason}" if node.reason else "")


def _drain_reason(session: Session, node: str) -> str | None:
    """Why the node was taken out (its last move to draining), not what happened since
    (drained, diagnosing): what Slurm should show an operator."""
    return session.scalars(select(NodeEvent.reason).where(
        NodeEvent.node == node, NodeEvent.to_state == NodeState.DRAINING)
        .order_by(NodeEvent.id.desc()).limit(1)).first()


def sync_node_states(store: Store, backend: Any, now: float,
                     health: HealthConfig | None = None) -> None:
    """One comparison, both directions (see the module docstring). Moves copied from the
    executing system go through ``core.health``'s monitor like an operator's: a drain in
    Slurm is a drain by ``slurm``, a return there a forced return by ``slurm``."""
    if "node_states" not in getattr(backend, "capabilities", ()):
        return
    try:
        external = {n.name: n for n in backend.node_states()}
    except Exception:  # the executing system is briefly unreachable: try next cycle
        log.exception("cannot read node states from %s", backend.name)
        return
    to_drain: list[tuple[str, str]] = []
    to_resume: list[str] = []
    with store.transaction() as s:
        monitor = load_monitor(s, health or HealthConfig(), now)
        was_open = monitor.breaker_open
        for row in repo.nodes(s):
            ext = external.get(row.name)
            if ext is None:
                continue
            state = NodeState(row.state)
            if ext.out_of_service and not ext.drained_by_grace:
                if state in IN_SERVICE:
                    monitor.drain(row.name, _described(ext), EXTERNAL_ACTOR, now)
            elif not ext.out_of_service and row.holder == EXTERNAL_ACTOR and state in (
                    NodeState.DRAINING, NodeState.DRAINED):
                monitor.undrain(row.name, EXTERNAL_ACTOR, now, force=True)
            elif state not in IN_SERVICE and row.holder != EXTERNAL_ACTOR \
                    and not ext.out_of_service:
                to_drain.append((row.name, _drain_reason(s, row.name) or "drained by Grace"))
            elif state in IN_SERVICE and ext.out_of_service and ext.drained_by_grace:
                to_resume.append(row.name)
        save_monitor(s, monitor, was_open, now)
    # a refused update (no operator rights, slurmctld busy) must not end the cycle:
    # Grace already stopped placing there, and the next cycle tries again
    for name, reason in to_drain:
        log.warning("draining %s in %s: %s", name, backend.name, reason)
        try:
            backend.drain(name, reason)
        except Exception:
            log.exception("could not drain %s in %s", name, backend.name)
    for name in to_resume:
        log.warning("resuming %s in %s: back in service in Grace", name, backend.name)
        try:
            backend.resume(name)
        except Exception:
            log.exception("could not resume %s in %s", name, backend.name)
