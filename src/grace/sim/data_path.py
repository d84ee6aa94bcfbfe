"""The twin's data-path model: step time from compute, all-reduce and data loading, with contention.

Opt-in (``SimConfig.data_path``); with it off the twin keeps the stretch factor of
``sim.runtime_model``. Written out with its assumptions and its validation in
docs/twin.md ("The data path").

One step of a data-parallel job of ``n`` ranks:

    step_s = compute_s + comm_s + stall_s
    comm_s  = 2 (n - 1) / n * grad_gb / link_gbps / share_of(shared uplinks)
    stall_s = max(0, read_s - compute_s),   read_s = compute_s / share_of(read bandwidth)

- ``comm_s`` is the ring all-reduce (nccl-tests' bus bandwidth is ``algbw * 2(n-1)/n``,
  so ``link_gbps`` is the bus bandwidth the ring reaches) over the slowest tier the
  placement crosses: inside one node the GPU model's NVLink (catalog, GB/s per GPU);
  across nodes, NCCL runs one ring per NIC, so a node's part of the ring moves at the
  NICs of the job's GPUs there together (``network.nic_gbps / 8`` GB/s each), times
  that node's degraded-link factor; the slowest node sets the pace, capped by NVLink.
  Communication does not overlap compute: the upper bound today's model also takes.
- Crossing leaves, each of the job's nodes under a leaf sends its part of the ring
  (``link_gbps``) up that leaf's uplink (``UplinkTraffic.ALL_RANKS``, the default: what
  ``core.spine_load`` counts, and today's factor when a leaf is full; tree and
  all-to-all traffic, and rings that ECMP hashes badly, behave so), or only one link's
  worth per leaf (``UplinkTraffic.RING``: a ring ordered by leaf crosses each cut once,
  the lower bound). Likewise each pod uplink, crossing pods. An uplink's capacity is
  the GPUs under it times the NIC divided by the oversubscription
  (``spine_oversubscription``; times ``pod_oversubscription`` for a pod's). The jobs
  crossing it are taken to all-reduce at once (an upper bound); when they ask for more
  than it has, each gets the capacity in proportion to what it asked (``Contention``).
- The input pipeline prefetches: reading overlaps compute (not the all-reduce, whose
  traffic shares the NIC). A job reads ``read_gbps_per_gpu`` per GPU while computing at
  full speed; jobs reading at once share the file system's ``read_gbps`` (or, with
  ``nvme_read_gbps``, their node's NVMe) in proportion to demand.
- ``slowdown`` is ``step_s`` over the step the job would take on the reference GPU
  model placed as tightly as its size allows, alone: the run-time multiplier the engine
  applies to the trace's duration, as today's model does.

Defaults (``job_facts``) when the trace does not say: the checkpoint size is
``core.checkpoint_stagger.checkpoint_gb`` (a 7B model's mixed-precision Adam state per 8
GPUs); the gradient is the bf16 share of it (2 of its 14 bytes per parameter); the read
rate is ``DEFAULT_READ_GBPS_PER_GPU``; the compute per step is calibrated so that, placed
tightly and alone, communication is today's share of the step (10% inside a node, 20%
across nodes). So on an idle cluster a job placed tightly runs exactly as long as with
the model off. Placed badly it differs from today's formula where today's is coarse:
a gang split over nodes keeps the NICs of its GPUs there (today: one NIC per GPU), and
a ring across an oversubscribed spine is slowed by what shares its uplinks, itself
included (today: always, by the whole oversubscription).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from grace.core.capacity import Placement
from grace.core.checkpoint_stagger import CHECKPOINT_BYTES_PER_PARAM, checkpoint_gb
from grace.core.topology import Topology
from grace.sim.runtime_model import TIER_LEAF, TIER_NODE, RuntimeModel
from grace.sim.traces.model import TraceJob

#: bf16 gradient bytes per byte of checkpoint (2 of the 14 bytes a parameter takes there)
GRAD_PER_CHECKPOINT_GB = 2.0 / CHECKPOINT_BYTES_PER_PARAM
#: Input per GPU at full speed when the trace does not say, GB/s: an ImageNet-class vision
#: job (~450 JPEGs of ~110 KB a second per GPU); an assumption, not a measurement.
DEFAULT_READ_GBPS_PER_GPU = 0.05
#: A one-GPU job's step when the trace does not say (it has no all-reduce to calibrate
#: against); only the input stall scales with it, and that is a share of the step.
SINGLE_GPU_STEP_S = 1.0
#: Re-rate a running job only when its step time or checkpoint cost moves by more than this.
RERATE_TOLERANCE = 0.01


class UplinkTraffic(StrEnum):
    """How much of a job's all-reduce crosses a leaf's (or pod's) uplinks."""

    ALL_RANKS = "all-ranks"  # every node of the job under the leaf: its link rate each
    RING = "ring"  # one link's worth per leaf: a ring ordered by leaf crosses each cut once


def ring_allreduce_s(ranks: int, gb: float, link_gbps: float) -> float:
    """Seconds a ring all-reduce of ``gb`` GB takes over ``ranks`` ranks at ``link_gbps``
    GB/s per rank: each rank sends (and receives) 2 (n - 1) / n of the buffer."""
    if ranks <= 1 or gb <= 0:
        return 0.0
    return 2.0 * (ranks - 1) / ranks * gb / link_gbps


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What a job moves per step, with the trace's figures or the documented defaults."""

    model_gb: float  # checkpoint size: weights and optimizer state
    grad_gb_per_step: float  # gradient each rank all-reduces per step
    read_gbps_per_gpu: float  # input read per GPU at full speed
    step_compute_s: float  # a step's compute on the reference GPU model


def job_facts(tj: TraceJob, gpus: int, ref_link_gbps: float, comm_share: float) -> JobFacts:
    """The trace's data-path figures, defaults filled (module docstring): ``ref_link_gbps``
    is the per-rank bandwidth of the tier the job fits in tightly, ``comm_share`` the share
    of its step the calibrated default compute leaves to communication there."""
    model_gb = tj.model_gb if tj.model_gb is not None else checkpoint_gb(gpus)
    grad = tj.grad_gb_per_step if tj.grad_gb_per_step is not None else (
        model_gb * GRAD_PER_CHECKPOINT_GB)
    read = tj.read_gbps_per_gpu if tj.read_gbps_per_gpu is not None else (
        DEFAULT_READ_GBPS_PER_GPU)
    compute = tj.step_compute_s
    if compute is None:
        comm = ring_allreduce_s(gpus, grad, ref_link_gbps)
        compute = comm * (1.0 - comm_share) / comm_share if comm > 0 else SINGLE_GPU_STEP_S
    return JobFacts(model_gb, grad, read, compute)


@dataclass(frozen=True, slots=True)
class Route:
    """One attempt on one placement: its step alone, and what shared resources it asks for.

    ``uplinks`` and ``reads`` are ``(resource id, GB/s asked)``; the step's all-reduce is
    slowed by the least share any of its uplinks grants, its reads by the least share of
    its read resources."""

    gpus: int
    compute_s: float  # on the placed GPU model
    comm_s: float  # all-reduce alone (degraded links counted)
    ref_step_s: float  # the reference step: the slowdown's denominator
    link_gbps: float  # per-rank bandwidth alone
    uplinks: tuple[tuple[int, float], ...]
    reads: tuple[tuple[int, float], ...]
    degraded: bool  # a degraded link slows it
    model_gb: float
    write_gbps: float  # its checkpoint's write rate alone (file system or its NICs)


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step under the current load, and its multiplier on the trace's duration."""

    compute_s: float
    comm_s: float
    stall_s: float
    ref_step_s: float

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s + self.stall_s

    @property
    def slowdown(self) -> float:
        return self.step_s / self.ref_step_s


class Contention:
    """Shared resources (uplinks, file-system reads, NVMe) and who asks how much of each.

    A resource asked for more than its capacity grants each user ``capacity / asked``
    of what it asked (proportional sharing: a job limited elsewhere still counts in full,
    which errs towards more contention). ``add``/``remove`` return the resources whose
    share changed, so the engine re-rates only their users.
    """

    def __init__(self, capacity: list[float]) -> None:
        self.capacity = capacity
        self.asked = [0.0] * len(capacity)
        self.users: list[dict[int, float]] = [{} for _ in capacity]

    def share(self, r: int) -> float:
        asked, cap = self.asked[r], self.capacity[r]
        return cap / asked if asked > cap else 1.0

    def least_share(self, demands: Iterable[tuple[int, float]]) -> float:
        return min((self.share(r) for r, _ in demands), default=1.0)

    def add(self, job: int, demands: Iterable[tuple[int, float]]) -> list[int]:
        changed = []
        for r, d in demands:
            before = self.share(r)
            self.users[r][job] = self.users[r].get(job, 0.0) + d
            self.asked[r] += d
            if self.share(r) != before:
                changed.append(r)
        return changed

    def remove(self, job: int, demands: Iterable[tuple[int, float]]) -> list[int]:
        changed = []
        for r, _ in demands:
            d = self.users[r].pop(job, None)
            if d is None:
                continue
            before = self.share(r)
            # recomputed, not subtracted, once nobody is left: no drift from rounding
            self.asked[r] = self.asked[r] - d if self.users[r] else 0.0
            if self.share(r) != before:
                changed.append(r)
        return changed

    def users_of(self, resources: Iterable[int]) -> set[int]:
        out: set[int] = set()
        for r in resources:
            out.update(self.users[r])
        return out


class DataPathModel:
    """Per-cluster constants of the data path and the resource ids; pure, no clock.

    Resource ids: leaf uplinks ``0 .. L-1``, pod uplinks ``L .. L+P-1``, the shared file
    system's reads ``L+P``, node ``k``'s NVMe ``L+P+1+k``.
    """

    def __init__(self, topo: Topology, runtime: RuntimeModel,
                 traffic: UplinkTraffic = UplinkTraffic.ALL_RANKS) -> None:
        self.topo = topo
        self.runtime = runtime
        self.traffic = traffic
        net = topo.network
        self.nic_gbps = net.nic_gbps / 8.0
        self.degraded = {topo.by_name[d.node]: d.factor for d in net.degraded_links
                         if d.node in topo.by_name}
        self.storage = topo.storage
        n_leaves = len(topo.leaf_nodes)
        n_pods = 1 + max(topo.leaf_pod, default=-1)
        self.pod_base = n_leaves
        self.fs_read = n_leaves + n_pods
        self.nvme_base = self.fs_read + 1
        leaf_gpus = [sum(topo.nodes[n].gpus for n in ns) for ns in topo.leaf_nodes]
        pod_gpus = [0] * n_pods
        for leaf, g in enumerate(leaf_gpus):
            pod_gpus[topo.leaf_pod[leaf]] += g
        spine = net.spine_oversubscription
        cap = [g * self.nic_gbps / spine for g in leaf_gpus]
        cap += [g * self.nic_gbps / (spine * net.pod_oversubscription) for g in pod_gpus]
        st = self.storage
        cap.append(st.read_gbps if st is not None else float("inf"))
        nvme = st.nvme_read_gbps if st is not None and st.nvme_read_gbps else float("inf")
        cap += [nvme] * len(topo.nodes)
        self.capacity = cap

    def reference_link_gbps(self, gpus: int, model: str) -> tuple[float, float]:
        """The ring bandwidth of a gang of ``gpus`` placed tightly (fewest nodes, evenly
        filled; fewest leaves, full) alone on an idle cluster, and the communication share
        today's model gives it. A gang larger than a leaf shares its own full leaves'
        uplinks: with every node's traffic crossing, its share is today's tier ratio."""
        rm = self.runtime
        nvlink = rm.model_nvlink_gbps.get(model, rm.tier_gbps[0])
        ideal = rm.ideal_tier(gpus)
        if ideal == TIER_NODE:
            return nvlink, rm.comm_share_node
        per_node = gpus // -(-gpus // rm.gpus_per_node)
        link = min(nvlink, per_node * self.nic_gbps)
        if self.traffic is UplinkTraffic.ALL_RANKS:
            link *= rm.tier_gbps[ideal] / rm.tier_gbps[TIER_LEAF]
        return link, rm.comm_share_multi

    def route(self, tj: TraceJob, placement: Placement) -> Route | None:
        """The attempt's step alone and its demands; None for a sub-GPU job (MIG or a
        fractional share), which runs at the trace's duration as today."""
        topo, rm = self.topo, self.runtime
        if not placement.gpus:
            return None
        gpus = len(placement.gpus)
        model = topo.nodes[topo.gpu_node[placement.gpus[0]]].gpu_model
        ref_link, share = self.reference_link_gbps(gpus, model)
        facts = job_facts(tj, gpus, ref_link, share)
        speed = rm.reference_tflops / rm.model_tflops.get(model, rm.reference_tflops)
        compute = facts.step_compute_s * speed
        nodes = sorted(placement.nodes(topo))  # fills by_node: (node, bitmask of its GPUs)
        per_node = {n: mask.bit_count() for n, mask in placement.by_node}
        nvlink = rm.model_nvlink_gbps.get(model, rm.tier_gbps[0])
        degraded = False
        uplinks: list[tuple[int, float]] = []
        if len(nodes) <= 1:
            link = nvlink
        else:
            # one ring per NIC of the job's GPUs on a node (NCCL's channels): a node's
            # share of the ring runs at its NICs together; the slowest node sets the pace
            healthy = min(per_node.values()) * self.nic_gbps
            network = min(per_node[n] * self.nic_gbps * self.degraded.get(n, 1.0)
                          for n in nodes)
            link = min(nvlink, network)
            degraded = link < min(nvlink, healthy)
            per_leaf: dict[int, int] = {}
            for n in nodes:
                leaf = topo.nodes[n].leaf
                per_leaf[leaf] = per_leaf.get(leaf, 0) + 1
            if len(per_leaf) > 1:
                ring = self.traffic is UplinkTraffic.RING
                uplinks += [(leaf, link if ring else k * link)
                            for leaf, k in sorted(per_leaf.items())]
                per_pod: dict[int, int] = {}
                for leaf, k in per_leaf.items():
                    p = topo.leaf_pod[leaf]
                    per_pod[p] = per_pod.get(p, 0) + k
                if len(per_pod) > 1:
                    uplinks += [(self.pod_base + p, link if ring else k * link)
                                for p, k in sorted(per_pod.items())]
        reads: list[tuple[int, float]] = []
        rate = facts.read_gbps_per_gpu * facts.step_compute_s / compute  # slower GPU: slower
        if rate > 0 and self.storage is not None:
            if self.storage.nvme_read_gbps:
                reads = [(self.nvme_base + n, per_node[n] * rate) for n in nodes]
            else:
                reads = [(self.fs_read, gpus * rate)]
        ref_step = facts.step_compute_s + ring_allreduce_s(gpus, facts.grad_gb_per_step, ref_link)
        write = min(self.storage.write_gbps if self.storage is not None else float("inf"),
                    gpus * self.nic_gbps)
        return Route(gpus, compute, ring_allreduce_s(gpus, facts.grad_gb_per_step, link),
                     ref_step, link, tuple(uplinks), tuple(reads), degraded, facts.model_gb,
                     write)

    @staticmethod
    def step(route: Route, contention: Contention) -> StepTime:
        """The step under the load ``contention`` holds now."""
        comm = route.comm_s / contention.least_share(route.uplinks)
        read_share = contention.least_share(route.reads)
        stall = route.compute_s * (1.0 / read_share - 1.0)
        return StepTime(route.compute_s, comm, stall, route.ref_step_s)


__all__ = ["DEFAULT_READ_GBPS_PER_GPU", "GRAD_PER_CHECKPOINT_GB", "RERATE_TOLERANCE",
           "Contention", "DataPathModel", "JobFacts", "Route", "StepTime", "UplinkTraffic",
           "job_facts", "ring_allreduce_s"]
