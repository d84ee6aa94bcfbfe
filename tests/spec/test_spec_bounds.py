"""A job spec refuses what no store, no arithmetic and no terminal can hold, naming the field.

These are the inputs an API fuzzer found to crash the control plane with a 500:
``Infinity`` for a number (json.loads accepts it), integers past 64 bits, names
longer than their column, NUL bytes (PostgreSQL cannot store them). Each must be
a ValidationError, hence a 422, never any other exception.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from grace.spec.cluster import ClusterSpec
from grace.spec.errors import SpecError, from_validation_error
from grace.spec.job import JobSpec
from grace.spec.loader import parse_jobs
from grace.spec.text_limits import STORED, name_problem, tenant_problem, text_problem

GOOD: dict[str, Any] = {"name": "j", "gpus": 1, "command": ["python", "train.py"]}


def problems_of(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) of every problem, as the API lists them; [] when the spec is valid."""
    try:
        JobSpec.model_validate(body)
    except ValidationError as e:
        return [(p.path, p.message) for p in from_validation_error("request", e).problems]
    return []


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(("change", "field"), [
    ({"gpus": INF}, "gpus"),
    ({"gpus": NAN}, "gpus"),
    ({"gpus": "Infinity"}, "gpus"),
    ({"min_vram_gb": INF}, "min_vram_gb"),
    ({"memory_gb": INF}, "memory_gb"),
    ({"dataset_gb": INF}, "dataset_gb"),
    ({"runtime_limit": INF}, "runtime_limit"),
    ({"runtime_estimate": NAN}, "runtime_estimate"),
    ({"model": {"params_b": NAN}}, "model.params_b"),
    ({"model": {"params_b": 1, "activation_gb": INF}}, "model.activation_gb"),
])
def test_inf_and_nan_are_refused_at_their_field(change: dict[str, Any], field: str) -> None:
    found = problems_of({**GOOD, **change})
    assert [f for f, _ in found] == [field], found


def test_infinity_from_json_is_a_validation_error_not_a_crash() -> None:
    # Python's json module (FastAPI's parser) turns the bare word Infinity into float('inf');
    # before this, int(inf) in the shape check raised OverflowError: a 500.
    body = json.loads('{"name": "j", "gpus": Infinity, "command": ["python"]}')
    assert [f for f, _ in problems_of(body)] == ["gpus"]


def test_yaml_inf_is_refused_in_a_job_file() -> None:
    with pytest.raises(SpecError) as e:
        parse_jobs(yaml.safe_load("name: j\ngpus: .inf\ncommand: [python]\n"))
    assert [p.path for p in e.value.problems] == ["gpus"]


@pytest.mark.parametrize(("change", "field"), [
    ({"nodes": 2**63, "gpus_per_node": 8, "gpus": None}, "nodes"),
    ({"nodes": 2, "gpus_per_node": 2**64, "gpus": None}, "gpus_per_node"),
    ({"gpus": 10**400}, "gpus"),
    ({"priority": 2**63}, "priority"),
    ({"elastic": {"min_gpus": 1, "max_gpus": 2**70}}, "elastic.max_gpus"),
    ({"model": {"params_b": 1, "parallelism": {"data": 2**63}}}, "model.parallelism.data"),
    ({"runtime_limit": 1e300}, "runtime_limit"),
])
def test_integers_and_durations_past_their_bounds_are_refused(change: dict[str, Any],
                                                              field: str) -> None:
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    found = problems_of(body)
    assert field in [f for f, _ in found], found


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"name": "a\0b"}, "name", "NUL byte"),
    ({"name": "line\nbreak"}, "name", "control character"),
    ({"name": "x" * 201}, "name", "at most 200 characters"),
    ({"name": "   "}, "name", "blank"),
    ({"name": "\ud800"}, "name", "valid string"),  # pydantic refuses lone surrogates itself
    ({"tenant": "a b"}, "tenant", "not a valid tenant name"),
    ({"tenant": "-lead"}, "tenant", "starting with a letter or digit"),
    ({"tenant": "t\0"}, "tenant", "not a valid tenant name"),
    ({"tenant": "x" * 64}, "tenant", "use 1 to 63 letters"),
    ({"gpu_model": "A100\0"}, "gpu_model", "NUL byte"),
    ({"gpu_model": "x" * 65}, "gpu_model", "at most 64"),
])
def test_names_outside_their_character_set_or_length_are_refused(
        change: dict[str, Any], field: str, words: str) -> None:
    found = problems_of({**GOOD, **change})
    assert [f for f, _ in found] == [field], found
    assert words in found[0][1], found


@pytest.mark.parametrize("name", ["train-llama 70b (run 3)", "模型训练", "x" * 200])
def test_printable_names_up_to_the_column_width_are_accepted(name: str) -> None:
    assert problems_of({**GOOD, "name": name}) == []


@pytest.mark.parametrize("tenant", ["research", "a", "team.vision_2-b", "x" * 63])
def test_tenant_names_in_the_character_set_are_accepted(tenant: str) -> None:
    assert problems_of({**GOOD, "tenant": tenant}) == []


def test_a_huge_value_is_not_echoed_back_whole() -> None:
    # a 10 MB name must give a short message: the error is sent back and logged
    found = problems_of({**GOOD, "name": "x" * 10_000_000})
    assert [f for f, _ in found] == ["name"]
    assert len(found[0][1]) < 300, len(found[0][1])


def test_the_openapi_schema_documents_the_bounds() -> None:
    props = JobSpec.model_json_schema()["properties"]
    assert props["name"]["maxLength"] == 200
    assert props["tenant"]["maxLength"] == 63
    assert props["tenant"]["pattern"].startswith("^[A-Za-z0-9]")
    assert props["priority"]["maximum"] == 1000


def test_free_text_allows_newlines_but_not_nul_or_escapes() -> None:
    assert text_problem("line one\nline two\ttab", "the reason") is None
    assert "NUL byte" in (text_problem("a\0", "the reason") or "")
    assert "control character" in (text_problem("\x1b[31mred", "the reason") or "")
    assert "at most 10" in (text_problem("x" * 11, "the reason", max_chars=10) or "")
    assert name_problem("n1", "the node") is None
    assert tenant_problem("research") is None


def test_a_stored_spec_from_before_the_edge_checks_still_loads() -> None:
    # a job submitted before these checks (a tenant with a space, a 300-character name on
    # SQLite) is read back by the reconciler every cycle: it must load, not fail forever
    old = {**GOOD, "tenant": "my team", "name": "n\t" + "x" * 300}
    assert [f for f, _ in problems_of(old)] == ["name", "tenant"]  # refused at the edge
    spec = JobSpec.model_validate(old, context=STORED)
    assert (spec.tenant, len(spec.name)) == ("my team", 302)
    with pytest.raises(ValidationError):  # what never could be stored is still refused
        JobSpec.model_validate({**old, "gpus": INF}, context=STORED)


def test_a_cluster_file_refuses_inf_too() -> None:
    with pytest.raises(ValidationError, match="finite"):
        ClusterSpec.model_validate({"name": "c", "node_groups": [
            {"name": "g", "gpu": "A100-80GB", "memory_gb": INF}]})
