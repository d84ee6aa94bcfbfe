"""The twin's physics of checkpoint bursts: writes that overlap share the file system.

A fluid model over one hyperperiod (``core.checkpoint_stagger.hyperperiod_s``):
each job starts a burst of ``size_gb`` (its ``write_s`` x ``write_gbps``) at the
common-clock times ``phase + k * interval``; the writers active at an instant
share ``fs_write_gbps`` max-min fairly (each gets at most its own rate, the
rest is split evenly among those that could use more), and a burst lasts until
its bytes are written. Training blocks for the burst (a synchronous save; with
an asynchronous one the same figure is how long the background write holds the
file system). The hyperperiods before and after the measured one are played
too, so bursts that spill across either edge meet the ones they overlap.

What it leaves out: per-node and per-link limits below the job's own rate, the
file system's metadata and caching behaviour, and reads; a job's schedule does
not shift when a burst runs late (checkpoints fall on the common clock).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

import numpy as np

from grace.core.checkpoint import expected_ettr
from grace.core.checkpoint_stagger import CheckpointLoad, hyperperiod_s

#: Bytes below this (GB) count as written: float dust from the rate arithmetic.
_EPS_GB = 1e-9


def _max_min(caps: np.ndarray, capacity: float) -> np.ndarray:
    """Max-min fair rates: each writer gets min(its cap, the water level) and they sum to
    ``capacity`` (or to the caps, when those fit)."""
    if caps.sum() <= capacity:
        return caps.copy()
    order = np.argsort(caps, kind="stable")
    s = caps[order]
    k = len(s)
    before = np.concatenate([[0.0], np.cumsum(s)[:-1]])
    levels = (capacity - before) / (k - np.arange(k))
    first = int(np.argmax(s > levels))  # exists: the caps do not fit
    return np.minimum(caps, levels[first])


def _uncontended(starts: np.ndarray, ends: np.ndarray, rates: np.ndarray,
                 capacity: float) -> bool:
    """Whether the bursts, each at its own rate, never ask for more than ``capacity``
    together: then each lasts its ``write_s`` (the common case once staggered)."""
    times = np.concatenate([starts, ends])
    delta = np.concatenate([rates, -rates])
    order = np.lexsort((delta, times))  # at equal times, ends before starts
    return bool(np.cumsum(delta[order]).max(initial=0.0) <= capacity * (1 + 1e-12))


def burst_write_s(loads: Sequence[CheckpointLoad], phases: Mapping[int, float],
                  fs_write_gbps: float) -> dict[int, float]:
    """Mean seconds each job's checkpoint takes (and blocks training) with ``phases`` on a
    file system of ``fs_write_gbps``; a job alone on an ample one gets its ``write_s``."""
    if not loads:
        return {}
    if not fs_write_gbps > 0:
        raise ValueError(f"fs_write_gbps must be positive, got {fs_write_gbps!r}")
    horizon = hyperperiod_s(loads)
    interval = np.array([ld.interval_s for ld in loads])
    write = np.array([ld.write_s for ld in loads])
    caps_all = np.array([ld.write_gbps for ld in loads])
    # every burst of the hyperperiods before, of and after the measured one
    first = np.array([phases.get(ld.job_id, 0.0) for ld in loads]) % interval - horizon
    count = np.ceil((2 * horizon - first) / interval).astype(np.int64)
    job = np.repeat(np.arange(len(loads)), count)
    k = np.arange(job.size) - np.repeat(np.cumsum(count) - count, count)
    starts = first[job] + k * interval[job]
    inside = starts < 2 * horizon
    job, starts = job[inside], starts[inside]
    if _uncontended(starts, starts + write[job], caps_all[job], fs_write_gbps):
        return {ld.job_id: float(ld.write_s) for ld in loads}  # nobody ever waits for anybody
    # (start, job id, index in loads)
    arrivals = [(float(t), loads[i].job_id, int(i)) for t, i in zip(starts, job, strict=True)]
    pending = int(((starts >= 0.0) & (starts < horizon)).sum())  # measured, not yet done
    heapq.heapify(arrivals)
    sizes = np.array([ld.size_gb for ld in loads])
    act_i: list[int] = []  # index in loads of each active burst
    act_start: list[float] = []
    rem = np.zeros(0)
    total = np.zeros(len(loads))
    count_m = np.zeros(len(loads))
    t = arrivals[0][0] if arrivals else 0.0
    while pending and (arrivals or act_i):
        while arrivals and arrivals[0][0] <= t:
            start, _, i = heapq.heappop(arrivals)
            act_i.append(i)
            act_start.append(start)
            rem = np.append(rem, sizes[i])
        if not act_i:
            t = arrivals[0][0]
            continue
        rates = _max_min(caps_all[act_i], fs_write_gbps)
        finish = rem / rates
        dt = float(finish.min())
        if arrivals and arrivals[0][0] - t < dt:
            dt = arrivals[0][0] - t
        rem = rem - rates * dt
        t += dt
        done = (rem <= _EPS_GB) | (finish <= dt)
        if done.any():
            for j in np.flatnonzero(done):
                i, start = act_i[j], act_start[j]
                if 0.0 <= start < horizon:
                    total[i] += t - start
                    count_m[i] += 1
                    pending -= 1
            keep = np.flatnonzero(~done)
            act_i = [act_i[j] for j in keep]
            act_start = [act_start[j] for j in keep]
            rem = rem[keep]
    return {ld.job_id: float(total[i] / count_m[i]) if count_m[i] else ld.write_s
            for i, ld in enumerate(loads)}


def ettr_with_bursts(loads: Sequence[CheckpointLoad], blocked_s: Mapping[int, float],
                     gpus: Mapping[int, float], mtbf_s: Mapping[int, float],
                     restart_s: float) -> float:
    """GPU-weighted ETTR (productive time / wall time) of the jobs when each checkpoint
    blocks for its ``blocked_s`` (``burst_write_s``): Daly's closed form per job
    (``core.checkpoint.expected_ettr``), failures and restarts included."""
    num = den = 0.0
    for ld in loads:
        g = gpus[ld.job_id]
        num += g * expected_ettr(ld.interval_s, blocked_s[ld.job_id], mtbf_s[ld.job_id],
                                 restart_s)
        den += g
    return num / den if den else 1.0


__all__ = ["burst_write_s", "ettr_with_bursts"]
