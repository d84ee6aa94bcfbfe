"""What one attempt of a checkpointing job commits: the twin's arithmetic, in one place.

An attempt pays a restart (none for the first), then runs work in segments of
``tau`` seconds of wall time, each followed by a checkpoint that blocks training
for ``delta``. A failure keeps the checkpointed segments and loses the rest; a
planned stop (a preemption, the end of the clock) checkpoints first and keeps all
the work done. ``Simulation`` (``sim.engine``) banks each attempt with these
functions, and so does the what-if timeline (``sim.whatif_timeline``), which
banks one replay's attempts under several intervals: sharing the code is what
keeps the two answers equal.

A plan is ``(restart_s, slowdown, tau_s, delta_s)``: the wall seconds before work
starts, wall seconds per second of reference work, the checkpoint interval
(``inf``: never) and the checkpoint's cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grace.core.checkpoint import choose_interval
from grace.sim.failures import FailureModel

Plan = tuple[float, float, float, float]


def failure_plan(model: FailureModel, gpus: float, attempt: int, slowdown: float) -> Plan:
    """The plan of attempt ``attempt`` (0 is the first) of a job of ``gpus`` under
    ``model``: the model's fixed interval, else Daly's for the job's size."""
    tau = choose_interval(max(gpus, 1e-3), model.checkpoint_s, model.restart_s,
                          model.gpu_mtbf_h, model.checkpoint_interval_s).interval_s
    return (model.restart_s if attempt else 0.0, slowdown, tau, model.checkpoint_s)


@dataclass(frozen=True, slots=True)
class Banked:
    """What an attempt leaves: the reference work still to do, the checkpoints it
    wrote, and the wall seconds it lost (per GPU; the caller multiplies)."""

    remaining_base_s: float
    checkpoints: int
    lost_s: float


def bank(remaining_base_s: float, plan: Plan, elapsed_s: float, complete: bool,
         partial: bool = False) -> Banked:
    """The work an attempt of ``elapsed_s`` wall seconds committed.

    ``complete``: it ran to the end (every checkpoint written, nothing lost).
    ``partial``: a planned stop, so the segment in flight counts as done and only
    the restart is lost. Otherwise a failure: the work since the last checkpoint
    and the restart are lost.
    """
    restart, speed, tau, delta = plan
    if complete:
        work_wall = remaining_base_s * speed
        ckpts = math.floor(work_wall / tau) if math.isfinite(tau) else 0
        return Banked(0.0, ckpts, 0.0)
    running = max(0.0, elapsed_s - restart)
    if math.isfinite(tau):
        segments = math.floor(running / (tau + delta))
        banked_wall = segments * tau
        in_flight = min(tau, running - segments * (tau + delta))
    else:
        segments, banked_wall, in_flight = 0, 0.0, running
    if partial:  # the clock stopped: work in flight counts as done
        banked_wall += in_flight
    banked_wall = min(banked_wall, remaining_base_s * speed)
    remaining = max(0.0, remaining_base_s - banked_wall / speed)
    lost = min(elapsed_s, restart) if partial else elapsed_s - segments * (tau + delta)
    return Banked(remaining, segments, max(0.0, lost))
