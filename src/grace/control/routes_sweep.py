"""Sweeps and preflights over HTTP: ``POST /sweeps``, ``GET /sweeps/{id}``, and the preflight
half of ``POST /jobs``.

``POST /sweeps`` takes a ``kind: sweep`` body (``spec.sweep.SweepSpec``),
expands it to its trials, vets each as ``POST /jobs`` vets a job (a command,
the cluster can run it, admission, notifications: the API's own ``vet``), and
stores them as one job group of kind ``sweep`` (``add_job_group``), so at most
``max_parallel`` run at once; the sweep's id is its first trial's job id. A
member submits for its own tenant; every write is audited with its actor.

``GET /sweeps/{id}`` is the results table (``control.sweeps.results``).

A job with ``preflight: {gpus, steps}`` is stored as two jobs
(``submit_with_preflight``): the preflight (the same command and environment
on the preflight's GPUs, with ``GRACE_PREFLIGHT_STEPS``; the runtime runs that
many steps, checks them and exits) and the job itself with a ``preflight``
dependency on it. The job's GPUs are not taken until the preflight completed;
a preflight that failed (or diverged) fails the job with its reason
(``core.workflow``), so a broken job never takes its large allocation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException
from fastapi import Path as InPath
from pydantic import ValidationError
from sqlalchemy.orm import Session

from grace.control.api_contract import MAX_INT32, READ, WRITE, errors
from grace.control.auth import Principal
from grace.control.live.context import JobDirs
from grace.control.routes_workflow import check_dependencies, submit_jobs
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import Job
from grace.control.sweeps import results
from grace.spec.errors import from_validation_error
from grace.spec.job import JobSpec
from grace.spec.sweep import SweepSpec
from grace.spec.trial import PREFLIGHT_STEPS_ENV
from grace.spec.workflow import Dependency, DependencyKind

SweepId = Annotated[int, InPath(ge=1, le=MAX_INT32, description="a sweep's id (its first "
                                                                 "trial's job id)")]
#: ``vet(spec)``: the API's checks of a job at submit (HTTPException 422 naming the field);
#: returns the admission record to store on the job.
Vet = Callable[[JobSpec], dict[str, Any] | None]


def preflight_spec(spec: JobSpec) -> JobSpec:
    """The preflight job of ``spec``: its command and env on the preflight's GPUs, told how
    many steps to run; it waits on what the job waits on. It is never held: a held job's
    preflight may run meanwhile, and the job still waits for its release."""
    assert spec.preflight is not None
    body = spec.model_dump(mode="json", exclude={"preflight", "array", "nodes", "gpus_per_node",
                                                  "elastic", "notify", "hold"})
    body.update(name=f"{spec.name}-preflight"[:200], gpus=spec.preflight.gpus,
                env={**spec.env, PREFLIGHT_STEPS_ENV: str(spec.preflight.steps)})
    return JobSpec.model_validate(body)


def refuse_internal_dependency(spec: JobSpec, prefix: str = "") -> None:
    """422 for a ``preflight`` dependency a client wrote: only ``submit_with_preflight``
    sets that kind, and a job gated by it fails (not cancels) when its parent fails."""
    for i, dep in enumerate(spec.dependency):
        if dep.kind is DependencyKind.PREFLIGHT:
            raise HTTPException(422, detail=[{"field": f"{prefix}dependency.{i}.kind",
                                              "message": (
                "'preflight' is set by the control plane; write preflight: {gpus, steps} "
                "on the job, or use afterok")}])


def submit_with_preflight(s: Session, spec: JobSpec, who: Principal, now: float,
                          vet: Vet, numbered: bool = True) -> list[Job]:
    """``POST /jobs``'s store half with preflights: the job's rows (``submit_jobs``), then,
    last, its preflight job's, the job depending on it. ``spec.sweep`` is refused: only
    ``POST /sweeps`` makes trials. ``numbered=False``: see ``submit_jobs`` (a job with a
    preflight is numbered at once: its gate names the preflight's id)."""
    if spec.sweep is not None:
        raise HTTPException(422, detail=[{"field": "sweep", "message": (
            "set by the control plane on a sweep's trials; submit a kind: sweep file "
            "(POST /sweeps) instead")}])
    refuse_internal_dependency(spec)
    if spec.preflight is None:
        return submit_jobs(s, spec, who, now, numbered)
    pre_spec = preflight_spec(spec)
    try:
        record = vet(pre_spec)
    except HTTPException as e:  # the preflight's own shape: name its field
        detail = e.detail if isinstance(e.detail, list) else [{"field": "", "message": e.detail}]
        raise HTTPException(e.status_code, detail=[
            {**d, "field": f"preflight.{d.get('field') or 'gpus'}"} for d in detail]) from e
    pre = submit_jobs(s, pre_spec, who, now)[0]
    pre.owner, pre.admission = who.token_id, record
    gated = spec.model_copy(update={"dependency": [
        *spec.dependency, Dependency(kind=DependencyKind.PREFLIGHT, job=pre.id)]})
    return [*submit_jobs(s, gated, who, now), pre]


def submitted_with_preflight(jobs: list[Job],
                             submitted: Callable[[list[Job]], dict[str, Any]]) -> dict[str, Any]:
    """``POST /jobs``'s answer: the job's (``submitted``), plus its preflight job's id."""
    last = jobs[-1]
    if len(jobs) > 1 and PREFLIGHT_STEPS_ENV in (last.spec_json.get("env") or {}) and any(
            d.get("kind") == DependencyKind.PREFLIGHT and d.get("job") == last.id
            for d in jobs[0].spec_json.get("dependency") or []):
        return submitted(jobs[:-1]) | {"preflight": last.id}
    return submitted(jobs)


def install_sweep_routes(app: FastAPI, store: Store, member: Any, viewer: Any,
                         get: Callable[[Session, int, Principal], Job],
                         dirs: Callable[[], JobDirs], clock: Callable[[], float],
                         vet: Vet, tenant_body: Callable[[dict[str, Any], Principal],
                                                         dict[str, Any]]) -> None:
    """``get`` finds a job the caller may see (404 otherwise); ``tenant_body`` sets or
    checks a body's ``tenant`` for the caller as ``POST /jobs`` does."""

    @app.post("/sweeps", status_code=201, responses=errors(*WRITE, 400, 413))
    def submit_sweep(body: dict[str, Any], who: Principal = member) -> dict[str, Any]:
        """Submit a sweep: its trials as one group, at most ``max_parallel`` at once."""
        body = tenant_body({k: v for k, v in body.items() if k != "kind"}, who)
        try:
            sweep = SweepSpec.model_validate(body)
            trials = sweep.expand()  # a trial's values pass the job spec's checks here
        except ValidationError as e:
            raise HTTPException(422, detail=[
                {"field": p.path, "message": p.message}
                for p in from_validation_error("request", e).problems]) from e
        if not who.all_tenants and sweep.job.tenant != who.tenant:
            # the base job's own tenant: a member's trials run as its tenant only
            raise HTTPException(403, detail=f"this token submits for tenant {who.tenant!r} "
                                            f"only, not {sweep.job.tenant!r}; drop the job's "
                                            f"tenant, or `grace submit --tenant {who.tenant}`")
        refuse_internal_dependency(sweep.job, "job.")
        records = [vet(t) for t in trials]  # every trial, before anything is stored
        with store.transaction() as s:
            check_dependencies(s, sweep.job, who, "job.")
            jobs = repo.add_job_group(s, trials, sweep.max_parallel, clock(), who.actor,
                                      who.token_id, "sweep")
            for job, record in zip(jobs, records, strict=True):
                job.owner, job.admission = who.token_id, record
            return {"id": jobs[0].id, "name": sweep.name, "tenant": jobs[0].tenant,
                    "trials": [j.id for j in jobs], "max_parallel": sweep.max_parallel}

    @app.get("/sweeps/{sweep_id}", responses=errors(*READ, 404))
    def show_sweep(sweep_id: SweepId, who: Principal = viewer) -> dict[str, Any]:
        """The results table: each trial's parameters, state, steps and best metric, the
        best trial, and the GPU-seconds the sweep used."""
        with store.read() as s:
            get(s, sweep_id, who)  # 404 for another tenant's, like a missing one
            try:
                return results(s, dirs(), sweep_id, clock())
            except KeyError:
                raise HTTPException(404, detail=f"job {sweep_id} is not a sweep; "
                                                "`grace jobs` lists sweeps' ids") from None


__all__ = ["install_sweep_routes", "preflight_spec", "submit_with_preflight",
           "submitted_with_preflight"]
