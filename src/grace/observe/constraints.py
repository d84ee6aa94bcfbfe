"""Live constraint verdicts: each running job's, and the cluster's GPUs per constraint.

The verdict itself is ``core.constraint.classify`` (pure, shared with the twin);
this module feeds it what the control plane knows: the heartbeat log's wait
shares of the job's newest records (one ``heartbeat_record_s`` window per rank,
mean over ranks, see ``observe.telemetry``), and the live placement against the
tightest the gang could have had. A job whose telemetry belongs to an older
attempt, or that sent no step time yet, is ``unknown``.

Read by ``GET /jobs/{id}`` (``constraint``), ``grace job`` and ``/metrics``
(``grace_job_constraint``, ``grace_cluster_constraint_gpus``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from grace.core.constraint import (
    UNKNOWN,
    Constraint,
    Thresholds,
    Verdict,
    classify,
    gpus_by_constraint,
    tiers_of,
    to_json,
)
from grace.core.topology import Topology
from grace.observe.facts import LiveAttempt
from grace.observe.telemetry import JobTelemetry


def job_verdict(t: JobTelemetry | None, attempt: int, topo: Topology, nodes: Iterable[str],
                gpus: float, nodes_asked: int | None,
                thresholds: Thresholds = Thresholds()) -> Verdict:
    """The live attempt's verdict; ``unknown`` without telemetry of this attempt."""
    if t is None or t.attempt != attempt or t.waits is None:
        return UNKNOWN
    actual, tightest = tiers_of(topo, nodes, gpus, nodes_asked)
    return classify(t.waits, actual <= tightest, thresholds, (actual, tightest))


def attempt_verdict(a: LiveAttempt, t: JobTelemetry | None, topo: Topology) -> Verdict:
    return job_verdict(t, a.number, topo, (n for n, _ in a.placement), a.gpus, a.nodes_asked)


def verdicts(live: Iterable[LiveAttempt], jobs: dict[int, JobTelemetry], topo: Topology
             ) -> dict[int, tuple[LiveAttempt, Verdict]]:
    """Every live attempt's verdict, by job id."""
    return {a.job_id: (a, attempt_verdict(a, jobs.get(a.job_id), topo)) for a in live}


def cluster_gpus(judged: dict[int, tuple[LiveAttempt, Verdict]]) -> dict[Constraint, float]:
    """Running GPUs per constraint: the share of the cluster's work each one limits."""
    return gpus_by_constraint((v.constraint, a.gpus) for a, v in judged.values())


def job_constraint(job: Any, telemetry: Any, topo: Topology) -> dict[str, object] | None:
    """``GET /jobs/{id}``'s ``constraint``: ``{kind, share, detail, label, shares}`` for a job with a
    live attempt, None for one without (pending, ended). ``job`` is the store's ``Job``
    (attempts loaded), ``telemetry`` the API's ``HeartbeatLog``."""
    from grace.control.store.models import LIVE_ATTEMPT_STATES

    live = [a for a in job.attempts if a.state in LIVE_ATTEMPT_STATES]
    if not live:
        return None
    a = live[-1]
    asked = (job.spec_json or {}).get("nodes")
    t = telemetry.snapshot([job.id]).get(job.id)
    v = job_verdict(t, a.number, topo,
                    [str(e.get("node")) for e in a.placement_json if isinstance(e, dict)],
                    a.gpus, asked if isinstance(asked, int) and asked > 0 else None)
    return to_json(v, t.waits if t is not None and t.attempt == a.number else None)
