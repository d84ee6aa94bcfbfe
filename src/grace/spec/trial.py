"""What a job carries when it is one trial of a sweep, or when it asks for a preflight.

Kept apart from ``grace.spec.sweep`` (which holds a whole ``JobSpec`` as the
sweep's base job) so that ``JobSpec`` can hold these without an import cycle.
The control plane fills ``JobSpec.sweep`` in when it expands a sweep; a user
writes ``preflight:`` in a job spec.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from grace.core.early_stop import StopConfig

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)
#: A parameter or metric name: also an env suffix (GRACE_PARAM_<NAME>) and a --flag.
NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
#: Values a parameter takes, as the trial sees them in its flags and environment.
ParamValue = float | int | str | bool


class Mode(StrEnum):
    """Whether lower (a loss) or higher (an accuracy) metric values are better."""

    MIN = "min"
    MAX = "max"


class Rule(StrEnum):
    """The early-stopping rules ``grace.core.early_stop`` implements (cited there)."""

    MEDIAN = "median"
    SUCCESSIVE_HALVING = "successive-halving"


class Metric(BaseModel):
    """The objective the runtime reports (``rt.report_metric(name, value)``; ``loss`` is
    also what ``step_done(loss=...)`` reports) and whether lower or higher is better."""

    model_config = _STRICT

    name: str = Field(default="loss", pattern=NAME_PATTERN.pattern, max_length=64)
    mode: Mode = Mode.MIN


class EarlyStopping(BaseModel):
    """Which rule ends weak trials (``grace.core.early_stop``) and its parameters."""

    model_config = _STRICT

    rule: Rule = Rule.MEDIAN
    grace_steps: int = Field(default=10, ge=1, le=10_000_000,
                             description="no trial is judged before this step")
    min_trials: int = Field(default=3, ge=1, le=10_000,
                            description="median: other trials that must have got as far")
    eta: int = Field(default=3, ge=2, le=100,
                     description="successive halving: keep the top 1/eta at each rung")

    def config(self) -> StopConfig:
        from grace.core.early_stop import StopConfig  # core imports this module's enums

        return StopConfig(rule=self.rule, grace_steps=self.grace_steps,
                          min_trials=self.min_trials, eta=self.eta)


class SweepTrial(BaseModel):
    """Set by the control plane on each trial it expands from a sweep (never by hand:
    ``POST /jobs`` refuses it). The sweep's id is its job group's: its first trial's
    job id (``Job.array_id``, with ``array_kind`` "sweep")."""

    model_config = _STRICT

    name: str = Field(max_length=200)
    trial: int = Field(ge=0, le=100_000)
    trials: int = Field(ge=1, le=100_000)
    params: dict[str, ParamValue] = Field(default_factory=dict, max_length=64)
    metric: Metric = Field(default_factory=Metric)
    early_stopping: EarlyStopping | None = None


#: The environment variable a preflight run reads: how many steps to run, then check.
PREFLIGHT_STEPS_ENV = "GRACE_PREFLIGHT_STEPS"


class Preflight(BaseModel):
    """``preflight: {gpus: 2, steps: 50}``: a small run of the same command first; the job
    takes its own GPUs only after it passed (data loads, loss finite and falling,
    checkpoint saved and resumed)."""

    model_config = _STRICT

    gpus: float = Field(default=1, gt=0, le=1_000_000,
                        description="GPUs of the preflight run (<1 for a MIG slice)")
    steps: int = Field(default=50, ge=4, le=1_000_000,
                       description="steps to run; the loss of the first and last quarter "
                                   "are compared")


__all__ = ["NAME_PATTERN", "PREFLIGHT_STEPS_ENV", "EarlyStopping", "Metric", "Mode",
           "ParamValue", "Preflight", "Rule", "SweepTrial"]
