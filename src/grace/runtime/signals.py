"""SIGTERM from the backend (a planned drain, a preemption, a cancel): checkpoint, then exit.

The handler only raises a flag; the runtime acts on it at the next
``step_done``, where every rank agrees on it first (a signal reaches ranks at
different moments, and a checkpoint is a collective). Then each rank takes a
synchronous checkpoint of the step just finished, flushes its heartbeats and
ends with :data:`PREEMPTED_EXIT_CODE`.

Why 143 and not 0: 143 is what a process killed by SIGTERM reports (128 + 15),
so torchrun, the local backend and the reconciler treat the attempt as stopped
rather than completed, whatever sent the signal; a job that exited 0 after a
stray SIGTERM would otherwise be recorded as finished. The difference from a
plain kill is that a checkpoint of the last step is committed first and the
process ends without a traceback.

Repeated SIGTERMs are expected (the local backend signals every process of
an attempt and torchrun forwards its own) and change nothing. A rank stuck
where it never reaches ``step_done`` (a hung collective) is ended by the
sender's SIGKILL after its grace period, and its last committed checkpoint
stands.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

#: Exit code after a SIGTERM was honoured (checkpoint committed, or impossible).
PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM


class Preempted(SystemExit):
    """Raised by ``Runtime.step_done`` after the SIGTERM checkpoint; exit code 143."""

    def __init__(self, step: int, checkpointed: bool) -> None:
        super().__init__(PREEMPTED_EXIT_CODE)
        self.step = step
        self.checkpointed = checkpointed

    def __str__(self) -> str:
        done = "checkpointed" if self.checkpointed else "no checkpoint"
        return f"stopped by SIGTERM after step {self.step} ({done})"


class StopFlag:
    """Installs a SIGTERM handler that sets ``requested``; ``uninstall`` puts the old one back."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM,)) -> None:
        self.requested = False
        self.signum: int | None = None
        self._signals = signals
        self._previous: dict[int, Any] = {}

    def install(self) -> bool:
        """False (and nothing installed) off the main thread, where Python forbids handlers."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig in self._signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return True

    def uninstall(self) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            return
        self.requested = True  # no printing here: the handler may interrupt a write to stderr
        self.signum = signum
