"""Tenants (quota, fair share, usage, showback) and alerts, as the signed-in person may see them.

A member or a tenant's viewer sees its own tenant's row only, as ``GET /tenants``
answers it; the showback figures (``GET /showback``: GPU-hours allocated, useful
and lost, and their cost) are for operators and admins. The fair share is the
tenant's weight over the sum of every tenant's weights, the share of a contended
cluster the ``grace`` policy gives it (``docs/scheduler.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from grace.control.auth import Principal
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import Job, Role
from grace.core.topology import Topology


@dataclass(frozen=True, slots=True)
class ShowbackView:
    allocated_gpu_hours: float
    useful_gpu_hours: float
    lost_gpu_hours: float  # failures, data and sync waits, checkpoints
    useful_share: float
    allocated_usd: float
    useful_usd: float


@dataclass(frozen=True, slots=True)
class TenantView:
    name: str
    guaranteed_gpus: float | None  # None: unlimited
    borrow_limit_gpus: float | None
    weight: float
    fair_share: float  # 0..1
    gpus_held: float
    gpu_hours: float
    running: int
    pending: int
    showback: ShowbackView | None  # operators and admins only


def tenants(store: Store, topo: Topology, state_dir: Path, now: float,
            who: Principal) -> list[TenantView]:
    from grace.cost.showback_live import live_showback

    with store.read() as s:
        rows = repo.tenants(s)
        hours = repo.gpu_hours_by_tenant(s, now)
        held: dict[str, float] = {}
        for a in repo.running_attempts(s):
            held[a.job.tenant] = held.get(a.job.tenant, 0.0) + a.gpus
        counts = {(tenant, str(state)): int(n) for tenant, state, n in s.execute(
            select(Job.tenant, Job.state, func.count()).group_by(Job.tenant, Job.state))}
    total_weight = sum(t.weight for t in rows) or 1.0
    figures: dict[str, Any] = {}
    if who.at_least(Role.OPERATOR):
        figures = live_showback(store, topo, state_dir, now)["tenants"]
    out = []
    for t in rows:
        if not who.sees(t.name):
            continue
        f = figures.get(t.name)
        show = None if f is None else ShowbackView(
            f["allocated_gpu_hours"], f["useful_gpu_hours"],
            f["failure_gpu_hours"] + f["data_sync_gpu_hours"] + f["checkpoint_gpu_hours"],
            f["useful_share"], f["allocated_usd"], f["useful_usd"])
        out.append(TenantView(t.name, t.guaranteed_gpus, t.borrow_limit_gpus, t.weight,
                              t.weight / total_weight, held.get(t.name, 0.0),
                              hours.get(t.name, 0.0), counts.get((t.name, "running"), 0),
                              counts.get((t.name, "pending"), 0), show))
    return out


# ---------------------------------------------------------------- alerts
@dataclass(frozen=True, slots=True)
class AlertView:
    rule: str
    severity: str
    state: str
    labels: tuple[tuple[str, str], ...]
    summary: str
    action: str
    reason: str
    active_since: float | None


def alerts(observability: Any, who: Principal,
           as_json: Callable[[Any], dict[str, Any]]) -> list[AlertView] | None:
    """The runbook's alerts now, those ``who`` may see (another tenant's are left out, as
    ``GET /alerts`` does); None when this process evaluates no alerts."""
    if observability is None:
        return None
    out = []
    for alert in observability.alerts():
        a = as_json(alert)
        labels = {str(k): str(v) for k, v in (a.get("labels") or {}).items()}
        if not who.all_tenants and labels.get("tenant") not in (None, "", who.tenant):
            continue
        out.append(AlertView(str(a.get("rule", "")), str(a.get("severity", "")),
                             str(a.get("state", "")), tuple(sorted(labels.items())),
                             str(a.get("summary") or ""), str(a.get("action") or ""),
                             str(a.get("reason") or ""), a.get("active_since")))
    severity_first = {"critical": 0, "warning": 1, "info": 2}
    return sorted(out, key=lambda a: (a.state != "firing", severity_first.get(a.severity, 3),
                                      a.rule))


__all__ = ["AlertView", "ShowbackView", "TenantView", "alerts", "tenants"]
