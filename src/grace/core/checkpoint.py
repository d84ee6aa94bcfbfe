"""How often a job should checkpoint, and what its failures cost (the goodput model).

With ``delta`` the time training blocks per checkpoint, ``mtbf`` the job's mean
time between failures and ``restart`` the time from a failure to training
again (detection, rescheduling, loading the checkpoint):

- Young (1974): tau = sqrt(2 * delta * mtbf).
- Daly (2006), "A higher order estimate of the optimum checkpoint interval for
  restart dumps": tau = sqrt(2 delta M) * (1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9)
  - delta, for delta < 2M; else tau = M.
- With exponentially distributed failures, the expected wall time to finish one
  segment of ``tau`` useful work followed by a checkpoint, restarts included, is
  M * e^(R/M) * (e^((tau + delta)/M) - 1); ETTR (effective training time ratio)
  is tau over that.

The job's MTBF comes from a per-GPU MTBF (observed, or the Llama 3 figure) and
its GPU count: failures of independent GPUs add up, so M = MTBF_gpu / GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Per-GPU mean time between unexpected interruptions, hours: 16,384 H100 x 54 days
#: / 419 interruptions (Llama 3, arXiv 2407.21783, section 3.3.4).
LLAMA3_GPU_MTBF_H = 16_384 * 54 * 24 / 419


def job_mtbf_s(gpus: float, gpu_mtbf_h: float = LLAMA3_GPU_MTBF_H) -> float:
    """The job's MTBF in seconds when each of its GPUs fails independently."""
    if gpus <= 0 or gpu_mtbf_h <= 0:
        raise ValueError("gpus and gpu_mtbf_h must be positive")
    return gpu_mtbf_h * 3600.0 / gpus


def young_interval(delta_s: float, mtbf_s: float) -> float:
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def expected_segment_wall_s(interval_s: float, delta_s: float, mtbf_s: float,
                            restart_s: float) -> float:
    """Expected wall time to bank one interval of work, failures and restarts included."""
    m = mtbf_s
    return m * math.exp(restart_s / m) * math.expm1((interval_s + delta_s) / m)


def expected_ettr(interval_s: float, delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """Closed-form ETTR for exponential failures (see the module docstring)."""
    return interval_s / expected_segment_wall_s(interval_s, delta_s, mtbf_s, restart_s)


@dataclass(frozen=True)
class Goodput:
    """Where a job's wall time goes, as shares that add up to 1."""

    ettr: float
    checkpointing: float
    recomputation: float
    restarts: float

    @property
    def lost(self) -> float:
        return 1.0 - self.ettr


def goodput(interval_s: float, delta_s: float, mtbf_s: float, restart_s: float) -> Goodput:
    """ETTR from the closed form; the loss split by first-order weights.

    Per unit of wall time a job writes checkpoints for delta/(tau+delta), fails
    1/M times, and each failure costs the restart plus, on average, half a
    segment of recomputed work. Those three weights divide the exact loss.
    """
    ettr = expected_ettr(interval_s, delta_s, mtbf_s, restart_s)
    w_ckpt = delta_s / (interval_s + delta_s)
    w_restart = restart_s / mtbf_s
    w_recompute = (interval_s + delta_s) / (2.0 * mtbf_s)
    total = w_ckpt + w_restart + w_recompute
    lost = 1.0 - ettr
    if total <= 0:
        return Goodput(ettr, 0.0, 0.0, 0.0)
    return Goodput(ettr, lost * w_ckpt / total, lost * w_recompute / total,
                   lost * w_restart / total)


@dataclass(frozen=True)
class IntervalChoice:
    interval_s: float
    method: str  # "daly", "young" or "fixed"
    mtbf_s: float
    delta_s: float
    expected_ettr: float


def choose_interval(gpus: float, delta_s: float, restart_s: float,
                    gpu_mtbf_h: float = LLAMA3_GPU_MTBF_H,
                    fixed_s: float | None = None) -> IntervalChoice:
    """The checkpoint interval for a job: the job's own fixed one, else Daly's.

    Re-run it whenever the estimates move (a measured checkpoint cost, a new
    failure rate): the choice is a pure function of them.
    """
    mtbf = job_mtbf_s(gpus, gpu_mtbf_h)
    if fixed_s is not None:
        return IntervalChoice(fixed_s, "fixed", mtbf, delta_s,
                              expected_ettr(fixed_s, delta_s, mtbf, restart_s))
    tau = max(daly_interval(delta_s, mtbf), 1.0)
    return IntervalChoice(tau, "daly", mtbf, delta_s, expected_ettr(tau, delta_s, mtbf, restart_s))
