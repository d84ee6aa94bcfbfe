"""What the scheduler is told about a job's length: runtime estimates as users give them.

A scheduler never knows how long a job will run; it knows what the submitter
declared. Slurm asks for a time limit (``--time``), uses it as the runtime
estimate for backfill and ends the job when it runs out (``TIMEOUT``). The
public traces record how long jobs ran, not what their users asked for, so the
twin needs a model of the asking. Three are offered (``EstimateModel``):

- ``exact``: the true duration, and after a requeue the exact remaining work.
  An oracle no live system has; kept to measure how much perfect estimates
  would be worth (and for the old figures).
- ``none``: no estimate at all (backfill cannot reserve; spot is never chosen).
- ``user`` (the default): a requested time limit per job, taken from the trace
  where it has one (``limit=COL`` of the generic CSV loader, e.g. sacct's
  ``Timelimit``), otherwise drawn from :class:`UserLimits`. The limit is the
  scheduler's estimate and, unless ``enforce_limits`` is off, the job's
  runtime limit: a job that outruns it ends ``timeout``. A requeued job
  (failure, preemption) keeps its limit for its next attempt, as in Slurm.

The user model (calibration and caveats in ``docs/twin.md``) follows what
Mu'alem & Feitelson (IEEE TPDS 2001) and Tsafrir, Etsion & Feitelson (JSSPP
2005; IEEE TPDS 2007) found in production logs: users overestimate, often
grossly (accuracy, run time over estimate, spread roughly evenly over (0, 1]);
a large share keep the queue's default limit; requested limits are a handful of
round values; and some users ask for too little and are killed at the limit.

Only this module's ``UserLimits.draw`` reads a job's true duration to
make a limit: it stands for the user, who knows roughly how long their job
runs. Nothing downstream of the draw sees the duration (tests/sim/test_no_lookahead.py).
"""

from __future__ import annotations

import bisect
import math
import zlib
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from grace.sim.traces.model import TraceJob

MINUTE = 60.0
HOUR = 3600.0
DAY = 86_400.0
WEEK = 7 * DAY

#: The round values users ask for (Slurm ``--time`` as people type it); beyond the last,
#: whole weeks.
ROUND_LIMITS_S: tuple[float, ...] = (
    15 * MINUTE, 30 * MINUTE, HOUR, 2 * HOUR, 4 * HOUR, 8 * HOUR, 12 * HOUR,
    DAY, 2 * DAY, 3 * DAY, WEEK, 2 * WEEK,
)


class EstimateModel(StrEnum):
    """Where a job's runtime estimate (and limit) comes from in a replay."""

    EXACT = "exact"
    NONE = "none"
    USER = "user"


def parse_estimate_model(text: str | EstimateModel) -> EstimateModel:
    """``"user"`` → ``EstimateModel.USER``; a ValueError naming the choices otherwise."""
    if isinstance(text, EstimateModel):
        return text
    try:
        return EstimateModel(str(text).strip().lower())
    except ValueError:
        raise ValueError(f"unknown estimates model {text!r}; choose one of "
                         f"{', '.join(m.value for m in EstimateModel)}") from None


def round_up(seconds: float) -> float:
    """The smallest round limit at or above ``seconds`` (whole weeks past the ladder)."""
    i = bisect.bisect_left(ROUND_LIMITS_S, seconds)
    if i < len(ROUND_LIMITS_S):
        return ROUND_LIMITS_S[i]
    return math.ceil(seconds / WEEK) * WEEK


def round_down(seconds: float) -> float | None:
    """The largest round limit at or below ``seconds``; None under the smallest."""
    if seconds >= ROUND_LIMITS_S[-1]:
        return math.floor(seconds / WEEK) * WEEK
    i = bisect.bisect_right(ROUND_LIMITS_S, seconds)
    return ROUND_LIMITS_S[i - 1] if i else None


@dataclass(frozen=True, slots=True)
class UserLimits:
    """How users pick a time limit; every figure is a stated assumption (docs/twin.md).

    Per job, one uniform draw picks the kind of user, a second the value:

    - with probability ``keep_default_share`` (if the job fits in it) the user asks
      nothing and keeps the queue's default, ``default_s``;
    - with probability ``under_share`` the user asks too little: the round value at or
      below ``duration x U(0.5, 1)``; the job times out (a job too short for any round
      value below it cannot, and is treated as the next case);
    - otherwise the user overestimates: accuracy (duration / request) uniform on
      ``[min_accuracy, 1]`` (Mu'alem & Feitelson: accuracy spread roughly evenly), the
      request rounded up to a round value. The median factor before rounding is
      ``2 / (1 + min_accuracy)`` (1.9 by default); rounding up adds to it.
    """

    default_s: float = DAY
    keep_default_share: float = 0.20
    under_share: float = 0.05
    min_accuracy: float = 0.05

    def __post_init__(self) -> None:
        for name in ("keep_default_share", "under_share"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"UserLimits.{name} must be a share in [0, 1], not {v}")
        if self.keep_default_share + self.under_share > 1.0:
            raise ValueError("UserLimits: keep_default_share + under_share must be at most 1")
        if not 0.0 < self.min_accuracy <= 1.0:
            raise ValueError(f"UserLimits.min_accuracy must be in (0, 1], not {self.min_accuracy}")
        if self.default_s <= 0:
            raise ValueError(f"UserLimits.default_s must be positive, not {self.default_s}")

    def draw(self, duration_s: float, seed: int, job_key: str) -> float:
        """The limit this job's user asks for; the same for the same seed and job, whatever
        else is in the trace (the generator is keyed by both, not drawn in trace order)."""
        rng = np.random.default_rng([seed, zlib.crc32(job_key.encode())])
        kind, value = rng.random(2)
        if kind < self.keep_default_share and duration_s <= self.default_s:
            return self.default_s
        if kind >= 1.0 - self.under_share:
            short = round_down(duration_s * (0.5 + 0.5 * value))
            if short is not None and short < duration_s:
                return short
        accuracy = self.min_accuracy + (1.0 - self.min_accuracy) * value
        return round_up(duration_s / accuracy)


USER_LIMITS = UserLimits()


@dataclass(frozen=True, slots=True)
class Declared:
    """What the scheduler is told about one job: its estimate and its enforced limit."""

    estimate_s: float | None
    limit_s: float | None
    from_trace: bool = False  # the limit is the trace's, not drawn


def declare(model: EstimateModel, tj: TraceJob, seed: int, enforce_limits: bool = True,
            user: UserLimits = USER_LIMITS) -> Declared:
    """The estimate and limit of ``tj`` under ``model`` (see the module docstring).

    A trace limit of ``math.inf`` (Slurm ``UNLIMITED``) means the user declared no bound:
    no estimate, no limit."""
    if model is EstimateModel.EXACT:
        return Declared(tj.duration_s, None)
    if model is EstimateModel.NONE:
        return Declared(None, None)
    from_trace = tj.limit_s is not None
    limit = tj.limit_s if tj.limit_s is not None else user.draw(tj.duration_s, seed, tj.job_id)
    if math.isinf(limit):
        return Declared(None, None, from_trace)
    return Declared(limit, limit if enforce_limits else None, from_trace)


def model_label(model: EstimateModel, from_trace: int, jobs: int) -> str:
    """The summary's ``estimates`` value: the model, and for ``user`` where limits came
    from: ``user`` (all drawn), ``user:trace`` (all the trace's), ``user:trace+model``."""
    if model is not EstimateModel.USER or from_trace == 0:
        return model.value
    return "user:trace" if from_trace == jobs else "user:trace+model"
