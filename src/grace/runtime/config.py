"""Where a job runs and what the control plane asked of it, read from the environment.

Under Grace the backend sets ``GRACE_JOB_ID``, ``GRACE_JOB_UID``, ``GRACE_ATTEMPT``,
``GRACE_NODE``, ``GRACE_WORKDIR`` and ``GRACE_CHECKPOINT_DIR``; the reconciler adds
``GRACE_CHECKPOINT_INTERVAL_S`` (its Young/Daly interval) and, when it staggers
checkpoints against the shared file system, ``GRACE_CHECKPOINT_PHASE_S``, and torchrun sets
``RANK``/``WORLD_SIZE``/``LOCAL_RANK``. Outside Grace every one of them has a
default, so the same script also runs on a laptop: attempt 1, workdir
``./grace-run``, no control plane to report to.

``GRACE_JOB_UID`` (``<store_id>:<job_id>``) exists because ``GRACE_JOB_ID`` is
only unique within one control-plane store: a fresh store numbers its jobs
from 1 again. The uid is written into every checkpoint manifest and checked on
resume, so a job never resumes from another job's checkpoint (see
``grace.runtime.checkpoint``). The runtime treats it as an opaque string.

``GRACE_CHECKPOINT_KEY`` (base64 of 32 bytes) is the job's data key: Grace's
launch unwraps it from the store for each attempt, and with it every
checkpoint file is encrypted (``grace.runtime.encryption``). It is never part
of a ``RuntimeEnv``'s repr.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from grace.runtime.encryption import DataKey

#: The job's data key (base64 of 32 bytes); set by Grace's launch when the control plane has a KMS.
CHECKPOINT_KEY_ENV = "GRACE_CHECKPOINT_KEY"

#: The checkpoint interval the control plane chose (seconds).
INTERVAL_ENV = "GRACE_CHECKPOINT_INTERVAL_S"
#: The checkpoint phase on the common clock (seconds): checkpoints fall at the Unix times t
#: with (t - phase) mod interval == 0, so the control plane can space jobs' bursts apart
#: (``grace.core.checkpoint_stagger``). Unset: an interval after the last checkpoint.
PHASE_ENV = "GRACE_CHECKPOINT_PHASE_S"

#: Where the control plane listens when a job runs under Grace and GRACE_URL is unset
#: (the CLI client's default too).
DEFAULT_URL = "http://127.0.0.1:8470"
#: Checkpoint interval when neither the job nor the control plane gives one.
DEFAULT_INTERVAL_S = 1800.0
#: Workdir of a run outside Grace.
DEFAULT_WORKDIR = "grace-run"


@dataclass(frozen=True)
class RuntimeEnv:
    job_id: str | None  # None outside Grace
    attempt: int
    node: str
    rank: int
    world_size: int
    local_rank: int
    workdir: Path
    checkpoint_dir: Path
    interval_s: float | None  # the control plane's checkpoint interval, if it gave one
    url: str | None  # where heartbeats go; None: only the local jsonl files
    # Unique across control-plane stores; None outside Grace (or under a control plane that
    # predates it). Last, with a default, so code that builds a RuntimeEnv by hand keeps working.
    job_uid: str | None = None
    # Encrypts every checkpoint file; None: plaintext checkpoints.
    checkpoint_key: DataKey | None = field(default=None, repr=False)
    # The checkpoint phase on the Unix clock (PHASE_ENV); None: interval after the last one.
    phase_s: float | None = None

    @property
    def attempt_dir(self) -> Path:
        return self.workdir / f"attempt-{self.attempt}"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RuntimeEnv:
        env = os.environ if environ is None else environ
        job_id = env.get("GRACE_JOB_ID") or None
        workdir = Path(env.get("GRACE_WORKDIR") or DEFAULT_WORKDIR).resolve()
        ckpt = env.get("GRACE_CHECKPOINT_DIR")
        interval = env.get(INTERVAL_ENV)
        phase = (env.get(PHASE_ENV) or "").strip()
        url = env.get("GRACE_URL") or (DEFAULT_URL if job_id else None)
        key = (env.get(CHECKPOINT_KEY_ENV) or "").strip()
        return cls(
            job_id=job_id,
            attempt=int(env.get("GRACE_ATTEMPT") or 1),
            node=env.get("GRACE_NODE") or os.uname().nodename,
            rank=int(env.get("RANK") or 0),
            world_size=int(env.get("WORLD_SIZE") or 1),
            local_rank=int(env.get("LOCAL_RANK") or 0),
            workdir=workdir,
            checkpoint_dir=Path(ckpt).resolve() if ckpt else workdir / "checkpoints",
            interval_s=float(interval) if interval else None,
            url=url.rstrip("/") if url and job_id else None,
            job_uid=(env.get("GRACE_JOB_UID") or "").strip() or None,
            checkpoint_key=DataKey.from_b64(key, CHECKPOINT_KEY_ENV) if key else None,
            phase_s=_phase(phase) if phase else None,
        )


def _phase(raw: str) -> float:
    """PHASE_ENV's value: a finite number of seconds, or an error naming the variable."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{PHASE_ENV}={raw!r}: expected a finite number of seconds "
                         "(the checkpoint phase on the Unix clock), or leave it unset")
    return value
