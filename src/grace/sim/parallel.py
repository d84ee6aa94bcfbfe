"""Several replays of one parsed trace at once, one process per replay, on local cores.

``grace compare`` replays the same trace under several policies; each replay is
single-threaded Python, so one after another they use one core of a machine that
has more. Here each replay runs in a forked worker process: the trace and the
cluster were parsed once in the parent and reach the workers by ``fork`` (the
pages are shared copy-on-write, never pickled or parsed again), and each worker
sends back its ``SimResult``. A replay is deterministic given its inputs (its
seed drives every random choice), so the results are the ones the same replays
give one after another; only ``wall_s`` and ``events_per_s`` differ.

The pool is the standard library's ``ProcessPoolExecutor``: no home-made
distribution layer. Where ``fork`` is not available (not Linux) or one worker is
asked for, the replays run one after another in this process.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_mod
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

from grace.core.checkpoint_stagger import CheckpointPhasing
from grace.core.policies import get_policy
from grace.sim.estimates import EstimateModel
from grace.sim.failures import FailureModel
from grace.sim.metrics import SimResult
from grace.sim.runner import ReplayInput, replay
from grace.spec.bursting import BurstingSpec


@dataclass(frozen=True)
class ReplayRun:
    """One replay of the shared input: what ``sim.runner.replay`` takes besides it."""

    label: str
    policy: str
    seed: int = 0
    quotas: dict[str, Any] | None = None
    estimates: EstimateModel = EstimateModel.USER
    failures: FailureModel | None = None
    bursting: BurstingSpec | None = None
    enforce_limits: bool | None = None
    data_path: bool = False
    checkpoint_phases: CheckpointPhasing = CheckpointPhasing.START
    #: which of ``replay_many``'s inputs (cluster variants share the parsed trace)
    input_index: int = 0
    #: set on a cluster variant (``sim.cluster_variants``): the summary records it
    fewer_nodes_percent: float | None = None


#: What a forked worker reads: set in the parent just before the pool forks.
_SHARED: dict[str, Any] = {}


def available_cores() -> int:
    """Cores this process may run on (its affinity mask, as a container limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers(runs: int) -> int:
    """One worker per replay, at most one per available core."""
    return max(1, min(runs, available_cores()))


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


def expected_cost(run: ReplayRun) -> int:
    """A rank of how long a replay is likely to take, from what its policy does each cycle
    (backfill reservations, preemption searches, fair-share ordering, leaf locality,
    re-planning): the replays are handed out longest first, so the last one to start is
    a short one and the cores finish together (longest-processing-time-first)."""
    try:
        p = get_policy(run.policy)
    except ValueError:
        return 0  # the replay itself will say so, in its worker
    return sum((2 * p.backfill, 2 * p.preempts, p.fair_share, p.quotas, p.leaf_locality,
                2 * p.replan, p.packing != "best-fit", run.data_path, run.failures is not None))


def _one(inp: ReplayInput, run: ReplayRun,
         progress: Callable[[float], None] | None) -> SimResult:
    result = replay(inp, run.policy, run.seed, run.quotas, run.estimates, progress=progress,
                    failures=run.failures, bursting=run.bursting,
                    enforce_limits=run.enforce_limits, data_path=run.data_path,
                    checkpoint_phases=run.checkpoint_phases)
    if run.fewer_nodes_percent is not None:
        result.summary["fewer_nodes_percent"] = run.fewer_nodes_percent
    return result


def _trimmed(result: SimResult, keep_jobs: bool) -> SimResult:
    """Without the per-job records unless asked: for Philly they are 37 MB a replay, two
    seconds to pickle in the worker and two more to unpickle here, one after another,
    and a comparison reads only summaries, series and the JCT and queue arrays."""
    return result if keep_jobs else replace(result, jobs=[])


def _worker(index: int) -> SimResult:
    """In a forked worker: replay run ``index`` of the shared list, reporting progress
    through the shared queue (a lost progress message costs nothing)."""
    run: ReplayRun = _SHARED["runs"][index]
    inp: ReplayInput = _SHARED["inputs"][run.input_index]
    updates = _SHARED["queue"]

    def report(fraction: float) -> None:
        with contextlib.suppress(queue_mod.Full):
            updates.put_nowait((index, fraction))

    return _trimmed(_one(inp, run, report), _SHARED["keep_jobs"])


def replay_many(inp: ReplayInput | Sequence[ReplayInput], runs: Sequence[ReplayRun],
                workers: int | None = None,
                progress: Callable[[int, float], None] | None = None,
                keep_jobs: bool = True) -> list[SimResult]:
    """Each run's result, in the order of ``runs``; a run replays input ``input_index``
    of ``inp`` (one input, or several: cluster variants sharing one parsed trace).

    ``workers``: processes at once (None: one per run, at most one per core; 1: one
    after another in this process). ``progress(i, fraction)`` is called in this
    process as run ``i`` advances. A replay that raises re-raises here (the others
    are cancelled or left to end; nothing is half-reported). ``keep_jobs=False`` leaves
    out each result's per-job records (``SimResult.jobs``, which showback reads)."""
    inputs = [inp] if isinstance(inp, ReplayInput) else list(inp)
    for r in runs:
        if not 0 <= r.input_index < len(inputs):
            raise ValueError(f"run {r.label!r} names input {r.input_index}; there are "
                             f"{len(inputs)}")
    n = default_workers(len(runs)) if workers is None else max(1, workers)
    if n == 1 or len(runs) <= 1 or not can_fork():
        return [_trimmed(_one(inputs[r.input_index], r, _for_run(progress, i)), keep_jobs)
                for i, r in enumerate(runs)]
    ctx = multiprocessing.get_context("fork")
    updates = ctx.Queue(maxsize=10_000)
    _SHARED.update(inputs=inputs, runs=list(runs), queue=updates, keep_jobs=keep_jobs)
    try:
        with ProcessPoolExecutor(max_workers=min(n, len(runs)), mp_context=ctx) as pool:
            longest_first = sorted(range(len(runs)), key=lambda i: -expected_cost(runs[i]))
            futures: dict[Future[SimResult], int] = {
                pool.submit(_worker, i): i for i in longest_first}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(updates, progress)
                for f in done:
                    error = f.exception()
                    if error is not None:
                        for other in pending:
                            other.cancel()
                        raise error
            _drain(updates, progress)
            return [f.result() for f in sorted(futures, key=futures.__getitem__)]
    finally:
        _SHARED.clear()
        updates.close()


def _for_run(progress: Callable[[int, float], None] | None,
             index: int) -> Callable[[float], None] | None:
    return None if progress is None else (lambda fraction: progress(index, fraction))


def _drain(updates: Any, progress: Callable[[int, float], None] | None) -> None:
    while True:
        try:
            i, fraction = updates.get_nowait()
        except queue_mod.Empty:
            return
        if progress is not None:
            progress(i, fraction)
