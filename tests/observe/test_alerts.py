"""Grace's own alert engine: selection, comparison, ``and on``, ``for``, rendering."""

from __future__ import annotations

import json
import math
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from grace.observe.alerts import Alert, AlertEngine, AlertState, format_value, render
from grace.observe.runbook_spec import RunbookSpec, Severity, load_runbook, parse_runbook

from .series import Series, families_at


def _book(*rules: dict[str, Any]) -> RunbookSpec:
    full = [{"severity": "warning", "summary": "s {job}", "action": "a", "reason": "r", **r}
            for r in rules]
    return parse_runbook({"kind": "runbook", "rules": full})


def _at(engine: AlertEngine, scenario: list[Series], step: int) -> list[Alert]:
    return engine.evaluate(families_at(scenario, step), now=60.0 * step)


def test_for_pending_then_firing_then_forgotten() -> None:
    engine = AlertEngine(_book({"name": "Slow", "metric": "m", "op": ">", "threshold": 0.3,
                                "for": "3m"}))
    values = (0.5, 0.5, 0.5, 0.5, 0.1, 0.5, 0.5)
    scenario = [Series("m", {"job": "1"}, values)]
    states = []
    for step in range(len(values)):
        got = _at(engine, scenario, step)
        states.append(got[0].state if got else None)
        if got:
            assert got[0].labels == {"job": "1"} and got[0].value == 0.5
    assert states == [AlertState.PENDING, AlertState.PENDING, AlertState.PENDING, AlertState.FIRING,
                      None, AlertState.PENDING, AlertState.PENDING]
    # it started over at step 5: active since then, not since step 0
    assert _at(engine, scenario, 6)[0].active_since == 300.0


def test_zero_for_fires_at_once_and_match_selects() -> None:
    engine = AlertEngine(_book({"name": "Drained", "metric": "grace_node_state",
                                "match": {"state": "drained"}, "op": "==", "threshold": 1,
                                "summary": "node {node} is drained"}))
    scenario = [Series("grace_node_state", {"node": "n1", "state": "drained"}, (1,)),
                Series("grace_node_state", {"node": "n1", "state": "healthy"}, (0,)),
                Series("grace_node_state", {"node": "n2", "state": "healthy"}, (1,)),
                Series("grace_node_state", {"node": "n3", "state": "drained"}, (0,))]
    got = _at(engine, scenario, 0)
    assert [(a.labels["node"], a.state, a.summary) for a in got] == [
        ("n1", AlertState.FIRING, "node n1 is drained")]


def test_and_on_keeps_left_series_with_a_right_partner() -> None:
    engine = AlertEngine(_book({"name": "Multi", "metric": "share", "match": {"phase": "allreduce"},
                                "op": ">", "threshold": 0.4,
                                "and": {"metric": "leaves", "op": ">", "threshold": 1,
                                        "on": ["job"]}}))
    scenario = [Series("share", {"job": "1", "phase": "allreduce"}, (0.6,)),
                Series("share", {"job": "2", "phase": "allreduce"}, (0.6,)),
                Series("share", {"job": "3", "phase": "allreduce"}, (0.2,)),
                Series("share", {"job": "4", "phase": "allreduce"}, (0.9,)),
                Series("leaves", {"job": "1", "tenant": "x"}, (2,)),
                Series("leaves", {"job": "2"}, (1,)),
                Series("leaves", {"job": "3"}, (3,))]
    got = _at(engine, scenario, 0)
    # job 2 is under one leaf, job 3 below the share, job 4 has no leaves series
    assert [(a.labels, a.value) for a in got] == [({"job": "1", "phase": "allreduce"}, 0.6)]


def test_missing_labels_read_as_empty_and_empty_values_are_dropped() -> None:
    engine = AlertEngine(_book(
        {"name": "NoTenant", "metric": "m", "match": {"tenant": ""}, "op": ">=", "threshold": 0},
        {"name": "JoinMissing", "metric": "m", "op": ">=", "threshold": 0,
         "and": {"metric": "n", "op": ">=", "threshold": 0, "on": ["pool"]}}))
    scenario = [Series("m", {"job": "1", "tenant": ""}, (1,)),
                Series("m", {"job": "2", "tenant": "a"}, (1,)),
                Series("n", {"other": "x"}, (1,))]
    got = {(a.rule, a.labels["job"]) for a in _at(engine, scenario, 0)}
    # job 1's empty tenant is no tenant; both sides lack `pool`, which PromQL matches as ""
    assert got == {("NoTenant", "1"), ("JoinMissing", "1"), ("JoinMissing", "2")}
    alert = next(a for a in _at(engine, scenario, 0) if a.labels["job"] == "1")
    assert "tenant" not in alert.labels


def test_nan_passes_only_not_equal() -> None:
    ops = [(">", "Gt"), ("<", "Lt"), ("==", "Eq"), ("!=", "Ne"), (">=", "Ge"), ("<=", "Le")]
    engine = AlertEngine(_book(*({"name": name, "metric": "m", "op": op, "threshold": 1}
                                 for op, name in ops)))
    got = _at(engine, [Series("m", {"job": "1"}, (math.nan,))], 0)
    assert [a.rule for a in got] == ["Ne"]
    assert math.isnan(got[0].value) and got[0].summary == "s 1"
    assert got[0].to_dict()["value"] is None
    json.dumps(got[0].to_dict(), allow_nan=False)  # what an API response must survive


def test_sample_names_from_a_real_registry() -> None:
    registry = CollectorRegistry()
    Counter("grace_restarts", "restarts", ["cause"], registry=registry).labels("xid").inc(3)
    Gauge("grace_health_breaker_open", "breaker", registry=registry).set(1)
    engine = AlertEngine(_book(
        {"name": "Restarts", "metric": "grace_restarts_total", "op": ">", "threshold": 2},
        {"name": "Family", "metric": "grace_restarts", "op": ">", "threshold": 0},
        {"name": "Breaker", "metric": "grace_health_breaker_open", "op": "==", "threshold": 1,
         "severity": "critical"}))
    got = engine.evaluate(registry.collect(), now=0.0)
    # a counter is compared by its _total sample, as Prometheus stores it; its family name is no series
    assert [(a.rule, a.labels) for a in got] == [("Breaker", {}), ("Restarts", {"cause": "xid"})]


def test_order_firing_first_then_severity_then_runbook_order() -> None:
    engine = AlertEngine(_book(
        {"name": "InfoNow", "metric": "m", "op": ">", "threshold": 0, "severity": "info"},
        {"name": "CritLater", "metric": "m", "op": ">", "threshold": 0, "severity": "critical",
         "for": "1h"},
        {"name": "CritNow", "metric": "m", "op": ">", "threshold": 0, "severity": "critical"},
        {"name": "WarnNow", "metric": "m", "op": ">", "threshold": 0}))
    got = _at(engine, [Series("m", {"job": "1"}, (1,))], 0)
    assert [(a.rule, a.state) for a in got] == [
        ("CritNow", AlertState.FIRING), ("WarnNow", AlertState.FIRING),
        ("InfoNow", AlertState.FIRING), ("CritLater", AlertState.PENDING)]
    assert got[0].severity is Severity.CRITICAL


def test_rendering_and_the_json_shape() -> None:
    assert render("job {job} at {value} ({missing}) {not a placeholder}", {"job": "7"}, 0.4567) == \
        "job 7 at 0.457 () {not a placeholder}"
    assert [format_value(v) for v in (0.45, 150.0, 1234.0, math.inf, -math.inf)] == [
        "0.45", "150", "1.23e+03", "+Inf", "-Inf"]
    engine = AlertEngine(load_runbook())
    got = _at(engine, [Series("grace_health_breaker_open", {}, (1,))], 0)
    assert got[0].to_dict() == {
        "rule": "HealthBreakerOpen", "severity": "critical", "state": "firing", "labels": {},
        "value": 1.0, "active_since": 0.0, "summary": got[0].summary,
        "action": got[0].action, "reason": got[0].reason}
    assert "grace resume --reset-breaker" in got[0].action


def test_from_file_defaults_to_the_shipped_runbook() -> None:
    assert [r.name for r in AlertEngine.from_file().runbook.rules] == [
        r.name for r in load_runbook().rules]
