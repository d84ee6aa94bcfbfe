"""``grace runbooks`` (table, --prometheus, --markdown, --file), docs/runbooks.md, ``grace alerts``."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from grace.cli.main import app
from grace.observe.promql import rules_yaml
from grace.observe.runbook_docs import render_markdown
from grace.observe.runbook_spec import anchor, load_runbook

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
NARROW = {"COLUMNS": "80", "TERM": "dumb"}


def _words(text: str) -> set[str]:
    """The words of a Rich table, borders removed (wrapped cells interleave, so words, not phrases)."""
    return set(re.sub(r"[\u2500-\u257f]", " ", text).split())


def _lines_fit(text: str, width: int = 80) -> None:
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, too_long


def test_table_lists_every_rule_within_80_columns() -> None:
    out = runner.invoke(app, ["runbooks"], env=NARROW)
    assert out.exit_code == 0, out.output
    _lines_fit(out.output)
    for rule in load_runbook().rules:
        assert rule.name in out.output
    assert "…" not in out.output  # folded, never cut
    words = _words(out.output)
    assert {"10m", "1h", "0s", "--reset-breaker`.", "NVMe"} <= words


def test_prometheus_flag_prints_the_rule_file() -> None:
    out = runner.invoke(app, ["runbooks", "--prometheus"])
    assert out.exit_code == 0, out.output
    assert out.stdout == (REPO / "deploy/prometheus/grace-rules.yml").read_text()
    assert yaml.safe_load(out.stdout)["groups"][0]["rules"][0]["alert"] == "DataWaitHigh"


def test_markdown_is_the_committed_docs_page() -> None:
    out = runner.invoke(app, ["runbooks", "--markdown"])
    assert out.exit_code == 0, out.output
    committed = (REPO / "docs/runbooks.md").read_text()
    assert out.stdout == committed, ("docs/runbooks.md is stale: run "
                                     "grace runbooks --markdown > docs/runbooks.md")
    book = load_runbook()
    headings = re.findall(r"^## (\w+)$", committed, flags=re.MULTILINE)
    assert headings == [r.name for r in book.rules]
    for rule in book.rules:  # the index links to the anchors every runbook_url points at
        assert f"[{rule.name}](#{anchor(rule)})" in committed
        assert rule.action in committed and rule.reason in committed


def test_custom_file_and_bad_input(tmp_path: Path) -> None:
    custom = tmp_path / "mine.yaml"
    custom.write_text(yaml.safe_dump({"kind": "runbook", "name": "lab", "rules": [{
        "name": "Hot", "metric": "DCGM_FI_DEV_GPU_TEMP", "op": ">", "threshold": 80, "for": "2m",
        "severity": "critical", "summary": "GPU {gpu} hot", "action": "cool it", "reason": "clocks"}]}))
    table = runner.invoke(app, ["runbooks", "--file", str(custom)], env=NARROW)
    assert table.exit_code == 0 and "Hot" in table.output and "runbook 'lab'" in table.output
    rules = runner.invoke(app, ["runbooks", "--file", str(custom), "--prometheus"])
    assert rules.stdout == rules_yaml(load_runbook(custom), str(custom))
    assert "expr: DCGM_FI_DEV_GPU_TEMP > 80" in rules.stdout
    docs = runner.invoke(app, ["runbooks", "--file", str(custom), "--markdown"])
    assert docs.stdout == render_markdown(load_runbook(custom), str(custom))

    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: runbook\nrules:\n  - name: hot\n    metric: m\n    op: '>'\n    threshold: 1\n"
                   "    severity: page\n    summary: s\n    action: a\n    reason: r\n")
    out = runner.invoke(app, ["runbooks", "--file", str(bad)])
    assert out.exit_code == 2
    assert "rules[0].name" in out.output and "CamelCase" in out.output
    assert "rules[0].severity" in out.output
    both = runner.invoke(app, ["runbooks", "--prometheus", "--markdown"])
    assert both.exit_code == 2 and "not both" in both.output


def _rows(now: float) -> list[dict[str, Any]]:
    return [{"rule": "NodeDrained", "severity": "warning", "state": "firing",
     "labels": {"node": "gpu-node-17", "state": "drained"}, "value": 1.0,
     "active_since": now - 300, "summary": "node gpu-node-17 is drained; its GPUs are out "
     "of service", "action": "Read why in `grace nodes` (reason and who drained it), repair what it "
     "names, then return it with `grace resume gpu-node-17 --diagnose`", "reason": "fewer GPUs"},
    {"rule": "AllReduceMultiLeaf", "severity": "warning", "state": "pending",
     "labels": {"job": "12", "tenant": "research"}, "value": 0.61, "active_since": now - 30,
     "summary": "job 12 (research) spends 0.61 of each step in all-reduce across leaf switches",
     "action": "Reschedule it under one leaf switch", "reason": "the spine"},
    ]


@dataclass
class FakeApi:
    """What ``GET /alerts`` answers, and each request the CLI made."""

    rows: list[dict[str, Any]]
    requests: list[httpx.Request] = field(default_factory=list)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    """The API answered without a server, reached the way every API command reaches it."""
    fake = FakeApi(_rows(time.time()))

    def request(method: str, url: str, **kw: Any) -> httpx.Response:
        req = httpx.Request(method, url, headers=kw.get("headers"))
        fake.requests.append(req)
        return httpx.Response(200, json=fake.rows, request=req)

    monkeypatch.setattr(httpx, "request", request)
    monkeypatch.setenv("GRACE_URL", "http://grace.example:9999")
    monkeypatch.setenv("GRACE_TOKEN", "viewer-token")
    return fake


def test_alerts_table_json_and_empty(api: FakeApi) -> None:
    out = runner.invoke(app, ["alerts"], env=NARROW)
    assert out.exit_code == 0, out.output
    _lines_fit(out.output)
    assert "1 firing, 1 pending" in out.output
    words = _words(out.output)
    assert {"NodeDrained", "AllReduceMultiLeaf", "5m", "gpu-node-17", "--diagnose`"} <= words
    assert any(re.fullmatch(r"3[0-9]s", w) for w in words)  # the pending one, 30 s old
    req = api.requests[-1]
    assert (req.method, str(req.url)) == ("GET", "http://grace.example:9999/alerts")
    assert req.headers["Authorization"] == "Bearer viewer-token"

    as_json = runner.invoke(app, ["alerts", "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == api.rows

    api.rows = []
    empty = runner.invoke(app, ["alerts"], env=NARROW)
    assert empty.exit_code == 0 and "no alerts" in empty.output
