"""The cluster map and the queue as the signed-in person may see them (view models).

The map is the topology (leaf switches -> nodes -> GPUs) with each GPU's state
now, read from the store in one transaction: which live attempt holds it, and
what the node's health row says. Visibility is the API's (``Principal.sees``):
a GPU another tenant holds is shown as ``held``, without the job's name, id or
tenant, as ``GET /jobs`` would not list that job either.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from enum import StrEnum

from grace.control.auth import Principal
from grace.control.node_health import breaker_message
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import LIVE_ATTEMPT_STATES, Job, JobState
from grace.core.decisions import NEXT_STEP, PendingReason
from grace.core.health import NodeState
from grace.core.topology import Topology
from grace.observe.metrics import node_gpu_state

#: Colours for tenants (CSS classes ``tenant-0`` ..): a tenant keeps its colour across
#: pages and restarts because it comes from its name, not from an order.
TENANT_COLOURS = 10


class GpuState(StrEnum):
    """What a GPU is doing now; the same words as the ``grace_gpus{state}`` metric."""

    FREE = "free"
    ALLOCATED = "allocated"
    DRAINING = "draining"
    DRAINED = "drained"
    DOWN = "down"


def idle_state(node_state: str | None) -> GpuState:
    """What a GPU no job holds is, by its node's state: the rule ``/metrics`` counts with
    (``observe.metrics.node_gpu_state``), so the map and ``grace_gpus`` agree. A node the
    store has no row for yet (registered when the control plane starts leading) is down:
    nothing is placed on it."""
    return GpuState(node_gpu_state(node_state)) if node_state is not None else GpuState.DOWN


#: Node states the map marks with their reason (and a node not registered yet).
UNREGISTERED = "unregistered"
MARKED_STATES = frozenset({NodeState.DEGRADED, NodeState.DRAINING, NodeState.DRAINED,
                           NodeState.DIAGNOSING, UNREGISTERED})


def tenant_colour(tenant: str) -> str:
    return f"tenant-{zlib.crc32(tenant.encode()) % TENANT_COLOURS}"


@dataclass(frozen=True, slots=True)
class Holder:
    """A job on a GPU, or ``hidden`` when it is another tenant's."""

    job_id: int | None
    job_name: str | None
    tenant: str | None

    @property
    def hidden(self) -> bool:
        return self.job_id is None


@dataclass(frozen=True, slots=True)
class GpuCell:
    index: int
    state: GpuState
    holders: tuple[Holder, ...] = ()  # more than one: MIG slices or shares of one GPU

    @property
    def css(self) -> str:
        """The cell's classes: its state, and who holds it (a tenant's colour or ``held``)."""
        if self.state is not GpuState.ALLOCATED:
            return f"gpu {self.state}"
        first = self.holders[0] if self.holders else None
        who = "held" if first is None or first.hidden or first.tenant is None \
            else tenant_colour(first.tenant)
        return f"gpu allocated {who}"

    @property
    def title(self) -> str:
        if self.state is not GpuState.ALLOCATED:
            return f"GPU {self.index}: {self.state}"
        names = [("held by another tenant" if h.hidden else f"job {h.job_id} {h.job_name} "
                  f"({h.tenant})") for h in self.holders]
        return f"GPU {self.index}: " + "; ".join(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    group: str
    gpu_model: str
    pool: str
    state: str
    reason: str | None
    actor: str | None
    lemon: bool
    gpus: tuple[GpuCell, ...]

    @property
    def marked(self) -> bool:
        """Out of service or suspect: the map shows its state and reason."""
        return self.state in MARKED_STATES or self.lemon

    @property
    def element_id(self) -> str:
        return f"node-{self.name}"

    @property
    def jobs(self) -> tuple[Holder, ...]:
        """The jobs on this node that the viewer may see, once each."""
        seen = {h.job_id: h for g in self.gpus for h in g.holders if not h.hidden}
        return tuple(seen.values())


@dataclass(frozen=True, slots=True)
class LeafView:
    name: str
    nodes: tuple[NodeView, ...]


@dataclass(frozen=True, slots=True)
class Headline:
    gpus: int
    allocated: int
    free: int
    unavailable: int  # draining, drained or down, and not allocated
    running: int
    pending: int
    scoped_to: str | None  # the tenant the job counts are for; None: every tenant


@dataclass(frozen=True, slots=True)
class ClusterMap:
    cluster: str
    leaves: tuple[LeafView, ...]
    headline: Headline
    tenants: tuple[tuple[str, str], ...]  # (tenant, colour class) for the legend
    breaker_open: bool


@dataclass
class _Occupancy:
    holders: dict[tuple[str, int], list[Holder]] = field(default_factory=dict)
    colours: dict[str, str] = field(default_factory=dict)


def _occupancy(running: list[Job], who: Principal) -> _Occupancy:
    out = _Occupancy()
    for job in running:
        visible = who.sees(job.tenant)
        holder = Holder(job.id, job.name, job.tenant) if visible else Holder(None, None, None)
        if visible:
            out.colours[job.tenant] = tenant_colour(job.tenant)
        for attempt in job.attempts:
            if attempt.state not in LIVE_ATTEMPT_STATES:
                continue
            for entry in attempt.placement_json:
                if isinstance(entry, dict):
                    for slot in entry.get("gpus", ()):
                        out.holders.setdefault((str(entry.get("node")), int(slot)),
                                               []).append(holder)
    return out


def cluster_map(store: Store, topo: Topology, who: Principal) -> ClusterMap:
    """The map, one store transaction."""
    with store.read() as s:
        rows = {n.name: n for n in repo.nodes(s)}
        running = repo.jobs_in_states(s, [JobState.RUNNING])
        pending = repo.jobs_in_states(s, [JobState.PENDING])
        occupancy = _occupancy(running, who)
        breaker_open = breaker_message(s) is not None
        leaves = []
        counts = {state: 0 for state in GpuState}
        for leaf, members in enumerate(topo.leaf_nodes):
            nodes = []
            for index in members:
                info = topo.nodes[index]
                row = rows.get(info.name)
                idle = idle_state(str(row.state) if row is not None else None)
                cells = []
                for g in range(info.gpus):
                    holders = tuple(occupancy.holders.get((info.name, g), ()))
                    cell = GpuCell(g, GpuState.ALLOCATED if holders else idle, holders)
                    counts[cell.state] += 1
                    cells.append(cell)
                if row is None:
                    nodes.append(NodeView(info.name, info.group, info.gpu_model, info.pool,
                                          UNREGISTERED, "the control plane has not registered "
                                          "it yet", None, False, tuple(cells)))
                    continue
                nodes.append(NodeView(info.name, info.group, info.gpu_model, info.pool,
                                      str(row.state), row.reason, row.actor, bool(row.lemon),
                                      tuple(cells)))
            leaves.append(LeafView(topo.leaf_names[leaf], tuple(nodes)))
    visible_running = sum(1 for j in running if who.sees(j.tenant))
    visible_pending = sum(1 for j in pending if who.sees(j.tenant))
    headline = Headline(
        gpus=topo.total_gpus, allocated=counts[GpuState.ALLOCATED], free=counts[GpuState.FREE],
        unavailable=counts[GpuState.DRAINING] + counts[GpuState.DRAINED] + counts[GpuState.DOWN],
        running=visible_running, pending=visible_pending,
        scoped_to=None if who.all_tenants else who.tenant)
    return ClusterMap(topo.name, tuple(leaves), headline,
                      tuple(sorted(occupancy.colours.items())), breaker_open)


# ---------------------------------------------------------------- the queue
@dataclass(frozen=True, slots=True)
class PendingView:
    id: int
    name: str
    tenant: str
    gpus: float
    priority: int
    workload_class: str
    submitted_at: float
    reason: str  # a PendingReason value, or "other"
    detail: str  # the reason's words as the store has them
    next_step: str


def _why(reason: str | None) -> tuple[str, str, str]:
    """(typed reason, the stored text, what happens next) for a pending job's ``reason``."""
    if reason is None:
        return ("not-examined", "",
                "the scheduler has not looked at it yet; it does within a cycle or two")
    if reason in PendingReason._value2member_map_:
        typed = PendingReason(reason)
        return typed.value, typed.value, NEXT_STEP[typed]
    # a requeue's own words ("launch failed (1 of 3): ..."): its next step is a new try
    return "other", reason, "queued again; the scheduler places it like any other pending job"


def queue(store: Store, who: Principal) -> list[PendingView]:
    """Pending jobs ``who`` may see, oldest first (the order the scheduler meets ties in)."""
    with store.read() as s:
        jobs = [j for j in repo.jobs_in_states(s, [JobState.PENDING]) if who.sees(j.tenant)]
        out = []
        for j in jobs:
            reason, detail, step = _why(j.reason)
            out.append(PendingView(j.id, j.name, j.tenant, j.gpus, j.priority, j.workload_class,
                                   j.submitted_at, reason, detail, step))
    return out


def queue_counts(views: list[PendingView]) -> dict[str, int]:
    """Pending jobs per typed reason, for the queue page's summary."""
    out: dict[str, int] = {}
    for v in views:
        out[v.reason] = out.get(v.reason, 0) + 1
    return dict(sorted(out.items()))


__all__ = ["MARKED_STATES", "ClusterMap", "GpuCell", "GpuState", "Headline", "Holder", "LeafView",
           "NodeView", "PendingView", "cluster_map", "queue", "queue_counts", "tenant_colour"]
