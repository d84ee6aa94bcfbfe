"""Early stopping of sweep trials: which running trials to end, from their metric histories.

A sweep runs many small trials whose metric (a validation loss, an accuracy) is
reported while they train. Most hyperparameter settings are visibly worse
early on, so letting every trial run to the end spends most of a sweep's
GPU-hours on settings nobody will use. Two published rules are implemented,
both over the same input (each trial's ``(step, value)`` history) so the
control plane and any replay make the same decision from the same data:

- **Median stopping rule** (Golovin et al., "Google Vizier: A Service for
  Black-Box Optimization", KDD 2017, section 3.2.2): stop trial ``t`` at step
  ``s`` if its best value so far is strictly worse than the median of the
  other trials' running averages up to ``s``. Only trials that have reached
  step ``s`` count (a trial that has not got there has no average "up to s"),
  and there must be at least ``min_trials`` of them. Trials run side by side
  at different speeds, so ``s`` is the latest step that ``t`` and
  ``min_trials`` others have all reached (not ``t``'s own latest step, which
  only the slowest trial's peers would ever have reached); ``t``'s best is
  taken over everything it reported, which can only make it harder to stop.
- **Successive halving**, in its asynchronous form (Jamieson & Talwalkar,
  "Non-stochastic Best Arm Identification and Hyperparameter Optimization",
  AISTATS 2016; Li et al., "A System for Massively Parallel Hyperparameter
  Tuning" (ASHA), MLSys 2020): rungs at ``grace_steps * eta**k`` steps; at each
  rung a trial keeps running only if its value there is in the top ``1/eta``
  of the trials that have reached that rung. Being stateless, the rule is
  applied again every time it is asked, so a trial that passed a rung early
  can still be stopped there when better trials arrive later (as in ASHA's
  promotion test, but with the rung's full population).

Two guarantees hold for both rules (and are property-tested): no trial is
stopped before it has reported a step ``>= grace_steps`` (early values are
noise: warm-up, a learning-rate schedule), and the trial holding the best
value seen so far is never stopped (whatever a rule's statistics say, ending
the incumbent could only lose the sweep's answer).

Pure: no clock, no I/O. The caller reads the histories and ends the trials.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from grace.spec.trial import Mode, Rule  # the closed sets a sweep file names

K = TypeVar("K", bound=Hashable)  # whatever names a trial: a job id, a string


@dataclass(frozen=True, slots=True)
class StopConfig:
    """The rule and its parameters (``spec.sweep.EarlyStopping`` builds one)."""

    rule: Rule = Rule.MEDIAN
    #: no trial is judged before it reports a step at least this large; also the first rung
    grace_steps: int = 10
    #: median rule: at least this many other trials must have reached the step
    min_trials: int = 3
    #: successive halving: keep the top 1/eta at each rung; rungs grow by eta
    eta: int = 3


@dataclass(frozen=True, slots=True)
class Trial:
    """One trial's reported metric, in step order or not, and whether it still runs."""

    points: Sequence[tuple[int, float]]
    running: bool = True


@dataclass(frozen=True, slots=True)
class StopTrial:
    """Decision for the driver: end this trial (not a failure); ``reason`` says why."""

    trial: Hashable
    reason: str


def _clean(points: Sequence[tuple[int, float]], mode: Mode) -> list[tuple[int, float]]:
    """Finite points in step order, negated under ``max`` so smaller is always better."""
    sign = 1.0 if mode is Mode.MIN else -1.0
    return sorted((int(s), sign * float(v)) for s, v in points if math.isfinite(v))


def _best_upto(points: list[tuple[int, float]], step: int) -> float | None:
    values = [v for s, v in points if s <= step]
    return min(values) if values else None


def _mean_upto(points: list[tuple[int, float]], step: int) -> float | None:
    values = [v for s, v in points if s <= step]
    return statistics.fmean(values) if values else None


def _shown(value: float, mode: Mode) -> str:
    return f"{value if mode is Mode.MIN else -value:.4g}"


def incumbent(trials: Mapping[K, Trial], mode: Mode) -> K | None:
    """The trial with the best value reported so far (the first of equals), or None."""
    best: tuple[float, int] | None = None
    found: K | None = None
    for i, (key, trial) in enumerate(trials.items()):
        pts = _clean(trial.points, mode)
        if not pts:
            continue
        value = min(v for _, v in pts)
        if best is None or (value, i) < best:
            best, found = (value, i), key
    return found


def decide(trials: Mapping[K, Trial], mode: Mode, config: StopConfig) -> list[StopTrial]:
    """The running trials to stop now, in the mapping's order, each with its reason."""
    clean = {k: _clean(t.points, mode) for k, t in trials.items()}
    best_value = min((v for pts in clean.values() for _, v in pts), default=None)
    out: list[StopTrial] = []
    for key, trial in trials.items():
        pts = clean[key]
        if not trial.running or not pts or pts[-1][0] < config.grace_steps:
            continue
        if best_value is not None and min(v for _, v in pts) <= best_value:
            continue  # holds the best value so far: never stopped
        reason = (_median(key, pts, clean, mode, config) if config.rule is Rule.MEDIAN
                  else _halving(key, pts, clean, mode, config))
        if reason is not None:
            out.append(StopTrial(key, reason))
    return out


def _median(key: K, pts: list[tuple[int, float]],
            clean: Mapping[K, list[tuple[int, float]]], mode: Mode,
            config: StopConfig) -> str | None:
    need = max(config.min_trials, 1)
    reached = sorted((o[-1][0] for other, o in clean.items() if other != key and o),
                     reverse=True)
    if len(reached) < need:
        return None
    # the latest step that this trial and ``need`` others have all reached: trials run
    # side by side at different speeds, and waiting for every other to catch up would let
    # only the slowest ever be judged
    step = min(pts[-1][0], reached[need - 1])
    if step < config.grace_steps:
        return None
    averages = [avg for other, o in clean.items()
                if other != key and o and o[-1][0] >= step
                and (avg := _mean_upto(o, step)) is not None]
    if len(averages) < need:  # some reported only after ``step``: no average up to it
        return None
    median = statistics.median(averages)
    best = min(v for _, v in pts)  # its best so far: at or after ``step``, never worse
    if best > median:
        return (f"median rule at step {step}: best {_shown(best, mode)} is worse than the "
                f"median {_shown(median, mode)} of {len(averages)} other trials' running "
                "averages")
    return None


def rungs(grace_steps: int, eta: int, up_to: int) -> list[int]:
    """Successive halving's rung steps, ``grace_steps * eta**k``, that are ``<= up_to``."""
    out: list[int] = []
    r = max(grace_steps, 1)
    while r <= up_to:
        out.append(r)
        r *= max(eta, 2)
    return out


def _halving(key: K, pts: list[tuple[int, float]],
             clean: Mapping[K, list[tuple[int, float]]], mode: Mode,
             config: StopConfig) -> str | None:
    eta = max(config.eta, 2)
    for rung in rungs(config.grace_steps, eta, pts[-1][0]):
        at_rung = {other: v for other, o in clean.items()
                   if o and o[-1][0] >= rung and (v := _best_upto(o, rung)) is not None}
        keep = len(at_rung) // eta
        if key not in at_rung or keep < 1:  # first reported past the rung; or too few here
            continue  # fewer than eta trials got here: nothing to compare yet
        cutoff = sorted(at_rung.values())[keep - 1]
        if at_rung[key] > cutoff:
            return (f"successive halving at rung {rung} steps: {_shown(at_rung[key], mode)} "
                    f"is not in the top 1/{eta} ({keep} of {len(at_rung)} trials; cutoff "
                    f"{_shown(cutoff, mode)})")
    return None


__all__ = ["Mode", "Rule", "StopConfig", "StopTrial", "Trial", "decide", "incumbent", "rungs"]
