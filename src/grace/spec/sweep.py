"""``kind: sweep``: many small trials of one job over a grid or random draws of parameters.

A sweep file names a base job (``job:``, any job spec field), the parameters
and how to search them, how many trials may run at once, the metric that
ranks them and, optionally, the rule that ends weak trials early::

    kind: sweep
    name: lr-sweep
    tenant: research
    job: {gpus: 0.25, command: [python, examples/sweep_trial.py, --steps, "60"]}
    parameters:
      lr: {loguniform: [1.0e-4, 1.0]}   # random search: uniform, loguniform, choice
      width: [16, 32]                    # a list: a grid axis (a choice under random)
    trials: 16                           # random search only
    seed: 0
    max_parallel: 4
    metric: {name: val_loss, mode: min}
    early_stopping: {rule: median, grace_steps: 10}

How a trial receives its parameters (one convention, for every trial): each
parameter is appended to the command as ``--<name>=<value>`` and set in the
environment as ``GRACE_PARAM_<NAME>`` (upper case, ``-`` as ``_``). A script
with argparse flags of the parameters' names needs nothing else.

Expansion is deterministic: a grid in the order the parameters are written
(the last one varying fastest), random draws from ``random.Random(seed)``, so
the same file always gives the same trials, and numbers are rounded to 4
significant digits so flags, names and the results table stay readable.
"""

from __future__ import annotations

import itertools
import math
import random
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from grace.spec.job import JobSpec, WorkloadClass
from grace.spec.text_limits import name_check
from grace.spec.trial import NAME_PATTERN, EarlyStopping, Metric, ParamValue, SweepTrial

#: A sweep expands to at most this many trials (a grid's product grows fast).
MAX_TRIALS = 1000
#: The prefix of each parameter's environment variable in a trial.
PARAM_ENV_PREFIX = "GRACE_PARAM_"
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


class Search(StrEnum):
    GRID = "grid"  # every combination of the parameters' lists
    RANDOM = "random"  # ``trials`` independent draws


class Distribution(BaseModel):
    """One random parameter: exactly one of ``uniform``, ``loguniform`` (both ``[low,
    high]``) or ``choice`` (a list of values)."""

    model_config = _STRICT

    uniform: tuple[float, float] | None = None
    loguniform: tuple[float, float] | None = None
    choice: list[ParamValue] | None = Field(default=None, min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _one(self) -> Distribution:
        given = [k for k in ("uniform", "loguniform", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of uniform: [low, high], loguniform: "
                             "[low, high] or choice: [values]")
        for k in ("uniform", "loguniform"):
            bounds = getattr(self, k)
            if bounds is not None and not bounds[0] < bounds[1]:
                raise ValueError(f"{k}: low must be below high, e.g. [1.0e-4, 1.0e-1]")
        if self.loguniform is not None and self.loguniform[0] <= 0:
            raise ValueError("loguniform: both bounds must be above 0")
        return self

    def draw(self, rng: random.Random) -> ParamValue:
        if self.choice is not None:
            return rng.choice(self.choice)
        if self.uniform is not None:
            return _round(rng.uniform(*self.uniform))
        assert self.loguniform is not None
        lo, hi = self.loguniform
        return _round(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _parameter_kind(value: Any) -> str:
    return "values" if isinstance(value, list) else "distribution"


#: a list (a grid axis, or a choice under random search) or one distribution; told apart
#: by shape, so an error names only the form that was written
Parameter = Annotated[
    Annotated[list[ParamValue], Tag("values")] | Annotated[Distribution, Tag("distribution")],
    Discriminator(_parameter_kind)]


def _round(value: float) -> float:
    return float(f"{value:.4g}")


def flag_value(value: ParamValue) -> str:
    """A parameter as it appears in ``--name=value`` and the environment."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}" if value != int(value) or abs(value) >= 1e6 else repr(value)
    return str(value)


class SweepSpec(BaseModel):
    """A sweep, validated whole: the base job, the search, the metric and the stopping rule."""

    model_config = _STRICT

    name: Annotated[str, name_check("the sweep's name", 120)] = Field(min_length=1)
    tenant: str | None = Field(default=None, description="the base job's tenant if unset")
    job: JobSpec
    parameters: dict[str, Parameter] = Field(min_length=1, max_length=64)
    search: Search | None = Field(default=None, description="default: grid when every "
                                                            "parameter is a list, else random")
    trials: int | None = Field(default=None, ge=1, le=MAX_TRIALS,
                               description="random search: how many draws")
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    max_parallel: int = Field(default=4, ge=1, le=MAX_TRIALS,
                              description="trials running at once")
    metric: Metric = Field(default_factory=Metric)
    early_stopping: EarlyStopping | None = None

    @model_validator(mode="before")
    @classmethod
    def _base_job(cls, data: Any) -> Any:
        """The base job is named after the sweep and inherits its tenant unless it says."""
        if isinstance(data, dict) and isinstance(data.get("job"), dict):
            job = dict(data["job"])
            job.setdefault("name", data.get("name") or "sweep")
            if data.get("tenant") is not None:
                if job.get("tenant", data["tenant"]) != data["tenant"]:
                    raise ValueError(f"job.tenant ({job['tenant']!r}) differs from the sweep's "
                                     f"tenant ({data['tenant']!r}); set one of them")
                job.setdefault("tenant", data["tenant"])
            job.setdefault("workload_class", WorkloadClass.SWEEP.value)
            data = {**data, "job": job}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> SweepSpec:
        for name in self.parameters:
            if not NAME_PATTERN.match(name):
                raise ValueError(f"parameter {name!r}: use letters, digits, '_' or '-', "
                                 "starting with a letter (it becomes --name=value)")
        for name, values in self.parameters.items():
            if isinstance(values, list) and not values:
                raise ValueError(f"parameter {name!r}: an empty list; give at least one value")
        for field in ("array", "preflight", "sweep"):
            if getattr(self.job, field, None):
                raise ValueError(f"job.{field}: a sweep's base job cannot have one; remove it")
        if self.search is None:
            every_list = all(isinstance(v, list) for v in self.parameters.values())
            self.search = Search.GRID if every_list else Search.RANDOM
        if self.search is Search.GRID:
            if any(isinstance(v, Distribution) for v in self.parameters.values()):
                raise ValueError("search: grid needs a list of values for every parameter; "
                                 "use search: random for distributions")
            if self.trials is not None:
                raise ValueError("trials: a grid runs every combination; drop trials, or "
                                 "use search: random")
            size = math.prod(len(v) for v in self.parameters.values()
                             if isinstance(v, list))
            if size > MAX_TRIALS:
                raise ValueError(f"the grid has {size} combinations, more than {MAX_TRIALS}; "
                                 "use fewer values or search: random with trials")
        elif self.trials is None:
            raise ValueError("trials: random search needs how many trials to draw, e.g. "
                             "trials: 16")
        return self

    def combinations(self) -> list[dict[str, ParamValue]]:
        """Each trial's parameters, in trial order (deterministic)."""
        names = list(self.parameters)
        if self.search is Search.GRID:
            axes = [v for v in self.parameters.values() if isinstance(v, list)]
            return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*axes)]
        rng = random.Random(self.seed)
        assert self.trials is not None
        out: list[dict[str, ParamValue]] = []
        for _ in range(self.trials):
            out.append({n: (rng.choice(v) if isinstance(v, list) else v.draw(rng))
                        for n, v in self.parameters.items()})
        return out

    def expand(self) -> list[JobSpec]:
        """The trials as job specs: the base job with its parameters as flags and env."""
        combos = self.combinations()
        width = len(str(len(combos) - 1))
        base = self.job.model_dump(mode="json", exclude={"sweep"})
        trials: list[JobSpec] = []
        for i, params in enumerate(combos):
            env = dict(base["env"])
            env.update({PARAM_ENV_PREFIX + n.upper().replace("-", "_"): flag_value(v)
                        for n, v in params.items()})
            command = list(base["command"] or []) + [f"--{n}={flag_value(v)}"
                                                     for n, v in params.items()]
            trial = SweepTrial(name=self.name, trial=i, trials=len(combos), params=params,
                               metric=self.metric, early_stopping=self.early_stopping)
            trials.append(JobSpec.model_validate({
                **base, "name": f"{self.name}-{i:0{width}d}", "env": env,
                "command": command if base["command"] else None,
                "workload_class": WorkloadClass.SWEEP.value,
                "sweep": trial.model_dump(mode="json")}))
        return trials


__all__ = ["MAX_TRIALS", "PARAM_ENV_PREFIX", "Distribution", "Search", "SweepSpec",
           "flag_value"]
