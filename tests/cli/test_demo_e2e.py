"""`grace demo`, the README's first command, as a new user runs it: through a pipe at 80
columns (CI, `| tee`), on a real control plane with real PyTorch training."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_demo_completes_and_every_line_fits_80_columns_in_a_pipe(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    run = subprocess.run([sys.executable, "-m", "grace.cli.main", "demo", "--state-dir",
                          str(tmp_path / "demo")], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    # the jobs table ends on its own line: the summary after it starts a line
    assert any(line.startswith("jobs: 5 (5 completed)") for line in lines), run.stdout
    table = [line for line in lines if line.split()[:1] in (["1"], ["2"], ["3"], ["4"], ["5"])]
    assert len(table) == 5 and all("completed" in line for line in table), run.stdout
    assert any(line.startswith("grace why ") for line in lines), run.stdout
