"""``grace validate`` accepts every example file of every kind and rejects every broken one.

The examples are what users copy, so each must pass the command that checks
them; the files under examples/broken must each fail it. The kind of each file
is pinned too, so a price book or bursting file never passes by being read as
something else.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from grace.cli.main import app
from grace.cli.validate import kind_of
from grace.spec.loader import read_yaml

_EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GOOD = sorted(p for p in _EXAMPLES.rglob("*.yaml") if "broken" not in p.parts)
BROKEN = sorted((_EXAMPLES / "broken").glob("*.yaml"))
runner = CliRunner()

#: the kind of every example outside clusters/ and jobs/ (a new one needs a row)
OTHER_KINDS = {"bursting.yaml": "bursting", "health.yaml": "health", "prices.yaml": "prices",
               "admission.yaml": "admission", "notify.yaml": "notify"}


def _id(p: Path) -> str:
    return str(p.relative_to(_EXAMPLES))


def validate(*args: str | Path) -> tuple[int, str]:
    """Exit code and output with Rich's line wrapping undone."""
    r = runner.invoke(app, ["validate", *map(str, args)])
    return r.exit_code, " ".join(r.output.split())


@pytest.mark.parametrize("path", GOOD, ids=[_id(p) for p in GOOD])
def test_every_example_validates(path: Path) -> None:
    code, text = validate(path)
    assert code == 0, text
    assert text.startswith(f"ok {path}")


def test_every_example_has_a_known_kind() -> None:
    folder_kind = {"clusters": "cluster", "jobs": "job"}
    for path in GOOD:
        expected = folder_kind.get(path.parent.name) or OTHER_KINDS.get(path.name)
        if path.name == "sweep.yaml":  # in jobs/: a kind: sweep expands to its trials' jobs
            expected = "sweep"
        assert expected is not None, f"{_id(path)}: add its kind to OTHER_KINDS"
        assert kind_of(read_yaml(path)) == expected, _id(path)


@pytest.mark.parametrize("path", BROKEN, ids=[_id(p) for p in BROKEN])
def test_every_broken_example_is_rejected(path: Path) -> None:
    code, text = validate(path)
    assert code == 1
    assert f"invalid {path}" in text


def test_a_job_asking_for_gpus_is_not_taken_for_a_price_book() -> None:
    assert kind_of({"gpus": 8}) == "job"
    assert kind_of({"gpus": {"H100-SXM": {"server_capex_per_node_usd": 1}}}) == "prices"


def test_bursting_offers_are_checked_against_the_cluster_given() -> None:
    code, text = validate("--cluster", _EXAMPLES / "clusters" / "philly-busy-70.yaml",
                          _EXAMPLES / "bursting.yaml")
    assert code == 0, text
    assert "fits cluster 'philly-busy-70'" in text
    # hybrid.yaml's cloud pool holds A100s, and it has no on-demand pool
    code, text = validate("--cluster", _EXAMPLES / "clusters" / "hybrid.yaml",
                          _EXAMPLES / "bursting.yaml")
    assert code == 1
    assert "2 problem(s)" in text
    assert "offers[0].gpu: 'P100' but node group 'spot-a100'" in text
    assert "offers[1].pool: cluster 'hybrid' has no pool 'cloud-on-demand'" in text


def test_a_bad_bursting_file_lists_every_bad_field(tmp_path: Path) -> None:
    path = tmp_path / "bursting.yaml"
    path.write_text("kind: bursting\nqueue_wait_threshold: 1h\noffers:\n"
                    "  - {name: od, gpu: P100, kind: on-demand, usd_per_gpu_hour: -1}\n")
    code, text = validate(path)
    assert code == 1
    assert "2 problem(s)" in text
    assert "queue_wait_threshold: unknown field" in text
    assert "offers[0].usd_per_gpu_hour" in text


def test_a_bad_price_book_and_health_file_are_rejected_with_the_field(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("owned:\n  pue: fast\n")
    health = tmp_path / "health.yaml"
    health.write_text("kind: health\nrules:\n  xid:94: reboot\n")
    code, text = validate(prices, health)
    assert code == 1
    assert "owned.pue" in text
    assert "xid:94: unknown action 'reboot'" in text


def test_an_unknown_kind_names_the_kinds_there_are(tmp_path: Path) -> None:
    path = tmp_path / "quota.yaml"
    path.write_text("kind: quota\n")
    code, text = validate(path)
    assert code == 1
    assert "unknown kind 'quota'" in text
