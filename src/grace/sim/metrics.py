"""What a replay measured: job completion and queueing times, allocation, fragmentation,
leaf span and per-tenant shares, as one flat JSON-able summary plus time series.

Time-weighted figures integrate piecewise-constant state between events:
``gpu_allocation`` is allocated GPU-time over total GPU-time up to the makespan;
``fragmentation`` is the time-averaged share of GPUs that sat free while jobs
waited and none of the waiting jobs could use them (measured right after each
scheduling cycle, when everything placeable has been placed).

The series (sampled about ``SERIES_POINTS`` times, and once more at the end so every
chart reaches the end of the replay) are what the HTML report draws: owned GPUs in use
and jobs waiting; GPUs in use per tenant (``SimResult.tenant_series``, owned and rented
alike, so the tenants add up to everything running); and, in a bursting replay, rented
GPUs in use, rented GPUs provisioned and cloud spend accrued so far. Spend accrues at the
ready nodes' hourly price between cycles, as ``sim.bursting`` bills them; the summary's
``cloud_usd`` also bills nodes still up at the end until their idle timeout, so it can sit
a little above the series' last value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from grace.core.state import SchedulerState
from grace.core.topology import Topology

if TYPE_CHECKING:
    from grace.sim.engine import SimJob
    from grace.sim.traces.model import TraceJob

SERIES_POINTS = 2000
#: the bursting replay's series: rented GPUs in use, rented GPUs provisioned, spend so far
CLOUD_GPUS, CLOUD_PROVISIONED, CLOUD_USD = "cloud_gpus", "cloud_provisioned_gpus", "cloud_usd"


@dataclass
class SimResult:
    summary: dict[str, Any]
    series: dict[str, list[float]]
    jct_s: np.ndarray
    queue_s: np.ndarray
    tenants: dict[str, dict[str, float]] = field(default_factory=dict)
    jobs: list[SimJob] = field(default_factory=list)  # per-job records (showback)
    #: the cluster's own GPUs (rented ones left out): the report's capacity line
    total_gpus: float = 0.0
    #: GPUs in use per tenant at each ``series["t_s"]`` sample (zeros before it first ran)
    tenant_series: dict[str, list[float]] = field(default_factory=dict)


class MetricsRecorder:
    """Integrates state over virtual time; cheap enough to call at every event."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.total_gpus = topo.total_gpus
        self.last_t: float | None = None
        self.first_t: float | None = None
        self.alloc_area = 0.0
        self.frag_area = 0.0
        self.queue_area = 0.0
        self._alloc = 0.0
        self._frag = 0.0
        self._queue = 0
        self.preemptions = 0
        self.ended = 0
        self.node_failures = 0
        self.job_failures = 0
        self.restarts = 0
        self.lemons_flagged = 0
        self.breaker_trips = 0
        self.rented_gpus = 0.0  # GPUs held on rented cloud nodes: not the cluster's own
        self.series: dict[str, list[float]] = {"t_s": [], "allocated_gpus": [], "queued_jobs": []}
        self.tenant_series: dict[str, list[float]] = {}
        self._sample_every = 0.0
        self._cloud = False
        self._rented_provisioned = 0.0
        self._usd_per_hour = 0.0
        self.cloud_usd = 0.0
        self._state: SchedulerState | None = None

    def track_cloud(self, owned_gpus: int) -> None:
        """A bursting replay: capacity is the owned GPUs, and the rented ones get series."""
        self.total_gpus = owned_gpus
        self._cloud = True
        self.series |= {CLOUD_GPUS: [], CLOUD_PROVISIONED: [], CLOUD_USD: []}

    def count_cloud(self, in_use: float, provisioned: float, usd_per_hour: float) -> None:
        """What the rented nodes hold and cost after a cycle (``CountRentedGpus``)."""
        self.rented_gpus = in_use
        self._rented_provisioned = provisioned
        self._usd_per_hour = usd_per_hour

    def set_horizon(self, horizon_s: float) -> None:
        self._sample_every = horizon_s / SERIES_POINTS

    def advance(self, now: float, state: SchedulerState) -> None:
        if self.last_t is None:
            self.last_t = self.first_t = now
            return
        dt = now - self.last_t
        if dt > 0:
            self.alloc_area += self._alloc * dt
            self.frag_area += self._frag * dt
            self.queue_area += self._queue * dt
            self.cloud_usd += self._usd_per_hour * dt / 3600.0
            self.last_t = now

    def after_cycle(self, now: float, state: SchedulerState) -> None:
        self._state = state
        self._alloc = state.allocated_gpus() - self.rented_gpus
        self._queue = len(state.pending)
        self._frag = (self.total_gpus - self._alloc) if self._queue else 0.0
        s = self.series
        if not s["t_s"] or now - s["t_s"][-1] >= self._sample_every:
            self._sample(now, state)

    def _sample(self, now: float, state: SchedulerState) -> None:
        s = self.series
        s["t_s"].append(now)
        s["allocated_gpus"].append(self._alloc)
        s["queued_jobs"].append(self._queue)
        if self._cloud:
            s[CLOUD_GPUS].append(self.rented_gpus)
            s[CLOUD_PROVISIONED].append(self._rented_provisioned)
            s[CLOUD_USD].append(self.cloud_usd)
        n = len(s["t_s"])
        for tenant in state.usage:
            if tenant not in self.tenant_series:
                self.tenant_series[tenant] = [0.0] * (n - 1)
        for tenant, points in self.tenant_series.items():
            usage = state.usage.get(tenant)
            points.append(usage.gpus if usage is not None else 0.0)

    def _close_series(self) -> None:
        """One last sample at the last instant replayed, so the charts reach the end; the
        state then is the last cycle's (it is piecewise constant between cycles)."""
        t = self.series["t_s"]
        if self._state is not None and self.last_t is not None and t and t[-1] < self.last_t:
            self._sample(self.last_t, self._state)

    def finish(self, jobs: Iterable[SimJob], unplaceable: list[TraceJob], events: int,
               wall_s: float) -> SimResult:
        self._close_series()
        jobs = list(jobs)
        done = [j for j in jobs if not math.isnan(j.end_s)]
        submit = np.array([j.trace.submit_s for j in done])
        end = np.array([j.end_s for j in done])
        first = np.array([j.first_start_s for j in done])
        jct = end - submit
        queue = first - submit
        t0 = min((j.trace.submit_s for j in jobs), default=0.0)
        makespan = (float(end.max()) - t0) if len(end) else 0.0
        span = (self.last_t or 0.0) - (self.first_t or 0.0)
        multi = [j for j in done if j.nodes > 1]
        tenants = self._tenants(done, jobs)

        def pct(a: np.ndarray, q: float) -> float:
            return float(np.percentile(a, q)) if len(a) else 0.0

        summary: dict[str, Any] = {
            "jobs": len(jobs),
            "jobs_completed": sum(1 for j in done if j.outcome == "completed"),
            "jobs_timed_out": sum(1 for j in done if j.outcome == "timeout"),
            "jobs_failed": sum(1 for j in done if j.outcome == "failed"),
            "jobs_unfinished": len(jobs) - len(done),
            "jobs_skipped": len(unplaceable),
            "avg_jct_s": float(jct.mean()) if len(jct) else 0.0,
            "p50_jct_s": pct(jct, 50),
            "p99_jct_s": pct(jct, 99),
            "avg_queue_s": float(queue.mean()) if len(queue) else 0.0,
            "p50_queue_s": pct(queue, 50),
            "p99_queue_s": pct(queue, 99),
            "makespan_s": makespan,
            "gpu_allocation": self.alloc_area / (self.total_gpus * span) if span > 0 else 0.0,
            "fragmentation": self.frag_area / (self.total_gpus * span) if span > 0 else 0.0,
            "avg_queue_len": self.queue_area / span if span > 0 else 0.0,
            "multi_node_jobs": len(multi),
            "multi_leaf_share": (sum(1 for j in multi if j.leaves > j.min_leaves) / len(multi))
            if multi else 0.0,
            "preemptions": self.preemptions,
            "node_failures": self.node_failures,
            "job_failures": self.job_failures,
            "restarts": self.restarts,
            "lemons_flagged": self.lemons_flagged,
            "breaker_trips": self.breaker_trips,
            "lost_gpu_hours": sum(j.lost_gpu_s for j in jobs) / 3600.0,
            "checkpoint_gpu_hours": sum(j.checkpoint_gpu_s for j in jobs) / 3600.0,
            "events": events,
            "wall_s": wall_s,
            "events_per_s": events / wall_s if wall_s > 0 else 0.0,
        }
        return SimResult(summary, self.series, jct, queue, tenants, jobs, self.total_gpus,
                         self.tenant_series)

    @staticmethod
    def _tenants(done: list[SimJob], jobs: list[SimJob]) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for j in jobs:
            t = out.setdefault(j.trace.tenant, {"jobs": 0, "gpu_hours": 0.0, "avg_queue_s": 0.0,
                                                "restarts": 0, "lost_gpu_hours": 0.0})
            t["restarts"] += j.failures
            t["lost_gpu_hours"] += j.lost_gpu_s / 3600.0
        total = 0.0
        for j in done:
            gpus = j.pending.gpu_equivalents
            gh = gpus * j.trace.duration_s / 3600.0
            t = out[j.trace.tenant]
            t["jobs"] += 1
            t["gpu_hours"] += gh
            t["avg_queue_s"] += j.first_start_s - j.trace.submit_s
            total += gh
        for t in out.values():
            t["avg_queue_s"] /= max(1, t["jobs"])
            t["share_of_gpu_hours"] = t["gpu_hours"] / total if total else 0.0
        return out
