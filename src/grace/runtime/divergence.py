"""Divergence guard: stop a run whose loss went NaN, infinite, or far above its recent average.

A diverged run does not heal by retrying, so the job ends with status
``diverged`` (exit code :data:`DIVERGED_EXIT_CODE`, which the reconciler does
not retry) and keeps its last good checkpoint for a person to look at.

The rules, on the loss every rank agrees on (the mean over ranks):

- NaN or infinite: diverged at once.
- Spike: a loss above ``spike_factor`` times the mean of the last ``window``
  accepted losses, once at least ``min_history`` are known. ``patience``
  consecutive spikes diverge the run; one normal loss in between resets the
  count. Spiking losses never enter the average, so a spike cannot raise the
  bar for the next one.

While a spike is pending (``suspect``) the runtime takes no checkpoint and
commits none, so the checkpoint it keeps predates the trouble.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

#: Exit code of a diverged run (``grace.control.reconciler.DIVERGED_EXIT_CODE``).
DIVERGED_EXIT_CODE = 86


class Diverged(SystemExit):
    """Raised by ``Runtime.step_done`` to end the process with exit code 86."""

    def __init__(self, reason: str, step: int) -> None:
        super().__init__(DIVERGED_EXIT_CODE)
        self.reason = reason
        self.step = step

    def __str__(self) -> str:
        return f"diverged at step {self.step}: {self.reason}"


@dataclass(frozen=True)
class Verdict:
    diverged: bool
    suspect: bool  # a spike is pending: do not checkpoint
    reason: str = ""


OK = Verdict(False, False)


class DivergenceGuard:
    def __init__(
        self,
        spike_factor: float = 3.0,
        window: int = 50,
        min_history: int = 10,
        patience: int = 2,
    ) -> None:
        if spike_factor <= 1.0 or window < 1 or min_history < 1 or patience < 1:
            raise ValueError("need spike_factor > 1, window >= 1, min_history >= 1, patience >= 1")
        self.spike_factor = spike_factor
        self.min_history = min_history
        self.patience = patience
        self._history: deque[float] = deque(maxlen=window)
        self.streak = 0  # consecutive spikes so far

    @property
    def mean(self) -> float | None:
        return math.fsum(self._history) / len(self._history) if self._history else None

    @property
    def suspect(self) -> bool:
        return self.streak > 0

    def state_dict(self) -> dict[str, object]:
        return {"history": list(self._history), "streak": self.streak}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self._history.clear()
        history = state.get("history", [])
        if isinstance(history, list):
            self._history.extend(float(x) for x in history)
        self.streak = int(state.get("streak", 0))  # type: ignore[call-overload]

    def check(self, loss: float) -> Verdict:
        if not math.isfinite(loss):
            return Verdict(True, True, f"loss is {loss}")
        mean = self.mean
        if len(self._history) >= self.min_history and mean is not None and loss > self.spike_factor * mean:
            self.streak += 1
            reason = (
                f"loss {loss:.4g} is {loss / mean:.1f}x its recent average {mean:.4g} "
                f"({self.streak} step(s) in a row)"
            )
            return Verdict(self.streak >= self.patience, True, reason)
        self.streak = 0
        self._history.append(loss)
        return OK
