"""Health intake: signals, drains, diagnostics and returns through ``core.health``.

Every cycle, in one transaction: the monitor is loaded from the store
(``control.node_health``), given each signal the API or a watch recorded (in
the order they arrived), told which draining nodes have no job left, and
given the diagnostics that finished; then everything it changed is written
back. What it decided for jobs (restart the jobs of a node) becomes end
requests in the same transaction; a breaker trip is logged as an error and
kept as a ``breaker_events`` row that ``grace nodes`` and ``GET /nodes`` show
until a person resets it.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from grace.control.diagnostics import Diagnostics, TimedDiagnostics
from grace.control.live.context import LiveContext
from grace.control.live.ending import EndRequests
from grace.control.node_health import HealthConfig, HealthEffects, load_monitor, save_monitor
from grace.control.store import repository as repo
from grace.control.store.models import EndCause, JobState
from grace.core.health import HealthMonitor, NodeState, Signal, SignalKind

log = logging.getLogger("grace.health")


class HealthIntake:
    def __init__(self, ctx: LiveContext, ends: EndRequests, config: HealthConfig,
                 diagnostics: Diagnostics | None = None) -> None:
        self.ctx = ctx
        self.ends = ends
        self.config = config
        self.diagnostics: Diagnostics = diagnostics or TimedDiagnostics()

    def signal(self, sig: Signal, actor: str = "grace") -> None:
        """Record a signal for the next cycle (kept in the store until it is handled)."""
        with self.ctx.store.transaction() as s:
            repo.add_signal(s, sig.node, sig.kind.value, sig.at, sig.code, sig.detail, actor)

    def cycle(self, now: float) -> HealthEffects:
        effects = HealthEffects()
        with self.ctx.store.read() as s:
            if not repo.health_work_waits(s):
                return effects  # no signal, no node draining or diagnosing: nothing moves
            self.ctx.mirror.refresh(s)
        with self.ends.transaction() as s:
            monitor = load_monitor(s, self.config, now)
            was_open = monitor.breaker_open
            for row in repo.unhandled_signals(s):
                row.handled_at = now
                if row.node not in self.ctx.topo.by_name:
                    continue
                effects.take(monitor.observe(Signal(row.node, SignalKind(row.kind), row.at,
                                                    row.code, row.detail)))
            busy = self.ctx.mirror.busy_nodes()
            for name in sorted(self.ctx.topo.by_name):
                if monitor.state(name) is NodeState.DRAINING and name not in busy:
                    effects.take(monitor.jobs_left(name, now))
            self._diagnose(s, monitor, effects, now)
            trip = effects.breaker[0].message if effects.breaker else ""
            save_monitor(s, monitor, was_open, now, trip)
            self._restart_jobs(s, effects, now)
        for trip_ in effects.breaker:
            log.error("%s", trip_.message)
        for lemon in effects.lemons:
            log.warning("node %s is a lemon: %d failures in %.0f days; repair it, then clear "
                        "its flag", lemon.node, lemon.failures, lemon.window_s / 86400)
        for d in effects.drains:
            try:  # Slurm must stop placing there too; node_sync retries a refusal
                self.ctx.backend.drain(d.node, d.reason)
            except Exception:
                log.exception("could not drain %s in %s", d.node, self.ctx.backend.name)
        return effects

    def _diagnose(self, s: Session, monitor: HealthMonitor, effects: HealthEffects,
                  now: float) -> None:
        """Start the runs the monitor asked for; hand it the results that came in."""
        rows = {r.name: r for r in repo.nodes(s)}
        for d in effects.diagnostics:
            row = rows[d.node]
            row.diagnostic_level = d.level
            row.diagnostic_due = self.diagnostics.start(d.node, d.level, d.reset_first, now)
        effects.diagnostics = []
        for name, row in rows.items():
            level = row.diagnostic_level
            if level is None or monitor.state(name) is not NodeState.DIAGNOSING:
                continue
            if not self.diagnostics.running(name, level):  # began under an earlier process
                row.diagnostic_due = self.diagnostics.start(name, level, bool(row.reset_pending),
                                                            now)
                continue
            passed = self.diagnostics.result(name, level, now)
            if passed is None:
                continue
            row.diagnostic_level = row.diagnostic_due = None
            more = HealthEffects()
            more.take(monitor.diagnostic_result(name, passed, now, level))
            for d in more.diagnostics:
                row.diagnostic_level = d.level
                row.diagnostic_due = self.diagnostics.start(name, d.level, d.reset_first, now)
            effects.returned += more.returned

    def _restart_jobs(self, s: Session, effects: HealthEffects, now: float) -> None:
        """RestartJobs: every running job on the node ends; a failure of the node or of the
        job, as the monitor said."""
        for r in effects.restarts:
            cause = EndCause.NODE if r.node_at_fault else EndCause.APPLICATION
            for a in repo.running_attempts(s):
                if a.job.state == JobState.RUNNING and any(
                        e["node"] == r.node for e in a.placement_json):
                    self.ends.request(a, cause, now, r.node if r.node_at_fault else None,
                                      r.reason, self.ctx.settings.fail_grace_s)


__all__ = ["HealthIntake"]
