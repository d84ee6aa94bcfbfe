"""The loader's contract: whole specs or one SpecError listing every problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from grace.spec import BUILTIN_GPUS, GpuModel, SpecError
from grace.spec.loader import detect_kind, load_jobs, parse_cluster, parse_jobs, read_yaml


def _job(name: str, **fields: object) -> dict[str, object]:
    return {"name": name, "gpus": 1, **fields}


def _cluster(**group: object) -> dict[str, object]:
    return {"name": "c", "node_groups": [{"name": "g", "gpu": "H100-SXM", **group}]}


def test_all_problems_of_a_job_list_are_listed() -> None:
    data = {"jobs": [
        _job("ok"),
        _job("bad-duration", runtime_limit="soon"),
        _job("ok-too"),
        _job("bad-gpus", gpus=-1),
    ]}
    with pytest.raises(SpecError) as info:
        parse_jobs(data)
    assert [p.path for p in info.value.problems] == ["jobs[1].runtime_limit", "jobs[3].gpus"]


def test_one_bad_job_means_no_job_is_returned() -> None:
    data = {"jobs": [_job("a"), _job("b", gpus_per_nod=8), _job("c")]}
    result = None
    with pytest.raises(SpecError) as info:
        result = parse_jobs(data)
    assert result is None
    assert len(info.value.problems) == 1
    assert str(info.value.problems[0]).startswith("jobs[1].gpus_per_nod: ")


def test_several_problems_in_one_job_are_all_listed() -> None:
    with pytest.raises(SpecError) as info:
        parse_jobs({"name": "x", "gpus": 1, "priorty": 5, "runtime_limit": "forever"})
    assert sorted(p.path for p in info.value.problems) == ["priorty", "runtime_limit"]


def test_missing_required_field_says_add_it() -> None:
    with pytest.raises(SpecError) as info:
        parse_jobs({"gpus": 1})
    (problem,) = info.value.problems
    assert problem.path == "name"
    assert "add it" in problem.message


def test_nested_paths_are_readable() -> None:
    with pytest.raises(SpecError) as info:
        parse_jobs({"name": "x", "gpus": 8, "model": {"params_b": 7, "parallelism": {"zero_stage": 4}}})
    assert [p.path for p in info.value.problems] == ["model.parallelism.zero_stage"]


def test_empty_job_list_is_rejected() -> None:
    with pytest.raises(SpecError, match="non-empty list"):
        parse_jobs({"jobs": []})


def test_a_list_item_that_is_not_a_mapping_is_named() -> None:
    with pytest.raises(SpecError) as info:
        parse_jobs({"jobs": [_job("a"), "b"]})
    assert [p.path for p in info.value.problems] == ["jobs[1]"]
    assert "expected a mapping" in info.value.problems[0].message


def test_job_gpu_model_is_checked_against_the_given_catalog() -> None:
    custom = GpuModel(name="X1", vram_gb=64, bf16_tflops=100, nvlink_gbps=0, board_watts=300,
                      usd_per_hour=1.0)
    catalog = {**BUILTIN_GPUS, "X1": custom}
    (job,) = parse_jobs(_job("a", gpu_model="X1"), catalog=catalog)
    assert job.gpu_model == "X1"
    with pytest.raises(SpecError, match="unknown GPU model 'X1'"):
        parse_jobs(_job("a", gpu_model="X1"))


def test_kind_is_detected_and_checked() -> None:
    assert detect_kind({"kind": "Cluster"}) == "cluster"
    assert detect_kind({"node_groups": []}) == "cluster"
    assert detect_kind({"name": "j", "gpus": 1}) == "job"
    assert detect_kind({"jobs": []}) == "job"
    with pytest.raises(SpecError) as info:
        parse_cluster({"kind": "job", "name": "j", "gpus": 1})
    assert info.value.problems[0].path == "kind"
    with pytest.raises(SpecError, match="expected kind 'job'"):
        parse_jobs({"kind": "cluster", **_cluster()})


def test_cluster_file_may_add_gpu_models() -> None:
    data = _cluster(gpu="X1")
    data["gpu_models"] = [{"name": "X1", "vram_gb": 64, "bf16_tflops": 100, "nvlink_gbps": 0,
                           "board_watts": 300, "usd_per_hour": 1.0}]
    spec = parse_cluster(data)
    assert "X1" in spec.catalog() and "H100-SXM" in spec.catalog()


@pytest.mark.parametrize(
    ("group", "phrase"),
    [
        ({"gpus_per_node": 4, "mig_gpus_per_node": 5}, "exceeds gpus_per_node"),
        ({"nodes_per_leaf": 20, "nvlink_domain_nodes": 18}, "multiple of"),
        ({"count": 2, "names": ["only-one"]}, "make them agree"),
        ({"name": "-bad"}, "node_groups[0].name"),
        ({"gpus_per_node": 0}, "node_groups[0].gpus_per_node"),
    ],
)
def test_node_group_consistency(group: dict[str, object], phrase: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_cluster(_cluster(**group))
    assert phrase in str(info.value)


def test_duplicate_group_and_pool_names_are_rejected() -> None:
    data = {"name": "c", "node_groups": [{"name": "g", "gpu": "L40S"}, {"name": "g", "gpu": "L40S"}]}
    with pytest.raises(SpecError, match=r"node_groups\[1\]\.name: duplicate"):
        parse_cluster(data)
    data = {"name": "c", "pools": [{"name": "p"}, {"name": "p"}],
            "node_groups": [{"name": "g", "gpu": "L40S"}]}
    with pytest.raises(SpecError, match="pool names must be unique"):
        parse_cluster(data)


def test_cluster_needs_a_node_group() -> None:
    with pytest.raises(SpecError) as info:
        parse_cluster({"name": "c", "node_groups": []})
    assert info.value.problems[0].path == "node_groups"


def test_default_pool_is_on_prem() -> None:
    spec = parse_cluster(_cluster())
    assert spec.pool_of(spec.node_groups[0]) == "on-prem"


def test_read_yaml_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read file"):
        read_yaml(tmp_path / "nope.yaml")


def test_duplicate_keys_are_caught_at_any_depth(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("name: c\nnode_groups:\n  - name: g\n    gpu: L40S\n    gpu: H100-SXM\n")
    with pytest.raises(SpecError) as info:
        read_yaml(path)
    (problem,) = info.value.problems
    assert problem.path == "line 5, column 5"
    assert "duplicate key 'gpu'" in problem.message


def test_a_file_that_is_a_list_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- name: a\n  gpus: 1\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        load_jobs(path)
