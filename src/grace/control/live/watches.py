"""Watches over running attempts: heartbeats that stopped, stragglers, planned evictions.

Each finds attempts to end and records why (``ending``); none waits for an
attempt to exit. The straggler watch keeps heartbeat windows in memory, but
only as a cache of the runtime's heartbeat files: after a restart the next
windows are cut from the same files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from grace.control.live.context import LiveContext
from grace.control.live.ending import EndRequests
from grace.control.live.files import last_heartbeat
from grace.control.live.mirror import StoreMirror
from grace.control.live.observe import attempt_of
from grace.control.snapshot import build_state
from grace.control.store import exclusions
from grace.control.store import repository as repo
from grace.control.store.models import Attempt, EndCause, JobState
from grace.control.stragglers import StragglerWatch
from grace.core.health import SignalKind
from grace.core.jobs import JobCompileError
from grace.core.scheduler import decide
from grace.core.stragglers import Straggler

log = logging.getLogger("grace.reconciler")


@dataclass(frozen=True)
class LiveAttempt:
    key: tuple[int, int]  # (job id, attempt number)
    started_at: float
    nodes: tuple[str, ...]
    ending: bool  # an end was requested already


def live_attempts(mirror: StoreMirror, now: float) -> list[LiveAttempt]:
    """The attempts of running jobs, from the mirror (refreshed once per cycle)."""
    return [LiveAttempt((a.job_id, a.number), a.started_at or now, a.nodes,
                        a.end_cause is not None)
            for a in mirror.live_attempts() if mirror.jobs[a.job_id].state == JobState.RUNNING]


class Watches:
    def __init__(self, ctx: LiveContext, ends: EndRequests, stragglers: StragglerWatch) -> None:
        self.ctx = ctx
        self.ends = ends
        self.stragglers = stragglers
        # each live attempt's directory, made once (at thousands of attempts, building the
        # paths every cycle cost more than reading the files)
        self._dirs: dict[tuple[int, int], Path] = {}

    def _dir(self, key: tuple[int, int]) -> Path:
        path = self._dirs.get(key)
        if path is None:
            path = self._dirs[key] = self.ctx.dirs.attempt(*key)
        return path

    def cycle(self, now: float) -> None:
        with self.ctx.store.read() as s:
            self.ctx.mirror.refresh(s)
            live = live_attempts(self.ctx.mirror, now)
            evictions = repo.evictions(s)
        if len(self._dirs) > 2 * len(live):
            keep = {a.key for a in live}
            self._dirs = {k: v for k, v in self._dirs.items() if k in keep}
        hung = self._hung(live, now)
        moves = self._stragglers(live, now)
        with self.ends.transaction() as s:
            for key, detail in hung:
                self.ends.request(_attempt(s, key), EndCause.HANG, now, None, detail,
                                  self.ctx.settings.fail_grace_s)
            for key, found in moves:
                self._move_off(s, key, found, now)
            for node, reason in evictions.items():
                for a in live:
                    if node in a.nodes and not a.ending:
                        self.ends.request(_attempt(s, a.key), EndCause.DRAIN, now, node,
                                          f"planned drain of {node}: {reason}",
                                          self.ctx.settings.move_grace_s)
                repo.require_node(s, node).evict_reason = None

    def _hung(self, live: list[LiveAttempt], now: float) -> list[tuple[tuple[int, int], str]]:
        """A job that heartbeats (it uses grace.runtime) and then stops has hung."""
        timeout = self.ctx.settings.heartbeat_timeout_s
        out = []
        for a in live:
            if a.ending or now - a.started_at < timeout:
                continue
            last = last_heartbeat(self._dir(a.key))
            if last is not None and now - last > timeout:
                out.append((a.key, f"no heartbeat for {now - last:.0f}s (timeout "
                                   f"{timeout:.0f}s): hung"))
        return out

    def _stragglers(self, live: list[LiveAttempt],
                    now: float) -> list[tuple[tuple[int, int], Straggler]]:
        """Heartbeat windows of every running gang go to core's straggler rule."""
        for key in self.stragglers.tracked() - {a.key for a in live}:
            self.stragglers.forget(key)
        out = []
        for a in live:
            if a.ending:
                continue
            for found in self.stragglers.observe(a.key, self._dir(a.key), a.nodes,
                                                 a.started_at, now):
                out.append((a.key, found))
                break  # one move per attempt: the next attempt is judged afresh
        return out

    def _move_off(self, s: Session, key: tuple[int, int], found: Straggler, now: float) -> None:
        """MoveJobOff, live: the node is reported to the health table (a straggler signal),
        and the job moved off it from a SIGTERM checkpoint if it can run elsewhere."""
        decision = found.decision()
        repo.add_signal(s, found.node, SignalKind.STRAGGLER.value, now, None,
                        f"job {key[0]}: {found.slowdown:.0%} slower than the gang median for "
                        f"{found.windows} windows")
        attempt = _attempt(s, key)
        job = attempt.job
        try:
            pj = self.ctx.compiler.compile(job.id, job.restarts, job.spec_json, job.submitted_at,
                                           [*exclusions.active_names(job, now), found.node])
        except JobCompileError:
            pj = None
        # could it run without the node on this cluster with nothing else on it?
        if pj is None or not decide(build_state(self.ctx.topo, self.ctx.policy, {}, [], [pj],
                                                set()), now).starts:
            log.warning("job %s: %s; not moved: no placement without %s", key[0],
                        decision.reason, found.node)
            return
        self.ends.request(attempt, EndCause.STRAGGLER, now, found.node, decision.reason,
                          self.ctx.settings.move_grace_s)


def _attempt(s: Session, key: tuple[int, int]) -> Attempt:
    return attempt_of(repo.require_job(s, key[0]), key[1])


__all__ = ["LiveAttempt", "Watches", "live_attempts"]
