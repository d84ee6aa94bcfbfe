"""The Slurm sweep's own parts, without a Slurm: the manifest, a task's run, the gathering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grace.backends.slurm_cli import SlurmError
from grace.sim.slurm_sweep import (
    SweepTask,
    gather,
    log_path,
    result_path,
    run_task,
    write_sweep,
)


def test_a_task_runs_its_line_of_the_manifest_and_gather_reads_it(tmp_path: Path,
                                                                 sweep_scene: list[str]) -> None:
    scene = sweep_scene
    tasks = [SweepTask("fifo", ["simulate", *scene, "--policy", "fifo"]),
             SweepTask("grace seed 3", ["simulate", *scene, "--policy", "grace", "--seed", "3"])]
    folder = tmp_path / "sweep"
    script = write_sweep(folder, tasks, python="/usr/bin/python3")
    text = script.read_text()
    assert "-m grace.sim.slurm_sweep" in text and "$SLURM_ARRAY_TASK_ID" in text
    assert script.stat().st_mode & 0o111
    assert run_task(folder / "tasks.json", 1) == 0
    with pytest.raises(SlurmError, match=r"array task 0 \(fifo\) wrote no result"):
        gather(folder, tasks)
    assert run_task(folder / "tasks.json", 0) == 0
    fifo, grace = gather(folder, tasks)
    assert (fifo["policy"], grace["policy"], grace["seed"]) == ("fifo", "grace", 3)
    assert not list(folder.glob("*.part"))  # results are renamed into place whole


def test_a_failed_task_is_named_with_the_end_of_its_log(tmp_path: Path) -> None:
    tasks = [SweepTask("bad", ["simulate", "--cluster", str(tmp_path / "missing.yaml"),
                               "--trace", str(tmp_path / "missing.csv")])]
    folder = tmp_path / "sweep"
    write_sweep(folder, tasks)
    assert run_task(folder / "tasks.json", 0) != 0
    log_path(folder, 0).write_text("Traceback ...\nerror: no such cluster file\n")
    with pytest.raises(SlurmError, match="no such cluster file") as e:
        gather(folder, tasks)
    assert str(log_path(folder, 0)) in str(e.value)


def test_a_new_sweep_in_an_old_folder_never_reads_the_old_results(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    folder.mkdir()
    result_path(folder, 0).write_text(json.dumps({"policy": "stale"}))
    write_sweep(folder, [SweepTask("x", ["simulate"])])
    assert not result_path(folder, 0).exists()
