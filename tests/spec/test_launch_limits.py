"""Launch input that exec would refuse is refused at submit (JobSpec) and at launch
(LaunchSpec.check), by the same functions, with the field and a fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from grace.backends.base import LaunchSpec, LaunchSpecError, NodeAssignment
from grace.spec import SpecError
from grace.spec.errors import from_validation_error
from grace.spec.job import JobSpec
from grace.spec.launch_limits import (
    MAX_ARG_STRLEN,
    MAX_COMMAND_ARG_BYTES,
    MAX_ENV_BYTES,
    MAX_ENV_VALUE_BYTES,
    command_problems,
    env_problems,
    launch_problems,
)
from grace.spec.loader import parse_jobs

GOOD: dict[str, Any] = {"name": "j", "gpus": 1, "command": ["python", "train.py"]}


def problems_of(**change: Any) -> list[tuple[str, str]]:
    """(field, message) of every problem JobSpec reports, as the API would list them."""
    try:
        JobSpec.model_validate({**GOOD, **change})
    except ValidationError as e:
        return [(p.path, p.message) for p in from_validation_error("request", e).problems]
    return []


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"env": {"A=B": "1"}}, "env", "'A=B' is not valid"),
    ({"env": {"1X": "1"}}, "env", "not starting with a digit"),
    ({"env": {"": "1"}}, "env", "name '' is not valid"),
    ({"env": {"BIG": "x" * (1 << 20)}}, "env", "value of BIG is 1048576 bytes"),
    ({"env": {"NUL": "a\0b"}}, "env", "value of NUL holds a NUL byte"),
    ({"env": {f"V{i}": "x" * 30000 for i in range(10)}}, "env", "environment is"),
    ({"command": ["python", "a\0b"]}, "command", "argument 1 holds a NUL byte"),
    ({"command": ["python", "x" * MAX_ARG_STRLEN]}, "command", "argument 1 is 131072 bytes"),
    ({"command": []}, "command", "command is empty"),
    ({"command": ["", "train.py"]}, "command", "program (argument 0) is blank"),
    ({"command": ["python", "\ud800"]}, "command", "lone surrogate"),
])
def test_submit_refuses_what_exec_would_refuse(change: dict[str, Any], field: str, words: str) -> None:
    found = problems_of(**change)
    assert [f for f, _ in found] == [field], found
    assert words in found[0][1], found


def test_the_limits_themselves_are_accepted() -> None:
    assert problems_of(env={"OK": "x" * MAX_ENV_VALUE_BYTES, "_under_score9": ""}) == []
    assert problems_of(command=["python", "x" * MAX_COMMAND_ARG_BYTES, ""]) == []
    assert problems_of(command=None) == []  # the twin's specs need none; the API requires one
    assert problems_of(env={"UNICODE": "é" * 1000}) == []


def test_problems_name_the_exact_item() -> None:
    assert [p.path for p in env_problems({"A=B": "", "BIG": "x" * (40 * 1024), "OK": "1"})] == [
        "env", "env.BIG"]
    assert [p.path for p in command_problems(["python", "ok", "a\0"])] == ["command[2]"]
    assert [p.path for p in launch_problems(("python", "x\0"), {"A-B": "1"})] == ["command[1]", "env"]
    assert env_problems({f"V{i}": "x" * 30000 for i in range(10)})[-1].message.startswith(
        "the environment is")
    assert sum(len(k) + len(v) + 2 for k, v in {"V": "x" * 1000}.items()) < MAX_ENV_BYTES


def test_messages_are_never_mistaken_for_field_paths() -> None:
    """spec.errors splits a message that starts ``path: `` into per-path problems; ours
    name their item in words, so the field stays the validator's own."""
    found = problems_of(env={"A=B": "1", "BIG": "x" * (1 << 16)})
    assert len(found) == 1 and found[0][0] == "env"
    assert "'A=B'" in found[0][1] and "BIG" in found[0][1]


def test_the_yaml_loader_names_the_field_too() -> None:
    with pytest.raises(SpecError) as err:
        parse_jobs({"jobs": [{**GOOD, "env": {"A=B": "1"}}]})
    assert any(p.path.endswith("env") and "A=B" in p.message for p in err.value.problems)


def launch(**change: Any) -> LaunchSpec:
    base: dict[str, Any] = {"job_id": 7, "attempt": 2, "name": "j", "command": ("python", "-c", "pass"),
                            "nodes": (NodeAssignment("a100-00", (0,)),), "workdir": Path("/tmp/x")}
    return LaunchSpec(**{**base, **change})


@pytest.mark.parametrize(("change", "words"), [
    ({"env": {"A=B": "1"}}, "env: the environment variable name 'A=B'"),
    ({"env": {"BIG": "x" * (1 << 20)}}, "env.BIG: the value of BIG is 1048576 bytes"),
    ({"command": ("python", "a\0b")}, "command[1]: the command's argument 1 holds a NUL"),
    ({"command": ()}, "no command"),
    ({"nodes": ()}, "no nodes"),
])
def test_launch_spec_check_refuses_what_slipped_through(change: dict[str, Any], words: str) -> None:
    with pytest.raises(LaunchSpecError, match="job 7") as err:
        launch(**change).check()
    assert words in str(err.value)
    assert isinstance(err.value, ValueError)  # callers that catch ValueError still do


def test_what_passes_the_check_really_execs() -> None:
    """The boundary is exec's own: the longest argument allowed runs, one byte more does not."""
    arg = "x" * MAX_COMMAND_ARG_BYTES
    launch(command=(sys.executable, "-c", "pass", arg)).check()
    subprocess.run([sys.executable, "-c", "pass", arg], check=True)
    with pytest.raises(OSError, match="Argument list too long"):
        subprocess.run([sys.executable, "-c", "pass", arg + "x"], check=True)
    with pytest.raises(LaunchSpecError):
        launch(command=(sys.executable, "-c", "pass", arg + "x")).check()
