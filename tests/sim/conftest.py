"""Fixtures for the twin's tests: where the public traces live.

The traces sit beside the repository (``<repo>/../shared/traces``), not in it:
they are data under their own licences. ``GRACE_TRACES_DIR`` points elsewhere.
Tests that need them skip, saying where they looked, when they are absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    env = os.environ.get("GRACE_TRACES_DIR")
    where = Path(env) if env else REPO_ROOT.parent / "shared" / "traces"
    if not where.is_dir():
        pytest.skip(
            f"public traces not found at {where}; put them there or set GRACE_TRACES_DIR"
        )
    return where
