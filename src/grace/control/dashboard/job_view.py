"""One job's page: its attempts and placement (from the store) and its curves (heartbeats).

The curves come from ``HeartbeatLog.series`` (``grace.observe.telemetry``), the
points rank 0 reported, as columns ready for plotly: one list per field, one
``phases`` list per phase, so the page's script hands them to ``Plotly.react``
without reshaping. The log lives in the API process (``app.state.observability``);
without one (an app built without it, or a control plane that just restarted and
has heard nothing yet) the series is empty and the page says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grace.control.auth import Principal
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import LIVE_ATTEMPT_STATES, Attempt, Job
from grace.observe.telemetry import PHASES

#: Events shown on the page, newest last (the full history is in ``GET /jobs/N``).
EVENTS_SHOWN = 30


@dataclass(frozen=True, slots=True)
class AttemptView:
    number: int
    state: str
    nodes: str  # "a100-00 [0, 1]; a100-01 [0, 1]"
    started_at: float
    ended_at: float | None
    exit_code: int | None
    failure_kind: str | None
    end_cause: str | None
    detail: str | None
    live: bool


@dataclass(frozen=True, slots=True)
class EventView:
    at: float
    kind: str
    actor: str
    detail: str


@dataclass(frozen=True, slots=True)
class JobPage:
    id: int
    name: str
    tenant: str
    state: str
    reason: str | None
    gpus: float
    workload_class: str
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    restarts: int
    command: str
    attempts: tuple[AttemptView, ...]
    placement: tuple[tuple[str, str], ...]  # (node, its GPU slots) of the live attempt
    events: tuple[EventView, ...]


def _placement(attempt: Attempt) -> list[tuple[str, str]]:
    out = []
    for entry in attempt.placement_json:
        if isinstance(entry, dict):
            gpus = ", ".join(str(g) for g in entry.get("gpus", ()))
            slices = entry.get("slices") or ()
            shared = f" (shares {len(slices)} slice{'s' if len(slices) != 1 else ''})" \
                if slices else ""
            out.append((str(entry.get("node")), f"GPU {gpus}{shared}"))
    return out


def _detail(body: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in body.items() if v not in (None, "", [], {}))


def visible(store: Store, job_id: int, who: Principal) -> bool:
    """Does the job exist for ``who``? (Another tenant's does not, as in the API.)"""
    with store.read() as s:
        job = repo.get_job(s, job_id)
        return job is not None and who.sees(job.tenant)


def job_page(store: Store, job_id: int, who: Principal) -> JobPage | None:
    """The job's page, or None when it does not exist for ``who`` (another tenant's)."""
    with store.read() as s:
        job: Job | None = repo.get_job(s, job_id)
        if job is None or not who.sees(job.tenant):
            return None
        attempts = []
        live: list[tuple[str, str]] = []
        for a in sorted(job.attempts, key=lambda a: a.number):
            is_live = a.state in LIVE_ATTEMPT_STATES
            if is_live:
                live = _placement(a)
            attempts.append(AttemptView(
                a.number, str(a.state), "; ".join(f"{n} [{g.removeprefix('GPU ')}]"
                                                  for n, g in _placement(a)),
                a.started_at, a.ended_at, a.exit_code, a.failure_kind,
                str(a.end_cause) if a.end_cause is not None else None, a.detail, is_live))
        events = [EventView(e.at, str(e.kind), e.actor, _detail(dict(e.detail or {})))
                  for e in repo.events(s, job_id)][-EVENTS_SHOWN:]
        command = job.spec_json.get("command") or []
        return JobPage(job.id, job.name, job.tenant, str(job.state), job.reason, job.gpus,
                       job.workload_class, job.submitted_at, job.started_at, job.ended_at,
                       job.restarts, " ".join(str(c) for c in command), tuple(attempts),
                       tuple(live), tuple(events))


def series(observability: Any, job_id: int) -> dict[str, Any]:
    """Rank 0's points as columns (see the module docstring); ``available`` False when
    this process keeps no heartbeats."""
    telemetry = getattr(observability, "telemetry", None)
    points = telemetry.series(job_id) if telemetry is not None else []
    names = [p for p in PHASES if any(p in pt.phases for pt in points)]
    return {
        "job": job_id,
        "available": telemetry is not None,
        "points": len(points),
        "at": [p.at for p in points],
        "attempt": [p.attempt for p in points],
        "step": [p.step for p in points],
        "step_s": [p.step_s for p in points],
        "loss": [p.loss for p in points],
        "tokens_per_s": [p.tokens_per_s for p in points],
        "phases": {name: [p.phases.get(name, 0.0) for p in points] for name in names},
    }


def plotted_points(data: dict[str, Any]) -> int:
    """How many step-time points the chart draws (those with a step time)."""
    return sum(1 for v in data["step_s"] if v is not None)


__all__ = ["AttemptView", "EventView", "JobPage", "job_page", "plotted_points", "series", "visible"]
