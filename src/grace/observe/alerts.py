"""Grace evaluates its runbook itself, with the semantics of the PromQL it generates.

``grace alerts`` and the dashboard must show what Prometheus would page about,
also on a cluster without Prometheus. :class:`AlertEngine` runs each rule over
the metric families Grace exposes (``registry.collect()``: the objects behind
``/metrics``), the way Prometheus runs ``grace.observe.promql.expr(rule)``:

* selection: samples whose name is the rule's metric (a counter's ``_total``
  sample, a histogram's ``_bucket``) and whose labels equal ``match``, a
  missing label reading as ``""``, as in PromQL;
* comparison: a filtering comparison keeps the samples that pass (IEEE: NaN
  passes only ``!=``), each keeping its own labels and value;
* ``and on(l...)``: the left side's samples for which the right side kept one
  with equal values of ``l...``;
* ``for``: a (rule, label set) is pending from the first evaluation it matched
  and firing once ``for`` has passed since; it is forgotten the first
  evaluation it does not match, so it starts over if it comes back.

Labels with empty values are dropped from an alert's labels, as Prometheus
drops them on ingestion. ``tests/observe/test_alerts_promtool.py`` runs this
engine and ``promtool test rules`` over the same series and asserts both fire
the same alerts with the same annotations.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from prometheus_client import Metric

from grace.observe.runbook_spec import (
    PLACEHOLDER,
    VALUE_PLACEHOLDER,
    Condition,
    Rule,
    RunbookSpec,
    Severity,
    load_runbook,
)

LabelKey = tuple[tuple[str, str], ...]
#: one series at evaluation time: its labels (empty values dropped) and value
Series = tuple[dict[str, str], float]

_SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


class AlertState(StrEnum):
    """Prometheus' alert states, less ``inactive`` (an inactive alert is not listed)."""

    PENDING = "pending"  # the condition holds, not yet for the rule's ``for``
    FIRING = "firing"


@dataclass(frozen=True)
class Alert:
    """One (rule, label set) whose condition holds now; text already filled in."""

    rule: str
    severity: Severity
    labels: dict[str, str]
    value: float
    active_since: float
    state: AlertState
    summary: str
    action: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``GET /alerts``; a non-finite value as null (JSON has no NaN)."""
        return {"rule": self.rule, "severity": self.severity.value, "state": self.state.value,
                "labels": dict(self.labels),
                "value": self.value if math.isfinite(self.value) else None,
                "active_since": self.active_since, "summary": self.summary,
                "action": self.action, "reason": self.reason}


def format_value(value: float) -> str:
    """``{value}`` as Prometheus prints ``{{ $value | printf "%.3g" }}`` (Go's %g)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.3g}"


def render(text: str, labels: dict[str, str], value: float) -> str:
    """Runbook text with ``{label}`` and ``{value}`` filled in; a missing label reads as ``""``,
    as ``{{ $labels.x }}`` does in Prometheus."""
    def one(m: Any) -> str:
        name = m.group(1)
        return format_value(value) if name == VALUE_PLACEHOLDER else labels.get(name, "")

    return PLACEHOLDER.sub(one, text)


def _key(labels: dict[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


def select(cond: Condition, samples: dict[str, list[Series]]) -> list[Series]:
    """``metric{match} op threshold``: the series that pass, with their own labels and values."""
    return [(labels, value) for labels, value in samples.get(cond.metric, ())
            if all(labels.get(k, "") == v for k, v in cond.match.items())
            and cond.op.holds(value, cond.threshold)]


def matching(rule: Rule, samples: dict[str, list[Series]]) -> list[Series]:
    """The series for which ``expr(rule)`` returns a sample now, one per label set."""
    left = select(rule, samples)
    if rule.and_ is not None:
        on = rule.and_.on
        right = {tuple(labels.get(k, "") for k in on) for labels, _ in select(rule.and_, samples)}
        left = [(labels, value) for labels, value in left
                if tuple(labels.get(k, "") for k in on) in right]
    seen: set[LabelKey] = set()
    out = []
    for labels, value in left:
        k = _key(labels)
        if k not in seen:
            seen.add(k)
            out.append((labels, value))
    return out


class AlertEngine:
    """The runbook's rules over Grace's metric families, remembering what held since when.

    One engine per process: ``for`` is measured between its evaluations, so it
    must be called regularly (each scrape, each dashboard refresh) to see a
    condition start and stop. Safe to call from several threads.
    """

    def __init__(self, runbook: RunbookSpec) -> None:
        self.runbook = runbook
        self._metrics = frozenset(c.metric for r in runbook.rules for c in r.conditions)
        self._since: dict[tuple[str, LabelKey], float] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path | str | None = None) -> AlertEngine:
        """An engine over a runbook file, or over the shipped defaults when ``path`` is None."""
        return cls(load_runbook(path))

    def _index(self, families: Iterable[Metric]) -> dict[str, list[Series]]:
        samples: dict[str, list[Series]] = {}
        for family in families:
            for s in family.samples:
                if s.name in self._metrics:
                    labels = {k: v for k, v in s.labels.items() if v != ""}
                    samples.setdefault(s.name, []).append((labels, float(s.value)))
        return samples

    def evaluate(self, families: Iterable[Metric], now: float) -> list[Alert]:
        """Every pending and firing alert at ``now``: firing first, then by severity, then in
        runbook order."""
        samples = self._index(families)
        alerts: list[tuple[tuple[Any, ...], Alert]] = []
        with self._lock:
            held: set[tuple[str, LabelKey]] = set()
            for order, rule in enumerate(self.runbook.rules):
                for labels, value in matching(rule, samples):
                    ident = (rule.name, _key(labels))
                    held.add(ident)
                    since = self._since.setdefault(ident, now)
                    state = AlertState.FIRING if now - since >= rule.for_s else AlertState.PENDING
                    alert = Alert(rule.name, rule.severity, labels, value, since, state,
                                  render(rule.summary, labels, value),
                                  render(rule.action, labels, value),
                                  render(rule.reason, labels, value))
                    alerts.append(((state != AlertState.FIRING, _SEVERITY_RANK[rule.severity],
                                    order, ident[1]), alert))
            for ident in self._since.keys() - held:
                del self._since[ident]
        return [a for _, a in sorted(alerts, key=lambda pair: pair[0])]


__all__ = ["Alert", "AlertEngine", "AlertState", "format_value", "load_runbook", "matching",
           "render", "select"]
