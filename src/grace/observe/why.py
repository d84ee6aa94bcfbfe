"""``grace why JOB``: what holds a job back, in words, with what to do about it.

A pending job: its typed reason (``core.decisions.PendingReason``), the next step
``NEXT_STEP`` gives, and the figures behind it (free GPUs of the models it can
use, the tenant's quota and holdings, the nodes out of service).

A running job: its bottleneck from the phase timers of its newest heartbeats.
The thresholds and actions are the runbook's own (the rules that watch
``grace_job_wait_share{kind="io"}``, ``grace_job_phase_share{phase="allreduce"}``
and ``{phase="checkpoint"}``), so ``grace why`` calls a job input-bound exactly
when the runbook's alert would, bar the rule's ``for``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from grace.control.store.models import Attempt, Job, JobState
from grace.core.decisions import NEXT_STEP, PendingReason
from grace.core.health import IN_SERVICE
from grace.observe.alerts import render
from grace.observe.runbook_spec import Rule, RunbookSpec


class Bottleneck(StrEnum):
    INPUT = "input-bound"
    COMMUNICATION = "communication-bound"
    CHECKPOINT = "checkpoint-bound"
    COMPUTE = "compute-bound"
    UNKNOWN = "no-heartbeats-yet"


class WhyKind(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    ENDED = "ended"


#: (bottleneck, the metric and label its runbook rule watches), in the order they are tried
_WATCHED = (
    (Bottleneck.INPUT, "grace_job_wait_share", ("kind", "io")),
    (Bottleneck.COMMUNICATION, "grace_job_phase_share", ("phase", "allreduce")),
    (Bottleneck.CHECKPOINT, "grace_job_phase_share", ("phase", "checkpoint")),
)
#: used only when a custom runbook has no rule for the bottleneck
_FALLBACK = {Bottleneck.INPUT: 0.30, Bottleneck.COMMUNICATION: 0.40, Bottleneck.CHECKPOINT: 0.10}
_COMPUTE_ACTION = ("nothing to fix in the cluster: the GPUs are busy with the model's own work; "
                   "a larger batch, mixed precision or a fused kernel would speed it up")


@dataclass
class Explanation:
    job: int
    state: str
    kind: WhyKind
    reason: str
    action: str
    figures: dict[str, Any] = field(default_factory=dict)
    rule: str | None = None  # the runbook rule the action comes from

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "state": self.state, "kind": str(self.kind), "reason": self.reason,
                "action": self.action, "rule": self.rule, "figures": self.figures}


def _rule_for(runbook: RunbookSpec, metric: str, label: tuple[str, str]) -> Rule | None:
    for rule in runbook.rules:
        if rule.metric == metric and rule.match.get(label[0]) == label[1]:
            return rule
    return None


def explain(session: Any, job: Job, obs: Any, live: Attempt | None) -> Explanation:
    """``obs`` is the API's :class:`~grace.observe.hub.Observability`."""
    if job.state is JobState.PENDING:
        return _pending(job, obs)
    if job.state is JobState.RUNNING:
        return _running(job, obs, live)
    return Explanation(job.id, str(job.state), WhyKind.ENDED, job.reason or f"it {job.state}",
                       f"see `grace job {job.id}` for its attempts and events")


def _pending(job: Job, obs: Any) -> Explanation:
    reading = obs.reading()
    facts = reading.facts
    figures: dict[str, Any] = {"gpus": job.gpus}
    try:
        reason = PendingReason(job.reason or "")
    except ValueError:
        text = job.reason or "not examined by a cycle yet"
        return Explanation(job.id, "pending", WhyKind.PENDING, text,
                           f"wait for the next cycle; `grace job {job.id}` shows its events", figures)
    held = {(n, g) for a in facts.live for n, gs in a.placement for g in gs}
    states = {n.name: n.state for n in facts.nodes}
    free: Counter[str] = Counter()
    out_of_service = []
    for info in obs.topo.nodes:
        if states.get(info.name) in {s.value for s in IN_SERVICE}:
            free[info.gpu_model] += sum(1 for g in range(info.gpus) if (info.name, g) not in held)
        else:
            out_of_service.append({"node": info.name, "state": states.get(info.name, "unknown"),
                                   "reason": next((n.reason for n in facts.nodes
                                                   if n.name == info.name), None)})
    figures["free_gpus_by_model"] = dict(sorted(free.items()))
    action = NEXT_STEP[reason]
    if reason is PendingReason.OVER_QUOTA:
        tenant_held = sum(a.gpus for a in facts.live if a.tenant == job.tenant)
        figures["tenant"] = job.tenant
        figures["tenant_gpus_held"] = tenant_held
        figures["tenant_guaranteed_gpus"] = facts.quotas.get(job.tenant)
    elif reason is PendingReason.NO_USABLE_NODES:
        figures["nodes_out_of_service"] = out_of_service
        action += "; an operator returns a node with `grace resume NODE --diagnose`"
    return Explanation(job.id, "pending", WhyKind.PENDING, str(reason), action, figures)


def _running(job: Job, obs: Any, live: Attempt | None) -> Explanation:
    latest = obs.telemetry.snapshot([job.id]).get(job.id)
    figures: dict[str, Any] = {}
    if live is not None:
        leaves = {obs.topo.nodes[obs.topo.by_name[e["node"]]].leaf for e in live.placement_json
                  if e.get("node") in obs.topo.by_name}
        figures["leaves"] = len(leaves)
        figures["nodes"] = [e.get("node") for e in live.placement_json]
    if latest is None or (live is not None and latest.attempt != live.number):
        return Explanation(job.id, "running", WhyKind.RUNNING, str(Bottleneck.UNKNOWN),
                           "it has sent no heartbeat yet: it is starting, or it does not use "
                           "grace.runtime (see docs/runtime.md)", figures)
    shares = {"io": latest.io_share, "sync": latest.sync_share, **latest.phase_share}
    figures["shares"] = {k: round(v, 3) for k, v in sorted(shares.items())}
    figures["step_s"] = latest.step_s
    for bottleneck, metric, label in _WATCHED:
        rule = _rule_for(obs.runbook, metric, label)
        threshold = rule.threshold if rule is not None else _FALLBACK[bottleneck]
        value = latest.io_share if label == ("kind", "io") else latest.phase_share.get(label[1], 0.0)
        if value > threshold:
            figures["threshold"] = threshold
            action = (render(rule.action, {"job": str(job.id), "tenant": job.tenant}, value)
                      if rule is not None else NEXT_STEP_FOR[bottleneck])
            return Explanation(job.id, "running", WhyKind.RUNNING, str(bottleneck), action, figures,
                               rule.name if rule is not None else None)
    return Explanation(job.id, "running", WhyKind.RUNNING, str(Bottleneck.COMPUTE), _COMPUTE_ACTION,
                       figures)


NEXT_STEP_FOR = {
    Bottleneck.INPUT: "check the storage tier, raise dataloader workers, or stage the data on "
                      "local NVMe",
    Bottleneck.COMMUNICATION: "reschedule it under one leaf switch, or overlap communication "
                              "with compute (larger buckets, gradient accumulation)",
    Bottleneck.CHECKPOINT: "checkpoint less often, save asynchronously, or write to a faster tier",
}
