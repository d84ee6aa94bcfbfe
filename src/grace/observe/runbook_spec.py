"""RunbookSpec (``kind: runbook``): metric thresholds mapped to operator actions, as data.

One table says, for each condition worth a person's attention, what to look
at, what to do and why. Everything else is generated from it, so the three
can never disagree: Prometheus alerting rules (``grace.observe.promql``),
Grace's own evaluation of the same rules (``grace.observe.alerts``, for
``grace alerts`` and the dashboard) and ``docs/runbooks.md``.

A rule is deliberately small, one comparison of one metric, optionally
and-joined with a second on shared labels::

    - name: AllReduceMultiLeaf
      metric: grace_job_phase_share
      match: {phase: allreduce}
      op: ">"
      threshold: 0.40
      and: {metric: grace_job_leaves, op: ">", threshold: 1, on: [job]}
      for: 10m
      severity: warning
      summary: job {job} spends {value} of each step in all-reduce across leaves
      action: ...
      reason: ...

That is exactly what both evaluators agree on (``metric{match} OP threshold``,
``(A) and on(labels) (B)``, held for ``for``); anything PromQL can say beyond it
(rates, aggregations) belongs in a recording rule whose output a runbook rule
then compares. ``summary``, ``action`` and ``reason`` may name the alerting
series' labels as ``{label}`` and its value as ``{value}``.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from grace.spec.errors import SpecError, SpecProblem, from_validation_error
from grace.spec.units import parse_duration

#: Prometheus' metric and label name grammars (its data model docs); ``__`` names are reserved
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_RULE_NAME = re.compile(r"[A-Z][A-Za-z0-9]*")
#: ``{label}`` in summary/action/reason; any other brace is literal text
PLACEHOLDER = re.compile(r"\{([a-zA-Z_][a-zA-Z0-9_]*)\}")
#: the placeholder that stands for the alerting series' value, not a label
VALUE_PLACEHOLDER = "value"


class Op(StrEnum):
    """A PromQL comparison operator, filtering (no ``bool``): a series is kept when it holds."""

    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="
    EQ = "=="
    NE = "!="

    def holds(self, value: float, threshold: float) -> bool:
        """IEEE comparison, as Prometheus (Go) makes it: NaN fails all but ``!=``."""
        return _COMPARE[self](value, threshold)


_COMPARE: dict[Op, Callable[[float, float], bool]] = {
    Op.GT: operator.gt, Op.GE: operator.ge, Op.LT: operator.lt, Op.LE: operator.le,
    Op.EQ: operator.eq, Op.NE: operator.ne,
}


class Severity(StrEnum):
    """How soon a person must act: critical now, warning today, info when convenient."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


def _label_name(name: object) -> object:
    if isinstance(name, str) and (not _LABEL_NAME.fullmatch(name) or name.startswith("__")):
        raise ValueError(f"{name!r} is not a label name: letters, digits and _, not starting "
                         "with a digit or __ (e.g. job, Hostname)")
    return name


class Condition(BaseModel):
    """``metric{match} op threshold``: the series of one metric whose value passes a comparison."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    metric: str = Field(description="a sample name as exposed: a counter's ends in _total")
    match: dict[str, str] = Field(default_factory=dict,
                                  description="label -> value: only series with these labels")
    op: Op
    threshold: float = Field(allow_inf_nan=False)

    @field_validator("metric")
    @classmethod
    def _metric_name(cls, name: str) -> str:
        if not _METRIC_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a metric name: letters, digits, _ and :, not "
                             "starting with a digit (e.g. grace_job_wait_share)")
        return name

    @field_validator("match", mode="before")
    @classmethod
    def _match_labels(cls, match: object) -> object:
        if not isinstance(match, dict):
            return match  # pydantic says it must be a mapping
        out: dict[object, object] = {}
        for key, value in match.items():
            _label_name(key)
            if isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # gpu: 0 means the label value "0"
            elif not isinstance(value, str):
                raise ValueError(f"{key}: label values are text; quote {value!r} in YAML "
                                 f"({key}: \"{value}\")")
            out[key] = value
        return out

    @field_validator("op", mode="before")
    @classmethod
    def _op_known(cls, op: object) -> object:
        if not isinstance(op, str) or op not in {o.value for o in Op}:
            raise ValueError(f"unknown comparison {op!r}; use one of "
                             f"{', '.join(repr(o.value) for o in Op)}, quoted in YAML (op: \">\": "
                             "a bare > starts a folded string)")
        return op

    @field_validator("threshold", mode="before")
    @classmethod
    def _threshold_number(cls, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"must be a number (0.3, 20, 1e-3); got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number; got {value!r}")
        return value


class AndCondition(Condition):
    """The second half of ``(A) and on(labels) (B)``: A's series are kept where B has one
    with the same values of ``on``."""

    on: list[str] = Field(min_length=1, description="labels both sides share, e.g. [job]")

    @model_validator(mode="before")
    @classmethod
    def _yaml_on_key(cls, data: object) -> object:
        # YAML 1.1 (PyYAML) reads a bare `on` key as the boolean true
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if k is True else k): v for k, v in data.items()}
        return data

    @field_validator("on")
    @classmethod
    def _on_labels(cls, on: list[str]) -> list[str]:
        for name in on:
            _label_name(name)
        if len(set(on)) != len(on):
            raise ValueError(f"{on}: a label is listed twice; list each once")
        return on


def _for_seconds(value: object) -> float:
    """``for`` may be zero (fire at once), which ``parse_duration`` refuses for a timeout."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return 0.0
    if isinstance(value, str) and (m := re.fullmatch(r"\s*0+(?:\.0*)?\s*([a-z]*)\s*", value)):
        try:
            parse_duration(f"1{m.group(1)}")  # the unit must still be one the project reads
        except ValueError as e:
            raise ValueError(f"cannot read duration {value!r}; write 0s, 90s, 10m, 1h") from e
        return 0.0
    try:
        return parse_duration(value)
    except ValueError as e:
        raise ValueError(f"{e} (0s fires at once)") from e


class Rule(Condition):
    """One runbook row: when ``metric{match} op threshold`` (and ``and``) has held for
    ``for``, a person should do ``action``, because ``reason``."""

    name: str = Field(description="CamelCase, unique in the file: the alert's name")
    and_: AndCondition | None = Field(default=None, alias="and")
    for_s: float = Field(default=0.0, alias="for", description="seconds the condition must hold")
    severity: Severity
    summary: str = Field(min_length=1)
    action: str = Field(min_length=1)
    reason: str = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _camel_case(cls, name: str) -> str:
        if not _RULE_NAME.fullmatch(name):
            raise ValueError(f"{name!r}: write the name in CamelCase (letters and digits, "
                             "starting with a capital), e.g. DataWaitHigh")
        return name

    @field_validator("for_s", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float:
        return _for_seconds(value)

    @field_validator("severity", mode="before")
    @classmethod
    def _severity_known(cls, value: object) -> object:
        if not isinstance(value, str) or value not in {s.value for s in Severity}:
            raise ValueError(f"unknown severity {value!r}; use one of "
                             f"{', '.join(s.value for s in Severity)}")
        return value

    @field_validator("summary", "action", "reason")
    @classmethod
    def _text(cls, text: str) -> str:
        text = " ".join(text.split())  # YAML folded text: one line, as an annotation shows it
        if "{{" in text or "}}" in text:
            raise ValueError("write placeholders with single braces ({job}, {value}); double "
                             "braces are Prometheus template syntax, which Grace generates")
        return text

    @property
    def conditions(self) -> tuple[Condition, ...]:
        """This rule's comparisons, its own first."""
        return (self,) if self.and_ is None else (self, self.and_)


class RunbookSpec(BaseModel):
    """A runbook file: validated whole, then turned into alert rules, Grace's alerts and docs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="grace", min_length=1,
                      description="the Prometheus rule group the rules are generated into")
    runbook_url: str = Field(default="docs/runbooks.md", min_length=1,
                             description="where docs/runbooks.md is read; each alert links "
                                         "to its rule's heading there")
    rules: list[Rule] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> RunbookSpec:
        seen: dict[str, int] = {}
        lines = []
        for i, rule in enumerate(self.rules):
            if rule.name in seen:
                lines.append(f"rules[{i}].name: {rule.name!r} is also rules[{seen[rule.name]}]; "
                             "give each rule its own name")
            seen.setdefault(rule.name, i)
        if lines:
            raise ValueError("\n".join(lines))
        return self

    def rule(self, name: str) -> Rule:
        """The rule called ``name``; KeyError naming the known ones otherwise."""
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(f"no runbook rule {name!r}; known: {', '.join(r.name for r in self.rules)}")


def anchor(rule: Rule) -> str:
    """The fragment of the rule's heading in docs/runbooks.md (GitHub's: lower case)."""
    return rule.name.lower()


def parse_runbook(data: Any, source: str = "<runbook>") -> RunbookSpec:
    """A ``kind: runbook`` document, or one SpecError naming every bad field and its fix."""
    if not isinstance(data, dict):
        raise SpecError(source, [SpecProblem("", "expected a mapping with kind: runbook and rules")])
    kind = data.get("kind")
    if kind is None:
        raise SpecError(source, [SpecProblem("kind", "a runbook file says `kind: runbook`; add it")])
    if str(kind).lower() != "runbook":
        raise SpecError(source, [SpecProblem("kind", f"expected kind 'runbook', got {kind!r}")])
    try:
        return RunbookSpec.model_validate({k: v for k, v in data.items() if k != "kind"})
    except ValidationError as e:
        raise from_validation_error(source, e) from e


#: the runbook Grace ships (``grace runbooks`` with no ``--file``)
DEFAULT_RUNBOOK = "observe/data/runbooks.yaml"


def load_runbook(path: Path | str | None = None) -> RunbookSpec:
    """A runbook file, or the shipped defaults when ``path`` is None."""
    from grace.spec.loader import read_yaml

    if path is None:
        shipped = resources.files("grace").joinpath(DEFAULT_RUNBOOK)
        with resources.as_file(shipped) as p:
            return parse_runbook(read_yaml(p), f"grace/{DEFAULT_RUNBOOK}")
    return parse_runbook(read_yaml(path), str(path))


__all__ = ["DEFAULT_RUNBOOK", "PLACEHOLDER", "VALUE_PLACEHOLDER", "AndCondition", "Condition",
           "Op", "Rule", "RunbookSpec", "Severity", "anchor", "load_runbook", "parse_runbook"]
