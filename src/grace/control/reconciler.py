"""The live driver of ``core``: one cycle observes, takes in health, watches, decides, applies.

The rooms are in ``grace.control.live`` (one role each); this class only runs
them in order. One ``cycle`` does:

1. observe: ask the backend what its attempts did; record each ended attempt and
   run core's restart policy on failures, each job in its own transaction;
2. health: signals, drains, diagnostics and returns through ``core.health``;
3. Slurm's own node states, both ways (``node_sync``);
4. watches: heartbeats that stopped, stragglers, planned evictions; sweeps' early
   stopping (``live.early_stop``);
5. cancellations requested through the API;
6. view: the store's rows as a ``SchedulerState`` (read only), then bursting;
7. ``decide(state, now)`` with wall time;
8. apply: stops, preemptions, starts (each persisted before it is launched).

Nothing lives only in this process's memory: health signals, end requests
and evictions are rows; the preemption history is the store's events; the
packer's request mix and the compiled-job cache are caches rebuilt from the
store. A cycle never waits for processes: ends are requested and the backend's
own worker completes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from grace.backends.base import Backend
from grace.control.admission import Admission
from grace.control.bursting import LiveBursting, LiveEffect, PreemptJob
from grace.control.diagnostics import Diagnostics
from grace.control.kms import KeyEncryptionService
from grace.control.live.apply import Applier
from grace.control.live.context import LiveContext, LiveSettings, job_dirs
from grace.control.live.early_stop import EarlyStopWatch
from grace.control.live.ending import EndRequests
from grace.control.live.health import HealthIntake
from grace.control.live.observe import CycleReport, Observer
from grace.control.live.recovery import recover, settle
from grace.control.live.view import ViewBuilder
from grace.control.live.watches import Watches
from grace.control.node_health import HealthConfig
from grace.control.node_sync import sync_node_states
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import EndCause, JobEventKind, JobState
from grace.control.stragglers import StragglerWatch
from grace.core.bursting import RouteJob, SetNodesUsable, requeue_with_pools
from grace.core.health import HealthTable, Signal
from grace.core.policies import QueuePolicy
from grace.core.restart import RestartPolicy
from grace.core.scheduler import decide
from grace.core.state import SchedulerState
from grace.core.topology import Topology
from grace.runtime.divergence import DIVERGED_EXIT_CODE

log = logging.getLogger("grace.reconciler")


class Reconciler:
    """Runs the live roles in order; owns nothing but caches (the store is the truth)."""

    def __init__(self, store: Store, backend: Backend, topo: Topology, policy: QueuePolicy,
                 state_dir: Path, clock: Callable[[], float] = time.time,
                 restart_policy: RestartPolicy | None = None,
                 checkpoint_s: float = 30.0, restart_s: float = 60.0,
                 heartbeat_timeout_s: float = 30.0, health_table: HealthTable | None = None,
                 stragglers: StragglerWatch | None = None, move_grace_s: float = 60.0,
                 defer_writes: bool = False, health: HealthConfig | None = None,
                 diagnostics: Diagnostics | None = None, launch_budget: int = 3,
                 api_url: str | None = None, admission: Admission | None = None,
                 kms: KeyEncryptionService | None = None,
                 fs_write_gbps: float | None = None) -> None:
        missing = {"launch", "cancel", "poll", "adopt"} - set(backend.capabilities)
        if missing:
            raise ValueError(f"backend {backend.name!r} cannot {sorted(missing)}; Grace needs them")
        settings = LiveSettings(checkpoint_s=checkpoint_s, restart_s=restart_s,
                                heartbeat_timeout_s=heartbeat_timeout_s, move_grace_s=move_grace_s,
                                launch_budget=launch_budget, api_url=api_url,
                                restart_policy=restart_policy or RestartPolicy(),
                                fs_write_gbps=fs_write_gbps)
        self.ctx = LiveContext(store, backend, topo, policy, job_dirs(store, state_dir), settings,
                               clock, admission, kms=kms)
        self.store, self.backend, self.topo, self.policy = store, backend, topo, policy
        self.state_dir = state_dir
        self.clock = clock
        config = health or HealthConfig(table=health_table or HealthTable.default())
        self.stragglers = stragglers or StragglerWatch()
        self.ends = EndRequests(self.ctx)
        self.health = HealthIntake(self.ctx, self.ends, config, diagnostics)
        self.observer = Observer(self.ctx, self.stragglers)
        self.watches = Watches(self.ctx, self.ends, self.stragglers)
        self.early_stop = EarlyStopWatch(self.ctx, self.ends)  # sweeps' weak trials
        self.views = ViewBuilder(self.ctx, self.ctx.mirror)
        self.applier = Applier(self.ctx, self.ends)
        if not defer_writes:  # a standby defers them until it leads (recover registers them)
            self._ensure_nodes()

    @property
    def stragglers(self) -> StragglerWatch:
        return self._stragglers

    @stragglers.setter
    def stragglers(self, watch: StragglerWatch) -> None:
        """Replaceable (tests tune the windows); every role that reads it sees the new one."""
        self._stragglers = watch
        for role in ("observer", "watches"):
            if hasattr(self, role):
                getattr(self, role).stragglers = watch

    # ----------------------------------------------------------------- start-up
    _nodes_synced = False

    def _ensure_nodes(self) -> None:
        """Register the cluster's nodes in the store, once, before the first write."""
        if not self._nodes_synced:
            with self.store.transaction() as s:
                for n in self.topo.nodes:
                    repo.upsert_node(s, n.name, n.gpus, n.gpu_model)
            self._nodes_synced = True

    def recover(self) -> list[int]:
        """After a restart (or on taking the lead): register the cluster's nodes, adopt live
        attempts, end and requeue the rest. Writes nothing before it is called, so a standby
        control plane can hold a Reconciler without touching the store."""
        self._ensure_nodes()
        return recover(self.ctx, self.ends)

    # ----------------------------------------------------------------- inputs
    def signal(self, sig: Signal) -> None:
        """A health signal (from the API, an exporter, ``grace inject``); handled next cycle."""
        self._ensure_nodes()
        self.health.signal(sig)

    def evict(self, node: str, reason: str) -> None:
        """A planned drain: move every job off ``node`` from a fresh checkpoint (next cycle)."""
        with self.store.transaction() as s:
            repo.require_node(s, node).evict_reason = reason

    # ----------------------------------------------------------------- the cycle
    def cycle(self) -> CycleReport:
        t0 = time.perf_counter()
        commits0 = self.store.commit_seconds
        self._ensure_nodes()
        report = CycleReport()
        phases = report.phases
        now = self.clock()
        lap = _Laps(phases)
        for job_id, number in sorted(self.ctx.unreaped):
            if settle(self.ctx, self.ends, job_id, number, now):
                report.requeued.append(job_id)
        for obs in self.backend.poll():
            self.observer.observe(obs, now, report)
        lap("observe")
        self.health.cycle(now)
        # Slurm's own node states, both ways
        sync_node_states(self.store, self.backend, now, self.health.config)
        lap("health")
        self.watches.cycle(now)
        self.early_stop.cycle(now)
        self.applier.cancellations(now)
        if self.ends.sent:  # a backend that ended them at once: record it before deciding,
            self.ends.sent = 0  # as the twin fails a node's jobs in the instant it fails
            for obs in self.backend.poll():
                self.observer.observe(obs, now, report)
        lap("watches")
        view = self.views.build(now)
        lap("load")
        self.applier.unrunnable(view, now)
        self._burst(view.state, view.reasons, now)
        lap("apply")
        result = decide(view.state, now)
        lap("decide")
        self.views.decided(result)
        self.applier.apply(result, view, now, report)
        lap("apply")
        phases["commit"] = self.store.commit_seconds - commits0
        report.pending = len(view.state.pending) - len(result.starts)
        report.running = len(view.state.running) + len(result.starts)
        report.seconds = time.perf_counter() - t0
        if self.on_cycle is not None:
            self.on_cycle(report.seconds)
        return report

    #: told each cycle's seconds (``grace up``: the ``grace_reconcile_cycle_seconds`` histogram)
    on_cycle: Callable[[float], None] | None = None

    #: cloud bursting (grace.control.bursting.LiveBursting), when the operator attached one
    bursting: LiveBursting | None = None

    def _burst(self, state: SchedulerState, reasons: dict[int, str | None], now: float) -> None:
        """Rented nodes: the provider's news, unprovisioned nodes out of the snapshot,
        routing, idle release and new requests, before ``decide`` sees the snapshot.
        The adapter gets data, never this reconciler; what it asks for comes back as
        effects, applied here between its two steps (``burst`` reads the routed jobs)."""
        cloud = self.bursting
        if cloud is None:
            return
        self.views.incremental = False  # it edits the snapshot: a fresh one every cycle
        unrouted = cloud.unrouted(state)
        specs: dict[int, dict] = {}
        if unrouted:
            with self.store.read() as s:
                specs = {int(j): repo.require_job(s, int(j)).spec_json for j in unrouted}
        self._apply_cloud_effects(state, cloud.observe(state, now, specs), now)
        self._apply_cloud_effects(state, cloud.burst(state, reasons, now), now)

    def _apply_cloud_effects(self, state: SchedulerState, effects: Sequence[LiveEffect],
                             now: float) -> None:
        """Carry out ``LiveBursting``'s effects in order: the snapshot's nodes and queues,
        and preemptions through the store and backend, which are this reconciler's."""
        for e in effects:
            if isinstance(e, SetNodesUsable):
                for n in e.nodes:
                    state.set_node_usable(n, e.usable)
            elif isinstance(e, RouteJob):
                requeue_with_pools(state, e.job_id, e.pools)
            elif isinstance(e, PreemptJob):
                self._preempt(e.job_id, now, e.reason)
            else:
                raise TypeError(f"not a bursting effect: {e!r}")

    def _preempt(self, job_id: int, now: float, reason: str) -> None:
        with self.ends.transaction() as s:
            self.applier._end(s, job_id, now, EndCause.PREEMPT, JobState.PENDING, reason,
                              JobEventKind.PREEMPTED)


class _Laps:
    """Adds the seconds since the last lap to a phase of the cycle's report."""

    def __init__(self, phases: dict[str, float]) -> None:
        self.phases = phases
        self.t = time.perf_counter()

    def __call__(self, phase: str) -> None:
        t = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + t - self.t
        self.t = t


__all__ = ["DIVERGED_EXIT_CODE", "CycleReport", "Reconciler"]
