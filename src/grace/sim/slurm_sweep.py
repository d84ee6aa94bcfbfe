"""A twin sweep as one Slurm job array: one replay per array task, results gathered here.

``grace compare --on slurm`` hands its replays (policies x seeds x cluster
variants) to the user's Slurm instead of local cores. Each replay becomes one
task of one ``sbatch --array`` job; a task runs ``grace simulate`` with that
replay's flags (this module's ``__main__`` picks its line of the manifest by
``$SLURM_ARRAY_TASK_ID``) and writes its summary JSON into the sweep's folder,
which must be on a file system the nodes share (the folder holds the manifest,
the batch script, one log and one JSON per task). Grace then waits for the
array to leave the queue and reads the JSONs back, in task order: the same
summaries the local run gives (a replay is deterministic given its flags).

Slurm is reached only through ``backends.slurm_cli`` (``sbatch``, ``squeue``,
``scancel``), the seam the Slurm backend uses: no home-made distribution layer.
A task that fails leaves no JSON; Grace then names it and the log to read.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grace.backends.slurm_cli import SlurmCli, SlurmError

MANIFEST = "tasks.json"
SCRIPT = "sweep.sh"
POLL_S = 1.0


@dataclass(frozen=True)
class SweepTask:
    """One replay: its label and the ``grace simulate`` arguments that run it (no
    ``--json``: the task adds its own output path)."""

    label: str
    argv: list[str]


def result_path(folder: Path, index: int) -> Path:
    return folder / f"task-{index}.json"


def log_path(folder: Path, index: int) -> Path:
    return folder / f"task-{index}.log"


def write_sweep(folder: Path, tasks: Sequence[SweepTask], python: str = sys.executable) -> Path:
    """The manifest and the batch script in ``folder`` (made if missing); the script's
    path. Results of an earlier sweep in the folder are removed so none is read as new."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in [*folder.glob("task-*.json"), *folder.glob("task-*.log")]:
        old.unlink()
    manifest = folder / MANIFEST
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"label": t.label, "argv": t.argv} for t in tasks], indent=1))
    tmp.replace(manifest)
    script = folder / SCRIPT
    script.write_text(
        "#!/bin/bash\n"
        "# one replay of a Grace twin sweep per array task (grace.sim.slurm_sweep)\n"
        f"exec {shlex.quote(python)} -m grace.sim.slurm_sweep "
        f"{shlex.quote(str(manifest.resolve()))} \"$SLURM_ARRAY_TASK_ID\"\n")
    script.chmod(0o755)
    return script


def submit(cli: SlurmCli, folder: Path, tasks: Sequence[SweepTask], *,
           at_once: int | None = None, partition: str | None = None,
           python: str = sys.executable) -> str:
    """Write the sweep and submit it as one array job; Slurm's job id."""
    if not tasks:
        raise ValueError("a sweep needs at least one replay")
    script = write_sweep(folder, tasks, python)
    array = f"0-{len(tasks) - 1}" + (f"%{at_once}" if at_once else "")
    args = ["sbatch", "--parsable", f"--array={array}", "--job-name=grace-twin-sweep",
            "--ntasks=1", "--cpus-per-task=1", f"--chdir={Path.cwd()}",
            f"--output={folder.resolve()}/task-%a.log"]
    if partition:
        args.append(f"--partition={partition}")
    out = cli.run(*args, str(script.resolve()))
    return out.strip().split(";")[0]


def wait(cli: SlurmCli, job_id: str, timeout_s: float,
         progress: Callable[[int], None] | None = None) -> None:
    """Until no task of array ``job_id`` is queued or running; on timeout the array is
    cancelled and TimeoutError raised."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = cli.run("squeue", "-h", "-r", "-j", job_id, "-o", "%i", check=False)  # a line per task
        live = [line for line in out.splitlines() if line.strip()]
        if progress is not None:
            progress(len(live))
        if not live:
            return
        if time.monotonic() > deadline:
            cli.run("scancel", job_id, check=False)
            raise TimeoutError(f"Slurm array {job_id} still had {len(live)} task(s) after "
                               f"{timeout_s:.0f} s; cancelled. Raise --timeout or check "
                               "the partition's queue (squeue)")
        time.sleep(POLL_S)


def gather(folder: Path, tasks: Sequence[SweepTask]) -> list[dict[str, Any]]:
    """Each task's summary, in task order; a missing one is named with its log."""
    out: list[dict[str, Any]] = []
    for i, t in enumerate(tasks):
        path = result_path(folder, i)
        if not path.exists():
            log = log_path(folder, i)
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() \
                else ["(no log: the task never started)"]
            raise SlurmError(f"array task {i} ({t.label}) wrote no result; its log {log} "
                             f"ends: {' | '.join(tail)}")
        out.append(json.loads(path.read_text()))
    return out


def run_task(manifest: Path, index: int) -> int:
    """In an array task: run replay ``index`` of the manifest through ``grace simulate``,
    writing its JSON beside the manifest (atomically: a half-written file is never read)."""
    from grace.cli.main import app

    tasks = json.loads(manifest.read_text())
    task = tasks[index]
    final = result_path(manifest.parent, index)
    tmp = final.with_suffix(".part")
    try:
        code = app([*task["argv"], "--json", str(tmp)], standalone_mode=False)
    except SystemExit as e:  # a refused flag
        code = e.code
    if isinstance(code, int) and code != 0:
        return code
    if not tmp.exists():
        return 1
    os.replace(tmp, final)
    return 0


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m grace.sim.slurm_sweep MANIFEST TASK_INDEX", file=sys.stderr)
        return 2
    return run_task(Path(argv[0]), int(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
