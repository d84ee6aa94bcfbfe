"""Fixtures for the observability tests: Prometheus' own ``promtool`` as the referee.

The runbook's PromQL, the generated rule file, ``deploy/prometheus/prometheus.yml``
and the Grafana dashboard's queries are all checked by ``promtool`` (Debian's
``prometheus`` package). Without it those tests are skipped here, but fail
when ``GRACE_TEST_PROMETHEUS=1`` (CI sets it), so CI can never pass by
silently skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

HOW_TO = "install Debian's prometheus package (apt-get install prometheus), or put promtool on PATH"


def _required() -> bool:
    return os.environ.get("GRACE_TEST_PROMETHEUS", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def promtool() -> Path:
    """promtool's path; skip (or, with GRACE_TEST_PROMETHEUS=1, fail) when there is none."""
    found = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists()
                                         else None)
    if found is None:
        if _required():
            pytest.fail(f"GRACE_TEST_PROMETHEUS is set but promtool is missing: {HOW_TO}",
                        pytrace=False)
        pytest.skip(f"needs promtool: {HOW_TO}")
    return Path(found)


PromtoolRun = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_promtool(promtool: Path) -> PromtoolRun:
    """``run_promtool("check", "rules", path)``: promtool's result, output kept for messages."""
    def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(promtool), *map(str, args)], capture_output=True, text=True,
                              timeout=60, cwd=cwd, check=False)

    return run
