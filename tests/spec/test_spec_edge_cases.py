"""Spec-layer edge cases found in review: merge keys, list defaults, exact MIG names,
non-finite durations, every cross-reference problem listed with its path."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from grace.spec import BUILTIN_GPUS, SpecError
from grace.spec.loader import parse_cluster, parse_jobs, read_yaml


def test_h200_and_b200_mig_profile_names_match_nvidia() -> None:
    assert [p.name for p in BUILTIN_GPUS["H200"].mig_profiles] == [
        "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]
    assert [p.name for p in BUILTIN_GPUS["B200"].mig_profiles] == [
        "1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"]


def test_yaml_merge_keys_work(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "defaults: &d {tenant: research, gpus: 1}\n"
        "jobs:\n  - {<<: *d, name: a}\n  - {<<: *d, name: b, gpus: 2}\n"
    )
    data = read_yaml(path)
    jobs = parse_jobs({"jobs": data["jobs"]})
    assert [(j.tenant, j.gpus) for j in jobs] == [("research", 1), ("research", 2)]


def test_keys_beside_jobs_are_not_silently_dropped() -> None:
    data = {"tenant": "research", "jobs": [{"name": "a", "gpus": 1}]}
    try:
        (job,) = parse_jobs(data)
    except SpecError:
        return  # refusing the key is as good as applying it
    assert job.tenant == "research"


def test_a_cluster_needs_a_pool() -> None:
    with pytest.raises(SpecError):
        parse_cluster({"name": "c", "pools": [], "node_groups": [{"name": "g", "gpu": "L40S"}]})


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_durations_must_be_finite(value: float) -> None:
    with pytest.raises(SpecError):
        parse_jobs({"name": "a", "gpus": 1, "runtime_limit": value})


def test_all_cross_reference_problems_are_listed_with_paths() -> None:
    data = {"name": "c", "node_groups": [
        {"name": "a", "gpu": "H100-PCIe"},
        {"name": "b", "gpu": "L40S", "gpus_per_node": 4, "mig_gpus_per_node": 1},
    ]}
    with pytest.raises(SpecError) as info:
        parse_cluster(data)
    assert [p.path for p in info.value.problems] == [
        "node_groups[0].gpu", "node_groups[1].mig_gpus_per_node"]


@pytest.mark.parametrize("content", [b"name: x\n[a, b]: 1\n", b"name: \xff\xfe\n"])
def test_any_unreadable_file_is_a_spec_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "odd.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError):
        read_yaml(path)
