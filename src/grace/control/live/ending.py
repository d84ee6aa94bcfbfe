"""Ends the control plane asks for: recorded first, then requested, never waited for.

A hang, a bad node, a move, a cancel, a stop or a preemption each end an
attempt on purpose. The request (``Attempt.end_cause`` and its node, detail and
grace) is committed before the backend is told, so a control plane that
restarts, or a standby that takes over, knows why an attempt it finds ended
was ended, and sends the cancel again if the processes still run. The
backend's ``cancel`` returns at once (SIGTERM now, SIGKILL from its own worker
after the grace), so a gang that takes a minute to checkpoint and exit does not
hold up the cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session

from grace.control.live.context import LiveContext
from grace.control.store import repository as repo
from grace.control.store.models import Attempt, EndCause

log = logging.getLogger("grace.reconciler")


class EndRequests:
    """Write end requests in a transaction; send them once it has committed."""

    def __init__(self, ctx: LiveContext) -> None:
        self.ctx = ctx
        self._outbox: list[tuple[int, int, float]] = []
        self.sent = 0  # cancels sent since the reconciler last looked

    def request(self, attempt: Attempt, cause: EndCause, now: float, node: str | None = None,
                detail: str = "", grace_s: float | None = None) -> bool:
        """Record the end in the caller's transaction and queue the cancel for ``send``."""
        grace = self.ctx.settings.cancel_grace_s if grace_s is None else grace_s
        if not repo.request_end(attempt, cause, now, node, detail, grace):
            return False
        log.warning("job %s attempt %s: ending (%s)%s", attempt.job_id, attempt.number,
                    cause.value, f": {detail}" if detail else "")
        self._outbox.append((attempt.job_id, attempt.number, grace))
        return True

    def again(self, attempt: Attempt) -> None:
        """Cancel once more an attempt whose end was requested earlier (after a restart)."""
        grace = attempt.end_grace_s
        self._outbox.append((attempt.job_id, attempt.number,
                             self.ctx.settings.cancel_grace_s if grace is None else grace))

    def send(self) -> None:
        """Tell the backend, after the requests are committed (call outside a transaction)."""
        outbox, self._outbox = self._outbox, []
        self.sent += len(outbox)
        for job_id, number, grace in outbox:
            try:
                self.ctx.backend.cancel(job_id, number, grace_s=grace)
            except Exception:  # the next cycle's recovery of end requests retries it
                log.exception("cancel of job %s attempt %s failed", job_id, number)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A store transaction whose end requests are sent once it has committed."""
        try:
            with self.ctx.store.transaction() as s:
                yield s
        except BaseException:
            self.discard()
            raise
        self.send()

    def discard(self) -> None:
        """The transaction rolled back: nothing it requested happened."""
        self._outbox.clear()


__all__ = ["EndRequests"]
