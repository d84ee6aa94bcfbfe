"""The data path during one replay: who uses which shared resource, and at what rate.

``Simulation`` (``sim.engine``) owns the clock, the events and the work banking; this
keeps the rest of the data path's state for it: each running attempt's ``Route`` and the
``StepTime`` applied to it, the ``Contention`` on uplinks and reads, and, when the file
system's writes are modelled, every checkpointing job's ``CheckpointLoad`` and phase and
the checkpoint cost (``delta``) the burst model gives each. It answers which running jobs a
start or an end touches, so the engine re-rates only those, and it sums the summary's
``data_path`` section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grace.core.capacity import Placement
from grace.core.checkpoint_stagger import (
    CheckpointLoad,
    CheckpointPhasing,
    harmonic_interval,
    phase_for,
)
from grace.core.topology import Topology
from grace.sim.checkpoint_bursts import burst_write_s
from grace.sim.data_path import (
    RERATE_TOLERANCE,
    Contention,
    DataPathModel,
    Route,
    StepTime,
    UplinkTraffic,
)
from grace.sim.runtime_model import RuntimeModel
from grace.sim.traces.model import TraceJob


@dataclass(slots=True)
class Rated:
    """One running attempt: its route, and the step the engine's plan was last set from."""

    route: Route
    step: StepTime
    gpus: float
    contended: bool = False  # ran slowed by contention at some point


@dataclass
class DataPathTotals:
    """GPU-seconds by where a working step's time went, over every attempt."""

    work_gpu_s: float = 0.0
    comm_gpu_s: float = 0.0
    stall_gpu_s: float = 0.0
    checkpoint_gpu_s: float = 0.0  # blocked writing checkpoints (file system modelled)
    checkpoint_wait_gpu_s: float = 0.0  # ... beyond what each write takes alone
    rerates: int = 0  # running jobs whose completion moved because a shared load changed
    rerates_skipped: int = 0  # ... whose change stayed under RERATE_TOLERANCE
    attempts: int = 0
    degraded_attempts: int = 0
    contended_attempts: int = 0
    placement_slowed_attempts: int = 0  # slower than placed tightly, before any contention


class DataPathRun:
    """The data path's state across one replay."""

    def __init__(self, topo: Topology, runtime: RuntimeModel,
                 phasing: CheckpointPhasing = CheckpointPhasing.START,
                 traffic: UplinkTraffic = UplinkTraffic.ALL_RANKS) -> None:
        self.model = DataPathModel(topo, runtime, traffic)
        self.contention = Contention(self.model.capacity)
        self.phasing = phasing
        self.jobs: dict[int, Rated] = {}
        self.totals = DataPathTotals()
        storage = topo.storage
        self.fs_write_gbps = storage.write_gbps if storage is not None else None
        self.loads: dict[int, tuple[CheckpointLoad, float]] = {}  # checkpointing: load, phase
        self.deltas: dict[int, float] = {}
        self._stale = False  # the checkpointing set changed since the costs were computed

    # ------------------------------------------------------------ attempts
    def start(self, job: int, tj: TraceJob, placement: Placement, gpus: float
              ) -> tuple[float, set[int]] | None:
        """Register an attempt; its slowdown under the load with it, and the other running
        jobs whose share of a resource it changed. None: the data path does not apply
        (a sub-GPU job)."""
        route = self.model.route(tj, placement)
        if route is None:
            return None
        changed = self.contention.add(job, route.uplinks + route.reads)
        step = DataPathModel.step(route, self.contention)
        rated = Rated(route, step, gpus, contended=self._contended(route))
        self.jobs[job] = rated
        t = self.totals
        t.attempts += 1
        t.degraded_attempts += route.degraded
        alone = route.compute_s + route.comm_s
        t.placement_slowed_attempts += alone > route.ref_step_s * (1 + RERATE_TOLERANCE)
        return step.slowdown, self.contention.users_of(changed) - {job}

    def end(self, job: int) -> set[int]:
        """An attempt ended: the running jobs whose share of an uplink or of the reads it
        changed (checkpoint costs change at ``settle``)."""
        rated = self.jobs.pop(job, None)
        if rated is None:
            return set()
        self.totals.contended_attempts += rated.contended
        changed = self.contention.remove(job, rated.route.uplinks + rated.route.reads)
        if self.loads.pop(job, None) is not None:
            self._stale = True
        self.deltas.pop(job, None)
        return self.contention.users_of(changed) - {job}

    def slowdown(self, job: int) -> float:
        """The job's slowdown under the load now (not yet applied)."""
        rated = self.jobs[job]
        return DataPathModel.step(rated.route, self.contention).slowdown

    def applied(self, job: int) -> None:
        """The engine set the job's plan from the load now: remember that step."""
        rated = self.jobs[job]
        rated.step = DataPathModel.step(rated.route, self.contention)
        rated.contended = rated.contended or self._contended(rated.route)

    def _contended(self, route: Route) -> bool:
        c = self.contention
        return c.least_share(route.uplinks) < 1.0 or c.least_share(route.reads) < 1.0

    # ------------------------------------------------------------ checkpoints
    @property
    def models_writes(self) -> bool:
        """Checkpoint writes share the file system's write bandwidth (a storage tier)."""
        return self.fs_write_gbps is not None

    def checkpointing(self, job: int, tau_s: float, now: float) -> tuple[float, float]:
        """A starting attempt that checkpoints every ``tau_s``: its interval (rounded to a
        harmonic one, so phases hold: ``core.checkpoint_stagger``) and its checkpoint cost
        until ``settle`` (its write alone; the engine settles before time moves on)."""
        assert self.fs_write_gbps is not None
        route = self.jobs[job].route
        tau = harmonic_interval(tau_s)
        write_s = route.model_gb / route.write_gbps
        load = CheckpointLoad(job, tau, write_s, route.write_gbps)
        phase = phase_for(self.phasing, load, now, self.loads, self.fs_write_gbps)
        self.loads[job] = (load, phase)
        self._stale = True
        return tau, write_s

    def settle(self) -> set[int]:
        """Once per instant, after its starts and ends: every checkpointing job's cost
        given everyone's phases (one burst model run however many jobs came and went);
        the jobs whose cost moved by more than the tolerance."""
        if not self._stale:
            return set()
        self._stale = False
        return self._refresh_deltas()

    def delta(self, job: int) -> float | None:
        return self.deltas.get(job)

    def write_alone_s(self, job: int) -> float:
        load = self.loads.get(job)
        return load[0].write_s if load is not None else 0.0

    def _refresh_deltas(self) -> set[int]:
        """Every checkpointing job's cost given everyone's phases; the jobs whose cost
        moved by more than the tolerance."""
        assert self.fs_write_gbps is not None
        if not self.loads:
            self.deltas = {}
            return set()
        loads = [ld for ld, _ in self.loads.values()]
        phases = {jid: ph for jid, (_, ph) in self.loads.items()}
        new = burst_write_s(loads, phases, self.fs_write_gbps)
        moved = {jid for jid, d in new.items()
                 if not math.isclose(d, self.deltas.get(jid, -1.0), rel_tol=RERATE_TOLERANCE)}
        self.deltas = {jid: float(d) for jid, d in new.items()}
        return moved

    # ------------------------------------------------------------ accounting
    def account(self, job: int, work_wall_s: float, checkpoints: int, delta_s: float) -> None:
        """Book ``work_wall_s`` seconds of working steps at the job's applied step, and
        ``checkpoints`` writes of ``delta_s`` each."""
        rated = self.jobs.get(job)
        if rated is None:
            return
        t, g, step = self.totals, rated.gpus, rated.step
        if work_wall_s > 0 and step.step_s > 0:
            t.work_gpu_s += work_wall_s * g
            t.comm_gpu_s += work_wall_s * g * step.comm_s / step.step_s
            t.stall_gpu_s += work_wall_s * g * step.stall_s / step.step_s
        if checkpoints and self.models_writes:
            t.checkpoint_gpu_s += checkpoints * delta_s * g
            t.checkpoint_wait_gpu_s += checkpoints * max(0.0, delta_s - self.write_alone_s(job)) * g

    def summary(self) -> dict[str, object]:
        """The replay summary's ``data_path`` section."""
        t = self.totals
        work = t.work_gpu_s or 1.0
        return {
            "comm_share": round(t.comm_gpu_s / work, 6),
            "input_wait_share": round(t.stall_gpu_s / work, 6),
            "checkpoint_write_gpu_h": round(t.checkpoint_gpu_s / 3600.0, 6),
            "checkpoint_write_wait_gpu_h": round(t.checkpoint_wait_gpu_s / 3600.0, 6),
            "rerates": t.rerates,
            "rerates_skipped": t.rerates_skipped,
            "attempts": t.attempts,
            "degraded_attempts": t.degraded_attempts,
            "placement_slowed_attempts": t.placement_slowed_attempts,
            "contended_attempts": t.contended_attempts + sum(r.contended
                                                             for r in self.jobs.values()),
            "checkpoint_phases": str(self.phasing),
            "uplink_traffic": str(self.model.traffic),
            "fs_write_modelled": self.models_writes,
        }
