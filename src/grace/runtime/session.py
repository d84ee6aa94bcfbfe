"""The object a training loop talks to: :class:`Runtime`, made by :func:`grace.runtime.init`."""

from __future__ import annotations

import json
import math
import pickle
import random
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from grace.runtime import checkpoint as ckpt
from grace.runtime import preflight
from grace.runtime.config import DEFAULT_INTERVAL_S, RuntimeEnv
from grace.runtime.divergence import Diverged, DivergenceGuard
from grace.runtime.encryption import DataKey
from grace.runtime.heartbeat import HeartbeatSender, StepWindow
from grace.runtime.signals import Preempted, StopFlag
from grace.runtime.timers import PhaseTimers, time_ddp_allreduce


def _log(msg: str) -> None:
    print(f"grace.runtime: {msg}", file=sys.stderr, flush=True)


def _get_state(obj: Any) -> Any:
    if hasattr(obj, "get_state") and hasattr(obj, "set_state"):  # torch.Generator
        return obj.get_state()
    return obj.state_dict()


def _set_state(obj: Any, state: Any) -> None:
    if hasattr(obj, "get_state") and hasattr(obj, "set_state"):
        obj.set_state(state)
    else:
        obj.load_state_dict(state)


class Runtime:
    """Checkpoints, timers, heartbeats, divergence guard and SIGTERM handling for one rank.

    Use :func:`grace.runtime.init` rather than the constructor. Every rank of
    a job must make the same calls in the same order (``resume``,
    ``step_done``, ``checkpoint``, ``finish``): they agree with each other
    through a small all-reduce per step on a gloo group of the runtime's own.
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any = None,
        *,
        data_state: Any = None,
        extra: Mapping[str, Any] | None = None,
        checkpoint_interval_s: float | None = None,
        checkpoint_every_steps: int | None = None,
        keep: int = 3,
        async_save: bool = True,
        cache_staging: bool = True,
        timers: bool = True,
        heartbeat_record_s: float = 1.0,
        heartbeat_flush_s: float = 5.0,
        guard: DivergenceGuard | None = None,
        handle_sigterm: bool = True,
        final_checkpoint: bool = True,
        env: RuntimeEnv | None = None,
        checkpoint_key: DataKey | bytes | None = None,
    ) -> None:
        import torch
        import torch.distributed as dist

        self._torch = torch
        self.env = env or RuntimeEnv.from_environ()
        self.model = model
        self.optimizers: list[Any] = (
            [] if optimizer is None else list(optimizer) if isinstance(optimizer, Sequence) else [optimizer]
        )
        self.data_state = data_state
        self.extra = dict(extra or {})
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if distributed else self.env.rank
        self.world_size = dist.get_world_size() if distributed else 1
        # Groups of our own (gloo: CPU tensors, and async DCP needs a CPU backend): one for the
        # per-step agreement on the main thread, one for checkpoints, used by the save thread.
        self._ctl_pg = dist.new_group(backend="gloo") if distributed and self.world_size > 1 else None
        ckpt_pg = dist.new_group(backend="gloo") if distributed else None

        if checkpoint_interval_s is not None:
            self.interval_s: float | None = checkpoint_interval_s
        elif self.env.interval_s is not None:
            self.interval_s = self.env.interval_s
        else:
            self.interval_s = DEFAULT_INTERVAL_S if checkpoint_every_steps is None else None
        if self.interval_s is not None and self.interval_s <= 0:
            self.interval_s = None
        # a phase puts the checkpoints on the common clock (Unix time), where the control plane
        # spaced this job's bursts from the other jobs' (config.PHASE_ENV)
        self.phase_s: float | None = self.env.phase_s if self.interval_s is not None else None
        self.every_steps = checkpoint_every_steps
        self.async_save = async_save
        self.final_checkpoint = final_checkpoint

        self.checkpointer = ckpt.Checkpointer(
            self.env.checkpoint_dir,
            model,
            self.optimizers,
            pg=ckpt_pg,
            rank=self.rank,
            world_size=self.world_size,
            keep=keep,
            attempt=self.env.attempt,
            meta={"job_id": self.env.job_id},
            log=_log,
            cache_staging=cache_staging,
            job_uid=self.env.job_uid,
            key=checkpoint_key if checkpoint_key is not None else self.env.checkpoint_key,
        )
        if self.rank == 0:
            ckpt.clean_staging(self.env.checkpoint_dir)
        if self._ctl_pg is not None:
            dist.barrier(group=self._ctl_pg)  # nobody saves before the staging area is clean

        cuda = any(p.is_cuda for p in model.parameters())
        self.timers = PhaseTimers(enabled=timers, cuda=cuda)
        if timers and self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            if isinstance(model, DistributedDataParallel):
                time_ddp_allreduce(model, self.timers)
        self.guard = guard or DivergenceGuard()
        self._window = StepWindow(heartbeat_record_s)
        self.heartbeats = HeartbeatSender(
            jsonl_path=self.env.attempt_dir / f"heartbeats-rank{self.rank}.jsonl",
            url=self.env.url,
            job_id=self.env.job_id,
            attempt=self.env.attempt,
            node=self.env.node,
            rank=self.rank,
            flush_s=heartbeat_flush_s,
        )
        self._stop = StopFlag()
        if handle_sigterm:
            self._stop.install()

        self.step = 0  # the last completed step
        self.last_loss: float | None = None
        self._last_ckpt_step: int | None = None
        self._last_ckpt_time = time.monotonic()
        self._next_ckpt_wall = self._next_boundary()
        self._step_t0 = time.perf_counter()
        self._finished = False
        self._warmed = False
        self.checkpoint_block_s: list[float] = []
        self._last_record: dict[str, Any] | None = None
        self._metrics: dict[str, list[list[float]]] = {}  # reported, not yet in a record
        # preflight mode (runtime/preflight.py): the control plane set GRACE_PREFLIGHT_STEPS
        self.preflight_steps = preflight.steps_from_env()
        self._preflight_losses: list[float | None] = []

    # ------------------------------------------------------------------ loop API

    def phase(self, name: str) -> Any:
        """``with rt.phase("forward"): ...`` times the block (see ``grace.runtime.timers``)."""
        return self.timers.phase(name)

    def resume(self) -> int:
        """Load the newest checkpoint that verifies; returns the first step to run (1 if none).

        Raises :class:`~grace.runtime.checkpoint.ForeignCheckpointError` (on every
        rank) when the checkpoint directory holds another job's checkpoint.
        The runtime shuts down its heartbeat thread and SIGTERM handler first and
        lets the error propagate: uncaught, it ends the process with exit code 1
        and the message on stderr, so the misconfiguration shows up in the
        control plane's logs instead of a run that trains from step 0 over it.
        """
        try:
            found = self.checkpointer.load_latest()
        except ckpt.CheckpointError:
            self._finished = True
            self._close()
            raise
        if found is None:
            self.step = 0
        else:
            self.step, blob = found
            self._last_ckpt_step = self.step
            if blob is None:
                _log(
                    f"rank {self.rank}: checkpoint of step {self.step} has no state for this rank "
                    "(written by another world size); data position and RNG start fresh"
                )
            else:
                self._restore_rank_state(pickle.loads(blob))
            if self.rank == 0:
                _log(f"resumed from checkpoint of step {self.step}")
        self._last_ckpt_time = time.monotonic()
        self._next_ckpt_wall = self._next_boundary()
        self._step_t0 = time.perf_counter()
        return self.step + 1

    def step_done(self, loss: Any = None, tokens: float = 0.0, step: int | None = None) -> None:
        """End of a training step (after the optimizer step).

        Agrees with the other ranks on the mean loss, a pending SIGTERM and a
        due checkpoint; feeds the divergence guard (raising :class:`Diverged`,
        exit 86), the heartbeats and the checkpoint schedule; honours SIGTERM
        (checkpoint, then :class:`Preempted`, exit 143).
        """
        now = time.perf_counter()
        step_s = now - self._step_t0
        self.step = self.step + 1 if step is None else step
        local_loss = None if loss is None else float(loss.detach() if hasattr(loss, "detach") else loss)
        due = self._due()
        with self.timers.phase("sync"):
            mean_loss, stop, due = self._agree(local_loss, self._stop.requested, due)
        self.last_loss = mean_loss
        verdict = self.guard.check(mean_loss) if mean_loss is not None else None
        phases = self.timers.collect()
        record = self._window.add(self.step, mean_loss, tokens, step_s, phases, time.monotonic())
        if record is not None:
            self.heartbeats.add(self._with_saves(record))
        if verdict is not None and verdict.diverged:
            self._diverged(verdict.reason)
        suspect = verdict is not None and verdict.suspect
        if not suspect:
            self.checkpointer.release(True)  # the previous checkpoint's params gave a sane loss
        if stop:
            self._preempt(suspect)
        if due and not suspect and self.checkpointer.gate_open:
            self.checkpoint()
        elif self.async_save and not self._warmed:
            self._warmed = True  # the optimizer has state now: size the staging buffers
            self.checkpointer.warm_up()
        if self.preflight_steps is not None:
            self._preflight_losses.append(mean_loss)
            if self.step >= self.preflight_steps:
                self._preflight_end()
        self._step_t0 = time.perf_counter()

    def report_metric(self, name: str, value: Any, step: int | None = None) -> None:
        """Report an objective (``rt.report_metric("val_loss", 0.42)``) at ``step`` (default:
        the last completed step). Rank 0's reports ride in its next heartbeat record
        (``"metrics": {name: [[step, value], ...]}``); the control plane keeps them per
        attempt, ranks sweep trials by them and stops weak ones early. Other ranks' calls
        are ignored, so every rank may call it. A value that is not finite is dropped (the
        divergence guard watches the loss); ``step_done(loss=...)`` already reports
        ``loss``, so a sweep ranked by the training loss needs no call at all."""
        if self.rank != 0:
            return
        v = float(value.detach() if hasattr(value, "detach") else value)
        if math.isfinite(v):
            self._metrics.setdefault(str(name), []).append(
                [self.step if step is None else int(step), v])

    def maybe_checkpoint(self) -> bool:
        """Checkpoint if the interval has passed (a local decision: single-process use only)."""
        if self._due():
            self.checkpoint()
            return True
        return False

    def checkpoint(self, block: bool | None = None) -> float:
        """Checkpoint the last completed step now (all ranks together); returns the seconds blocked."""
        block = (not self.async_save) if block is None else block
        with self.timers.phase("checkpoint"):
            blocked = self.checkpointer.save(
                self.step, pickle.dumps(self._rank_state()), block=block, gated=not block
            )
        self.checkpoint_block_s.append(blocked)
        self._last_ckpt_step = self.step
        self._last_ckpt_time = time.monotonic()
        self._next_ckpt_wall = self._next_boundary()
        return blocked

    def finish(self) -> None:
        """Commit what is pending, take the final checkpoint, flush heartbeats, restore SIGTERM."""
        if self._finished:
            return
        if self.preflight_steps is not None:  # the loop ended before the preflight's steps
            self._preflight_end()
        self._finished = True
        try:
            healthy = not self.guard.suspect  # a spike still pending: keep what predates it
            self.checkpointer.release(healthy)
            self.checkpointer.wait()
            if healthy and self.final_checkpoint and self.step > 0 and self._last_ckpt_step != self.step:
                self.checkpoint(block=True)
        finally:
            self._close()

    # ------------------------------------------------------------------ internals

    def _due(self) -> bool:
        if self.every_steps and self.step % self.every_steps == 0:
            return True
        if self.phase_s is not None:
            return time.time() >= self._next_ckpt_wall
        return self.interval_s is not None and time.monotonic() - self._last_ckpt_time >= self.interval_s

    def _next_boundary(self) -> float:
        """The first Unix time after now with (t - phase) mod interval == 0 (inf: unphased)."""
        if self.phase_s is None or self.interval_s is None:
            return math.inf
        now = time.time()
        k = math.floor((now - self.phase_s) / self.interval_s) + 1
        return self.phase_s + k * self.interval_s

    def _agree(self, loss: float | None, stop: bool, due: bool) -> tuple[float | None, bool, bool]:
        if self._ctl_pg is None:
            return loss, stop, due
        torch = self._torch
        t = torch.tensor(
            [0.0 if loss is None else loss, 0.0 if loss is None else 1.0, float(stop), float(due)],
            dtype=torch.float64,
        )
        torch.distributed.all_reduce(t, group=self._ctl_pg)
        total, count, stops, dues = t.tolist()
        return (total / count if count else None), stops > 0, dues > 0

    def _rank_state(self) -> dict[str, Any]:
        torch = self._torch
        state: dict[str, Any] = {
            "step": self.step,
            "rank": self.rank,
            "world_size": self.world_size,
            "rng": {"python": random.getstate(), "torch": torch.get_rng_state()},
            "guard": self.guard.state_dict(),
        }
        if "numpy" in sys.modules:
            state["rng"]["numpy"] = sys.modules["numpy"].random.get_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["rng"]["cuda"] = torch.cuda.get_rng_state_all()
        if self.data_state is not None:
            state["data"] = _get_state(self.data_state)
        state["extra"] = {name: _get_state(obj) for name, obj in self.extra.items()}
        return state

    def _restore_rank_state(self, state: dict[str, Any]) -> None:
        torch = self._torch
        rng = state.get("rng", {})
        if "python" in rng:
            random.setstate(rng["python"])
        if "torch" in rng:
            torch.set_rng_state(rng["torch"])
        if "numpy" in rng:
            import numpy

            numpy.random.set_state(rng["numpy"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        if self.data_state is not None and "data" in state:
            _set_state(self.data_state, state["data"])
        for name, obj in self.extra.items():
            if name in state.get("extra", {}):
                _set_state(obj, state["extra"][name])
        if "guard" in state:
            self.guard.load_state_dict(state["guard"])

    def _diverged(self, reason: str) -> None:
        record = self._window.flush(time.monotonic())
        if record is not None:
            self.heartbeats.add(record)
        self.checkpointer.release(False)  # the pending checkpoint's params led here: drop it
        self.checkpointer.wait(timeout=60)
        kept = self.checkpointer.last_committed
        if kept is None:
            kept = max((s for s, _ in ckpt.committed(self.env.checkpoint_dir)), default=None)
        err = Diverged(reason, self.step)
        if self.rank == 0:
            last = f"step {kept}" if kept is not None else "none yet (it restarts from scratch)"
            _log(f"{err}; stopping with exit code {err.code}; last good checkpoint: {last}")
            path = self.env.attempt_dir / "diverged.json"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps({"step": self.step, "reason": reason, "checkpoint_step": kept}))
            except OSError:
                pass
        self._finished = True
        self._close()
        raise err

    def _preflight_end(self) -> None:
        """Check the losses, save a checkpoint, load it back and compare; then end the
        process: :class:`PreflightPassed` (exit 0) or :class:`PreflightFailed` (87)."""
        torch = self._torch
        problem = preflight.loss_problem(self._preflight_losses)
        if problem is None:
            try:
                self.checkpointer.release(True)
                self.checkpointer.wait(timeout=120)
                self.checkpoint(block=True)
                saved = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
                with torch.no_grad():  # scramble, so a load that does nothing cannot pass
                    for p in self.model.parameters():
                        p.add_(1.0)
                found = self.checkpointer.load_latest()
                if found is None or found[0] != self.step:
                    problem = (f"the checkpoint of step {self.step} was not found on resume "
                               f"(found {None if found is None else found[0]})")
                else:
                    loaded = self.model.state_dict()
                    bad = [k for k, v in saved.items() if not torch.equal(v, loaded[k])]
                    if bad:
                        problem = (f"the resumed parameters differ from the saved ones "
                                   f"({len(bad)} tensors, e.g. {bad[0]})")
            except ckpt.CheckpointError as e:
                problem = f"checkpoint save or resume failed: {e}"
        err: SystemExit = (preflight.PreflightPassed(self.step) if problem is None
                           else preflight.PreflightFailed(problem, self.step))
        if self.rank == 0:
            _log(f"{err}")
            try:
                self.env.attempt_dir.mkdir(parents=True, exist_ok=True)
                (self.env.attempt_dir / "preflight.json").write_text(json.dumps(
                    {"step": self.step, "passed": problem is None, "reason": problem}))
            except OSError:
                pass
        self._finished = True
        self._close()
        raise err

    def _preempt(self, suspect: bool) -> None:
        """Checkpoint the step just done (unless its loss is a pending spike), then exit 143."""
        if self.rank == 0:
            _log(f"SIGTERM: checkpointing step {self.step}, then exiting")
        record = self._window.flush(time.monotonic())
        if record is not None:
            self.heartbeats.add(record)
        ok = False
        try:
            self.checkpointer.release(not suspect)
            if self.checkpointer.wait(timeout=120):
                if self._last_ckpt_step != self.step and not suspect:
                    self.checkpoint(block=True)
                ok = self.checkpointer.last_committed == self.step
        except Exception as e:  # peers gone: the last committed checkpoint stands
            _log(f"rank {self.rank}: checkpoint on SIGTERM failed: {e!r}")
        err = Preempted(self.step, ok)
        if self.rank == 0:
            _log(f"{err}; exit code {err.code}")
        self._finished = True
        self._close()
        raise err

    def _close(self) -> None:
        record = self._window.flush(time.monotonic())
        if record is None and (self.checkpointer.saves_to_report or self._metrics) \
                and self._last_record is not None:
            # the final checkpoint came after the last record: repeat it, zero steps, to carry it
            record = {**self._last_record, "steps": 0, "at": time.time()}
        if record is not None:
            self.heartbeats.add(self._with_saves(record))
        self.heartbeats.close()
        self._stop.uninstall()

    def _with_saves(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with the checkpoints committed since the last one, for the control plane's
        save-time and size histograms (rank 0's saves; the other ranks' records carry none)."""
        saves = self.checkpointer.take_saves()
        if saves:
            record = {**record, "checkpoints": saves}
        if self._metrics:
            record = {**record, "metrics": self._metrics}
            self._metrics = {}
        self._last_record = {k: v for k, v in record.items() if k != "metrics"}  # sent once
        return record

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.finish()
        elif not self._finished:
            self._finished = True
            self._close()


def save_params(model: Any, path: str | Path) -> None:
    """Gather the full parameters (DDP, FSDP or plain) and ``torch.save`` them on rank 0.

    A collective under torch.distributed: every rank must call it.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        torch.save({k: v.detach().cpu() for k, v in sd.items()}, path)  # type: ignore[union-attr]
