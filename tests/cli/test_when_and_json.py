"""``grace history --since/--until`` times and ``--json -`` on report verbs (fast, no server)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
import typer

from grace.cli.json_out import to_stdout, write_json
from grace.cli.views import parse_when

NOW = 1_800_000_000.0


@pytest.mark.parametrize("text, expected", [
    ("2d", NOW - 2 * 86400), ("12h", NOW - 12 * 3600), ("30m", NOW - 1800), ("90s", NOW - 90),
    ("1w", NOW - 7 * 86400), ("1.5h", NOW - 5400), ("now", NOW), ("all", 0.0),
    ("1700000000", 1_700_000_000.0),
    ("2026-12-01", datetime(2026, 12, 1).timestamp()),
    ("2026-12-01 14:30", datetime(2026, 12, 1, 14, 30).timestamp()),
])
def test_when_reads_spans_dates_and_epochs(text: str, expected: float) -> None:
    assert parse_when(text, NOW, "--since") == expected


def test_a_time_it_cannot_read_names_the_option_and_the_forms() -> None:
    with pytest.raises(typer.BadParameter) as e:
        parse_when("last tuesday", NOW, "--until")
    assert e.value.param_hint == "--until" and "2d" in str(e.value) and "2026-12-01" in str(e.value)


def test_json_dash_prints_whole_json_and_a_path_writes_a_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payload = {"at": Path("/x"), "name": "x" * 300, "rows": [1, 2]}
    assert to_stdout("-") and not to_stdout(tmp_path / "a.json") and not to_stdout(None)
    write_json("-", payload)
    printed = capsys.readouterr().out
    assert json.loads(printed) == {"at": "/x", "name": "x" * 300, "rows": [1, 2]}
    write_json(tmp_path / "sub" / "a.json", payload)
    assert json.loads((tmp_path / "sub" / "a.json").read_text())["name"] == "x" * 300
    assert not list((tmp_path / "sub").glob("*.tmp"))
