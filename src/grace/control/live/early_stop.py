"""Early stopping, live: each cycle, apply a sweep's stopping rule to its running trials.

For every sweep with ``early_stopping`` and a trial running, the watch reads
all its trials' metric histories (``control.sweeps``; finished trials count
for the medians and rungs), asks ``core.early_stop.decide`` which running
trials to end, and ends them as a user's cancel would (SIGTERM: the runtime
checkpoints and exits), but recorded as ``completed`` with the reason
``early-stopped: <the rule's reason>`` and the end cause ``early-stop``: a
stopped trial is the rule working, not a failure, and its GPUs go to the
sweep's next trial at once.
"""

from __future__ import annotations

import logging

from sqlalchemy import select

from grace.control.live.context import LiveContext
from grace.control.live.ending import EndRequests
from grace.control.store import repository as repo
from grace.control.store.models import EndCause, Job, JobEventKind, JobState
from grace.control.sweeps import EARLY_STOPPED, as_trials, rows
from grace.core.early_stop import decide

log = logging.getLogger("grace.reconciler")


class EarlyStopWatch:
    def __init__(self, ctx: LiveContext, ends: EndRequests) -> None:
        self.ctx = ctx
        self.ends = ends

    def cycle(self, now: float) -> list[int]:
        """End the trials the rules say to stop; returns their job ids."""
        with self.ctx.store.read() as s:
            sweeps = set(s.scalars(select(Job.array_id).where(
                Job.state == JobState.RUNNING, Job.array_kind == "sweep")))
            verdicts: list[tuple[int, str]] = []
            for sweep_id in sorted(i for i in sweeps if i is not None):
                try:
                    info, trial_rows = rows(s, self.ctx.dirs, sweep_id, now)
                    if info.early_stopping is None:
                        continue
                    stops = decide(as_trials(trial_rows), info.metric.mode,
                                   info.early_stopping.config())
                except KeyError:
                    continue
                except Exception:  # one sweep's files must never stop the cycle for all
                    log.exception("sweep %s: early stopping skipped this cycle", sweep_id)
                    continue
                verdicts += [(t.trial, t.reason) for t in stops if isinstance(t.trial, int)]
        if not verdicts:
            return []
        stopped: list[int] = []
        with self.ends.transaction() as s:
            for job_id, reason in verdicts:
                job = repo.require_job(s, job_id)
                live = repo.live_attempt(s, job)
                if job.state != JobState.RUNNING or live is None:
                    continue  # it ended meanwhile
                why = f"{EARLY_STOPPED}: {reason}"
                repo.set_job_state(s, job, JobState.COMPLETED, now, why,
                                   JobEventKind.EARLY_STOPPED, {"attempt": live.number,
                                                                "reason": reason})
                self.ends.request(live, EndCause.EARLY_STOP, now, None, why)
                stopped.append(job_id)
        for job_id in stopped:
            log.info("job %s: %s", job_id, EARLY_STOPPED)
        return stopped


__all__ = ["EarlyStopWatch"]
