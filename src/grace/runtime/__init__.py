"""grace.runtime: what a training script imports to checkpoint safely and report to Grace.

A training loop needs five lines::

    import grace.runtime as gr

    rt = gr.init(model, optimizer, data_state=data_generator)   # reads GRACE_* from the env
    start = rt.resume()                        # newest verified checkpoint; 1 if none
    for step in range(start, steps + 1):
        with rt.phase("data"):
            batch = next_batch()
        with rt.phase("forward"):
            loss = model(batch)
        with rt.phase("backward"):
            loss.backward()
        with rt.phase("optimizer"):
            optimizer.step()
        rt.step_done(loss=loss, tokens=batch.numel())  # heartbeat, divergence guard, checkpoint
    rt.finish()                                # final checkpoint, flush

What it does (see each module): ``checkpoint`` (DCP, async, atomic commit with
a sha256 manifest, keep the last K, verified resume with fallback), ``timers``
(phase timers), ``heartbeat`` (batched heartbeats to ``GRACE_URL`` and a jsonl
file), ``divergence`` (NaN or spike: exit 86), ``signals`` (SIGTERM: checkpoint,
exit 143). ``docs/runtime.md`` is the user's guide.

torch is imported by :func:`init`, not by this package, so ``import grace`` and
``import grace.runtime`` work without it.

``resume`` refuses another job's checkpoint (``ForeignCheckpointError``, a
``CheckpointError``): every manifest records ``GRACE_JOB_UID``. With a data key
(``GRACE_CHECKPOINT_KEY``) checkpoints are encrypted at rest; ``resume`` refuses
ones sealed with another key, or encrypted ones without a key
(``CheckpointKeyError``).
"""

from __future__ import annotations

from typing import Any

from grace.runtime.checkpoint import CheckpointError, CheckpointKeyError, ForeignCheckpointError
from grace.runtime.config import RuntimeEnv
from grace.runtime.divergence import DIVERGED_EXIT_CODE, Diverged, DivergenceGuard
from grace.runtime.session import Runtime, save_params
from grace.runtime.signals import PREEMPTED_EXIT_CODE, Preempted

__all__ = [
    "DIVERGED_EXIT_CODE",
    "PREEMPTED_EXIT_CODE",
    "CheckpointError",
    "CheckpointKeyError",
    "Diverged",
    "DivergenceGuard",
    "ForeignCheckpointError",
    "Preempted",
    "Runtime",
    "RuntimeEnv",
    "init",
    "save_params",
]


def init(model: Any, optimizer: Any = None, **options: Any) -> Runtime:
    """The runtime for this rank; call after ``init_process_group`` (if any) and wrapping the model.

    ``optimizer``: one optimizer, a list of them, or None. Options (all optional):

    - ``data_state``: the data position, anything with ``state_dict``/``load_state_dict``
      or a ``torch.Generator``; saved per rank, so each rank resumes its own stream.
    - ``extra``: ``{name: object}`` more per-rank state (LR schedulers, ...).
    - ``checkpoint_interval_s``: seconds between checkpoints; default the control plane's
      ``GRACE_CHECKPOINT_INTERVAL_S``, else 1800. ``0`` turns periodic checkpoints off.
    - ``checkpoint_every_steps``: checkpoint every N steps instead (or as well).
    - ``keep`` (3): committed checkpoints kept. ``async_save`` (True).
    - ``cache_staging`` (True): reuse one host copy of the state for every async save
      (fast staging; costs that memory for the whole run).
    - ``timers`` (True), ``heartbeat_record_s`` (1.0), ``heartbeat_flush_s`` (5.0).
    - ``guard``: a :class:`DivergenceGuard` with other thresholds.
    - ``handle_sigterm`` (True), ``final_checkpoint`` (True, taken by ``finish``).
    - ``env``: a :class:`RuntimeEnv` instead of the process environment.
    - ``checkpoint_key``: a 32-byte data key (or ``DataKey``) that encrypts every checkpoint
      file; default ``GRACE_CHECKPOINT_KEY`` (base64), which Grace's launch sets.
    """
    return Runtime(model, optimizer, **options)
