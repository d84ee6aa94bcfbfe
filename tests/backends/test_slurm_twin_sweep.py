"""A twin sweep as a Slurm job array on the real test Slurm: the same JSON as the local run.

Needs the Slurm of ``.ci/slurm-up.sh`` (skipped without it, failed under CI's
``GRACE_TEST_SLURM=1``; see conftest.py). The array's tasks run on its nodes (all on
this host), so the sweep folder under pytest's tmp_path is shared by construction.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grace.backends.slurm_cli import SlurmCli

REPO = Path(__file__).resolve().parents[2]
TIMING = ("wall_s", "events_per_s")


def compare(scene: list[str], *extra: str, env: dict[str, str],
            cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grace.cli.main", "compare", *scene,
                           "--policies", "fifo,grace", "--seeds", "0,2", "--fewer-nodes", "0,25",
                           *extra], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_sweep_as_a_slurm_array_gives_the_json_of_the_local_run(
        slurm: SlurmCli, sweep_scene: list[str], tmp_path: Path) -> None:
    env = slurm.env()
    local = compare(sweep_scene, "--json", str(tmp_path / "local.json"), env=env, cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    folder = tmp_path / "sweep"
    remote = compare(sweep_scene, "--on", "slurm", "--sweep-dir", str(folder), "--timeout", "300",
                     "--json", str(tmp_path / "slurm.json"), env=env, cwd=tmp_path)
    assert remote.returncode == 0, remote.stderr
    assert "as Slurm array" in remote.stderr
    ours = json.loads((tmp_path / "local.json").read_text())
    theirs = json.loads((tmp_path / "slurm.json").read_text())
    assert len(ours) == 8 and list(ours) == list(theirs)
    for label in ours:
        assert ({k: v for k, v in ours[label].items() if k not in TIMING}
                == {k: v for k, v in theirs[label].items() if k not in TIMING}), label
    # each replay was one task of one array: eight results, eight logs, in the folder
    assert len(list(folder.glob("task-*.json"))) == 8
    assert len(list(folder.glob("task-*.log"))) == 8
