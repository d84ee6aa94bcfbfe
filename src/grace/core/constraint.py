"""What limits a running job: compute, input, communication or checkpoints, from its phase times.

The seed's practical test for the data path: "measuring whether accelerator
utilization drops during data loading or checkpointing, which identifies
storage as the constraint", and, for the network, that the interconnect
"frequently determines throughput" of distributed training. The runtime's
phase timers (``grace.runtime.timers``) measure exactly those drops: a step's
time spent waiting for a batch (``data``), for peers (``allreduce``, ``sync``)
and blocked on a save (``checkpoint``). This module turns them into one
verdict, a :class:`Constraint`, for the control plane (``grace job``, showback,
``/metrics``) and, with modelled phase shares, for the twin.

Pure: no clock, no I/O; the caller passes phase seconds and the placement.

How a step is split (:func:`shares_from_phases`)
------------------------------------------------

The runtime's ``step_s`` runs from one ``step_done`` to the next *but* leaves
out what ``step_done`` itself does after measuring it: the per-step agreement
between ranks (``sync``) and a blocking checkpoint (``checkpoint``), both timed
as phases (``runtime/session.py``). So the wall time of a step is
``step_s + sync + checkpoint``, and every share below is of that.

Under DistributedDataParallel the gradient all-reduce runs inside
``backward``, overlapped with it, and the ``allreduce`` phase is the span from
the first bucket's launch to the last bucket's completion
(``timers.time_ddp_allreduce``). Most of that span is hidden behind backward
compute; only the tail that outlasts compute costs step time. The timers do
not measure that tail, so it is estimated: backward compute is taken to be
:data:`BACKWARD_PER_FORWARD` (2) times forward, the usual rule for dense
models (a backward pass costs about twice the forward's FLOPs: Kaplan et al.
2020, "Scaling Laws for Neural Language Models", section 2.1, C ~ 6N per token
of which 2N forward; Narayanan et al. SC'21, Megatron-LM, section 5.1). The
exposed all-reduce is then ``min(allreduce, max(0, backward - 2 x forward))``:
never more than the span the hook saw, never negative. A job whose phases
already add up without the all-reduce overlapping (it all-reduces outside
``backward``) gets its whole ``allreduce`` counted. The estimate errs towards
"exposed" where backward is slower than twice forward for reasons other than
communication (small models on CPUs, where it often is); ``detail`` says so.

The verdict (:func:`classify`)
------------------------------

Three kinds of wait compete: input (``data``), communication (exposed
all-reduce plus ``sync``, which includes waiting for the slowest rank) and
checkpointing. The largest wait over its threshold names the constraint;
with none over, the job is compute-bound. Thresholds
(:class:`Thresholds`), with their reasons:

- input 0.30 and checkpoint 0.10 are the shipped runbook's ``DataWaitHigh``
  and ``CheckpointBound`` (``observe/data/runbooks.yaml``), so the verdict,
  the alert and ``grace why`` agree on what input- and checkpoint-bound mean.
  0.30 is where fixing the input is worth at least 1/(1 - 0.3) = 1.43x
  (Amdahl); 0.10 is well past the Young/Daly optimum, whose save overhead is
  a few percent of run time at realistic MTBFs (``core.checkpoint``).
- communication 0.30: the same 1.43x bar as input. The runbook's
  ``AllReduceMultiLeaf`` watches the raw all-reduce span (0.40), which under
  DDP overlaps backward; this one is the exposed part, so it is lower.

A communication-bound job is named ``communication-placement`` when its
placement crosses a looser network tier than the tightest its gang could have
had (:func:`tightest_tier`, :func:`placement_tier`: the same node / leaf / pod
tiers as the twin's runtime model), else ``communication-interconnect``: it is
as tightly placed as it can be and the links themselves are the limit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum

from grace.core.topology import Topology


class Constraint(StrEnum):
    """The closed set of verdicts (also the ``constraint`` label of ``/metrics``)."""

    COMPUTE = "compute"
    INPUT = "input"  # storage read: waiting for batches
    COMMUNICATION_INTERCONNECT = "communication-interconnect"
    COMMUNICATION_PLACEMENT = "communication-placement"
    CHECKPOINT = "checkpoint"  # storage write: blocked on saves
    UNKNOWN = "unknown"  # no phase data (no heartbeat yet, or a script without timers)


#: How each verdict reads in one line (``grace job``).
LABEL = {
    Constraint.COMPUTE: "compute-bound",
    Constraint.INPUT: "input-bound (storage read)",
    Constraint.COMMUNICATION_INTERCONNECT: "communication-bound (interconnect)",
    Constraint.COMMUNICATION_PLACEMENT: "communication-bound (placement)",
    Constraint.CHECKPOINT: "checkpoint-bound (storage write)",
    Constraint.UNKNOWN: "unknown (no phase data yet)",
}

#: Backward compute as a multiple of forward: dense models, see the module docstring.
BACKWARD_PER_FORWARD = 2.0
#: Shares may overshoot 1 by float rounding of sums; more than this is a caller's error.
_SLACK = 1e-6


class NetTier(IntEnum):
    """Network tiers a gang can span, tightest first (as ``sim.runtime_model``'s TIER_*)."""

    NODE = 0  # NVLink inside one node (or NVLink domain)
    LEAF = 1  # one leaf switch
    POD = 2  # leaves under one spine group
    CLUSTER = 3  # across pods


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Share of step wall time at which a wait names the constraint (reasons: module doc)."""

    input: float = 0.30
    communication: float = 0.30
    checkpoint: float = 0.10

    def __post_init__(self) -> None:
        for name in ("input", "communication", "checkpoint"):
            v = getattr(self, name)
            if not (0.0 < v <= 1.0):
                raise ValueError(f"threshold {name} must be in (0, 1], got {v}")


@dataclass(frozen=True, slots=True)
class PhaseShares:
    """Shares of a step's wall time: waiting for input, exposed communication, checkpointing.

    Each in [0, 1] and together at most 1 (what is left is compute and the rest)."""

    data: float
    communication: float
    checkpoint: float
    #: the all-reduce span's share before the overlap estimate (for ``detail`` only)
    allreduce_span: float = 0.0
    #: True when the exposed all-reduce is estimated (DDP overlap), not measured
    estimated: bool = False

    def __post_init__(self) -> None:
        for name in ("data", "communication", "checkpoint", "allreduce_span"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not math.isfinite(v) or v < 0 or v > 1 + _SLACK:
                raise ValueError(f"share {name} must be a finite number in [0, 1], got {v!r}")
        total = self.data + self.communication + self.checkpoint
        if total > 1 + _SLACK:
            raise ValueError(f"shares add up to {total:.3f} > 1: data {self.data:.3f}, "
                             f"communication {self.communication:.3f}, checkpoint "
                             f"{self.checkpoint:.3f} are parts of one step")

    @property
    def compute(self) -> float:
        return max(0.0, 1.0 - self.data - self.communication - self.checkpoint)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The constraint, the share of step time it accounts for, and a short reason."""

    constraint: Constraint
    share: float  # of step wall time: the wait that names it (compute: what is left)
    detail: str

    @property
    def label(self) -> str:
        return LABEL[self.constraint]

    def to_json(self) -> dict[str, object]:
        return {"kind": str(self.constraint), "share": round(self.share, 4), "detail": self.detail}


def to_json(verdict: Verdict, shares: PhaseShares | None) -> dict[str, object]:
    """A verdict with the shares behind it (``GET /jobs/{id}``'s ``constraint``)."""
    out = verdict.to_json() | {"label": verdict.label}
    if shares is not None:
        out["shares"] = {"data": round(shares.data, 4), "communication":
                         round(shares.communication, 4), "checkpoint": round(shares.checkpoint, 4),
                         "allreduce_span": round(shares.allreduce_span, 4),
                         "allreduce_overlap_estimated": shares.estimated}
    return out


UNKNOWN = Verdict(Constraint.UNKNOWN, 0.0, "no phase timings yet")


def _seconds(phases: Mapping[str, float], name: str) -> float:
    v = phases.get(name, 0.0)
    if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ValueError(f"phase {name} must be finite seconds >= 0, got {v!r}")
    return float(v)


def shares_from_phases(phases: Mapping[str, float], step_s: float,
                       backward_per_forward: float = BACKWARD_PER_FORWARD) -> PhaseShares:
    """A step's shares from the runtime's mean seconds per phase and its ``step_s``.

    See the module docstring for why the wall time is ``step_s + sync + checkpoint``
    and how the exposed all-reduce is estimated."""
    if not math.isfinite(step_s) or step_s <= 0:
        raise ValueError(f"step_s must be finite and > 0, got {step_s!r}")
    sec = {p: _seconds(phases, p) for p in ("data", "h2d", "forward", "backward", "allreduce",
                                              "optimizer", "checkpoint", "sync")}
    wall = step_s + sec["sync"] + sec["checkpoint"]
    inside = sum(sec[p] for p in ("data", "h2d", "forward", "backward", "optimizer"))
    span = sec["allreduce"]
    overlapped = span > 0 and inside + span > step_s * (1 + 1e-3)
    if overlapped:  # DDP: only the tail that outlasts backward compute costs step time
        exposed = min(span, max(0.0, sec["backward"] - backward_per_forward * sec["forward"]))
    else:
        exposed = span
    data = min(1.0, sec["data"] / wall)
    comm = min(1.0 - data, (exposed + sec["sync"]) / wall)
    ckpt = min(1.0 - data - comm, sec["checkpoint"] / wall)
    return PhaseShares(data, comm, max(0.0, ckpt), min(1.0, span / wall), overlapped)


def classify(shares: PhaseShares, ideal_placement: bool = True,
             thresholds: Thresholds = Thresholds(), tiers: tuple[NetTier, NetTier] | None = None
             ) -> Verdict:
    """The constraint of one step (or a mean over a window of steps).

    ``ideal_placement``: the job's gang spans no looser a network tier than it had to
    (:func:`placement_tier` <= :func:`tightest_tier`); ``tiers`` (actual, tightest), when
    known, only words the detail. The largest wait over its threshold wins; ties go to
    input, then communication, then checkpoint (the order the seed names them)."""
    waits = [
        (shares.data, thresholds.input, Constraint.INPUT),
        (shares.communication, thresholds.communication,
         Constraint.COMMUNICATION_INTERCONNECT if ideal_placement
         else Constraint.COMMUNICATION_PLACEMENT),
        (shares.checkpoint, thresholds.checkpoint, Constraint.CHECKPOINT),
    ]
    over = [(share, -i, kind) for i, (share, limit, kind) in enumerate(waits) if share > limit]
    if not over:  # details are short: ``grace job`` prints label and detail on one line
        return Verdict(Constraint.COMPUTE, shares.compute,
                       f"data {shares.data:.0%}, comm {shares.communication:.0%}, "
                       f"ckpt {shares.checkpoint:.0%} of step")
    share, _, kind = max(over)
    if kind is Constraint.INPUT:
        detail = f"data {share:.0%} of step"
    elif kind is Constraint.CHECKPOINT:
        detail = f"checkpoint {share:.0%} of step"
    else:
        detail = f"comm {share:.0%} of step"
        if tiers is not None and kind is Constraint.COMMUNICATION_PLACEMENT:
            detail += f"; {tiers[0].name.lower()}, fits {tiers[1].name.lower()}"
    return Verdict(kind, share, detail)


def tightest_tier(nodes_needed: int, nodes_per_leaf: int, leaves_per_pod: int) -> NetTier:
    """The tightest tier a gang of ``nodes_needed`` nodes could fit in on an empty cluster."""
    if nodes_needed <= 1:
        return NetTier.NODE
    if nodes_needed <= nodes_per_leaf:
        return NetTier.LEAF
    if nodes_needed <= nodes_per_leaf * leaves_per_pod:
        return NetTier.POD
    return NetTier.CLUSTER


def nodes_needed(topo: Topology, gpus: float, nodes_asked: int | None, gpu_model: str | None
                 ) -> int:
    """Fewest nodes a gang can use: the nodes it asked for, else its GPUs over the most
    GPUs one node (of its model, when known) has."""
    if nodes_asked:
        return nodes_asked
    per_node = max((n.gpus for n in topo.nodes if gpu_model is None or n.gpu_model == gpu_model),
                   default=topo.max_node_gpus) or 1
    return max(1, math.ceil(gpus / per_node))


def placement_tier(topo: Topology, node_names: Iterable[str]) -> NetTier:
    """The loosest tier a placement crosses (names the topology does not know are ignored)."""
    idx = {topo.by_name[n] for n in node_names if n in topo.by_name}
    if len(idx) <= 1:
        return NetTier.NODE
    if len({topo.nodes[i].domain for i in idx}) == 1:
        return NetTier.NODE  # one NVLink domain (rack-scale NVLink) is one tier
    leaves = {topo.nodes[i].leaf for i in idx}
    if len(leaves) == 1:
        return NetTier.LEAF
    return NetTier.POD if len({topo.leaf_pod[leaf] for leaf in leaves}) == 1 else NetTier.CLUSTER


def tiers_of(topo: Topology, node_names: Iterable[str], gpus: float, nodes_asked: int | None,
             gpu_model: str | None = None) -> tuple[NetTier, NetTier]:
    """(the tier a placement crosses, the tightest its gang could have had)."""
    names = list(node_names)
    models = {topo.nodes[topo.by_name[n]].gpu_model for n in names if n in topo.by_name}
    model = gpu_model or (next(iter(models)) if len(models) == 1 else None)
    per_leaf = max((len(ns) for ns in topo.leaf_nodes), default=1)
    per_pod = max((topo.leaf_pod.count(p) for p in set(topo.leaf_pod)), default=1)
    need = nodes_needed(topo, gpus, nodes_asked, model)
    return placement_tier(topo, names), tightest_tier(need, per_leaf, per_pod)


def gpus_by_constraint(jobs: Iterable[tuple[Constraint, float]]) -> dict[Constraint, float]:
    """Running GPUs per constraint (every member of the enum, zeros included)."""
    out = dict.fromkeys(Constraint, 0.0)
    for kind, gpus in jobs:
        out[kind] += gpus
    return out
