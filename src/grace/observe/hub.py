"""The API process's observability, in one object: ``app.state.observability``.

It owns the heartbeat log (fed by ``POST /jobs/N/heartbeats``), this host's
NVML seam, the metrics registry /metrics renders and the alert engine that
evaluates the runbook over those same metrics. The dashboard, ``/alerts`` and
``grace why`` read it; nothing here writes to the store.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.core import Metric
from sqlalchemy import select

from grace.control.store.db import Store
from grace.control.store.models import Job
from grace.core.topology import Topology
from grace.observe.facts import read_facts
from grace.observe.gpu import GpuTelemetry
from grace.observe.metrics import SHOWBACK_EVERY_S, GraceMetrics, Reading, Refresher, Showback
from grace.observe.runbook_spec import RunbookSpec, load_runbook
from grace.observe.telemetry import HeartbeatLog


def gpu_host_node(topo: Topology, hostname: str) -> str:
    """The cluster node whose GPUs NVML sees here: the one named like this host, else the
    only node of a one-node cluster (NVML inventory makes one), else the host's name."""
    if hostname in topo.by_name:
        return hostname
    short = hostname.split(".")[0]
    if short in topo.by_name:
        return short
    return topo.nodes[0].name if len(topo.nodes) == 1 else hostname


class Observability:
    """See the module docstring; ``gpus`` stands in for the NVML seam in tests."""

    def __init__(self, store: Store, topo: Topology, state_dir: Path,
                 clock: Callable[[], float] = time.time, gpus: GpuTelemetry | None = None,
                 refresh_s: float = 10.0, runbook: RunbookSpec | Path | None = None) -> None:
        self.store, self.topo, self.state_dir, self.clock = store, topo, state_dir, clock
        self.gpus = gpus or GpuTelemetry()
        self.gpu_node = gpu_host_node(topo, self.gpus.hostname)
        self.metrics = GraceMetrics(topo, self._read, self.gpu_node, refresh_s)
        self.telemetry = HeartbeatLog(on_checkpoint=self.metrics.observe_save)
        self._showback = Showback()
        self._totals = ShowbackTotals()
        self._showback_at = -1e18
        self._showback_lock = threading.Lock()
        self.runbook = _runbook(runbook)
        self.engine = _alert_engine(self.runbook)
        self._alerts: list[Any] = []
        self._evaluated_at = -1e18
        self._evaluating = threading.Lock()
        self._refresher: Refresher | None = None

    def _read(self) -> Reading:
        facts = read_facts(self.store, self.clock())
        jobs = self.telemetry.snapshot(a.job_id for a in facts.live)
        return Reading(facts, jobs, self.gpus.sample(), self.showback())

    def showback(self) -> Showback:
        """Per-tenant GPU-hours, all time, refreshed every ``SHOWBACK_EVERY_S`` (it reads history)."""
        with self._showback_lock:
            if time.monotonic() - self._showback_at >= SHOWBACK_EVERY_S:
                self._showback = self._totals.read(self.store, self.state_dir, self.clock())
                self._showback_at = time.monotonic()
            return self._showback

    def reading(self) -> Reading:
        """The newest reading /metrics rendered (rendered now if it is stale)."""
        self.metrics.scrape()
        reading = self.metrics.last_reading
        assert reading is not None  # scrape() renders one
        return reading

    def families(self) -> list[Metric]:
        return self.metrics.families()

    def evaluate_alerts(self) -> list[Any]:
        """Run the runbook over the newest metrics; remembered for ``alerts()``."""
        with self._evaluating:
            self._alerts = list(self.engine.evaluate(self.families(), self.clock()))
            self._evaluated_at = time.monotonic()
            return self._alerts

    def alerts(self) -> list[Any]:
        """The alerts now: evaluated again when the last evaluation is older than the
        metrics' ``refresh_s`` (the refresher also evaluates every 30 s, so a rule's
        ``for`` is timed even when nobody asks)."""
        if time.monotonic() - self._evaluated_at > self.metrics.refresh_s:
            return self.evaluate_alerts()
        return list(self._alerts)

    def start(self) -> None:
        """Render /metrics and evaluate alerts in the background (``grace up``)."""
        if self._refresher is None:
            self.metrics.background = True
            self._refresher = Refresher(self.metrics, evaluate=self.evaluate_alerts)
            self._refresher.start()

    def stop(self) -> None:
        if self._refresher is not None:
            self._refresher.stopping.set()
            self._refresher.join(10)
            self._refresher = None
        self.metrics.background = False


class ShowbackTotals:
    """All-time GPU-hours per tenant, read incrementally: a job that has ended is read once
    and its figures kept, so each refresh reads only the jobs still running or waiting
    (and those that ended since the last one), not the whole history."""

    #: a job that ends this close to a refresh is read again next time (its end may commit late)
    MARGIN_S = 300.0

    def __init__(self) -> None:
        self.ended: Showback = Showback()
        self.counted: set[str] = set()  # ended jobs already in ``ended``
        self.watermark: float | None = None

    def read(self, store: Store, state_dir: Path, now: float) -> Showback:
        from grace.cost.showback_live import live_usage

        with store.read() as s:
            usages = live_usage(s, state_dir, now, 0.0, lambda _node: 0.0, ended_after=self.watermark)
            ended = {str(j.id): j.ended_at for j in s.scalars(
                select(Job).where(Job.ended_at.is_not(None),
                                  Job.ended_at >= (self.watermark or 0.0)))}
        out = Showback(dict(self.ended.allocated), dict(self.ended.useful))
        for u in usages:
            if u.job in self.counted:
                continue
            lost = u.failure_gpu_hours + u.data_sync_gpu_hours + u.checkpoint_gpu_hours
            useful = max(0.0, u.allocated_gpu_hours - lost)
            for into in (out, self.ended) if ended.get(u.job) is not None else (out,):
                into.allocated[u.tenant] = into.allocated.get(u.tenant, 0.0) + u.allocated_gpu_hours
                into.useful[u.tenant] = into.useful.get(u.tenant, 0.0) + useful
            if ended.get(u.job) is not None:
                self.counted.add(u.job)
        self.watermark = now - self.MARGIN_S
        return out


def _runbook(given: RunbookSpec | Path | None) -> RunbookSpec:
    """The runbook given (loaded already, or a file), else the shipped defaults."""
    return given if isinstance(given, RunbookSpec) else load_runbook(given)


def _alert_engine(runbook: RunbookSpec) -> Any:
    from grace.observe.alerts import AlertEngine

    return AlertEngine(runbook)


def host_name() -> str:
    return socket.gethostname()
