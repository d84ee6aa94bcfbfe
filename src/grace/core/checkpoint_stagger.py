"""Checkpoint staggering: each job's checkpoint phase, so bursts do not pile up.

Why: a checkpoint is a burst of writes to the shared file system. When many
jobs checkpoint at once their bursts share its write bandwidth and each one
blocks training for longer; spread over the interval, the same bytes go out
at each job's own rate. Meta's Llama 3 storage sustains 2 TB/s and peaks at
7 TB/s (arXiv 2407.21783, section 3.3.1): a 16K-GPU cluster whose jobs all
checkpointed in the same second would ask for far more.

Phase semantics (one common clock: the twin's virtual clock, the Unix epoch
live): a job with interval ``I`` and phase ``p`` checkpoints at the wall times
``t`` with ``(t - p) mod I == 0``. So the control plane can place jobs against
each other, and a running job keeps its phase (``fixed``) while new ones are
spaced around it.

The policy (``stagger``) works on a grid of slots over one hyperperiod: every
interval is rounded to a whole number of slots, the hyperperiod is their least
common multiple, and a burst occupies ``ceil(write_s / slot)`` slots at the
job's own write rate. Jobs are placed largest write rate first (ties by job
id); each takes the phase that minimises the peak demand over the slots its
bursts cover, then the demand it overlaps at all, then the earliest slot. With
intervals that are powers of two times a base (``harmonic_interval``), the
hyperperiod is the longest interval and the grid is exact; Young/Daly's ETTR is
flat near its optimum, so rounding the interval by at most a factor of
sqrt(2) costs little (the overhead delta/tau + tau/2M grows by (f + 1/f)/2,
at most 6%).

``phase_for`` is the one entry both drivers call at a job's start, so the twin
and live assign equal phases to equal jobs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

#: Bytes a checkpoint holds per parameter with mixed-precision Adam: bf16 weights (2), an fp32
#: master copy (4), Adam's momentum and variance (8); gradients are not saved (ZeRO, SC'20, 3.1).
CHECKPOINT_BYTES_PER_PARAM = 14.0
#: A job that declares no model: a 7B model trained on 8 GPUs (98 GB / 8).
DEFAULT_CHECKPOINT_GB_PER_GPU = 7e9 * CHECKPOINT_BYTES_PER_PARAM / 1e9 / 8
#: Harmonic intervals are this many seconds times a power of two.
HARMONIC_BASE_S = 60.0
#: The grid's coarsest-allowed default slot is this times a power of two (it divides the base).
SLOT_UNIT_S = 15.0
#: The most slots one hyperperiod may have: bounds the work per job to ~1e5 element operations.
MAX_SLOTS = 1 << 16


class CheckpointPhasing(StrEnum):
    """When a job's checkpoints fall on the common clock."""

    START = "start"  # an interval after the job's own start: today's behaviour
    SYNCHRONIZED = "synchronized"  # every job at phase 0: the worst case, all bursts together
    STAGGERED = "staggered"  # ``stagger``: spaced so the bursts fit the file system


@dataclass(frozen=True, slots=True)
class CheckpointLoad:
    """One job's checkpoint traffic: every ``interval_s``, ``write_s`` seconds of writing at
    ``write_gbps`` GB/s (what it takes, and its rate, when it writes alone)."""

    job_id: int
    interval_s: float
    write_s: float
    write_gbps: float

    def __post_init__(self) -> None:
        for name in ("interval_s", "write_s", "write_gbps"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"CheckpointLoad.{name} of job {self.job_id} must be a "
                                 f"positive finite number, got {v!r}")

    @property
    def size_gb(self) -> float:
        return self.write_s * self.write_gbps


def checkpoint_gb(gpus: float, params_b: float | None = None) -> float:
    """A job's checkpoint size: from its model when declared, else the per-GPU default."""
    if params_b is not None:
        return params_b * CHECKPOINT_BYTES_PER_PARAM
    return max(gpus, 1.0) * DEFAULT_CHECKPOINT_GB_PER_GPU


def job_load(job_id: int, gpus: float, interval_s: float, write_s: float,
             params_b: float | None = None) -> CheckpointLoad:
    """A job's load from what both drivers know: its GPUs, declared model (if any), the
    interval pushed to it and what a checkpoint costs (``write_s``, the Young/Daly delta)."""
    return CheckpointLoad(job_id, interval_s, write_s, checkpoint_gb(gpus, params_b) / write_s)


def harmonic_interval(interval_s: float, base_s: float = HARMONIC_BASE_S) -> float:
    """``interval_s`` rounded (in log scale) to ``base_s`` times a power of two, at least the base.

    Intervals of that form divide each other, so jobs' schedules repeat every longest
    interval and phases chosen once stay apart for good (incommensurate intervals drift
    through every offset, where no phase helps)."""
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ValueError(f"interval_s must be positive and finite, got {interval_s!r}")
    k = max(0, round(math.log2(interval_s / base_s)))
    return base_s * (2 ** k)


def default_slot_s(loads: Sequence[CheckpointLoad]) -> float:
    """The grid's slot: SLOT_UNIT_S times a power of two, no longer than the shortest write,
    coarsened until the longest interval has at most MAX_SLOTS slots."""
    if not loads:
        return SLOT_UNIT_S
    shortest = min(ld.write_s for ld in loads)
    slot = SLOT_UNIT_S * 2.0 ** math.floor(math.log2(shortest / SLOT_UNIT_S))
    longest = max(ld.interval_s for ld in loads)
    while longest / slot > MAX_SLOTS:
        slot *= 2.0
    return slot


@dataclass(frozen=True, slots=True)
class _Grid:
    slot_s: float
    periods: dict[int, int]  # job -> interval in slots
    widths: dict[int, int]  # job -> burst in slots
    horizon: int  # slots in one hyperperiod


def _grid(loads: Sequence[CheckpointLoad], slot_s: float | None) -> _Grid:
    slot = default_slot_s(loads) if slot_s is None else slot_s
    if not (math.isfinite(slot) and slot > 0):
        raise ValueError(f"slot_s must be positive and finite, got {slot!r}")
    periods = {ld.job_id: max(1, round(ld.interval_s / slot)) for ld in loads}
    widths = {ld.job_id: min(periods[ld.job_id], max(1, math.ceil(ld.write_s / slot - 1e-9)))
              for ld in loads}
    longest = max(periods.values(), default=1)
    horizon = 1
    for n in sorted(set(periods.values())):
        horizon = math.lcm(horizon, n)
        if horizon > MAX_SLOTS:  # incommensurate: look at whole longest periods only
            horizon = longest * max(1, MAX_SLOTS // longest)
            break
    return _Grid(slot, periods, widths, max(horizon, longest))


def hyperperiod_s(loads: Sequence[CheckpointLoad], slot_s: float | None = None) -> float:
    """Seconds after which every job's schedule repeats, on ``stagger``'s grid (for
    intervals that do not divide each other: a whole number of the longest ones)."""
    grid = _grid(loads, slot_s)
    return grid.horizon * grid.slot_s


def _occupied(start: int, period: int, width: int, horizon: int) -> np.ndarray:
    """Slot indices (within the horizon) a burst starting at ``start`` every ``period`` covers;
    distinct, as a burst is never longer than its period (so ``demand[idx] += rate`` is exact)."""
    starts = np.arange(start, horizon, period)
    idx = (starts[:, None] + np.arange(width)[None, :]).ravel()
    return idx[idx < horizon]


def _window(folded: np.ndarray, width: int, op: np.ufunc) -> np.ndarray:
    """``op`` (max or add) over the circular windows folded[p : p + width] for every p."""
    n = folded.shape[0]
    ext = np.concatenate([folded, folded[: width - 1]]) if width > 1 else folded
    if op is np.add:
        c = np.concatenate([[0.0], np.cumsum(ext)])
        return c[width: width + n] - c[:n]
    out = ext.copy()
    span = 1
    while span < width:  # doubling: out[i] = max(ext[i : i + span])
        step = min(span, width - span)
        out[: len(out) - step] = np.maximum(out[: len(out) - step], out[step:])
        span += step
    return out[:n]


def _lay(grid: _Grid, entries: Sequence[tuple[CheckpointLoad, float]]) -> np.ndarray:
    """The demand (GB/s per slot) of ``entries`` (load, phase) over the hyperperiod, built
    in a few array operations (not one per job: ``stagger`` calls this at every start with
    every running job)."""
    if not entries:
        return np.zeros(grid.horizon)
    n = np.array([grid.periods[ld.job_id] for ld, _ in entries], dtype=np.int64)
    w = np.array([grid.widths[ld.job_id] for ld, _ in entries], dtype=np.int64)
    rate = np.array([ld.write_gbps for ld, _ in entries])
    first = np.array([round(ph / grid.slot_s) for _, ph in entries], dtype=np.int64) % n
    bursts = -(-(grid.horizon - first) // n)  # starts within the horizon, per job
    job = np.repeat(np.arange(len(entries)), bursts)
    k = np.arange(job.size) - np.repeat(np.cumsum(bursts) - bursts, bursts)
    start = first[job] + k * n[job]
    cell = np.repeat(np.arange(start.size), w[job])
    offset = np.arange(cell.size) - np.repeat(np.cumsum(w[job]) - w[job], w[job])
    idx = start[cell] + offset
    keep = idx < grid.horizon
    return np.bincount(idx[keep], weights=rate[job[cell]][keep], minlength=grid.horizon)


def demand_profile(loads: Sequence[CheckpointLoad], phases: Mapping[int, float],
                   slot_s: float | None = None) -> tuple[np.ndarray, float]:
    """The write demand (GB/s) per slot over one hyperperiod, and the slot's length."""
    grid = _grid(loads, slot_s)
    return _lay(grid, [(ld, phases.get(ld.job_id, 0.0)) for ld in loads]), grid.slot_s


def peak_demand(loads: Sequence[CheckpointLoad], phases: Mapping[int, float],
                slot_s: float | None = None) -> float:
    """The highest total write demand (GB/s) the phases put on the file system."""
    demand, _ = demand_profile(loads, phases, slot_s)
    return float(demand.max(initial=0.0))


def stagger(loads: Sequence[CheckpointLoad], fs_write_gbps: float,
            fixed: Mapping[int, float] | None = None,
            slot_s: float | None = None) -> dict[int, float]:
    """A phase in [0, interval_s) for each job of ``loads`` not in ``fixed``.

    Jobs in ``fixed`` (running ones) keep their phase and count as demand. The rest
    are placed greedily, largest write rate first (ties: job id), each at the slot
    that minimises the peak over its bursts, then the demand it overlaps, then the
    earliest slot (see the module docstring). Bursts stay within ``fs_write_gbps``
    wherever a free gap exists; where none does, the peak is the lowest this greedy
    order finds. Deterministic: equal inputs give equal phases.
    """
    if not (math.isfinite(fs_write_gbps) and fs_write_gbps > 0):
        raise ValueError(f"fs_write_gbps must be positive and finite, got {fs_write_gbps!r}")
    fixed = fixed or {}
    ids = [ld.job_id for ld in loads]
    if len(set(ids)) != len(ids):
        raise ValueError("stagger: each job may appear once in loads")
    grid = _grid(loads, slot_s)
    demand = _lay(grid, [(ld, fixed[ld.job_id]) for ld in loads if ld.job_id in fixed])
    todo = sorted((ld for ld in loads if ld.job_id not in fixed),
                  key=lambda ld: (-ld.write_gbps, -ld.write_s, ld.job_id))
    out: dict[int, float] = {}
    for ld in todo:
        n, w = grid.periods[ld.job_id], grid.widths[ld.job_id]
        reps = -(-grid.horizon // n)
        if reps * n == grid.horizon:
            rows = demand.reshape(reps, n)
        else:  # incommensurate: the last partial period padded with no demand
            rows = np.concatenate([demand, np.zeros(reps * n - grid.horizon)]).reshape(reps, n)
        peak = _window(rows.max(axis=0), w, np.maximum) + ld.write_gbps
        overlap = _window(rows.sum(axis=0), w, np.add)
        # lowest peak, then least overlap, then the earliest slot (argmin takes the first)
        low = peak <= peak.min() + 1e-9
        best = int(np.argmin(np.where(low, overlap, np.inf)))
        demand[_occupied(best, n, w, grid.horizon)] += ld.write_gbps
        out[ld.job_id] = (best * grid.slot_s) % ld.interval_s
    return out


def phase_for(phasing: CheckpointPhasing, load: CheckpointLoad, now: float,
              running: Mapping[int, tuple[CheckpointLoad, float]],
              fs_write_gbps: float | None) -> float:
    """The phase of a job starting at ``now`` among ``running`` jobs (load, phase).

    START: an interval after its own start; SYNCHRONIZED: 0; STAGGERED: ``stagger``
    with the running jobs fixed (no file-system figure: nothing to stagger against,
    so its start, as START). The twin's engine and the live launch both call this.
    """
    if phasing is CheckpointPhasing.SYNCHRONIZED:
        return 0.0
    if phasing is CheckpointPhasing.START or fs_write_gbps is None:
        return now % load.interval_s
    loads = [ld for jid, (ld, _) in sorted(running.items()) if jid != load.job_id] + [load]
    fixed = {jid: phase for jid, (_, phase) in running.items() if jid != load.job_id}
    return stagger(loads, fs_write_gbps, fixed)[load.job_id]


__all__ = ["CHECKPOINT_BYTES_PER_PARAM", "DEFAULT_CHECKPOINT_GB_PER_GPU", "CheckpointLoad",
           "CheckpointPhasing", "checkpoint_gb", "default_slot_s", "demand_profile",
           "harmonic_interval", "hyperperiod_s", "job_load", "peak_demand", "phase_for", "stagger"]
