"""Slurm's workflow verbs over HTTP: hold, release, requeue; and arrays at submit.

``POST /jobs/{id}/hold|release|requeue`` act as ``scontrol`` does (see
``store.workflow``): a member on its own tenant's jobs (another tenant's is 404, as
a missing one), an operator or admin on any. A job in the wrong state is 409 with
what to do instead. ``submit_jobs`` is ``POST /jobs``'s store half: it checks each
dependency's parent exists and is visible to the submitter (422 naming
``dependency`` otherwise), and turns an ``array`` into one job per task, in the
caller's transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query
from fastapi import Path as InPath
from sqlalchemy import select
from sqlalchemy.orm import Session

from grace.control.api_contract import MAX_INT32, WRITE, errors
from grace.control.auth import Principal
from grace.control.store import repository as repo
from grace.control.store import workflow as flows
from grace.control.store.db import Store
from grace.control.store.errors import IllegalJobTransition
from grace.control.store.models import Job
from grace.spec.job import JobSpec
from grace.spec.workflow import MAX_ARRAY_INDEX

JobId = Annotated[int, InPath(ge=1, le=MAX_INT32, description="a job id", examples=[1])]


def check_dependencies(s: Session, spec: JobSpec, who: Principal, prefix: str = "") -> None:
    """422 unless every job ``spec`` depends on exists and ``who`` may see it: another
    tenant's job answers as a missing one, so a dependency cannot learn its outcome."""
    for i, dep in enumerate(spec.dependency):
        parent = repo.get_job(s, dep.job)
        if parent is None or not who.sees(parent.tenant):
            raise HTTPException(422, detail=[{"field": f"{prefix}dependency.{i}.job",
                                              "message": (
                f"no job {dep.job} to depend on; name a job of yours that exists "
                "(grace jobs lists them)")}])


def submit_jobs(s: Session, spec: JobSpec, who: Principal, now: float,
                numbered: bool = True) -> list[Job]:
    """Store ``spec``: one job, or one per task of its array (a throttled group).
    ``numbered=False``: a single job may get its id at the session's next flush
    (``repo.add_job``); an array's tasks are numbered at once (they name the first)."""
    check_dependencies(s, spec, who)
    if spec.array is None:
        return [repo.add_job(s, spec, now, who.actor, who.token_id, numbered=numbered)]
    return repo.add_job_group(s, [spec] * len(spec.array.indices), spec.array.max_parallel,
                              now, who.actor, who.token_id, "array", spec.array.indices)


def submitted(jobs: list[Job]) -> dict[str, Any]:
    """``POST /jobs``'s answer: the job, and for an array every task's id."""
    first = jobs[0]
    out: dict[str, Any] = {"id": first.id, "state": str(first.state), "tenant": first.tenant}
    if first.array_id is not None:
        out["array"] = {"id": first.array_id, "tasks": [j.id for j in jobs],
                        "indices": [j.array_index for j in jobs]}
    return out


def summary(job: Job) -> dict[str, Any]:
    """The workflow fields ``GET /jobs`` shows for each job."""
    array = None
    if job.array_id is not None:
        array = {"id": job.array_id, "index": job.array_index, "limit": job.array_limit,
                 "kind": job.array_kind}
    return {"array": array, "held": bool(job.held),
            "dependency": list(job.spec_json.get("dependency") or [])}


ArrayFlag = Annotated[bool, Query(description=(
    "act on every task of the array this id names (Slurm's `scancel 12` on an array job id)"))]
TaskIndex = Annotated[int | None, Query(ge=0, le=MAX_ARRAY_INDEX, description=(
    "act on the task of this index of the array this id names (Slurm's `12_3`)"))]


def targets(s: Session, job: Job, array: bool, task: int | None) -> list[Job]:
    """The jobs an action on ``job`` means: itself, every task of the array it heads
    (``array``), or one task of it by index (``task``); 422 if ``job`` heads no array."""
    if not array and task is None:
        return [job]
    if job.array_id != job.id:
        raise HTTPException(422, detail=[{"field": "array" if task is None else "task",
                                          "message": f"job {job.id} is not an array's id; "
                                                     "use the id `grace jobs` shows as ID_[...]"}])
    tasks = list(s.scalars(select(Job).where(Job.array_id == job.id)
                           .order_by(Job.array_index, Job.id)))
    if task is None:
        return tasks
    found = [t for t in tasks if t.array_index == task]
    if not found:
        raise HTTPException(404, detail=f"array {job.id} has no task {task}")
    return found


def act_on(jobs: list[Job], act: Callable[[Job], None]) -> dict[str, Any]:
    """``act`` on each of ``jobs`` whose state allows it; 409 (the first refusal's reason)
    if none does. A whole array is acted on where it can be, as Slurm does."""
    done: list[int] = []
    refused: list[str] = []
    for job in jobs:
        try:
            act(job)
            done.append(job.id)
        except IllegalJobTransition as e:
            refused.append(str(e))
    if not done:
        raise HTTPException(409, detail=refused[0])
    return {"jobs": done, "skipped": len(refused)}


def install_workflow_routes(app: FastAPI, store: Store, member: Any,
                            get: Callable[[Session, int, Principal], Job],
                            clock: Callable[[], float]) -> None:
    """``get`` finds a job the caller may see (404 otherwise): ``api._get``."""

    def _act(job_id: int, who: Principal, act: Callable[[Session, Job], Any],
             array: bool = False, task: int | None = None) -> Any:
        with store.transaction() as s:
            head = get(s, job_id, who)
            jobs = targets(s, head, array, task)
            if len(jobs) == 1 and not array:
                try:
                    return act(s, jobs[0])
                except IllegalJobTransition as e:
                    raise HTTPException(409, detail=str(e)) from e
            return {"id": job_id, **act_on(jobs, lambda j: act(s, j))}

    @app.post("/jobs/{job_id}/hold", responses=errors(*WRITE, 404, 409))
    def hold(job_id: JobId, who: Principal = member, array: ArrayFlag = False,
             task: TaskIndex = None) -> dict[str, Any]:
        """Keep a pending job from starting until it is released (``scontrol hold``)."""
        def act(s: Session, job: Job) -> dict[str, Any]:
            flows.hold(s, job, clock(), who.actor, who.token_id)
            return {"id": job.id, "state": str(job.state), "held": True}
        return _act(job_id, who, act, array, task)

    @app.post("/jobs/{job_id}/release", responses=errors(*WRITE, 404, 409))
    def release(job_id: JobId, who: Principal = member, array: ArrayFlag = False,
                task: TaskIndex = None) -> dict[str, Any]:
        """Let a held job be scheduled again (``scontrol release``)."""
        def act(s: Session, job: Job) -> dict[str, Any]:
            flows.release(s, job, clock(), who.actor, who.token_id)
            return {"id": job.id, "state": str(job.state), "held": False}
        return _act(job_id, who, act, array, task)

    @app.post("/jobs/{job_id}/requeue", responses=errors(*WRITE, 404, 409))
    def requeue(job_id: JobId, hold: Annotated[bool, Query(description=(
                    "hold it once queued (scontrol requeuehold)"))] = False,
                who: Principal = member, array: ArrayFlag = False,
                task: TaskIndex = None) -> dict[str, Any]:
        """Queue a job again (``scontrol requeue``): a running one ends its attempt with
        SIGTERM (it checkpoints; not a failure) and is pending from the next cycle; an
        ended one is pending at once."""
        def act(s: Session, job: Job) -> dict[str, Any]:
            now = flows.request_requeue(s, job, clock(), hold, who.actor, who.token_id)
            return {"id": job.id, "state": str(job.state), "held": bool(job.held),
                    "requeue_requested": not now}
        return _act(job_id, who, act, array, task)


__all__ = ["ArrayFlag", "TaskIndex", "act_on", "check_dependencies", "install_workflow_routes",
           "submit_jobs", "submitted", "summary", "targets"]
