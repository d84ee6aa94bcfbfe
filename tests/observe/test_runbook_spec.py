"""``kind: runbook`` files: the shipped defaults load, bad files name the field and the fix."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from grace.cli.validate import check_file
from grace.observe.runbook_spec import Op, Severity, load_runbook, parse_runbook
from grace.spec.errors import SpecError

from .contract import CONTRACT_METRICS


def _rule(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "DataWaitHigh", "metric": "grace_job_wait_share",
                            "match": {"kind": "io"}, "op": ">", "threshold": 0.3, "for": "10m",
                            "severity": "warning", "summary": "job {job} waits",
                            "action": "raise workers", "reason": "GPUs idle"}
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def _problems(data: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as e:
        parse_runbook(data, "rb.yaml")
    return {p.path: p.message for p in e.value.problems}


def test_shipped_defaults_cover_the_issue_and_use_contract_metrics() -> None:
    book = load_runbook()
    by_name = {r.name: r for r in book.rules}
    wait = by_name["DataWaitHigh"]
    assert (wait.metric, wait.match, wait.op, wait.threshold, wait.for_s) == (
        "grace_job_wait_share", {"kind": "io"}, Op.GT, 0.30, 600.0)
    assert "local NVMe" in wait.action
    multi = by_name["AllReduceMultiLeaf"]
    assert multi.and_ is not None and (multi.and_.metric, multi.and_.on) == ("grace_job_leaves", ["job"])
    assert multi.threshold == 0.40 and "one leaf" in multi.action
    assert "grace resume --reset-breaker" in by_name["HealthBreakerOpen"].action
    idle = by_name["GpuIdleAllocated"]
    assert idle.and_ is not None and idle.and_.metric == "DCGM_FI_DEV_GPU_UTIL"
    assert (idle.and_.op, idle.and_.threshold, idle.and_.on, idle.for_s) == (
        Op.LT, 20, ["Hostname", "gpu"], 3600.0)
    assert "MIG" in idle.action
    drained = by_name["NodeDrained"]
    assert drained.for_s == 0 and "grace resume {node}" in drained.action
    assert by_name["CheckpointBound"].threshold == 0.10 and by_name["CheckpointBound"].for_s == 900
    assert {"HeartbeatStale", "GpuTemperatureHigh", "GoodputLow"} <= by_name.keys()
    used = {c.metric for r in book.rules for c in r.conditions}
    assert used <= CONTRACT_METRICS, used - CONTRACT_METRICS
    assert all(r.severity in Severity for r in book.rules)


def test_yaml_on_key_and_zero_for_are_read() -> None:
    text = """
kind: runbook
rules:
  - name: Joined
    metric: a
    op: ">"
    threshold: 1
    for: 0s
    and: {metric: b, op: "==", threshold: 1, on: [job, tenant]}
    severity: info
    summary: s
    action: a
    reason: r
"""
    rule = parse_runbook(yaml.safe_load(text)).rules[0]
    assert rule.for_s == 0.0 and rule.and_ is not None and rule.and_.on == ["job", "tenant"]
    assert parse_runbook({"kind": "runbook", "rules": [_rule(**{"for": 0})]}).rules[0].for_s == 0.0
    assert parse_runbook({"kind": "runbook", "rules": [_rule(**{"for": "1.5h"})]}).rules[0].for_s == 5400


def test_label_values_are_text_and_folded_text_is_one_line() -> None:
    rule = parse_runbook({"kind": "runbook", "rules": [_rule(
        match={"gpu": 0}, action="check the\n  storage   tier")]}).rules[0]
    assert rule.match == {"gpu": "0"} and rule.action == "check the storage tier"
    assert "quote" in _problems({"kind": "runbook", "rules": [_rule(match={"flag": True})]})[
        "rules[0].match.flag"]


@pytest.mark.parametrize(("over", "path", "fix"), [
    ({"name": "data_wait"}, "rules[0].name", "CamelCase"),
    ({"metric": "9bad"}, "rules[0].metric", "not a metric name"),
    ({"match": {"__name__": "x"}}, "rules[0].match", "not a label name"),
    ({"op": ""}, "rules[0].op", "quoted in YAML"),
    ({"op": "=~"}, "rules[0].op", "use one of"),
    ({"threshold": "high"}, "rules[0].threshold", "must be a number"),
    ({"threshold": float("inf")}, "rules[0].threshold", "finite"),
    ({"threshold": True}, "rules[0].threshold", "must be a number"),
    ({"for": "ten minutes"}, "rules[0].for", "cannot read duration"),
    ({"for": "0x"}, "rules[0].for", "cannot read duration '0x'"),
    ({"for": -5}, "rules[0].for", "positive"),
    ({"severity": "page"}, "rules[0].severity", "info, warning, critical"),
    ({"summary": "job {{ $labels.job }}"}, "rules[0].summary", "single braces"),
    ({"action": ""}, "rules[0].action", "at least 1 character"),
    ({"reason": None}, "rules[0].reason", "required field is missing"),
    ({"colour": "red"}, "rules[0].colour", "unknown field"),
    ({"and": {"metric": "b", "op": ">", "threshold": 1}}, "rules[0].and.on", "missing"),
    ({"and": {"metric": "b", "op": ">", "threshold": 1, "on": []}}, "rules[0].and.on",
     "at least 1 item"),
    ({"and": {"metric": "b", "op": ">", "threshold": 1, "on": ["job", "job"]}}, "rules[0].and.on",
     "listed twice"),
])
def test_bad_rule_names_field_and_fix(over: dict[str, Any], path: str, fix: str) -> None:
    problems = _problems({"kind": "runbook", "rules": [_rule(**over)]})
    assert path in problems, problems
    assert fix in problems[path], problems[path]


def test_file_level_problems() -> None:
    assert "kind: runbook" in _problems({"rules": [_rule()]})["kind"]
    assert "expected kind 'runbook'" in _problems({"kind": "health", "rules": [_rule()]})["kind"]
    assert "at least 1 item" in _problems({"kind": "runbook", "rules": []})["rules"]
    dup = _problems({"kind": "runbook", "rules": [_rule(), _rule(metric="other")]})
    assert "also rules[0]" in dup["rules[1].name"]
    assert "expected a mapping" in _problems(["not", "a", "mapping"])[""]


def test_grace_validate_knows_the_kind(tmp_path: Path) -> None:
    good = tmp_path / "rb.yaml"
    good.write_text(yaml.safe_dump({"kind": "runbook", "rules": [_rule()]}))
    assert re.match(r"runbook 'grace', 1 rule\(s\): DataWaitHigh", check_file(good))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"kind": "runbook", "rules": [_rule(op="gt")]}))
    with pytest.raises(SpecError, match=r"rules\[0\]\.op: unknown comparison 'gt'"):
        check_file(bad)


def test_load_runbook_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read file"):
        load_runbook(tmp_path / "absent.yaml")
