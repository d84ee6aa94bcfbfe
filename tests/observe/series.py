"""Series for the alert tests, as prometheus_client metric families and as promtool input.

A scenario is a list of :class:`Series`, each one value per evaluation step
(one minute), ``None`` where the series is absent at that step. The same list
becomes what ``registry.collect()`` would yield at step ``i`` (for Grace's
engine) and ``input_series`` of a ``promtool test rules`` file (for
Prometheus), where an absent step is a ``stale`` marker so Prometheus' 5-minute
lookback does not carry the previous value over it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client import Metric

from grace.observe.promql import quote


@dataclass(frozen=True)
class Series:
    name: str
    labels: dict[str, str]
    values: tuple[float | None, ...]

    def promtool(self) -> str:
        inner = ",".join(f"{k}={quote(v)}" for k, v in self.labels.items())
        return f"{self.name}{{{inner}}}" if inner else self.name

    def promtool_values(self) -> str:
        return " ".join("stale" if v is None else _go_number(v) for v in self.values)


def _go_number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Inf" if v > 0 else "-Inf"
    return repr(float(v))


def families_at(scenario: list[Series], step: int) -> list[Metric]:
    """The metric families a registry would yield at ``step``: one per name, as gauges."""
    out: dict[str, Metric] = {}
    for s in scenario:
        value = s.values[step]
        if value is None:
            continue
        family = out.setdefault(s.name, Metric(s.name, f"test series {s.name}", "gauge"))
        family.add_sample(s.name, dict(s.labels), value)
    return list(out.values())


def steady(value: float | None, steps: int) -> tuple[float | None, ...]:
    return (value,) * steps
