"""The runbook as PromQL and as a Prometheus rule file that promtool accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grace.observe.promql import alerting_rules, duration, expr, number, rules_yaml, template
from grace.observe.runbook_spec import load_runbook, parse_runbook

from .conftest import PromtoolRun

REPO = Path(__file__).resolve().parents[2]


def _one(**rule: object) -> dict[str, object]:
    return {"name": "R", "metric": "m", "op": ">", "threshold": 1, "severity": "info",
            "summary": "s", "action": "a", "reason": "r", **rule}


def test_expressions() -> None:
    book = load_runbook()
    assert expr(book.rule("DataWaitHigh")) == 'grace_job_wait_share{kind="io"} > 0.3'
    assert expr(book.rule("AllReduceMultiLeaf")) == (
        '(grace_job_phase_share{phase="allreduce"} > 0.4) and on(job) (grace_job_leaves > 1)')
    assert expr(book.rule("GpuIdleAllocated")) == (
        "(grace_gpu_allocation == 1) and on(Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL < 20)")
    assert expr(book.rule("HealthBreakerOpen")) == "grace_health_breaker_open == 1"
    odd = parse_runbook({"kind": "runbook", "rules": [_one(match={"path": 'a"b\\c\nd', "x": "y"})]})
    assert expr(odd.rules[0]) == 'm{path="a\\"b\\\\c\\nd",x="y"} > 1'


@pytest.mark.parametrize(("value", "text"), [(20.0, "20"), (0.3, "0.3"), (-1.0, "-1"), (1e-05, "1e-05"),
                                             (2.5e20, "2.5e+20")])
def test_numbers(value: float, text: str) -> None:
    assert number(value) == text


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (90, "1m30s"), (600, "10m"), (3600, "1h"),
                                               (5400, "1h30m"), (86400 * 8, "1w1d"), (1.5, "1s500ms")])
def test_durations(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_templates_and_rule_shape() -> None:
    assert template("job {job} at {value}; {not placeholder} {x-y}") == (
        'job {{ $labels.job }} at {{ $value | printf "%.3g" }}; {not placeholder} {x-y}')
    book = load_runbook()
    group = alerting_rules(book)["groups"][0]
    assert group["name"] == "grace" and len(group["rules"]) == len(book.rules)
    wait = group["rules"][0]
    assert wait["alert"] == "DataWaitHigh" and wait["for"] == "10m"
    assert wait["labels"] == {"severity": "warning"}
    assert wait["annotations"]["runbook_url"] == "docs/runbooks.md#datawaithigh"
    assert "{{ $labels.job }}" in wait["annotations"]["summary"]
    drained = next(r for r in group["rules"] if r["alert"] == "NodeDrained")
    assert "for" not in drained  # 0s: fires on the first evaluation, Prometheus' default
    assert "grace resume {{ $labels.node }} --diagnose" in drained["annotations"]["action"]


def test_committed_rule_file_is_what_the_runbook_generates() -> None:
    committed = (REPO / "deploy/prometheus/grace-rules.yml").read_text()
    generated = rules_yaml(load_runbook(), "the shipped runbook (src/grace/observe/data/runbooks.yaml)")
    assert committed == generated, ("deploy/prometheus/grace-rules.yml is stale; run "
                                    "grace runbooks --prometheus > deploy/prometheus/grace-rules.yml")
    assert yaml.safe_load(committed) == alerting_rules(load_runbook())


def test_promtool_checks_the_generated_rules(run_promtool: PromtoolRun, tmp_path: Path) -> None:
    shipped = tmp_path / "grace-rules.yml"
    shipped.write_text(rules_yaml(load_runbook()))
    odd = tmp_path / "odd.yml"
    odd.write_text(rules_yaml(parse_runbook({"kind": "runbook", "name": "odd", "rules": [
        _one(match={"path": 'a"b\\c'}, summary="{value} {job} {Hostname}", **{"for": "90s"}),
        _one(name="Joined", **{"and": {"metric": "n", "op": "!=", "threshold": 0,
                                       "on": ["job", "tenant"]}})]})))
    out = run_promtool("check", "rules", shipped, odd)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(load_runbook().rules)} rules found" in out.stdout
    assert "SUCCESS: 2 rules found" in out.stdout
    broken = tmp_path / "broken.yml"
    broken.write_text("groups:\n- name: x\n  rules:\n  - alert: X\n    expr: 'm >'\n")
    assert run_promtool("check", "rules", broken).returncode != 0  # promtool does check the PromQL
