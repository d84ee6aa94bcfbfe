"""``grace hold|release|requeue JOB``: Slurm's ``scontrol`` verbs over the API, and the
``submit`` flags Slurm users type (``--time``, ``--dependency``, ``--array``, ...).

The flags become the same ``JobSpec`` fields a YAML file has, so one validation (the
server's) answers both; ``--time`` reads Slurm's formats, where a bare number is
minutes as in ``sbatch --time=90``.
"""

from __future__ import annotations

import json
from typing import Any

import typer

JsonOpt = typer.Option(False, "--json", help="print JSON for scripts")


def slurm_time(text: str) -> str:
    """``--time`` as Slurm reads it: ``90`` is 90 minutes; ``1-02:00:00``, ``02:00:00``,
    ``2h`` and ``90m`` pass on to the spec's duration parser."""
    return f"{text}m" if text.strip().isdigit() else text


def flag_fields(nodes: int | None, gpus_per_node: int | None, time: str | None,
                dependency: str | None, hold: bool, array: str | None) -> dict[str, Any]:
    """The spec fields the flags set; a flag not given sets nothing (a YAML file's own
    value stands)."""
    fields: dict[str, Any] = {"nodes": nodes, "gpus_per_node": gpus_per_node,
                              "runtime_limit": slurm_time(time) if time else None,
                              "dependency": dependency, "array": array,
                              "hold": True if hold else None}
    return {k: v for k, v in fields.items() if v is not None}


def submitted_line(out: dict[str, Any]) -> str:
    """``submitted job 12``, or for an array ``submitted array 12: 10 tasks, jobs 12-21``."""
    array = out.get("array")
    if not array:
        return f"submitted job {out['id']}" + (" (held)" if out.get("held") else "")
    tasks = array["tasks"]
    return (f"submitted array {array['id']}: {len(tasks)} tasks, jobs {tasks[0]}-{tasks[-1]}"
            if len(tasks) > 1 else f"submitted array {array['id']}: job {tasks[0]}")


def _act(job_id: int, verb: str, as_json: bool, said: str, **params: Any) -> None:
    from grace.cli.client import _call, console  # it imports this module's submit helpers

    out = _call("POST", f"/jobs/{job_id}/{verb}", params=params or None)
    if as_json:
        print(json.dumps(out))
        return
    console.print(said)


def hold(job_id: int = typer.Argument(..., help="a pending job"), as_json: bool = JsonOpt) -> None:
    """Keep a pending job from starting until it is released (scontrol hold)."""
    _act(job_id, "hold", as_json, f"job {job_id} held: it starts only after grace release "
                                  f"{job_id}")


def release(job_id: int = typer.Argument(..., help="a held job"), as_json: bool = JsonOpt) -> None:
    """Let a held job start again (scontrol release)."""
    _act(job_id, "release", as_json, f"job {job_id} released")


def requeue(job_id: int = typer.Argument(..., help="a running or ended job"),
            hold_it: bool = typer.Option(False, "--hold", help="hold it once queued "
                                                               "(scontrol requeuehold)"),
            as_json: bool = JsonOpt) -> None:
    """Queue a job again (scontrol requeue): a running one checkpoints on SIGTERM first
    (not counted as a failure); an ended one is pending at once."""
    _act(job_id, "requeue", as_json, f"job {job_id} requeued" + (" and held" if hold_it else ""),
         **({"hold": "true"} if hold_it else {}))


__all__ = ["flag_fields", "hold", "release", "requeue", "slurm_time", "submitted_line"]
