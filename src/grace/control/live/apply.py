"""Carry out ``decide``'s result: stops, preemptions, starts; and user cancellations.

Each start is first persisted (attempt "starting", job "running") and
committed, then launched, then its handle recorded. A crash between those steps
is safe: ``recovery`` adopts an attempt whose processes live and has the
backend end any it cannot adopt before the job may start again. A launch the
backend refuses counts against the job's launch budget; when it is spent the
job fails with a reason starting ``launch-error:`` and the backend's message.
With an admission file, a command it refuses at launch (a script edited since
submit) fails the job at once, with a reason starting ``admission:``.
Under a KMS each job's first launch makes its checkpoint data key and stores it
wrapped (``jobs.data_key``); every launch unwraps it into the attempt's env
(``GRACE_CHECKPOINT_KEY``, never stored or logged). One that does not unwrap
(the control plane has another key-encryption key) fails the job at once.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session

from grace.backends.base import LaunchSpec, LaunchSpecError, NodeAssignment, ReapError
from grace.control.admission import ADMISSION, launch_refusal
from grace.control.kms import KMSError, UnwrapError, launch_key, new_data_key
from grace.control.live.context import LiveContext
from grace.control.live.ending import EndRequests
from grace.control.live.files import latest_checkpoint
from grace.control.live.observe import CycleReport, attempt_of
from grace.control.live.view import CycleView
from grace.control.snapshot import placement_to_nodes
from grace.control.store import repository as repo
from grace.control.store import tokens
from grace.control.store import workflow as flows
from grace.control.store.models import Attempt, AttemptState, EndCause, Job, JobEventKind, JobState
from grace.core.capacity import Placement
from grace.core.checkpoint import choose_interval
from grace.core.checkpoint_stagger import (
    CheckpointLoad,
    CheckpointPhasing,
    harmonic_interval,
    job_load,
    phase_for,
)
from grace.core.decisions import DecideResult
from grace.core.jobs import PendingJob
from grace.runtime.config import CHECKPOINT_KEY_ENV, INTERVAL_ENV, PHASE_ENV

log = logging.getLogger("grace.reconciler")

#: ``reason`` prefix of a job whose launch budget is spent (the interface promises it).
LAUNCH_ERROR = "launch-error"


def _params_b(spec: dict[str, Any]) -> float | None:
    """The declared model's size (billions of parameters), which sizes its checkpoint."""
    model = spec.get("model") or {}
    value = model.get("params_b") if isinstance(model, dict) else None
    return float(value) if isinstance(value, int | float) else None


class Applier:
    def __init__(self, ctx: LiveContext, ends: EndRequests) -> None:
        self.ctx = ctx
        self.ends = ends

    def unrunnable(self, view: CycleView, now: float) -> None:
        """Jobs that can no longer run on this cluster fail; their live attempts end. Jobs
        whose dependency can never be met are cancelled (Slurm's kill_invalid_depend), or
        failed for a preflight's, with the gate's reason naming the parent."""
        if not (view.failed or view.unplaceable or view.never):
            return
        with self.ends.transaction() as s:
            for n in view.never:
                job = repo.require_job(s, n.job_id)
                if job.state is JobState.PENDING:
                    to, kind = ((JobState.FAILED, JobEventKind.FAILED) if n.fail
                                else (JobState.CANCELLED, JobEventKind.CANCELLED))
                    repo.set_job_state(s, job, to, now, n.reason, kind,
                                       {"parent": n.parent, "dependency": str(n.kind)})
            for job_id, why in view.failed:
                job = repo.require_job(s, job_id)
                if job.state in (JobState.PENDING, JobState.RUNNING):
                    repo.set_job_state(s, job, JobState.FAILED, now, why,
                                       JobEventKind.FAILED, {"reason": why})
            for job_id, number in view.unplaceable:
                self.ends.request(attempt_of(repo.require_job(s, job_id), number),
                                  EndCause.UNPLACEABLE, now, None, "cannot run on this cluster")

    def cancellations(self, now: float) -> None:
        """Cancels and requeues users asked for through the API (flags on the job)."""
        if self.ctx.mirror.loaded and not self.ctx.mirror.asked_to_end():
            return  # the mirror was refreshed this cycle (watches): no flag is set
        with self.ends.transaction() as s:
            for job in flows.requeue_requested(s):
                job.requeue_requested = False
                live = repo.live_attempt(s, job)
                if job.state is JobState.RUNNING and not job.cancel_requested:
                    # as a preemption: pending now, the attempt holds its GPUs until it ends
                    # from its SIGTERM checkpoint; no failure, no restart counted
                    repo.set_job_state(s, job, JobState.PENDING, now, "requeued by a user",
                                       JobEventKind.REQUEUED, {"requested": True})
                    if live is not None:
                        self.ends.request(live, EndCause.REQUEUE, now, None, "requeued")
            for job in repo.cancel_requested(s):
                if job.state == JobState.PENDING:
                    repo.set_job_state(s, job, JobState.CANCELLED, now,
                                       "cancelled before it started", JobEventKind.CANCELLED, {})
                elif job.state == JobState.RUNNING:
                    live = repo.live_attempt(s, job)
                    if live is not None:
                        self.ends.request(live, EndCause.CANCEL, now, None, "cancelled")

    def apply(self, result: DecideResult, view: CycleView, now: float,
              report: CycleReport) -> None:
        if result.stops or result.preemptions:
            with self.ends.transaction() as s:
                for stop in result.stops:
                    self._end(s, int(stop.job_id), now, EndCause.STOP, JobState.FAILED,
                              "timeout: passed its runtime_limit", JobEventKind.TIMEOUT)
                for p in result.preemptions:
                    self._end(s, int(p.job_id), now, EndCause.PREEMPT, JobState.PENDING,
                              f"preempted ({p.reason}) for job {p.for_job}",
                              JobEventKind.PREEMPTED)
        for start in result.starts:
            self.start(view.pending[start.job_id], start.placement, now, report, start.borrowing)
        self.record_reasons(result, view)

    def _end(self, s, job_id: int, now: float, cause: EndCause, to: JobState, reason: str,
             kind: JobEventKind) -> None:
        """A stopped or preempted job moves now; its attempt holds its GPUs until the
        backend reports it ended (decide may name it again meanwhile: it moves once)."""
        job = repo.require_job(s, job_id)
        live = repo.live_attempt(s, job)
        if job.state == JobState.RUNNING:
            repo.set_job_state(s, job, to, now, reason, kind, {})
        if live is not None:
            self.ends.request(live, cause, now, None, reason)

    def start(self, pj: PendingJob, placement: Placement, now: float,
              report: CycleReport, borrowing: bool = False) -> None:
        gang = placement_to_nodes(self.ctx.topo, placement)
        dirs = self.ctx.dirs
        with self.ctx.store.transaction() as s:
            job = repo.require_job(s, int(pj.id))
            if job.state != JobState.PENDING or job.cancel_requested:
                return
            workdir = dirs.job(job.id)
            attempt = repo.start_attempt(s, job, [g.to_json() for g in gang], self.ctx.backend.name,
                                         None, now, resumed_from=latest_checkpoint(workdir))
            number = attempt.number
            attempt.borrowing = borrowing
            spec = dict(job.spec_json)
            admitted = job.admission  # what was vetted at submit (None: no admission then)
            env = dict(spec.get("env") or {})
            interval = choose_interval(max(pj.gpu_equivalents, 1.0), self.ctx.settings.checkpoint_s,
                                       self.ctx.settings.restart_s)
            if not self._checkpoint_phase(s, job, attempt, pj, env, interval.interval_s, now):
                env.setdefault("GRACE_CHECKPOINT_INTERVAL_S", f"{interval.interval_s:.0f}")
            env["GRACE_JOB_UID"] = dirs.uid(job.id)
            key_refusal = self._checkpoint_key(job, env)  # the env is a copy: the key is not stored
            # the attempt's own token: it may post its heartbeats and nothing else
            env["GRACE_TOKEN"] = tokens.job_token(s, job.id, number)
            if self.ctx.settings.api_url:
                env["GRACE_URL"] = self.ctx.settings.api_url
            launch = LaunchSpec(job_id=job.id, attempt=number, name=job.name,
                                command=tuple(spec.get("command") or ()),
                                nodes=tuple(NodeAssignment(g.node, g.gpus) for g in gang),
                                workdir=workdir, env=env, time_limit_s=pj.limit_s,
                                tenant=job.tenant, memory_gb=spec.get("memory_gb"))
        if key_refusal is not None:
            message, final = key_refusal
            log.error("job %s not launched: %s", pj.id, message)  # names key ids, never a key
            self._launch_failed(int(pj.id), number, message, now, final=final)
            return
        refusal = launch_refusal(self.ctx.admission, spec, admitted)
        if refusal is not None:  # the vetted bytes changed, or the rules refuse it: final
            log.error("job %s refused at launch: %s", pj.id, refusal)
            self._launch_failed(int(pj.id), number, refusal, now, final=True, prefix=ADMISSION)
            return
        try:
            handle = self.ctx.backend.launch(launch)
        except LaunchSpecError as e:  # can never launch: retrying cannot help
            log.error("job %s cannot be launched: %s", pj.id, e)
            self._launch_failed(int(pj.id), number, str(e), now, final=True)
            return
        except ReapError as e:  # an earlier attempt's processes still hold the GPUs
            log.error("job %s: not launched, an earlier attempt survives: %s", pj.id, e)
            self._launch_failed(int(pj.id), number, str(e), now, counts=False)
            return
        except Exception as e:
            log.exception("launch of job %s failed", pj.id)
            self._launch_failed(int(pj.id), number, str(e), now)
            return
        with self.ctx.store.transaction() as s:
            job = repo.require_job(s, int(pj.id))
            repo.set_attempt_running(s, attempt_of(job, number), handle)
        report.started.append(int(pj.id))

    def _checkpoint_phase(self, s: Session, job: Job, attempt: Attempt, pj: PendingJob,
                          env: dict[str, str], daly_s: float, now: float) -> bool:
        """Stagger the attempt's checkpoints against the running ones'; False: no phase.

        With a file-system write bandwidth (``settings.fs_write_gbps``, else the cluster
        spec's ``storage.write_gbps``) the attempt gets Daly's interval rounded to a
        harmonic one and the phase ``core.checkpoint_stagger.phase_for`` chooses with the
        running attempts' phases fixed (the twin calls the same function), both pushed
        (``GRACE_CHECKPOINT_INTERVAL_S``, ``GRACE_CHECKPOINT_PHASE_S``) and kept on the
        attempt so later starts see them. A job that sets either variable itself keeps
        its own schedule, unphased.
        """
        fs = self.ctx.settings.fs_write_gbps
        if fs is None and self.ctx.topo.storage is not None:
            fs = self.ctx.topo.storage.write_gbps
        if fs is None or INTERVAL_ENV in env or PHASE_ENV in env:
            return False
        write_s = self.ctx.settings.checkpoint_s
        if write_s <= 0:
            return False
        interval = harmonic_interval(daly_s)
        running: dict[int, tuple[CheckpointLoad, float]] = {}
        for a in repo.running_attempts(s):
            if (a.job_id != job.id and a.checkpoint_phase_s is not None
                    and a.checkpoint_interval_s):
                running[a.job_id] = (job_load(a.job_id, a.gpus, a.checkpoint_interval_s, write_s,
                                              _params_b(a.job.spec_json)),
                                     a.checkpoint_phase_s)
        load = job_load(job.id, max(pj.gpu_equivalents, 1.0), interval, write_s,
                        _params_b(job.spec_json))
        phase = phase_for(CheckpointPhasing.STAGGERED, load, now, running, fs)
        attempt.checkpoint_interval_s, attempt.checkpoint_phase_s = interval, phase
        env[INTERVAL_ENV] = f"{interval:.0f}"
        env[PHASE_ENV] = f"{phase:.3f}"
        return True

    def _checkpoint_key(self, job: Job, env: dict[str, str]) -> tuple[str, bool] | None:
        """Put the job's data key into the launch ``env``; (why not, final) if it cannot be.

        The first launch under a KMS makes the key and stores it wrapped
        (``job.data_key``, in the caller's transaction); every launch unwraps it.
        A key that does not unwrap (another KEK, another job's) never will: final.
        """
        kms = self.ctx.kms
        if kms is None:
            return None
        context = self.ctx.dirs.uid(job.id)
        try:
            if job.data_key is None:
                job.data_key = new_data_key(kms, context)
            env[CHECKPOINT_KEY_ENV] = launch_key(kms, job.data_key, context)
        except UnwrapError as e:
            return f"checkpoint key: the job's data key does not unwrap: {e}", True
        except KMSError as e:
            return f"checkpoint key: the KMS failed: {e}", False
        return None

    def _launch_failed(self, job_id: int, number: int, message: str, now: float,
                       final: bool = False, counts: bool = True,
                       prefix: str = LAUNCH_ERROR) -> None:
        """The backend refused the launch: retried until the budget is spent (at once when
        ``final``: the spec itself is unlaunchable), then failed. One that does not
        ``count`` (an earlier attempt still ending) is only requeued."""
        budget = self.ctx.settings.launch_budget
        with self.ctx.store.transaction() as s:
            job = repo.require_job(s, job_id)
            repo.end_attempt(s, attempt_of(job, number), AttemptState.FAILED, now, None,
                             "launch", None, message)
            job.launch_failures = (job.launch_failures or 0) + counts
            if final:
                job.launch_failures = max(job.launch_failures, budget)
            detail = {"attempt": number, "error": message[-500:],
                      "launch_failures": job.launch_failures, "budget": budget}
            repo.add_event(s, job_id, JobEventKind.LAUNCH_FAILED, now, detail)
            if job.launch_failures >= budget:
                why = ("it can never be launched: not retried" if final else
                       f"the backend refused {job.launch_failures} launches")
                repo.set_job_state(s, job, JobState.FAILED, now,
                                   f"{prefix}: {message} ({why})", JobEventKind.FAILED,
                                   detail)
            else:
                repo.set_job_state(s, job, JobState.PENDING, now,
                                   f"launch failed ({job.launch_failures} of {budget}): {message}",
                                   JobEventKind.REQUEUED, detail)

    def record_reasons(self, result: DecideResult, view: CycleView) -> None:
        """Why each job still waits, written where it changed: a steady cycle writes nothing."""
        changed: dict[int, str] = {j: why for j, why in view.gated.items()
                                   if why != view.reasons.get(j)}
        stored = view.reasons
        for jid, reason in result.waiting_reasons(view.pending.values()):
            if reason != stored.get(jid):  # a StrEnum equals its stored text
                changed[int(jid)] = str(reason)
        if not changed:
            return
        with self.ctx.store.transaction() as s:
            # one query for them all, not one per job (held: the session only keeps weak refs)
            loaded = repo.jobs_by_id(s, changed) if len(changed) > 20 else []
            for job_id, why in changed.items():
                repo.set_pending_reason(s, job_id, why)
            del loaded


__all__ = ["LAUNCH_ERROR", "Applier"]
