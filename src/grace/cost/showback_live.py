"""Showback from the live control plane: jobs and attempts from the store, phases from heartbeats.

Per attempt (``gpus`` held from ``started_at`` to ``ended_at``, or to now):

- allocated = held wall time x GPUs, clipped to ``[since, now]``;
- failures: an attempt that FAILED or was LOST loses the work after the checkpoint
  the next attempt resumed from. With ``s0`` the step it started from (its own
  ``resumed_from``, else 0), ``S`` its newest heartbeat step and ``N`` the step the next
  attempt resumed from (0 if it started over), the lost share of its time is
  ``(S - N) / (S - s0)``, clamped to [0, 1]; 1 when the steps are unknown;
- of the rest, the per-step phase breakdown of the newest heartbeat (mean over ranks)
  splits off waiting on data or synchronization (``data + allreduce + sync`` over
  ``step_s``) and checkpointing (``checkpoint`` over ``step_s``); the wait is kept split
  too, I/O (``data``: storage read) and sync (``allreduce + sync``), so each tenant's
  ``io_wait_share`` and ``sync_wait_share`` of the GPU time it held are reported;
- queueing: submission to first start, and the gaps between attempts (a pending job
  waits until now).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from grace.control.store.models import Attempt, AttemptState, Job
from grace.cost.showback import JobUsage

_STEP = re.compile(r"step-(\d+)")
_IO_PHASES = ("data",)
_SYNC_PHASES = ("allreduce", "sync")


def _step_of(checkpoint: str | None) -> int:
    m = _STEP.search(Path(checkpoint).name) if checkpoint else None
    return int(m.group(1)) if m else 0


def _progress(adir: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted(adir.glob("progress-rank*.json")) if adir.is_dir() else []:
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return out


def phase_shares(records: list[dict[str, Any]]) -> tuple[float, float]:
    """(waiting on data or sync, checkpointing) as shares of a step, mean over ranks."""
    io, sync, ckpt = wait_shares(records)
    return io + sync, ckpt


def wait_shares(records: list[dict[str, Any]]) -> tuple[float, float, float]:
    """(waiting on data, waiting on peers, checkpointing) as shares of a step, mean over
    ranks; the first two add up to :func:`phase_shares`' wait. Peers: the all-reduce span
    and the runtime's sync, as ``grace_job_wait_share{kind="sync"}`` counts them."""
    ios, syncs, ckpts = [], [], []
    for r in records:
        step_s = float(r.get("step_s") or 0.0)
        phases = r.get("phases") or {}
        if step_s <= 0:
            continue
        io = min(1.0, sum(float(phases.get(p, 0.0)) for p in _IO_PHASES) / step_s)
        ios.append(io)
        syncs.append(min(1.0 - io, sum(float(phases.get(p, 0.0)) for p in _SYNC_PHASES) / step_s))
        ckpts.append(min(1.0, float(phases.get("checkpoint", 0.0)) / step_s))
    if not ios:
        return 0.0, 0.0, 0.0
    io, sync = sum(ios) / len(ios), sum(syncs) / len(syncs)
    return io, sync, min(sum(ckpts) / len(ckpts), 1.0 - io - sync)


def lost_share(attempt: Attempt, following: Attempt | None, records: list[dict[str, Any]]) -> float:
    """Share of a failed attempt's time whose work was not kept by a checkpoint."""
    if attempt.state not in (AttemptState.FAILED, AttemptState.LOST):
        return 0.0
    steps = [int(r["step"]) for r in records if isinstance(r.get("step"), int | float)]
    if not steps:
        return 1.0
    start, reached = _step_of(attempt.resumed_from), max(steps)
    kept = _step_of(following.resumed_from) if following is not None else start
    if reached <= start:
        return 1.0
    return min(1.0, max(0.0, (reached - kept) / (reached - start)))


def _clip(a: float, b: float, since: float, now: float) -> float:
    return max(0.0, min(b, now) - max(a, since))


def live_usage(session: Session, state_dir: Path, now: float, since: float,
               rate_of_node: Callable[[str], float],
               ended_after: float | None = None) -> list[JobUsage]:
    """One :class:`JobUsage` per job with time in ``[since, now]``; each attempt priced at
    the rate of its first node's pool. ``ended_after`` leaves out jobs that ended before it
    (``/metrics`` counts an ended job once, then reads only the jobs still changing)."""
    after = since if ended_after is None else max(since, ended_after)
    # attempts in one query, not one per job (1,000 live jobs: /metrics reads this each minute)
    jobs = session.scalars(select(Job).where((Job.ended_at.is_(None)) | (Job.ended_at >= after))
                           .order_by(Job.id).options(selectinload(Job.attempts))).all()
    from grace.control.live.context import JobDirs
    from grace.control.store.repository import store_id

    dirs = JobDirs(state_dir, store_id(session))
    out = []
    for job in jobs:
        attempts = list(job.attempts)
        queue = 0.0
        waited_from = job.submitted_at
        alloc = fail = io_wait = sync_wait = ckpt = cost = 0.0
        intervals = []
        for i, a in enumerate(attempts):
            queue += _clip(waited_from, a.started_at, since, now)
            end = a.ended_at if a.ended_at is not None else now
            waited_from = end
            held_h = _clip(a.started_at, end, since, now) / 3600.0
            if held_h <= 0:
                continue
            gpu_h = held_h * a.gpus
            records = _progress(dirs.attempt(job.id, a.number))
            lost = lost_share(a, attempts[i + 1] if i + 1 < len(attempts) else None, records)
            io, sync, c = wait_shares(records)
            alloc += gpu_h
            fail += gpu_h * lost
            io_wait += gpu_h * (1.0 - lost) * io
            sync_wait += gpu_h * (1.0 - lost) * sync
            ckpt += gpu_h * (1.0 - lost) * c
            nodes = [e["node"] for e in a.placement_json]
            cost += gpu_h * (rate_of_node(nodes[0]) if nodes else 0.0)
            intervals.append((max(a.started_at, since), min(end, now)))
        if not job.is_terminal and (not attempts or attempts[-1].ended_at is not None):
            queue += _clip(waited_from, now, since, now)
        if alloc <= 0 and queue <= 0:
            continue
        # a job that only waited is priced at the cluster's mean rate (an unknown node name)
        rate = cost / alloc if alloc > 0 else rate_of_node("")
        out.append(JobUsage(job=str(job.id), tenant=job.tenant, gpus=job.gpus,
                            usd_per_gpu_hour=rate, queue_hours=queue / 3600.0,
                            allocated_gpu_hours=alloc, failure_gpu_hours=fail,
                            data_sync_gpu_hours=io_wait + sync_wait, checkpoint_gpu_hours=ckpt,
                            io_wait_gpu_hours=io_wait, sync_wait_gpu_hours=sync_wait,
                            intervals=tuple(intervals)))
    return out



def live_showback(store: Any, topo: Any, state_dir: Path, now: float, since: float | None = None,
                  book: Any = None) -> dict[str, Any]:
    """The control plane's showback (``GET /showback``): all time unless ``since`` is given,
    priced with the default price book unless ``book`` is given."""
    from grace.cost.pricebook import load_pricebook
    from grace.cost.rates import rate_lookup
    from grace.cost.showback import showback

    rates = rate_lookup(topo, book or load_pricebook())
    start = since if since is not None else 0.0
    with store.transaction() as s:
        usages = live_usage(s, state_dir, now, start, rates)
    report = showback(usages, now, capacity_gpus=topo.total_gpus)
    report["since"] = since
    return report
