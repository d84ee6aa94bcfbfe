"""Grace's alert engine and Prometheus agree: the same series, the same firing alerts.

For each scenario Grace's :class:`AlertEngine` is run once a minute over the
series as prometheus_client metric families; the alerts it says are firing at
chosen minutes become the expectations of a ``promtool test rules`` file that
runs the generated alerting rules over the same series. promtool fails on any
difference (a missing or extra alert, other labels, other annotations), so a
pass means the two evaluators fire the same alerts with the same text. Every
rule of the file is checked at every chosen minute, so "not firing" is
compared too, and each scenario also asserts what Grace found, so an empty
agreement cannot pass.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from grace.observe.alerts import Alert, AlertEngine, AlertState
from grace.observe.promql import rules_yaml, runbook_url
from grace.observe.runbook_spec import RunbookSpec, load_runbook, parse_runbook

from .conftest import PromtoolRun
from .series import Series, families_at, steady


def _grace(book: RunbookSpec, scenario: list[Series], until: int) -> dict[int, list[Alert]]:
    """Grace's alerts (pending and firing) after evaluating at every minute 0..until."""
    engine = AlertEngine(book)
    return {step: engine.evaluate(families_at(scenario, step), now=60.0 * step)
            for step in range(until + 1)}


def _expected(book: RunbookSpec, alert: Alert) -> dict[str, Any]:
    return {"exp_labels": {**alert.labels, "severity": alert.severity.value},
            "exp_annotations": {"summary": alert.summary, "action": alert.action,
                                "reason": alert.reason,
                                "runbook_url": runbook_url(book, book.rule(alert.rule))}}


def _unit_test(book: RunbookSpec, scenario: list[Series], found: dict[int, list[Alert]],
               eval_minutes: list[int]) -> dict[str, Any]:
    tests = []
    for minute in eval_minutes:
        for rule in book.rules:
            firing = [a for a in found[minute] if a.rule == rule.name and a.state is AlertState.FIRING]
            tests.append({"eval_time": f"{minute}m", "alertname": rule.name,
                          "exp_alerts": [_expected(book, a) for a in firing]})
    return {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m",
                       "input_series": [{"series": s.promtool(), "values": s.promtool_values()}
                                        for s in scenario],
                       "alert_rule_test": tests}]}


def _promtool_agrees(run_promtool: PromtoolRun, tmp_path: Path, book: RunbookSpec,
                     scenario: list[Series], found: dict[int, list[Alert]],
                     eval_minutes: list[int]) -> None:
    (tmp_path / "rules.yml").write_text(rules_yaml(book))
    unit = _unit_test(book, scenario, found, eval_minutes)
    (tmp_path / "test.yml").write_text(yaml.safe_dump(unit, sort_keys=False, width=1000))
    out = run_promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert out.returncode == 0, f"promtool disagrees with Grace:\n{out.stdout}\n{out.stderr}"

    # the referee is awake: one firing alert left out of the expectations must fail it
    wrong = next(t for t in unit["tests"][0]["alert_rule_test"] if t["exp_alerts"])
    wrong["exp_alerts"] = wrong["exp_alerts"][1:]
    (tmp_path / "wrong.yml").write_text(yaml.safe_dump(unit, sort_keys=False, width=1000))
    assert run_promtool("test", "rules", "wrong.yml", cwd=tmp_path).returncode != 0


def _firing(found: dict[int, list[Alert]], minute: int) -> set[tuple[str, str]]:
    """(rule, the label that names what alerts) for each firing alert at ``minute``."""
    return {(a.rule, a.labels.get("job") or a.labels.get("node") or a.labels.get("gpu") or "")
            for a in found[minute] if a.state is AlertState.FIRING}


def _pending(found: dict[int, list[Alert]], minute: int) -> set[tuple[str, str]]:
    return {(a.rule, a.labels.get("job") or a.labels.get("node") or "")
            for a in found[minute] if a.state is AlertState.PENDING}


def test_shipped_runbook_fires_as_prometheus_does(run_promtool: PromtoolRun, tmp_path: Path) -> None:
    n = 61  # one value a minute, 0..60
    ckpt = tuple(0.05 if step == 8 else 0.2 for step in range(n))  # dips once: `for` starts over
    scenario = [
        Series("grace_job_wait_share", {"job": "1", "tenant": "vision", "kind": "io"}, steady(0.5, n)),
        Series("grace_job_wait_share", {"job": "2", "tenant": "vision", "kind": "io"}, steady(0.2, n)),
        Series("grace_job_wait_share", {"job": "3", "tenant": "nlp", "kind": "sync"}, steady(0.45, n)),
        Series("grace_job_phase_share", {"job": "4", "tenant": "nlp", "phase": "allreduce"},
               steady(0.6, n)),
        Series("grace_job_leaves", {"job": "4", "tenant": "nlp"}, steady(2, n)),
        Series("grace_job_phase_share", {"job": "5", "tenant": "nlp", "phase": "allreduce"},
               steady(0.6, n)),
        Series("grace_job_leaves", {"job": "5", "tenant": "nlp"}, steady(1, n)),
        Series("grace_node_state", {"node": "n1", "state": "drained"}, steady(1, n)),
        Series("grace_node_state", {"node": "n2", "state": "drained"}, steady(0, n)),
        Series("grace_node_state", {"node": "n3", "state": "drained"}, (1, 1, 1, *steady(None, n - 3))),
        Series("grace_health_breaker_open", {}, steady(0, n)),
        Series("grace_gpu_allocation", {"Hostname": "h1", "gpu": "0", "job": "6", "tenant": "rl"},
               steady(1, n)),
        Series("grace_gpu_allocation", {"Hostname": "h1", "gpu": "2", "job": "6", "tenant": "rl"},
               steady(1, n)),
        Series("DCGM_FI_DEV_GPU_UTIL", {"Hostname": "h1", "gpu": "0"}, steady(5, n)),
        Series("DCGM_FI_DEV_GPU_UTIL", {"Hostname": "h1", "gpu": "1"}, steady(5, n)),  # not allocated
        Series("DCGM_FI_DEV_GPU_UTIL", {"Hostname": "h1", "gpu": "2"}, steady(90, n)),
        Series("grace_job_phase_share", {"job": "7", "tenant": "rl", "phase": "checkpoint"}, ckpt),
        Series("grace_job_heartbeat_age_seconds", {"job": "8", "tenant": "rl"}, steady(200, n)),
        Series("grace_job_goodput_ratio", {"job": "9", "tenant": "rl"}, steady(0.5, n)),
        Series("DCGM_FI_DEV_GPU_TEMP", {"Hostname": "h2", "gpu": "3"}, steady(90, n)),
    ]
    book = load_runbook()
    minutes = [0, 1, 5, 10, 15, 25, 30, 60]
    found = _grace(book, scenario, max(minutes))

    assert _firing(found, 0) == {("NodeDrained", "n1"), ("NodeDrained", "n3")}
    assert ("DataWaitHigh", "1") in _pending(found, 5) and ("HeartbeatStale", "8") in _pending(found, 0)
    assert _firing(found, 5) == {("NodeDrained", "n1"), ("HeartbeatStale", "8"),
                                 ("GpuTemperatureHigh", "3")}
    assert _firing(found, 10) - _firing(found, 5) == {
        ("DataWaitHigh", "1"), ("SyncWaitHigh", "3"), ("AllReduceMultiLeaf", "4")}
    assert ("CheckpointBound", "7") in _pending(found, 15)  # it dipped at minute 8
    assert ("CheckpointBound", "7") in _firing(found, 25)
    assert ("GoodputLow", "9") in _firing(found, 30) and ("GpuIdleAllocated", "6") not in _firing(found, 30)
    assert ("GpuIdleAllocated", "6") in _firing(found, 60)
    idle = next(a for a in found[60] if a.rule == "GpuIdleAllocated")
    assert idle.labels == {"Hostname": "h1", "gpu": "0", "job": "6", "tenant": "rl"}
    assert "held by job 6 of rl" in idle.summary
    assert len({a.rule for a in found[60]}) == 9  # every rule but the closed breaker

    _promtool_agrees(run_promtool, tmp_path, book, scenario, found, minutes)


def test_every_operator_nan_and_joins_agree(run_promtool: PromtoolRun, tmp_path: Path) -> None:
    ops = {"Gt": ">", "Ge": ">=", "Lt": "<", "Le": "<=", "Eq": "==", "Ne": "!="}
    rules: list[dict[str, Any]] = [
        {"name": name, "metric": "m_total", "op": op, "threshold": 1} for name, op in ops.items()]
    rules += [
        {"name": "Held", "metric": "m_total", "op": ">", "threshold": 0, "for": "2m"},
        {"name": "NoTenant", "metric": "m_total", "match": {"tenant": ""}, "op": "!=",
         "threshold": -99},
        {"name": "TwoLabels", "metric": "m_total", "op": ">=", "threshold": 0,
         "and": {"metric": "n", "match": {"kind": "x"}, "op": "<", "threshold": 5,
                 "on": ["job", "tenant"]}},
    ]
    book = parse_runbook({"kind": "runbook", "rules": [
        {"severity": "info", "summary": "{job}/{tenant} at {value}",
         "action": "look at {job}, {absent}", "reason": "{value} vs threshold", **r} for r in rules]})
    values = (0.0, 1.0, 2.0, math.nan, -1.0, 0.001, 1.0, 3.0)
    n = len(values)
    scenario = [
        Series("m_total", {"job": "a", "tenant": "t"}, values),
        Series("m_total", {"job": "b"}, tuple(reversed(values))),
        Series("n", {"job": "a", "tenant": "t", "kind": "x"}, steady(1, n)),
        Series("n", {"job": "b", "tenant": "t", "kind": "x"}, steady(1, n)),  # b has no tenant
        Series("n", {"job": "b", "kind": "y"}, steady(1, n)),  # right labels, wrong match
    ]
    minutes = list(range(n))
    found = _grace(book, scenario, n - 1)

    counts = Counter(a.rule for m in minutes for a in found[m] if a.state is AlertState.FIRING)
    assert counts["Ne"] > 0 and counts["Eq"] > 0 and counts["Gt"] > 0 and counts["Lt"] > 0
    assert any(a.rule == "Ne" and math.isnan(a.value) and "NaN" in a.summary for a in found[3])
    assert {a.labels["job"] for a in found[0] if a.rule == "NoTenant"} == {"b"}
    assert {a.labels["job"] for m in minutes for a in found[m] if a.rule == "TwoLabels"} == {"a"}
    held = [a.state for m in minutes for a in found[m] if a.rule == "Held" and a.labels["job"] == "a"]
    assert AlertState.PENDING in held and AlertState.FIRING in held

    _promtool_agrees(run_promtool, tmp_path, book, scenario, found, minutes)
