"""A seeded generator of the four workload classes, for what-ifs no public trace covers.

Public traces are dominated by single-GPU jobs (93 % in Philly) and contain
nothing of LLM scale, so capacity questions about 512-GPU runs need synthetic
load. Shapes per class (sizes are powers of two, capped at the cluster):

- experiment: 1-8 GPUs, minutes (log-normal, median 20 min, 1 min..4 h);
- sweep: bursts of 8-32 one-GPU jobs from one tenant within two minutes,
  each ~30 min (5 min..4 h);
- fine-tune: 8-64 GPUs, hours (median 3 h, 1 h..24 h);
- full-run: 64-1024 GPUs, days (median 3 d, 1 d..21 d).

Arrivals are a Poisson process over arrival *events* (a job, or a whole sweep
burst), conditioned on the number of events: exponential gaps rescaled so
the events span exactly W / (load × cluster_gpus) seconds, where W is the
GPU-seconds actually drawn. The offered load is then ``load`` for any seed
(to within the two-minute spread of the last sweep burst). Sizing from the
realised work rather than from the mean matters: one 1,024-GPU, 10-day run
is more GPU time than ten thousand experiments, so expectation-based rates
miss the target badly on short traces.

Everything comes from ``numpy.random.default_rng(seed)``: same arguments,
same trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from grace.sim.traces._common import DAY, HOUR, finish
from grace.sim.traces.model import LoadReport, Trace
from grace.spec.job import WorkloadClass

#: Default share of *jobs* per class (sweeps count each member job).
DEFAULT_CLASSES: dict[WorkloadClass, float] = {
    WorkloadClass.EXPERIMENT: 0.55,
    WorkloadClass.SWEEP: 0.35,
    WorkloadClass.FINE_TUNE: 0.08,
    WorkloadClass.FULL_RUN: 0.02,
}

_SIZES: dict[WorkloadClass, tuple[int, ...]] = {
    WorkloadClass.EXPERIMENT: (1, 2, 4, 8),
    WorkloadClass.SWEEP: (1,),
    WorkloadClass.FINE_TUNE: (8, 16, 32, 64),
    WorkloadClass.FULL_RUN: (64, 128, 256, 512, 1024),
}
# (median seconds, log-normal sigma, min, max)
_DURATIONS: dict[WorkloadClass, tuple[float, float, float, float]] = {
    WorkloadClass.EXPERIMENT: (20 * 60, 1.0, 60, 4 * HOUR),
    WorkloadClass.SWEEP: (30 * 60, 0.6, 5 * 60, 4 * HOUR),
    WorkloadClass.FINE_TUNE: (3 * HOUR, 0.8, HOUR, DAY),
    WorkloadClass.FULL_RUN: (3 * DAY, 0.7, DAY, 21 * DAY),
}
_SWEEP_SIZE = (8, 32)  # members per burst, inclusive
_SWEEP_SPREAD_S = 120.0  # a burst's members arrive within this many seconds
_TENANTS = 8


def _weights(classes: Mapping[WorkloadClass | str, float] | None) -> dict[WorkloadClass, float]:
    if classes is None:
        return dict(DEFAULT_CLASSES)
    known = [c.value for c in WorkloadClass]
    out: dict[WorkloadClass, float] = {}
    for key, weight in classes.items():
        try:
            wc = WorkloadClass(key)
        except ValueError:
            raise ValueError(f"unknown workload class {key!r}; use one of {known}") from None
        if not weight >= 0:
            raise ValueError(f"class {wc.value}: weight must be >= 0, got {weight!r}")
        out[wc] = float(weight)
    if sum(out.values()) <= 0:
        raise ValueError(f"class weights must not all be zero; give some of {known} a positive weight")
    return out


def generate(
    n_jobs: int,
    seed: int,
    cluster_gpus: int,
    load: float = 0.8,
    classes: Mapping[WorkloadClass | str, float] | None = None,
) -> Trace:
    """``n_jobs`` jobs whose offered GPU load is ≈ ``load`` × ``cluster_gpus``.

    ``classes`` gives the share of jobs per workload class (any positive
    weights; they are normalised). Jobs never ask for more than
    ``cluster_gpus``.
    """
    if n_jobs < 1:
        raise ValueError(f"n_jobs must be at least 1, got {n_jobs}")
    if cluster_gpus < 1:
        raise ValueError(f"cluster_gpus must be at least 1, got {cluster_gpus}")
    if not load > 0:
        raise ValueError(f"load must be positive, got {load!r}")
    weights = _weights(classes)
    rng = np.random.default_rng(seed)

    # Turn job shares into event probabilities: a sweep event yields ~20 jobs.
    mean_burst = (_SWEEP_SIZE[0] + _SWEEP_SIZE[1]) / 2
    order = [wc for wc in WorkloadClass if weights.get(wc, 0) > 0]
    per_event = np.array([weights[wc] / (mean_burst if wc is WorkloadClass.SWEEP else 1) for wc in order])
    per_event /= per_event.sum()

    events: list[list[dict[str, Any]]] = []
    made = 0
    while made < n_jobs:
        wc = order[int(rng.choice(len(order), p=per_event))]
        tenant = f"team-{int(rng.integers(_TENANTS))}"
        if wc is WorkloadClass.SWEEP:
            size = min(int(rng.integers(_SWEEP_SIZE[0], _SWEEP_SIZE[1] + 1)), n_jobs - made)
            offsets = np.sort(rng.uniform(0, _SWEEP_SPREAD_S, size))
            offsets[0] = 0.0
        else:
            size, offsets = 1, np.zeros(1)
        event = []
        for off in offsets:
            sizes = [s for s in _SIZES[wc] if s <= cluster_gpus] or [cluster_gpus]
            median, sigma, lo, hi = _DURATIONS[wc]
            event.append({
                "job_id": f"syn-{made:06d}",
                "submit_s": float(off),  # offset within the event; the event time is added below
                "duration_s": float(np.clip(median * np.exp(sigma * rng.standard_normal()), lo, hi)),
                "gpus": int(rng.choice(sizes)),
                "tenant": tenant,
                "workload_class": wc,
                "preemptible": wc is not WorkloadClass.FULL_RUN,
            })
            made += 1
        events.append(event)

    work = sum(j["gpus"] * j["duration_s"] for ev in events for j in ev)
    horizon = work / (load * cluster_gpus)
    # Exponential gaps rescaled to sum to the horizon: a Poisson process
    # conditioned on its event count, so the span (hence the load) is exact
    # instead of off by ~1/sqrt(events).
    gaps = rng.exponential(1.0, len(events))
    gaps[0] = 0.0
    if len(events) > 1:
        gaps *= horizon / gaps.sum()
    starts = np.cumsum(gaps)

    pending = [
        {**j, "submit_s": float(t) + j["submit_s"]}
        for t, ev in zip(starts, events, strict=True)
        for j in ev
    ]
    report = LoadReport(
        source=f"synthetic(n_jobs={n_jobs}, seed={seed}, cluster_gpus={cluster_gpus}, load={load})"
    )
    report.rows = len(pending)
    return finish(pending, report)
