"""Fixtures for the spec tests: where the examples live and how to load any of them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from grace.spec.loader import detect_kind, parse_cluster, parse_jobs, read_yaml


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def examples(repo_root: Path) -> Path:
    return repo_root / "examples"


def _load_any(path: Path) -> Any:
    """What a user's ``grace submit``/``grace cluster`` would do: read, detect, parse."""
    data = read_yaml(path)
    if detect_kind(data) == "cluster":
        return parse_cluster(data, str(path))
    return parse_jobs(data, str(path))


@pytest.fixture(scope="session")
def load_spec() -> Callable[[Path], Any]:
    """Load a cluster or job file by its kind; a ClusterSpec or a list of JobSpec."""
    return _load_any
