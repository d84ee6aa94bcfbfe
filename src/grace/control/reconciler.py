"""The live driver of ``core``: observe, record, snapshot, decide, apply, persist.

One ``cycle`` does, in this order:

1. observe: ask the backend what its attempts did; record each ended attempt
   and run the restart policy on failures, each job in its own transaction;
2. cancellations requested through the API;
3. snapshot: the store's running and waiting jobs and drained nodes become a
   ``SchedulerState``;
4. ``decide(state, now)`` with wall time;
5. apply: stops and preemptions through the backend; each start is first
   persisted (attempt "starting", job "running") and committed, then launched,
   then its handle recorded. A crash between those steps is safe: on restart
   ``recover`` adopts attempts whose processes live and requeues the rest, and
   the backend's attempt directories are keyed by (job, attempt), so nothing
   runs twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grace.backends.base import AttemptStatus, Backend, LaunchSpec, NodeAssignment, Observation
from grace.control.bursting import LiveBursting
from grace.control.node_sync import sync_node_states
from grace.control.snapshot import JobCompiler, build_state, nodes_to_placement, placement_to_nodes
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import AttemptState, JobEventKind, JobState
from grace.control.stragglers import StragglerWatch
from grace.core.checkpoint import choose_interval
from grace.core.health import Action, HealthTable, Signal, SignalKind
from grace.core.jobs import JobCompileError, JobId, PendingJob
from grace.core.policies import QueuePolicy
from grace.core.quotas import TenantQuota
from grace.core.restart import FailedAttempt, FailureKind, RestartPolicy, RestartVerdict, on_failure
from grace.core.scheduler import decide
from grace.core.stragglers import Straggler
from grace.core.topology import Topology

log = logging.getLogger("grace.reconciler")

IN_SERVICE = {"healthy", "degraded", "returned"}


@dataclass(frozen=True)
class _LiveAttempt:
    key: tuple[int, int]  # (job id, attempt number)
    started_at: float
    nodes: tuple[str, ...]


@dataclass
class CycleReport:
    started: list[int] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    pending: int = 0
    running: int = 0
    seconds: float = 0.0


class Reconciler:
    """Owns nothing but caches: every decision is read from and written to the store."""

    def __init__(self, store: Store, backend: Backend, topo: Topology, policy: QueuePolicy,
                 state_dir: Path, clock: Callable[[], float] = time.time,
                 restart_policy: RestartPolicy | None = None,
                 checkpoint_s: float = 30.0, restart_s: float = 60.0,
                 heartbeat_timeout_s: float = 30.0, health_table: HealthTable | None = None,
                 stragglers: StragglerWatch | None = None, move_grace_s: float = 60.0,
                 defer_writes: bool = False) -> None:
        self.store = store
        self.backend = backend
        self.topo = topo
        self.policy = policy
        self.state_dir = state_dir
        self.clock = clock
        self.restart_policy = restart_policy or RestartPolicy()
        self.compiler = JobCompiler(topo)
        self.checkpoint_s = checkpoint_s
        self.restart_s = restart_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.health_table = health_table or HealthTable.default()
        self._inbox: list[Signal] = []  # health signals posted to the API
        self._inbox_lock = threading.Lock()
        # attempts we are ending because they failed (hang, bad node): (kind, node, detail)
        self._failing: dict[tuple[int, int], tuple[str, str | None, str]] = {}
        self.stragglers = stragglers or StragglerWatch()
        self.move_grace_s = move_grace_s  # time a moved job gets to checkpoint and exit
        # attempts we are ending to move their job off a node: (node, why, cause), cause
        # "straggler" or "drain"; the job is requeued without the node, budget untouched
        self._moving: dict[tuple[int, int], tuple[str, str, str]] = {}
        self._evictions: list[tuple[str, str]] = []  # planned drains: (node, reason)
        missing = {"launch", "cancel", "poll", "adopt"} - set(backend.capabilities)
        if missing:
            raise ValueError(f"backend {backend.name!r} cannot {sorted(missing)}; Grace needs them")
        if not defer_writes:  # a standby defers them until it leads (recover registers them)
            self._ensure_nodes()

    # ----------------------------------------------------------------- start-up
    _nodes_synced = False

    def _ensure_nodes(self) -> None:
        """Register the cluster's nodes in the store, once, before the first write of a cycle."""
        if not self._nodes_synced:
            self._sync_nodes()
            self._nodes_synced = True

    def _sync_nodes(self) -> None:
        with self.store.transaction() as s:
            for n in self.topo.nodes:
                repo.upsert_node(s, n.name, n.gpus, n.gpu_model)

    def recover(self) -> list[int]:
        """After a restart (or on taking the lead): register the cluster's nodes, adopt live
        attempts, requeue jobs whose processes died. Writes nothing before it is called, so
        a standby control plane can hold a Reconciler without touching the store."""
        self._ensure_nodes()
        now = self.clock()
        requeued: list[int] = []
        with self.store.transaction() as s:
            attempts = [(a.job_id, a.number, a.handle or "") for a in repo.running_attempts(s)]
        # a crash between launch and saving the handle: the backend kept one of its own
        recorded = getattr(self.backend, "recorded_handles", dict)()
        attempts = [(j, n, h or recorded.get((j, n), "")) for j, n, h in attempts]
        for job_id, number, handle in attempts:
            try:  # no handle: it died before the launch; a bad one cannot be re-attached either
                alive = bool(handle) and self.backend.adopt(job_id, number, handle)
            except ValueError as e:
                log.warning("job %s attempt %s cannot be adopted (%s): lost", job_id, number, e)
                alive = False
            with self.store.transaction() as s:
                job = repo.get_job(s, job_id)
                attempt = _attempt(job, number)
                if alive:
                    repo.add_event(s, job_id, JobEventKind.ADOPTED, now, {"attempt": number})
                    continue
                repo.end_attempt(s, attempt, AttemptState.LOST, now, None, "lost",
                                 None, "processes gone after a control-plane restart")
                repo.set_job_state(s, job, JobState.PENDING, now, "requeued: its processes "
                                   "died with the control plane", JobEventKind.REQUEUED,
                                   {"attempt": number})
                requeued.append(job_id)
        return requeued

    # ----------------------------------------------------------------- the cycle
    def cycle(self) -> CycleReport:
        t0 = time.perf_counter()
        self._ensure_nodes()
        report = CycleReport()
        now = self.clock()
        for obs in self.backend.poll():
            self._observe(obs, now, report)
        self._health_signals(now)
        sync_node_states(self.store, self.backend, now)  # Slurm's own node states, both ways
        live = self._live_attempts(now)
        self._check_heartbeats(now, live)
        self._check_stragglers(now, live)
        self._planned_evictions(live)
        self._cancellations(now)
        state, pending_jobs, reasons = self._snapshot(now)
        self._burst(state, reasons, now)
        result = decide(state, now)
        for stop in result.stops:
            self._stop(int(stop.job_id), now, "timeout: passed its runtime_limit",
                       JobEventKind.TIMEOUT)
        for p in result.preemptions:
            self._preempt(int(p.job_id), now, f"preempted ({p.reason}) for job {p.for_job}")
        for start in result.starts:
            self._start(pending_jobs[start.job_id], start.placement, now, report)
        self._record_reasons(result, pending_jobs, reasons)
        report.pending = len(state.pending) - len(result.starts)
        report.running = len(state.running) + len(result.starts)
        report.seconds = time.perf_counter() - t0
        return report

    #: cloud bursting (grace.control.bursting.LiveBursting), when the operator attached one
    bursting: LiveBursting | None = None

    def _burst(self, state, reasons: dict[int, str | None], now: float) -> None:
        """Rented nodes: the provider's news, unprovisioned nodes out of the snapshot,
        routing, idle release and new requests, before ``decide`` sees the snapshot."""
        if self.bursting is not None:
            self.bursting.cycle(self, state, reasons, now)

    def _snapshot(self, now: float) -> tuple:
        # a read transaction: on SQLite a write one would hold the lock that every
        # submission needs for the whole snapshot; the rare writes come after it
        failed: list[tuple[int, str]] = []  # jobs that can no longer run on this cluster
        with self.store.read() as s:
            quotas = {t.name: TenantQuota(
                guaranteed_gpus=t.guaranteed_gpus if t.guaranteed_gpus is not None else float("inf"),
                borrow_limit_gpus=t.borrow_limit_gpus if t.borrow_limit_gpus is not None
                else float("inf"),
                weight=t.weight, preemptions_per_hour=t.preemptions_per_hour)
                for t in repo.tenants(s)}
            node_rows = repo.nodes(s)
            unusable = {n.name for n in node_rows if str(n.state) not in IN_SERVICE}
            # every live attempt holds its GPUs, even one whose job was just preempted or
            # stopped and whose processes are still ending; such a job waits for them
            running, ending = [], []
            holding: set[int] = set()
            busy_nodes: set[str] = set()
            unplaceable: list[tuple[int, int]] = []  # live attempts of jobs that failed to compile
            for a in repo.running_attempts(s):
                if a.job_id in holding:
                    continue
                pj = self._compile(a.job, failed)
                if pj is None:
                    unplaceable.append((a.job_id, a.number))
                    continue
                holding.add(a.job_id)
                busy_nodes.update(e["node"] for e in a.placement_json)
                (running if a.job.state == JobState.RUNNING else ending).append(
                    (pj, nodes_to_placement(self.topo, a.placement_json), a.started_at or now))
            pending: dict[JobId, PendingJob] = {}
            reasons: dict[int, str | None] = {}  # as stored: _record_reasons writes only changes
            for job in repo.jobs_in_states(s, [JobState.PENDING]):
                if job.id in holding:
                    continue
                pj = self._compile(job, failed)
                if pj is not None:
                    pending[JobId(job.id)] = pj
                    reasons[job.id] = job.reason
            drained = [n.name for n in node_rows
                       if str(n.state) == "draining" and n.name not in busy_nodes]
        if failed or drained:
            with self.store.transaction() as s:
                for job_id, why in failed:
                    job = repo.get_job(s, job_id)
                    if job.state in (JobState.PENDING, JobState.RUNNING):
                        repo.set_job_state(s, job, JobState.FAILED, now, why,
                                           JobEventKind.FAILED, {"reason": why})
                for n in repo.nodes(s) if drained else ():
                    if n.name in drained and str(n.state) == "draining":  # not resumed since
                        # keep why it was drained: that is what an operator needs to see
                        repo.set_node_state(s, n.name, "drained",
                                            f"{n.reason} (its last job left)" if n.reason
                                            else "its last job left", n.actor or "grace", now)
        for job_id, number in unplaceable:
            self.backend.cancel(job_id, number)
        state = build_state(self.topo, self.policy, quotas, running, list(pending.values()),
                            unusable, ending)
        return state, pending, reasons

    def _compile(self, job, failed: list[tuple[int, str]]) -> PendingJob | None:
        """The job as core sees it; None, and the job noted in ``failed``, if it can no
        longer run on this cluster."""
        try:
            return self.compiler.compile(job.id, job.restarts, job.spec_json, job.submitted_at,
                                         job.exclude_nodes or [])
        except JobCompileError as e:
            if job.state in (JobState.PENDING, JobState.RUNNING):
                failed.append((job.id, str(e)))
            return None

    def _record_reasons(self, result, pending_jobs: dict[JobId, PendingJob],
                        known: dict[int, str | None]) -> None:
        """Why each job still waits, written where it changed: a steady cycle writes nothing."""
        started = {s.job_id for s in result.starts}
        changed: dict[int, str] = {}
        for jid, pj in pending_jobs.items():
            reason = None if jid in started else result.reason_for(pj)
            if reason is not None and str(reason) != known.get(int(jid)):
                changed[int(jid)] = str(reason)
        if not changed:
            return
        with self.store.transaction() as s:
            # one query for them all, not one per job (held: the session only keeps weak refs)
            loaded = repo.jobs_in_states(s, [JobState.PENDING]) if len(changed) > 20 else []
            for jid, reason in changed.items():
                repo.set_pending_reason(s, jid, reason)
            del loaded

    # ----------------------------------------------------------------- health
    def signal(self, sig: Signal) -> None:
        """A health signal (from the API, an exporter, ``grace inject``); handled next cycle."""
        with self._inbox_lock:
            self._inbox.append(sig)

    def _health_signals(self, now: float) -> None:
        """Each signal goes through the health table: drain the node, restart its jobs, or both."""
        with self._inbox_lock:
            inbox, self._inbox = self._inbox, []
        for sig in inbox:
            rule = self.health_table.rule_for(sig)
            what = f"{sig.key}: {rule.reason}" + (f" ({sig.detail})" if sig.detail else "")
            drain = rule.action in (Action.DRAIN_AND_DIAGNOSE, Action.DRAIN_AND_RESET)
            restart = drain or rule.action is Action.RESTART_JOB
            with self.store.transaction() as s:
                node = next((n for n in repo.nodes(s) if n.name == sig.node), None)
                if node is None:
                    continue
                if drain and str(node.state) in IN_SERVICE:
                    repo.set_node_state(s, sig.node, "draining", what, "grace", now)
                elif rule.action is Action.MARK_DEGRADED and str(node.state) == "healthy":
                    repo.set_node_state(s, sig.node, "degraded", what, "grace", now)
                victims = [(a.job_id, a.number) for a in repo.running_attempts(s)
                           if a.job.state == JobState.RUNNING
                           and any(e["node"] == sig.node for e in a.placement_json)]
            if restart:
                for key in victims:
                    self._fail_attempt(key, "node" if drain else "application",
                                       sig.node if drain else None, what)

    def _live_attempts(self, now: float) -> list[_LiveAttempt]:
        """The attempts of running jobs, read once per cycle for the checks that watch them."""
        with self.store.read() as s:
            return [_LiveAttempt((a.job_id, a.number), a.started_at or now,
                                 tuple(e["node"] for e in a.placement_json))
                    for a in repo.running_attempts(s) if a.job.state == JobState.RUNNING]

    def _attempt_dir(self, key: tuple[int, int]) -> Path:
        return self.state_dir / "jobs" / str(key[0]) / f"attempt-{key[1]}"

    def _check_heartbeats(self, now: float, live: list[_LiveAttempt]) -> None:
        """A job that heartbeats (it uses grace.runtime) and then stops has hung."""
        for a in live:
            if a.key in self._failing or now - a.started_at < self.heartbeat_timeout_s:
                continue
            last = _last_heartbeat(self._attempt_dir(a.key))
            if last is not None and now - last > self.heartbeat_timeout_s:
                self._fail_attempt(a.key, "hang", None,
                                   f"no heartbeat for {now - last:.0f}s (timeout "
                                   f"{self.heartbeat_timeout_s:.0f}s): hung")

    def _check_stragglers(self, now: float, live: list[_LiveAttempt]) -> None:
        """Heartbeat windows of every running gang go to core's straggler rule; a
        confirmed straggler's node is marked per the health table and its job moved."""
        for key in self.stragglers.tracked() - {a.key for a in live}:
            self.stragglers.forget(key)
        for a in live:
            if a.key in self._failing or a.key in self._moving:
                continue
            for found in self.stragglers.observe(a.key, self._attempt_dir(a.key), a.nodes,
                                                 a.started_at, now):
                self._move_off(a.key, found, now)
                break  # one move per attempt: the next attempt is judged afresh

    def _move_off(self, key: tuple[int, int], found: Straggler, now: float) -> None:
        """MoveJobOff, live: SIGTERM (the runtime checkpoints and exits 143), then requeue
        without the node. Kept where it is when the cluster has no other place for it."""
        decision = found.decision()
        self.signal(Signal(found.node, SignalKind.STRAGGLER, now,
                           detail=f"job {key[0]}: {found.slowdown:.0%} slower than the gang "
                                  f"median for {found.windows} windows"))
        with self.store.read() as s:
            job = repo.get_job(s, key[0])
            exclude = [*(job.exclude_nodes or []), found.node]
            try:
                pj = self.compiler.compile(job.id, job.restarts, job.spec_json,
                                           job.submitted_at, exclude)
            except JobCompileError:
                pj = None
        # could it run without the node on this cluster with nothing else on it?
        if pj is None or not decide(build_state(self.topo, self.policy, {}, [], [pj], set()),
                                    now).starts:
            log.warning("job %s: %s; not moved: no placement without %s", key[0],
                        decision.reason, found.node)
            return
        self._move(key, found.node, decision.reason, "straggler")

    def evict(self, node: str, reason: str) -> None:
        """A planned drain: move every job off ``node`` from a fresh checkpoint (next cycle)."""
        with self._inbox_lock:
            self._evictions.append((node, reason))

    def _planned_evictions(self, live: list[_LiveAttempt]) -> None:
        with self._inbox_lock:
            evictions, self._evictions = self._evictions, []
        for node, reason in evictions:
            for a in live:
                if node in a.nodes and a.key not in self._failing and a.key not in self._moving:
                    self._move(a.key, node, f"planned drain of {node}: {reason}", "drain")

    def _move(self, key: tuple[int, int], node: str, why: str, cause: str) -> None:
        """SIGTERM: the runtime checkpoints at the next step and exits 143; ``_moved``
        requeues the job without ``node`` once the backend reports the attempt ended."""
        log.warning("job %s attempt %s: %s", key[0], key[1], why)
        self._moving[key] = (node, why, cause)
        self.backend.cancel(key[0], key[1], grace_s=self.move_grace_s)

    def _fail_attempt(self, key: tuple[int, int], kind: str, node: str | None,
                      detail: str) -> None:
        if key in self._failing:
            return
        log.warning("job %s attempt %s: %s", key[0], key[1], detail)
        self._failing[key] = (kind, node, detail)
        self.backend.cancel(key[0], key[1], grace_s=5.0)

    # ----------------------------------------------------------------- apply
    def _start(self, pj: PendingJob, placement, now: float, report: CycleReport) -> None:
        gang = placement_to_nodes(self.topo, placement)
        with self.store.transaction() as s:
            job = repo.get_job(s, int(pj.id))
            if job.state != JobState.PENDING or job.cancel_requested:
                return
            number = job.attempts_count + 1
            workdir = self.state_dir / "jobs" / str(job.id)
            resumed = _latest_checkpoint(workdir)
            attempt = repo.start_attempt(s, job, [g.to_json() for g in gang],
                                         self.backend.name, None, now, resumed_from=resumed)
            spec = dict(job.spec_json)
            command = tuple(spec.get("command") or ())
            env = dict(spec.get("env") or {})
            interval = choose_interval(max(pj.gpu_equivalents, 1.0), self.checkpoint_s,
                                       self.restart_s)
            env.setdefault("GRACE_CHECKPOINT_INTERVAL_S", f"{interval.interval_s:.0f}")
            launch = LaunchSpec(job_id=job.id, attempt=attempt.number, name=job.name,
                                command=command, nodes=tuple(NodeAssignment(g.node, g.gpus)
                                                             for g in gang),
                                workdir=workdir, env=env, time_limit_s=pj.limit_s)
        try:
            handle = self.backend.launch(launch)
        except Exception as e:
            log.exception("launch of job %s failed", pj.id)
            with self.store.transaction() as s:
                job = repo.get_job(s, int(pj.id))
                a = _attempt(job, number)
                repo.end_attempt(s, a, AttemptState.FAILED, now, None, "launch", None, str(e))
                repo.set_job_state(s, job, JobState.PENDING, now, f"launch failed: {e}",
                                   JobEventKind.REQUEUED, {"attempt": number})
            return
        with self.store.transaction() as s:
            job = repo.get_job(s, int(pj.id))
            repo.set_attempt_running(s, _attempt(job, number), handle)
        report.started.append(int(pj.id))

    def _observe(self, obs: Observation, now: float, report: CycleReport) -> None:
        if obs.status is AttemptStatus.RUNNING:
            return
        moving = self._moving.pop((obs.job_id, obs.attempt), None)
        if moving is not None and obs.status is not AttemptStatus.SUCCEEDED:
            self._moved(obs, *moving, now=now, report=report)
            return
        self.stragglers.forget((obs.job_id, obs.attempt))
        cause = self._failing.pop((obs.job_id, obs.attempt), None)
        if cause is not None and obs.status is AttemptStatus.CANCELLED:
            # we ended it because it hung or its node went bad: that is a failure
            kind, node, detail = cause
            obs = Observation(obs.job_id, obs.attempt,
                              AttemptStatus.LOST if kind == "node" else AttemptStatus.FAILED,
                              obs.exit_code, detail, node)
        with self.store.transaction() as s:
            job = repo.get_job(s, obs.job_id)
            attempt = _attempt(job, obs.attempt)
            if attempt.state not in (AttemptState.STARTING, AttemptState.RUNNING):
                return  # already recorded
            state = {AttemptStatus.SUCCEEDED: AttemptState.SUCCEEDED,
                     AttemptStatus.CANCELLED: AttemptState.CANCELLED,
                     AttemptStatus.LOST: AttemptState.LOST}.get(obs.status, AttemptState.FAILED)
            kind = _failure_kind(obs)
            repo.end_attempt(s, attempt, state, now, obs.exit_code,
                             kind if state in (AttemptState.FAILED, AttemptState.LOST) else None,
                             obs.failed_node, obs.detail)
            report.ended.append(job.id)
            if job.state != JobState.RUNNING:
                return
            if obs.status is AttemptStatus.SUCCEEDED:
                repo.set_job_state(s, job, JobState.COMPLETED, now, "completed",
                                   JobEventKind.COMPLETED, {"attempt": obs.attempt})
                return
            if obs.status is AttemptStatus.CANCELLED:
                if job.cancel_requested:
                    repo.set_job_state(s, job, JobState.CANCELLED, now, "cancelled",
                                       JobEventKind.CANCELLED, {"attempt": obs.attempt})
                    return
                # ended by nobody we know of (e.g. before a control-plane restart): requeue
                kind = FailureKind.NODE.value
            if obs.exit_code == DIVERGED_EXIT_CODE:
                repo.set_job_state(s, job, JobState.DIVERGED, now, obs.detail or "diverged",
                                   JobEventKind.DIVERGED, {"attempt": obs.attempt})
                return
            self._failed(s, job, attempt, obs, kind, now, report)

    def _moved(self, obs: Observation, node: str, why: str, cause: str, now: float,
               report: CycleReport) -> None:
        """The moved attempt ended (after its checkpoint): requeue the job without the node.

        Not a failure of the job: its restart budget is untouched, as for a preemption.
        """
        self.stragglers.forget((obs.job_id, obs.attempt))
        with self.store.transaction() as s:
            job = repo.get_job(s, obs.job_id)
            attempt = _attempt(job, obs.attempt)
            if attempt.state not in (AttemptState.STARTING, AttemptState.RUNNING):
                return
            repo.end_attempt(s, attempt, AttemptState.CANCELLED, now, obs.exit_code,
                             cause, node, why)
            report.ended.append(job.id)
            if job.state != JobState.RUNNING:
                return
            if job.cancel_requested:
                repo.set_job_state(s, job, JobState.CANCELLED, now, "cancelled",
                                   JobEventKind.CANCELLED, {"attempt": obs.attempt})
                return
            repo.requeue_moved(s, job, now, why, node, {"attempt": obs.attempt, "node": node,
                                                        "exit_code": obs.exit_code})
            report.requeued.append(job.id)

    def _failed(self, s, job, attempt, obs: Observation, kind: str, now: float,
                report: CycleReport) -> None:
        pj = self.compiler.compile(job.id, job.restarts, job.spec_json, job.submitted_at,
                                   job.exclude_nodes or [])
        node = self.topo.by_name.get(obs.failed_node) if obs.failed_node else None
        ran = now - (attempt.started_at or now)
        decision = on_failure(pj, FailedAttempt(
            FailureKind(kind), node, ran, first_attempt=attempt.number == 1,
            progressed=_latest_checkpoint(self.state_dir / "jobs" / str(job.id)) !=
            attempt.resumed_from, restarts_without_progress=job.stalled_restarts or 0),
            self.restart_policy)
        detail = {"attempt": obs.attempt, "exit_code": obs.exit_code, "node": obs.failed_node,
                  "cause": kind, "detail": obs.detail[-500:]}
        if decision.verdict is not RestartVerdict.RESTART:
            repo.set_job_state(s, job, JobState.FAILED, now, decision.reason,
                               JobEventKind.FAILED, detail)
            return
        progressed = decision.job is not None and attempt.resumed_from != _latest_checkpoint(
            self.state_dir / "jobs" / str(job.id))
        repo.note_failure_and_requeue(
            s, job, now, decision.reason, detail,
            exclude_node=obs.failed_node if kind in ("node", "hang") else None,
            stalled_restarts=0 if progressed else (job.stalled_restarts or 0) + (kind != "node"))
        report.requeued.append(job.id)

    def _cancellations(self, now: float) -> None:
        with self.store.read() as s:
            wanted = [(j.id, j.state, j.attempts_count) for j in repo.cancel_requested(s)]
        for job_id, state, attempts in wanted:
            if state == JobState.PENDING:
                with self.store.transaction() as s:
                    repo.set_job_state(s, repo.get_job(s, job_id), JobState.CANCELLED, now,
                                       "cancelled before it started", JobEventKind.CANCELLED, {})
            elif state == JobState.RUNNING:
                self.backend.cancel(job_id, attempts)

    # A stopped or preempted job's attempt holds its GPUs until the backend reports it ended,
    # so decide may name it again meanwhile: the job moves once, the cancel is repeated.
    def _stop(self, job_id: int, now: float, reason: str, kind: JobEventKind) -> None:
        with self.store.transaction() as s:
            job = repo.get_job(s, job_id)
            attempts = job.attempts_count
            if job.state == JobState.RUNNING:
                repo.set_job_state(s, job, JobState.FAILED, now, reason, kind, {})
        self.backend.cancel(job_id, attempts)

    def _preempt(self, job_id: int, now: float, reason: str) -> None:
        with self.store.transaction() as s:
            job = repo.get_job(s, job_id)
            attempts = job.attempts_count
            if job.state == JobState.RUNNING:
                repo.set_job_state(s, job, JobState.PENDING, now, reason,
                                   JobEventKind.PREEMPTED, {})
        self.backend.cancel(job_id, attempts)


#: exit code the runtime's divergence guard uses (grace.runtime), so a diverged run is not retried
DIVERGED_EXIT_CODE = 86


def _failure_kind(obs: Observation) -> str:
    if obs.status is AttemptStatus.LOST:
        return FailureKind.NODE.value
    if "heartbeat" in (obs.detail or ""):
        return FailureKind.HANG.value
    if obs.exit_code is not None and (obs.exit_code < 0 or obs.exit_code in (137, 143)):
        return FailureKind.KILLED.value  # a signal, not the job's code: retried, node kept
    return FailureKind.APPLICATION.value


def _last_heartbeat(attempt_dir: Path) -> float | None:
    """When any rank of the attempt last wrote a heartbeat (the runtime's jsonl files)."""
    newest = None
    for f in attempt_dir.glob("heartbeats-rank*.jsonl"):
        try:
            m = f.stat().st_mtime
        except OSError:
            continue
        newest = m if newest is None else max(newest, m)
    return newest


def _attempt(job, number: int):
    for a in job.attempts:
        if a.number == number:
            return a
    raise KeyError(f"job {job.id} has no attempt {number}")


def _latest_checkpoint(workdir: Path) -> str | None:
    """The newest committed checkpoint directory of a job, if any (the runtime writes them)."""
    root = workdir / "checkpoints"
    if not root.is_dir():
        return None
    done = sorted(p for p in root.iterdir() if p.is_dir() and (p / "MANIFEST.json").exists())
    return str(done[-1]) if done else None
