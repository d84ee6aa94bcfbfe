"""Showback: who used the GPUs, how much of that was useful, where the rest went, what it cost.

Two producers turn their world into :class:`JobUsage` records, one per job:
``showback_twin`` (the twin's jobs after a replay) and ``showback_live`` (the
control plane's store and heartbeats). Everything after that is here and the
same for both: per-tenant sums, cluster totals, rolling windows.

A job's allocated GPU-hours split into useful work and three kinds of loss:

- failures: restarts and work recomputed after a failure;
- waiting on data or synchronization (data loading, all-reduce, barriers);
- writing checkpoints.

``useful = allocated - failures - data_sync - checkpoint``. Queueing is not
part of allocated time (the job held no GPUs); it is reported as wall hours
and as the GPU-hours the job asked for while it waited. Every GPU-hour is
priced at the rate of the pool it ran on (``usd_per_gpu_hour``), queueing
included, so the queue cost reads "what the wait would have cost to rent".

Totals are sums over jobs, and tenant figures are sums over the same jobs, so
tenants always add up to the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

DEFAULT_WINDOWS_S: dict[str, float] = {"1d": 86_400.0, "7d": 7 * 86_400.0}


@dataclass(frozen=True)
class JobUsage:
    """One job's use of the cluster; hours are GPU-hours unless named wall hours."""

    job: str
    tenant: str
    gpus: float
    usd_per_gpu_hour: float
    queue_hours: float
    allocated_gpu_hours: float
    failure_gpu_hours: float = 0.0
    data_sync_gpu_hours: float = 0.0
    checkpoint_gpu_hours: float = 0.0
    #: wall-clock spans the job held GPUs; its GPU-hours are spread evenly over them
    intervals: tuple[tuple[float, float], ...] = ()
    #: ``data_sync`` split: waiting on input (storage read) and on peers (all-reduce, sync);
    #: 0 both where the source cannot tell them apart (the twin's runtime model)
    io_wait_gpu_hours: float = 0.0
    sync_wait_gpu_hours: float = 0.0

    @property
    def useful_gpu_hours(self) -> float:
        lost = self.failure_gpu_hours + self.data_sync_gpu_hours + self.checkpoint_gpu_hours
        return max(0.0, self.allocated_gpu_hours - lost)

    def held_share_in(self, start: float, end: float) -> float:
        """Share of this job's held time that falls inside ``[start, end]``."""
        total = sum(b - a for a, b in self.intervals)
        if total <= 0:
            return 0.0
        inside = sum(max(0.0, min(b, end) - max(a, start)) for a, b in self.intervals)
        return inside / total


@dataclass
class UsageFigures:
    """Summable figures for a job, a tenant or the whole cluster."""

    jobs: int = 0
    allocated_gpu_hours: float = 0.0
    useful_gpu_hours: float = 0.0
    failure_gpu_hours: float = 0.0
    data_sync_gpu_hours: float = 0.0
    checkpoint_gpu_hours: float = 0.0
    io_wait_gpu_hours: float = 0.0
    sync_wait_gpu_hours: float = 0.0
    queue_hours: float = 0.0
    queue_gpu_hours: float = 0.0
    allocated_usd: float = 0.0
    useful_usd: float = 0.0
    failure_usd: float = 0.0
    data_sync_usd: float = 0.0
    checkpoint_usd: float = 0.0
    queue_usd: float = 0.0

    def add(self, u: JobUsage) -> None:
        rate = u.usd_per_gpu_hour
        self.jobs += 1
        self.allocated_gpu_hours += u.allocated_gpu_hours
        self.useful_gpu_hours += u.useful_gpu_hours
        self.failure_gpu_hours += u.failure_gpu_hours
        self.data_sync_gpu_hours += u.data_sync_gpu_hours
        self.checkpoint_gpu_hours += u.checkpoint_gpu_hours
        self.io_wait_gpu_hours += u.io_wait_gpu_hours
        self.sync_wait_gpu_hours += u.sync_wait_gpu_hours
        self.queue_hours += u.queue_hours
        self.queue_gpu_hours += u.queue_hours * u.gpus
        self.allocated_usd += u.allocated_gpu_hours * rate
        self.useful_usd += u.useful_gpu_hours * rate
        self.failure_usd += u.failure_gpu_hours * rate
        self.data_sync_usd += u.data_sync_gpu_hours * rate
        self.checkpoint_usd += u.checkpoint_gpu_hours * rate
        self.queue_usd += u.queue_hours * u.gpus * rate

    @property
    def useful_share(self) -> float:
        """Useful over allocated GPU-hours (a tenant's or job's effective utilization)."""
        return self.useful_gpu_hours / self.allocated_gpu_hours if self.allocated_gpu_hours else 0.0

    def to_json(self) -> dict[str, float]:
        out: dict[str, float] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["useful_share"] = self.useful_share
        # GPU time spent waiting on storage reads / on peers, as shares of GPU time held
        alloc = self.allocated_gpu_hours
        out["io_wait_share"] = self.io_wait_gpu_hours / alloc if alloc else 0.0
        out["sync_wait_share"] = self.sync_wait_gpu_hours / alloc if alloc else 0.0
        return out


def _window(usages: list[JobUsage], start: float, end: float,
            capacity_gpus: float | None) -> dict[str, object]:
    tenants: dict[str, dict[str, float]] = {}
    total_alloc = total_useful = 0.0
    for u in usages:
        share = u.held_share_in(start, end)
        if share <= 0:
            continue
        t = tenants.setdefault(u.tenant, {"allocated_gpu_hours": 0.0, "useful_gpu_hours": 0.0})
        t["allocated_gpu_hours"] += u.allocated_gpu_hours * share
        t["useful_gpu_hours"] += u.useful_gpu_hours * share
        total_alloc += u.allocated_gpu_hours * share
        total_useful += u.useful_gpu_hours * share
    for t in tenants.values():
        t["useful_share"] = t["useful_gpu_hours"] / t["allocated_gpu_hours"] if t[
            "allocated_gpu_hours"] else 0.0
    available = capacity_gpus * (end - start) / 3600.0 if capacity_gpus else None
    return {"start_s": start, "end_s": end, "allocated_gpu_hours": total_alloc,
            "useful_gpu_hours": total_useful,
            "effective_utilization": total_useful / available if available else None,
            "tenants": tenants}


def showback(usages: Iterable[JobUsage], now: float, capacity_gpus: float | None = None,
             windows_s: dict[str, float] | None = None) -> dict[str, object]:
    """Per-job rows, per-tenant sums, cluster totals and rolling windows ending at ``now``.

    A window's ``effective_utilization`` is useful GPU-hours in it over the GPU-hours the
    cluster had (``capacity_gpus * window``); None when the capacity is not given.
    """
    rows = list(usages)
    totals = UsageFigures()
    tenants: dict[str, UsageFigures] = {}
    for u in rows:
        totals.add(u)
        tenants.setdefault(u.tenant, UsageFigures()).add(u)
    windows = {name: _window(rows, now - span, now, capacity_gpus)
               for name, span in (windows_s or DEFAULT_WINDOWS_S).items()}
    jobs = []
    for u in rows:
        one = UsageFigures()
        one.add(u)
        jobs.append({"job": u.job, "tenant": u.tenant, "gpus": u.gpus,
                     "usd_per_gpu_hour": u.usd_per_gpu_hour} | one.to_json())
    return {"now": now, "capacity_gpus": capacity_gpus, "totals": totals.to_json(),
            "tenants": {t: f.to_json() for t, f in sorted(tenants.items())},
            "windows": windows, "jobs": jobs}
