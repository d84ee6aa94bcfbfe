"""JobSpec: what a user asks for when they submit training work.

A job says how many GPUs it needs in one of three ways, from most to least
explicit: a GPU model, a minimum VRAM per GPU, or the model it trains (size,
precision, optimizer, parallelism), from which Grace estimates VRAM and picks
the cheapest GPU that fits. Fewer than one GPU (``gpus: 0.25``) or a VRAM need
below a MIG slice makes it a sub-GPU job packed onto MIG slices.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from grace.spec import launch_limits
from grace.spec.notify import NotifySpec
from grace.spec.text_limits import (
    MAX_NAME_CHARS,
    MAX_TENANT_CHARS,
    TENANT_PATTERN,
    name_check,
    tenant_check,
)
from grace.spec.trial import Preflight, SweepTrial
from grace.spec.units import parse_duration
from grace.spec.workflow import ArraySpec, Dependency, parse_dependency

Duration = Annotated[float, BeforeValidator(parse_duration)]


def _dependencies(value: object) -> object:
    """Slurm's text (``"afterok:12,afterany:13"``, or a list of such) as a list of
    ``Dependency``; a list of mappings passes through to the model."""
    if isinstance(value, str):
        return parse_dependency(value)
    if isinstance(value, list):
        return [d for v in value for d in (parse_dependency(v) if isinstance(v, str) else [v])]
    return value
#: The longest runtime a job may state: ten years. Finite and far below where float
#: seconds lose precision, so every sum of times stays exact enough to compare.
MAX_DURATION_S = 10 * 365 * 86400
#: Bounds on counts a job asks for: well above any cluster (a node group holds at most
#: 100,000 nodes of at most 72 GPUs), small enough that products of them stay exact.
MAX_GPUS = 1_000_000
#: Every job model refuses inf and NaN (JSON's Infinity/NaN, YAML's .inf): they pass
#: ``gt=0`` checks and then break arithmetic (int(inf) raises) far from the field.
_FINITE = ConfigDict(extra="forbid", allow_inf_nan=False)


class WorkloadClass(StrEnum):
    """The four patterns that decide where and how a job should run."""

    EXPERIMENT = "experiment"
    FULL_RUN = "full-run"
    FINE_TUNE = "fine-tune"
    SWEEP = "sweep"


class Precision(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class Optimizer(StrEnum):
    ADAM = "adam"
    ADAMW = "adamw"
    SGD = "sgd"
    ADAFACTOR = "adafactor"
    NONE = "none"


class ParallelismSpec(BaseModel):
    """How model state is split: data replicas, tensor and pipeline shards, ZeRO stage."""

    model_config = _FINITE

    data: int = Field(default=1, ge=1, le=MAX_GPUS)
    tensor: int = Field(default=1, ge=1, le=MAX_GPUS)
    pipeline: int = Field(default=1, ge=1, le=MAX_GPUS)
    zero_stage: int = Field(default=0, ge=0, le=3, description="3 is FSDP full sharding")


class ModelSizeSpec(BaseModel):
    """The model a job trains, enough to estimate its VRAM per GPU."""

    model_config = _FINITE

    params_b: float = Field(gt=0, le=100_000, description="parameters, in billions")
    precision: Precision = Precision.BF16
    optimizer: Optimizer = Optimizer.ADAMW
    parallelism: ParallelismSpec = Field(default_factory=ParallelismSpec)
    activation_gb: float = Field(default=0, ge=0, le=100_000,
                                 description="activation memory per GPU, if known")
    lora: bool = Field(default=False, description="train adapters only: optimizer state ~0")


class ElasticSpec(BaseModel):
    model_config = _FINITE

    min_gpus: int = Field(ge=1, le=MAX_GPUS)
    max_gpus: int = Field(ge=1, le=MAX_GPUS)

    @model_validator(mode="after")
    def _ordered(self) -> ElasticSpec:
        if self.min_gpus > self.max_gpus:
            raise ValueError(
                f"min_gpus ({self.min_gpus}) exceeds max_gpus ({self.max_gpus}); swap them"
            )
        return self


class JobSpec(BaseModel):
    """One job; validated whole at the edge, trusted afterwards."""

    model_config = _FINITE

    # lengths and character sets are checked by name_check/tenant_check (whose messages say
    # the fix, and which a spec read back from the store skips: text_limits.STORED), and
    # documented for clients in the schema
    name: Annotated[str, name_check("the job's name")] = Field(
        min_length=1, description="printable text, no control characters",
        json_schema_extra={"maxLength": MAX_NAME_CHARS})
    tenant: Annotated[str, tenant_check()] = Field(
        default="default", min_length=1, json_schema_extra={
            "maxLength": MAX_TENANT_CHARS, "pattern": f"^{TENANT_PATTERN.pattern}$"})
    workload_class: WorkloadClass = WorkloadClass.EXPERIMENT
    priority: int = Field(default=0, ge=-1000, le=1000)

    gpus: float | None = Field(default=None, gt=0, le=MAX_GPUS,
                               description="total GPUs; <1 for a MIG slice")
    nodes: int | None = Field(default=None, ge=1, le=100_000)
    gpus_per_node: int | None = Field(default=None, ge=1, le=72)

    gpu_model: Annotated[str, name_check("the GPU model", 64)] | None = Field(
        default=None, json_schema_extra={"maxLength": 64})
    min_vram_gb: float | None = Field(default=None, gt=0, le=100_000)
    model: ModelSizeSpec | None = None
    allow_mixed_models: bool = False

    runtime_estimate: Duration | None = Field(default=None, le=MAX_DURATION_S)
    runtime_limit: Duration | None = Field(default=None, le=MAX_DURATION_S)
    elastic: ElasticSpec | None = None
    preemptible: bool = False
    sensitive_data: bool = Field(
        default=False, description="its data may not leave owned hardware (bursting routes)")
    dataset_gb: float = Field(
        default=0.0, ge=0, le=1e9, description="data to move if it bursts: dataset_gb x egress $/GB")

    memory_gb: float | None = Field(
        default=None, gt=0, le=1_000_000,
        description="host memory per node for the job's processes (the cgroup limit); "
                    "default: the node's memory share of the GPUs it gets there")

    command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)

    # Slurm's workflows (spec/workflow.py; the gate is core/workflow.py)
    hold: bool = Field(default=False, description="submitted held: never starts until released")
    dependency: Annotated[list[Dependency], BeforeValidator(_dependencies)] = Field(
        default_factory=list, max_length=100,
        description="start after other jobs end, e.g. 'afterok:12,afterany:13' (all must hold)")
    array: ArraySpec | None = Field(
        default=None, description="a job array, e.g. '0-99%8': one task per index, at most "
                                  "8 running at once")
    notify: NotifySpec | None = Field(default=None, description="webhook/mail on end, failure, "
                                      "preemption, move (spec/notify.py)")
    # a small run first (spec/trial.py); and, set by the control plane, a sweep trial's place
    preflight: Preflight | None = None
    sweep: SweepTrial | None = None

    # A command or env that exec refuses would fail at every launch of every attempt:
    # refuse it here, where the user sees the field (the limits: spec/launch_limits.py).
    # No command at all stays allowed for the twin's specs; the API requires one.
    @field_validator("command")
    @classmethod
    def _command_launchable(cls, command: list[str] | None) -> list[str] | None:
        if command is not None:
            problems = launch_limits.command_problems(command)
            if problems:
                raise ValueError(launch_limits.joined(problems))
        return command

    @field_validator("env")
    @classmethod
    def _env_launchable(cls, env: dict[str, str]) -> dict[str, str]:
        problems = launch_limits.env_problems(env)
        if problems:
            raise ValueError(launch_limits.joined(problems))
        return env

    @model_validator(mode="after")
    def _shape(self) -> JobSpec:
        if self.gpus is None and (self.nodes is None or self.gpus_per_node is None):
            raise ValueError(
                "say how many GPUs: set gpus (e.g. 8, or 0.25 for a MIG slice), "
                "or nodes and gpus_per_node"
            )
        if self.nodes is not None and self.gpus_per_node is not None:
            total = self.nodes * self.gpus_per_node
            if self.gpus is not None and self.gpus != total:
                raise ValueError(
                    f"gpus ({self.gpus:g}) disagrees with nodes x gpus_per_node ({total}); "
                    "drop gpus or make them agree"
                )
            self.gpus = float(total)
        elif self.nodes is not None or self.gpus_per_node is not None:
            raise ValueError("nodes and gpus_per_node go together; set both or neither")
        assert self.gpus is not None
        if self.gpus > 1 and self.gpus != int(self.gpus):
            raise ValueError(
                f"gpus={self.gpus:g}: only jobs under one GPU may be fractional; round it"
            )
        if self.runtime_estimate and self.runtime_limit and (
            self.runtime_estimate > self.runtime_limit
        ):
            raise ValueError(
                "runtime_estimate is longer than runtime_limit; raise the limit or lower "
                "the estimate"
            )
        if self.elastic is not None and not (
            self.elastic.min_gpus <= self.gpus <= self.elastic.max_gpus
        ):
            raise ValueError(
                f"gpus ({self.gpus:g}) must lie within elastic.min_gpus..max_gpus "
                f"({self.elastic.min_gpus}..{self.elastic.max_gpus})"
            )
        return self

    @property
    def whole_gpus(self) -> int:
        """GPUs as a whole count; 0 for sub-GPU (MIG) jobs."""
        assert self.gpus is not None
        return int(self.gpus) if self.gpus >= 1 else 0

    @property
    def is_sub_gpu(self) -> bool:
        assert self.gpus is not None
        return self.gpus < 1
