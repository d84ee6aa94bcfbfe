"""``grace hold|release|requeue JOB``: Slurm's ``scontrol`` verbs over the API, and the
``submit`` flags Slurm users type (``--time``, ``--dependency``, ``--array``, ...).

The flags become the same ``JobSpec`` fields a YAML file has, so one validation (the
server's) answers both; ``--time`` reads Slurm's formats, where a bare number is
minutes as in ``sbatch --time=90``.
"""

from __future__ import annotations

import json
import re
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


#: ``12`` (a job, or a whole array by its id) or ``12_3`` (one task of array 12), as Slurm
_JOB_TEXT = re.compile(r"^(\d{1,10})(?:_(\d{1,7}))?$")
JOB_HELP = "a job id, an array's id (every task) or ID_INDEX (one task), as Slurm's"


def job_target(text: str) -> tuple[int, dict[str, str]]:
    """``"12"`` or ``"12_3"`` as the job id to call and the query that scopes it: an
    array's id means every task (Slurm's ``scancel 12``), ``12_3`` task 3 alone."""
    from grace.cli.client import _call, err

    m = _JOB_TEXT.match(text.strip())
    if m is None:
        err.print(f"[red]invalid[/red] job {text!r}: write a job id (12) or an array task "
                  "(12_3)", soft_wrap=True)
        raise typer.Exit(code=2)
    job_id = int(m.group(1))
    if m.group(2) is not None:
        return job_id, {"task": m.group(2)}
    array = (_call("GET", f"/jobs/{job_id}").get("array") or {})
    return job_id, ({"array": "true"} if array.get("id") == job_id else {})


def _said(verb: str, job_id: int, params: dict[str, str], out: dict[str, Any]) -> str:
    if "jobs" not in out:  # one job
        return f"job {out.get('id', job_id)} {verb}"
    what = f"array {job_id}" + (f" task {params['task']}" if "task" in params else "")
    skipped = f" ({out['skipped']} left as they were)" if out.get("skipped") else ""
    return f"{what}: {len(out['jobs'])} job(s) {verb}{skipped}"


def act(text: str, verb: str, done: str, as_json: bool, **extra: str) -> None:
    """POST ``/jobs/{id}/{verb}`` for ``text`` (``12`` or ``12_3``) and say what happened."""
    from grace.cli.client import _call, console  # it imports this module's submit helpers

    job_id, params = job_target(text)
    out = _call("POST", f"/jobs/{job_id}/{verb}", params={**params, **extra} or None)
    if as_json:
        print(json.dumps(out))
        return
    console.print(_said(done, job_id, params, out))


def hold(job: str = typer.Argument(..., help=f"pending: {JOB_HELP}"),
         as_json: bool = JsonOpt) -> None:
    """Keep pending jobs from starting until released (scontrol hold)."""
    act(job, "hold", "held (grace release starts it)", as_json)


def release(job: str = typer.Argument(..., help=f"held: {JOB_HELP}"),
            as_json: bool = JsonOpt) -> None:
    """Let held jobs start again (scontrol release)."""
    act(job, "release", "released", as_json)


def requeue(job: str = typer.Argument(..., help=f"running or ended: {JOB_HELP}"),
            hold_it: bool = typer.Option(False, "--hold", help="hold it once queued "
                                                               "(scontrol requeuehold)"),
            as_json: bool = JsonOpt) -> None:
    """Queue jobs again (scontrol requeue): a running one checkpoints on SIGTERM first
    (not counted as a failure); an ended one is pending at once."""
    act(job, "requeue", "requeued" + (" and held" if hold_it else ""), as_json,
        **({"hold": "true"} if hold_it else {}))


__all__ = ["JOB_HELP", "act", "flag_fields", "hold", "job_target", "release", "requeue",
           "slurm_time", "submitted_line"]
