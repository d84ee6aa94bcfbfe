"""deploy/: the Prometheus config promtool accepts, and a Grafana board that is valid JSON model
whose every query parses and names only metrics Grace exposes."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import yaml

from grace.observe.promql import rules_yaml
from grace.observe.runbook_spec import load_runbook

from .conftest import PromtoolRun
from .contract import CONTRACT_METRICS

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "deploy/prometheus/prometheus.yml"
DASHBOARD = REPO / "deploy/grafana/grace.json"
SCHEMA = Path(__file__).with_name("grafana_dashboard.schema.json")

#: PromQL words that are not metric names (functions are recognised by their "(")
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                       "group_left", "group_right", "inf", "nan"})
#: Grafana's variables, replaced by values PromQL parses, as Grafana would before sending
_GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m",
                      "$job": ".*", "$tenant": ".*"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals first: they may hold braces
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range selectors
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    words = re.findall(r"\b[A-Za-z_:][A-Za-z0-9_:]*\b(?!\s*\()", e)
    return {w for w in words if w.lower() not in _KEYWORDS}


def test_metric_names_reads_promql() -> None:
    assert metric_names('avg by (tenant) (a{tenant=~"$t"} * on(Hostname, gpu) group_left() b_total)') \
        == {"a", "b_total"}
    assert metric_names('histogram_quantile(0.95, sum by (le) (rate(x_bucket{a="}"}[5m])))') == {"x_bucket"}
    assert metric_names("sum(increase(c[1h])) > bool 2 and d") == {"c", "d"}


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _data_panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in board["panels"]:
        if p["type"] == "row":
            yield from p.get("panels", [])
        else:
            yield p


def _targets(board: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for p in _data_panels(board):
        for t in p["targets"]:
            yield p, t


def test_dashboard_matches_the_json_model_schema(board: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema_rs.meta.validate(schema)  # the schema itself is valid JSON Schema 2020-12
    validator = jsonschema_rs.Draft202012Validator(schema)
    errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in validator.iter_errors(board)]
    assert not errors, errors
    # the schema has teeth: a hard-coded datasource uid, a panel off the grid, a target
    # without a query and an unknown panel type are each refused
    for break_it in (
        lambda b: b["panels"][1]["datasource"].update(uid="P1809F7CD0C75ACF3"),
        lambda b: b["panels"][1]["gridPos"].update(w=25),
        lambda b: b["panels"][1]["targets"][0].pop("expr"),
        lambda b: b["panels"][1].update(type="graphx"),
        lambda b: b.pop("schemaVersion"),
    ):
        broken = json.loads(json.dumps(board))
        break_it(broken)
        assert not validator.is_valid(broken)


def test_dashboard_layout_and_variables(board: dict[str, Any]) -> None:
    assert 36 <= board["schemaVersion"] <= 41
    ids = [p["id"] for p in board["panels"]] + [p["id"] for r in board["panels"] if r["type"] == "row"
                                                for p in r.get("panels", [])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: dict[tuple[int, int], str] = {}
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert {"job", "tenant"} <= variables.keys()
    text = DASHBOARD.read_text()
    used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", text)) - {"__rate_interval", "__range", "__interval",
                                                             "__all"}
    assert used <= variables.keys(), used - variables.keys()
    uids = set(re.findall(r'"uid":\s*"([^"]*)"', text))
    assert uids <= {"${datasource}", "-- Grafana --", board["uid"]}, uids


def test_dashboard_shows_what_the_issue_asks(board: dict[str, Any]) -> None:
    exprs = [t["expr"] for _, t in _targets(board)]

    def some(pattern: str) -> bool:
        return any(re.search(pattern, e) for e in exprs)

    assert some(r'sum\(grace_gpus\{state="allocated"\}\) / sum\(grace_gpus\)')  # cluster utilization
    assert some(r"sum by \(reason\) \(grace_pending_jobs")  # queue by reason
    assert some(r"grace_tenant_gpus_held") and some(r"grace_tenant_gpu_hours_allocated_total") \
        and some(r"grace_tenant_gpu_hours_useful_total")  # per-tenant usage and showback
    assert some(r'sum by \(phase\) \(rate\(grace_job_phase_seconds_total\{job=~"\$job"\}')  # phases
    assert some(r"grace_gpu_allocation.* on\(Hostname, gpu\) group_left\(\) DCGM_FI_DEV_GPU_UTIL")


def test_dashboard_queries_name_only_grace_metrics(board: dict[str, Any]) -> None:
    for panel, target in _targets(board):
        names = metric_names(target["expr"])
        assert names, (panel["title"], target["expr"])
        assert names <= CONTRACT_METRICS, (panel["title"], names - CONTRACT_METRICS)
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((\w+), *(\w+)\)", v["definition"])
            assert m and m.group(1) in CONTRACT_METRICS, v["definition"]


def test_promtool_parses_every_dashboard_query(board: dict[str, Any], run_promtool: PromtoolRun,
                                               tmp_path: Path) -> None:
    rules = []
    for panel, target in _targets(board):
        expr = target["expr"]
        for var, value in _GRAFANA_VARIABLES.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, (panel["title"], expr)
        rules.append({"record": f"grafana:panel_{panel['id']}_{target['refId']}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "grafana", "rules": rules}]}, width=1000))
    out = run_promtool("check", "rules", path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout


def test_prometheus_config_scrapes_grace_with_a_token_file() -> None:
    text = PROMETHEUS.read_text()
    config = yaml.safe_load(text)
    assert config["rule_files"] == ["grace-rules.yml"]
    (grace,) = [j for j in config["scrape_configs"] if j["job_name"] == "grace"]
    assert grace["metrics_path"] == "/metrics"
    assert grace["authorization"] == {"type": "Bearer", "credentials_file": "grace.token"}
    assert grace["honor_labels"] is True  # Grace's own `job` label (the job id) must survive
    assert "# - job_name: dcgm" in text and "# - job_name: node" in text
    assert ":9400" in text and ":9100" in text


def test_promtool_checks_the_prometheus_config(run_promtool: PromtoolRun, tmp_path: Path) -> None:
    shutil.copy(PROMETHEUS, tmp_path / "prometheus.yml")
    (tmp_path / "grace-rules.yml").write_text(rules_yaml(load_runbook()))
    (tmp_path / "grace.token").write_text("a-viewer-token\n")
    out = run_promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 1 rule files found" in out.stdout
    assert f"SUCCESS: {len(load_runbook().rules)} rules found" in out.stdout
    (tmp_path / "grace.token").unlink()  # promtool does read what the config names
    assert run_promtool("check", "config", "prometheus.yml", cwd=tmp_path).returncode != 0
