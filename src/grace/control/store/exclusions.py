"""A job's excluded nodes: why each one, since when, and until when.

A job moved off a node (a straggler, a planned drain) or restarted after the
node failed must not be placed back on it at once. But an exclusion kept for
good strands a job whose only fitting node came back repaired, so each entry
lasts until the node returns to service (``heal``) or until ``until``
(``EXCLUSION_TTL_S`` after it was made: a degraded node never "returns", it
stays in service), and an operator can clear a job's list
(``grace job N --clear-exclusions``).

Entries live in ``Job.exclude_nodes`` as ``{node, reason, cause, at, until}``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from grace.control.store.models import Job, JobEventKind, JobState

#: How long an exclusion lasts at most, seconds (a day: long enough for a slow node to be
#: looked at, short enough that a job is not kept off a node that was fine after all).
EXCLUSION_TTL_S = 86_400.0

_WAITING_OR_RUNNING = (JobState.PENDING, JobState.RUNNING)


def _entries(job: Job) -> list[dict[str, Any]]:
    return entries_of(job.exclude_nodes)


def entries_of(column: list[Any] | None) -> list[dict[str, Any]]:
    """``Job.exclude_nodes`` as entries (a bare node name is an entry of an older store)."""
    return [e if isinstance(e, dict) else {"node": str(e), "reason": "", "cause": "node",
                                            "at": None, "until": None}
            for e in column or ()]


def active(job: Job, now: float) -> list[dict[str, Any]]:
    """The entries in force at ``now``."""
    return [e for e in _entries(job) if e.get("until") is None or float(e["until"]) > now]


def active_names(job: Job, now: float) -> list[str]:
    return names_in_force(job.exclude_nodes, now)


def names_in_force(column: list[Any] | None, now: float) -> list[str]:
    """The nodes of ``Job.exclude_nodes`` whose entries are in force at ``now``, sorted."""
    return sorted({str(e["node"]) for e in entries_of(column)
                   if e.get("until") is None or float(e["until"]) > now})


def exclude(job: Job, node: str, reason: str, cause: str, now: float,
            ttl_s: float | None = EXCLUSION_TTL_S) -> None:
    """Keep ``job`` off ``node`` (a newer entry for the node replaces the older one)."""
    kept = [e for e in _entries(job) if e["node"] != node]
    job.exclude_nodes = [*kept, {"node": node, "reason": reason, "cause": cause, "at": now,
                                 "until": None if ttl_s is None else now + ttl_s}]


def heal(session: Session, node: str, now: float, why: str) -> list[int]:
    """``node`` is back in service: no job is kept off it any longer. Returns the jobs."""
    from grace.control.store import repository as repo  # repository imports this module

    healed: list[int] = []
    for job in repo.jobs_in_states(session, _WAITING_OR_RUNNING):
        entries = _entries(job)
        if not any(e["node"] == node for e in entries):
            continue
        job.exclude_nodes = [e for e in entries if e["node"] != node]
        repo.add_event(session, job.id, JobEventKind.EXCLUSIONS_CLEARED, now,
                       {"nodes": [node], "why": why})
        healed.append(job.id)
    return healed


def clear(session: Session, job: Job, actor: str, now: float,
          token_id: str | None = None) -> list[str]:
    """An operator clears every exclusion of ``job``; returns the nodes it named."""
    from grace.control.store import repository as repo

    nodes = sorted({str(e["node"]) for e in _entries(job)})
    if nodes:
        job.exclude_nodes = []
        repo.add_event(session, job.id, JobEventKind.EXCLUSIONS_CLEARED, now,
                       {"nodes": nodes, "why": f"cleared by {actor}", "actor": actor},
                       actor, token_id)
    return nodes


def describe(job: Job, now: float) -> list[dict[str, Any]]:
    """``excluded_nodes`` as the API and ``grace job N --json`` show them."""
    return [{"node": e["node"], "reason": e.get("reason") or "", "cause": e.get("cause"),
             "since": e.get("at"), "until": e.get("until")} for e in active(job, now)]


__all__ = ["EXCLUSION_TTL_S", "active", "active_names", "clear", "describe", "exclude", "heal"]
