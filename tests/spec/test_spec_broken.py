"""Each file in examples/broken fails with a SpecError that names the bad field and a fix.

The table below is the specification: one row per broken file, with the field
path the error must name and a phrase of the fix it must suggest. A new broken
file needs a row (``test_every_broken_file_has_a_row``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from grace.spec import SpecError

_BROKEN = Path(__file__).resolve().parents[2] / "examples" / "broken"


@dataclass(frozen=True)
class Broken:
    file: str
    path: str  # the field path (or YAML position) the error must name
    hint: str  # a phrase of the fix it must suggest
    problems: int = 1


CASES = [
    Broken("unknown-gpu", "node_groups[0].gpu", "use one of"),
    Broken("typo-field", "node_groups[0].gpus_per_nod", "check its spelling"),
    Broken("negative-count", "node_groups[0].count", "greater than or equal to 1"),
    Broken("bad-duration", "runtime_limit", "'90m'"),
    Broken("fractional-gpus", "gpus=2.5", "round it"),
    Broken("nodes-without-gpus-per-node", "gpus_per_node", "set both or neither"),
    Broken("yaml-syntax", "line 7, column 1", "invalid YAML"),
    Broken("duplicate-key", "duplicate key 'gpus'", "keep only one"),
    Broken("mig-on-l40s", "node_groups[1].mig_gpus_per_node", "set it to 0"),
    Broken("undeclared-pool", "node_groups[0].pool", "declare it under pools"),
    Broken("estimate-over-limit", "runtime_limit", "raise the limit or lower the estimate"),
    Broken("empty", "file is empty", "write a cluster or job spec"),
    Broken("two-bad-jobs", "jobs[1].gpus_per_nod", "use one of", problems=2),
]


def test_every_broken_file_has_a_row() -> None:
    on_disk = {p.stem for p in _BROKEN.glob("*.yaml")}
    assert on_disk == {c.file for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_broken_file_is_rejected_with_path_and_fix(case: Broken, load_spec) -> None:
    path = _BROKEN / f"{case.file}.yaml"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    err = info.value
    text = str(err)
    assert case.path in text
    assert case.hint in text
    assert len(err.problems) == case.problems, text
    assert err.source == str(path)
    assert text.startswith(f"{path}: {case.problems} problem(s)")


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_broken_file_says_what_is_wrong_in_its_header(case: Broken) -> None:
    assert (_BROKEN / f"{case.file}.yaml").read_text().startswith("# BROKEN: ")


def test_two_bad_jobs_names_both_and_returns_none(load_spec) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(_BROKEN / "two-bad-jobs.yaml")
    paths = [p.path for p in info.value.problems]
    assert paths == ["jobs[1].gpus_per_nod", "jobs[3].gpu_model"]
