"""Reading spec files: YAML in, validated objects or one ``SpecError`` out.

Files are parsed completely and validated completely before anything is
returned, so a caller never sees half a cluster. Duplicate keys, which YAML
would silently let the last one win, are reported as errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from grace.spec.admission import AdmissionSpec
from grace.spec.bursting import BurstingSpec
from grace.spec.cluster import ClusterSpec
from grace.spec.errors import SpecError, SpecProblem, from_validation_error
from grace.spec.gpus import BUILTIN_GPUS, GpuModel
from grace.spec.job import JobSpec

if TYPE_CHECKING:
    from grace.spec.sweep import SweepSpec

M = TypeVar("M", bound=BaseModel)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    mapping: dict[Any, Any] = {}
    merged_keys: set[Any] = set()
    explicit = list(node.value)
    loader.flatten_mapping(node)  # resolve YAML merge keys (<<: *defaults)
    n_merged = len(node.value) - len([kv for kv in explicit if kv[0].tag != "tag:yaml.org,2002:merge"])
    for i, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError as e:
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a plain name, got {key!r}", key_node.start_mark
            ) from e
        if i < n_merged:
            merged_keys.add(key)
        elif key in mapping and key not in merged_keys:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}; keep only one", key_node.start_mark
            )
        else:
            merged_keys.discard(key)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: Path | str) -> Any:
    """Parse one YAML document, turning any read or syntax error into a SpecError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(str(p), [SpecProblem("", f"cannot read file: {e.strerror}")]) from e
    except UnicodeDecodeError as e:
        raise SpecError(str(p), [SpecProblem("", "file is not UTF-8 text; save it as UTF-8")]) from e
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise SpecError(str(p), [SpecProblem(where, f"invalid YAML: {problem}")]) from e
    if data is None:
        raise SpecError(str(p), [SpecProblem("", "file is empty; write a cluster or job spec")])
    return data


def _validate(model: type[M], data: Any, source: str, prefix: str = "") -> M:
    if not isinstance(data, dict):
        raise SpecError(
            source, [SpecProblem(prefix, f"expected a mapping of fields, got {type(data).__name__}")]
        )
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(source, e, prefix) from e


def parse_cluster(data: Any, source: str = "<cluster>") -> ClusterSpec:
    data = _strip_kind(data, "cluster", source)
    return _validate(ClusterSpec, data, source)


def parse_bursting(data: Any, source: str = "<bursting>") -> BurstingSpec:
    """``kind: bursting``, or a file with a top-level ``bursting:`` section."""
    if isinstance(data, dict) and "bursting" in data and "kind" not in data:
        return _validate(BurstingSpec, data["bursting"], source, "bursting")
    data = _strip_kind(data, "bursting", source)
    return _validate(BurstingSpec, data, source)


def parse_admission(data: Any, source: str = "<admission>") -> AdmissionSpec:
    """``kind: admission``: the allow-list of the code jobs may run (spec/admission.py)."""
    if isinstance(data, dict) and "kind" not in data:  # a job or cluster file given by mistake?
        raise SpecError(source, [SpecProblem("kind", "an admission file says `kind: admission`; "
                                                     "add it")])
    return _validate(AdmissionSpec, _strip_kind(data, "admission", source), source)


def parse_jobs(
    data: Any, source: str = "<jobs>", catalog: dict[str, GpuModel] | None = None
) -> list[JobSpec]:
    """One job (a mapping) or several (``jobs: [...]``); all valid or none returned.

    Next to ``jobs:``, other top-level fields (``tenant: research``) are defaults
    that every job in the list inherits unless it sets its own.
    """
    data = _strip_kind(data, "job", source)
    catalog = catalog or BUILTIN_GPUS
    if isinstance(data, dict) and "jobs" in data:
        items = data["jobs"]
        if not isinstance(items, list) or not items:
            raise SpecError(source, [SpecProblem("jobs", "must be a non-empty list of jobs")])
        defaults = {k: v for k, v in data.items() if k != "jobs"}
        entries = [(f"jobs[{i}]", {**defaults, **item} if isinstance(item, dict) else item)
                   for i, item in enumerate(items)]
    else:
        entries = [("", data)]
    jobs: list[JobSpec] = []
    problems: list[SpecProblem] = []
    for prefix, item in entries:
        try:
            job = _validate(JobSpec, item, source, prefix)
        except SpecError as e:
            problems.extend(e.problems)
            continue
        if job.gpu_model is not None and job.gpu_model not in catalog:
            problems.append(SpecProblem(
                f"{prefix}.gpu_model" if prefix else "gpu_model",
                f"unknown GPU model {job.gpu_model!r}; use one of {sorted(catalog)}",
            ))
            continue
        jobs.append(job)
    if problems:
        raise SpecError(source, problems)
    return jobs


def parse_sweep(data: Any, source: str = "<sweep>") -> SweepSpec:
    """``kind: sweep``: a base job, its parameters and how to search them (spec/sweep.py)."""
    from grace.spec.sweep import SweepSpec

    return _validate(SweepSpec, _strip_kind(data, "sweep", source), source)


def _strip_kind(data: Any, expected: str, source: str) -> Any:
    if isinstance(data, dict) and "kind" in data:
        kind = str(data["kind"]).lower()
        if kind != expected:
            raise SpecError(
                source, [SpecProblem("kind", f"expected kind {expected!r}, got {kind!r}")]
            )
        data = {k: v for k, v in data.items() if k != "kind"}
    return data


def detect_kind(data: Any) -> str:
    """'cluster' or 'job' from an explicit ``kind`` or the fields present."""
    if isinstance(data, dict):
        if "kind" in data:
            return str(data["kind"]).lower()
        if "node_groups" in data:
            return "cluster"
        if "bursting" in data or "offers" in data:
            return "bursting"
    return "job"


def load_cluster(path: Path | str) -> ClusterSpec:
    return parse_cluster(read_yaml(path), str(path))


def load_bursting(path: Path | str) -> BurstingSpec:
    return parse_bursting(read_yaml(path), str(path))


def load_admission(path: Path | str) -> AdmissionSpec:
    return parse_admission(read_yaml(path), str(path))


def load_sweep(path: Path | str) -> SweepSpec:
    return parse_sweep(read_yaml(path), str(path))


def load_jobs(path: Path | str, catalog: dict[str, GpuModel] | None = None) -> list[JobSpec]:
    return parse_jobs(read_yaml(path), str(path), catalog)
