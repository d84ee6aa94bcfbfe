"""Failure processes for the twin, calibrated on the Llama 3 pre-training run.

Meta reports 419 unexpected interruptions in 54 days on 16,384 H100s (Llama 3,
arXiv 2407.21783, section 3.3.4, Table 5): one per ~3.1 h for the whole job,
i.e. a per-GPU MTBF of ~50,700 GPU-hours. The causes below are that table's
counts; each maps to what the health table does with it: hardware faults drain
the node for repair, software faults only restart the job.

Each node fails as a Poisson process with rate (GPUs on it) / (per-GPU MTBF),
multiplied for "lemon" nodes (Meta's research clusters: 1.2% of nodes caused a
large share of large-job failures, Kokolis et al., HPCA'25). Failure times are
drawn up front from a seeded generator, so a run repeats exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grace.core.checkpoint import LLAMA3_GPU_MTBF_H
from grace.core.health import Signal, SignalKind
from grace.core.topology import Topology


@dataclass(frozen=True)
class FailureCause:
    """A root cause, how often Llama 3 saw it, and the health signal it raises.

    ``signal`` is a key of the health table (``core.health``): what Grace does
    with the failure (drain and reset, drain and diagnose, restart the job only)
    comes from that one table, in the twin as live. ``drains_node`` states what
    the default table does, for documentation and tests.
    """

    name: str
    count: int  # occurrences in Llama 3's Table 5
    drains_node: bool
    signal: str = "preflight-failed"


#: Llama 3 Table 5 root causes of the 419 unexpected interruptions.
LLAMA3_CAUSES: tuple[FailureCause, ...] = (
    FailureCause("faulty GPU", 148, True, "xid:79"),
    FailureCause("GPU HBM3 memory", 72, True, "xid:95"),
    FailureCause("software bug", 54, False, "job-crashed"),
    FailureCause("network switch/cable", 35, True, "preflight-failed"),
    FailureCause("unplanned host maintenance", 32, True, "preflight-failed"),
    FailureCause("GPU SRAM memory", 19, True, "xid:140"),
    FailureCause("GPU system processor", 17, True, "xid:119"),
    FailureCause("NIC", 7, True, "preflight-failed"),
    FailureCause("NCCL watchdog timeout", 7, False, "heartbeat-missing"),
    FailureCause("silent data corruption", 6, True, "xid:48"),
    FailureCause("GPU thermal interface/sensor", 6, True, "preflight-failed"),
    FailureCause("SSD", 3, True),
    FailureCause("power supply", 3, True),
    FailureCause("server chassis", 2, True),
    FailureCause("IO expansion board", 2, True),
    FailureCause("dependency", 2, False, "job-crashed"),
    FailureCause("CPU", 2, True),
    FailureCause("system memory", 2, True),
)


@dataclass(frozen=True)
class FailureModel:
    """What fails, how often, and what recovery costs, for one twin run."""

    gpu_mtbf_h: float = LLAMA3_GPU_MTBF_H
    causes: tuple[FailureCause, ...] = LLAMA3_CAUSES
    lemon_share: float = 0.0  # share of nodes that fail ``lemon_factor`` times as often
    lemon_factor: float = 10.0
    repair_s: float = 4 * 3600.0  # drain to return: repair, then the level-3 diagnostic
    level3_s: float = 15 * 60.0  # DCGM level 3 (~15 min, NVIDIA), the last part of repair_s
    restart_s: float = 600.0  # failure to training again: detect, reschedule, load
    checkpoint_s: float = 60.0  # time training blocks per checkpoint (async save)
    checkpoint_interval_s: float | None = None  # None: Daly's interval per job
    lemons: frozenset[int] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class NodeFailure:
    at_s: float
    node: int
    cause: FailureCause


def failure_signal(failure: NodeFailure, node_name: str, now: float) -> Signal:
    """The health signal a drawn failure raises (``xid:79`` is an Xid with its code)."""
    kind, _, code = failure.cause.signal.partition(":")
    return Signal(node_name, SignalKind(kind), now, int(code) if code else None,
                  failure.cause.name)


def draw_failures(topo: Topology, model: FailureModel, horizon_s: float,
                  seed: int) -> tuple[list[NodeFailure], frozenset[int]]:
    """Every node's failures in [0, horizon), and which nodes are lemons."""
    rng = np.random.default_rng(seed)
    n = len(topo.nodes)
    lemons = set(model.lemons)
    if model.lemon_share > 0 and not lemons:
        k = max(1, round(model.lemon_share * n))
        lemons = set(rng.choice(n, size=k, replace=False).tolist())
    # lemons fail more often; ordinary nodes a little less, so the fleet average holds
    fleet = 1.0 + (len(lemons) / n) * (model.lemon_factor - 1.0) if n else 1.0
    weights = np.array([c.count for c in model.causes], dtype=float)
    weights /= weights.sum()
    out: list[NodeFailure] = []
    for node in topo.nodes:
        rate = node.gpus / (model.gpu_mtbf_h * 3600.0) / fleet
        if node.index in lemons:
            rate *= model.lemon_factor
        expected = rate * horizon_s
        count = int(rng.poisson(expected))
        if not count:
            continue
        times = np.sort(rng.uniform(0.0, horizon_s, size=count))
        causes = rng.choice(len(model.causes), size=count, p=weights)
        out.extend(NodeFailure(float(t), node.index, model.causes[int(c)])
                   for t, c in zip(times, causes, strict=True))
    out.sort(key=lambda f: (f.at_s, f.node))
    return out, frozenset(lemons)
