"""Preflight mode: a short run that checks a job before it takes its full allocation.

A job spec's ``preflight: {gpus: 2, steps: 50}`` makes the control plane run
the same command first on the preflight's GPUs with ``GRACE_PREFLIGHT_STEPS=50``
in the environment. The runtime then owns the end of that run: after that many
steps it checks what a large run most often dies of in its first hour,

1. the data loads (the loop reached the step at all);
2. the loss is finite (the divergence guard ends a NaN/Inf run with exit 86,
   ``diverged``, before this check) and falls: the mean of the last quarter of
   the steps is below the mean of the first quarter, and the least-squares
   trend of the loss falls by more than two standard errors (a loss that only
   wobbles on noisy batches does not pass);
3. a checkpoint saves and resumes: one is taken (blocking), loaded back into
   the model, and the parameters compared with what was saved, bit for bit;

and exits 0 if all hold, else 87 with the reason on stderr and in the
attempt's ``preflight.json``. The job's own loop never needs to know: a
script that already uses ``grace.runtime`` gets preflight for free.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping, Sequence

#: Set by the control plane on a preflight job (``grace.spec.trial.PREFLIGHT_STEPS_ENV``, the
#: same name: a test holds them equal; the runtime does not import the spec package).
PREFLIGHT_STEPS_ENV = "GRACE_PREFLIGHT_STEPS"
#: Exit code of a preflight whose checks failed (86 is the divergence guard's).
PREFLIGHT_FAILED_EXIT_CODE = 87


class PreflightPassed(SystemExit):
    """Raised by ``Runtime.step_done`` at the last preflight step: exit code 0."""

    def __init__(self, step: int) -> None:
        super().__init__(0)
        self.step = step

    def __str__(self) -> str:
        return f"preflight passed at step {self.step}"


class PreflightFailed(SystemExit):
    """Raised when a preflight check fails: exit code 87, ``reason`` says which."""

    def __init__(self, reason: str, step: int) -> None:
        super().__init__(PREFLIGHT_FAILED_EXIT_CODE)
        self.reason = reason
        self.step = step

    def __str__(self) -> str:
        return f"preflight failed at step {self.step}: {self.reason}"


def steps_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """The preflight's step count, or None outside preflight mode."""
    raw = (os.environ if environ is None else environ).get(PREFLIGHT_STEPS_ENV, "").strip()
    if not raw:
        return None
    try:
        steps = int(raw)
    except ValueError:
        return None
    return steps if steps >= 1 else None


#: How steep a loss's fall must be, in standard errors of its least-squares slope: a loss
#: that only wobbles on noisy batches has |t| < 2 about 95% of the time.
_T_FALLS = 2.0


def _slope_t(values: Sequence[float]) -> float:
    """The t statistic of the least-squares slope of ``values`` against their index."""
    n = len(values)
    xs = range(n)
    mx, my = (n - 1) / 2, statistics.fmean(values)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, values, strict=True)) / sxx
    ssr = sum((y - my - slope * (x - mx)) ** 2 for x, y in zip(xs, values, strict=True))
    se = math.sqrt(ssr / max(n - 2, 1) / sxx)
    if se == 0:
        return -math.inf if slope < 0 else math.inf if slope > 0 else 0.0
    return slope / se


def loss_problem(losses: Sequence[float | None]) -> str | None:
    """Why the losses of a preflight do not pass (None: they do): each must be a finite
    number, the last quarter's mean below the first quarter's, the trend beyond noise."""
    if len(losses) < 4:
        return f"only {len(losses)} step(s) ran; a preflight needs at least 4 to compare"
    if any(v is None for v in losses):
        return "no loss reported: pass it to rt.step_done(loss=...)"
    values = [float(v) for v in losses if v is not None]
    if not all(math.isfinite(v) for v in values):
        return "the loss is not finite (NaN or Inf)"
    q = max(len(values) // 4, 1)
    first, last = statistics.fmean(values[:q]), statistics.fmean(values[-q:])
    t = _slope_t(values)
    if not (last < first and t < -_T_FALLS):
        return (f"the loss did not fall: mean {first:.4g} over the first {q} steps, "
                f"{last:.4g} over the last {q} (trend t = {t:.2g}; a fall needs "
                f"t < -{_T_FALLS:g}, beyond batch-to-batch noise)")
    return None


__all__ = ["PREFLIGHT_FAILED_EXIT_CODE", "PreflightFailed", "PreflightPassed", "loss_problem",
           "steps_from_env"]
