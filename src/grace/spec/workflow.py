"""Slurm's job workflows as a job spec says them: dependencies, holds and job arrays.

``--dependency afterok:12,afterany:13`` and ``--array 0-99%8`` are read here, once,
at the edge (the CLI's flags, a YAML file, ``POST /jobs``): ``parse_dependency`` and
``parse_array`` accept Slurm's text and refuse anything else with the field and the
fix. What the gate does with them is ``grace.core.workflow``'s.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class DependencyKind(StrEnum):
    """What a dependent job waits for (Slurm's ``--dependency`` types Grace supports)."""

    AFTEROK = "afterok"  # the parent completed successfully
    AFTERANY = "afterany"  # the parent ended, however
    AFTERNOTOK = "afternotok"  # the parent ended without success
    # internal (a job's preflight, grace.spec preflight): like afterok, but a parent that
    # failed fails the dependent job with the parent's reason instead of cancelling it
    PREFLIGHT = "preflight"



#: An array has at most this many tasks: Slurm's default MaxArraySize (1001). One
#: submission stores every task in one transaction, which holds the store's write lock
#: (SQLite's, for every tenant) while it runs: 10,000 tasks held it for over a minute.
MAX_ARRAY_TASKS = 1001
#: The largest task index (Slurm's indices run below MaxArraySize).
MAX_ARRAY_INDEX = 1_000_000
_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
_EXAMPLE_ARRAY = "write e.g. '0-99', '1,3,5-7', '0-15:4' or '0-99%8'"
_EXAMPLE_DEP = "write e.g. 'afterok:12' or 'afterok:12,afterany:13'"


class Dependency(BaseModel):
    """Start only after job ``job`` ended as ``kind`` asks."""

    model_config = ConfigDict(extra="forbid")

    kind: DependencyKind
    job: int = Field(ge=1, le=2**31 - 1, description="the id of the job it waits for")


class ArraySpec(BaseModel):
    """A job array: one task per index, at most ``max_parallel`` running at once."""

    model_config = ConfigDict(extra="forbid")

    indices: list[int] = Field(min_length=1, max_length=MAX_ARRAY_TASKS)
    max_parallel: int | None = Field(default=None, ge=1, le=MAX_ARRAY_TASKS,
                                     description="Slurm's %N: tasks running at once")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        """``array: "0-99%8"`` in YAML or JSON is Slurm's text; a mapping is the model."""
        if isinstance(data, str):
            parsed = parse_array(data)
            return {"indices": parsed.indices, "max_parallel": parsed.max_parallel}
        return data

    @model_validator(mode="after")
    def _distinct(self) -> ArraySpec:
        if any(i < 0 or i > MAX_ARRAY_INDEX for i in self.indices):
            raise ValueError(f"array indices must lie in 0..{MAX_ARRAY_INDEX}")
        if len(set(self.indices)) != len(self.indices):
            raise ValueError("array indices repeat; list each index once")
        self.indices = sorted(self.indices)
        return self

    def text(self) -> str:
        """Slurm's compact form, e.g. ``0-9%2`` (what ``grace jobs`` shows)."""
        return compact_indices(self.indices) + (f"%{self.max_parallel}"
                                                if self.max_parallel else "")


def parse_array(text: str) -> ArraySpec:
    """``"0-99%8"`` -> indices 0..99, 8 at once. Ranges, lists and ``:step`` as Slurm."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"the array is empty; {_EXAMPLE_ARRAY}")
    body, _, limit = text.strip().partition("%")
    max_parallel: int | None = None
    if limit:
        if not limit.isdigit() or int(limit) < 1:
            raise ValueError(f"the array's limit after % must be a whole number >= 1, got "
                             f"{limit!r}; {_EXAMPLE_ARRAY}")
        max_parallel = int(limit)
    indices: list[int] = []
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            raise ValueError(f"cannot read the array part {part!r}; {_EXAMPLE_ARRAY}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise ValueError(f"the array {part!r} runs backwards or has step 0; {_EXAMPLE_ARRAY}")
        if hi > MAX_ARRAY_INDEX or len(indices) + (hi - lo) // step + 1 > MAX_ARRAY_TASKS:
            raise ValueError(f"an array has at most {MAX_ARRAY_TASKS} tasks with indices up to "
                             f"{MAX_ARRAY_INDEX}; split it into several arrays")
        indices.extend(range(lo, hi + 1, step))
    return ArraySpec(indices=indices, max_parallel=max_parallel)


def parse_dependency(text: str) -> list[Dependency]:
    """``"afterok:12,afterany:13"`` -> two dependencies, all of which must hold (Slurm's
    comma). ``afterok:12:13`` (several jobs of one kind) is read as Slurm reads it."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"the dependency is empty; {_EXAMPLE_DEP}")
    if "?" in text:
        raise ValueError("'?' (any of) in a dependency is not supported; list the jobs with ',' "
                         "(all of)")
    kinds = ", ".join(k.value for k in DependencyKind if k is not DependencyKind.PREFLIGHT)
    out: list[Dependency] = []
    for part in text.strip().split(","):
        kind, _, jobs = part.strip().partition(":")
        if kind not in {k.value for k in DependencyKind} or kind == DependencyKind.PREFLIGHT:
            raise ValueError(f"unknown dependency type {kind!r}; use one of {kinds}; "
                             f"{_EXAMPLE_DEP}")
        ids = jobs.split(":") if jobs else []
        if not ids or not all(i.isdigit() and 1 <= int(i) < 2**31 for i in ids):
            raise ValueError(f"the dependency {part!r} needs job ids after the type; "
                             f"{_EXAMPLE_DEP}")
        out.extend(Dependency(kind=DependencyKind(kind), job=int(i)) for i in ids)
    return out


def compact_indices(indices: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``0-2,5,7-8`` (Slurm's way of naming an array's tasks)."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(indices):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


__all__ = ["MAX_ARRAY_INDEX", "MAX_ARRAY_TASKS", "ArraySpec", "Dependency", "DependencyKind",
           "compact_indices", "parse_array", "parse_dependency"]
