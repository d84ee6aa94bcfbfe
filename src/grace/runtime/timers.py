"""Step-phase timers: where a training step's time goes, cheap enough to leave on.

``with timers.phase("forward"): ...`` adds the block's wall time to that phase;
``collect()`` hands back the seconds per phase since the last call (one step)
and starts over. A phase is a cached object with two ``perf_counter`` calls, so
instrumenting a step with the usual six phases costs a few microseconds (see
``benchmarks/runtime.py`` for the measured share of a step).

The standard names: ``data`` (loading the batch), ``h2d`` (host to device),
``forward``, ``backward``, ``allreduce`` (gradient all-reduce), ``optimizer``,
``checkpoint`` (time training blocks for a checkpoint), ``sync`` (the runtime's
own per-step agreement between ranks). Any other name works too.

Under DistributedDataParallel the gradient all-reduce runs inside
``backward``, overlapped with it; :func:`time_ddp_allreduce` installs a
communication hook that reports the span from the first bucket's launch to the
last bucket's completion as ``allreduce``. That phase overlaps ``backward`` and
is not part of a sum of phases.

On CUDA the host returns from a kernel launch long before the kernel ends, so
host times would only show launch cost: with ``cuda=True`` each phase records a
pair of CUDA events instead, resolved in ``collect()`` (which waits only for the
last event of the step; the loss read-back already waits for it). ``data``
stays a host timer in both modes. The CUDA path is not exercised by the tests of
this repository (no GPU in CI).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

PHASES = ("data", "h2d", "forward", "backward", "allreduce", "optimizer", "checkpoint", "sync")
#: Phases timed on the host even in CUDA mode.
HOST_PHASES = frozenset({"data", "checkpoint", "sync"})

_clock: Callable[[], float] = time.perf_counter


class _HostPhase:
    __slots__ = ("_acc", "_name", "_t0")

    def __init__(self, acc: dict[str, float], name: str) -> None:
        self._acc = acc
        self._name = name
        self._t0 = 0.0

    def __enter__(self) -> None:
        self._t0 = _clock()

    def __exit__(self, *exc: object) -> None:
        acc = self._acc
        acc[self._name] = acc.get(self._name, 0.0) + (_clock() - self._t0)


class _CudaPhase:
    __slots__ = ("_events", "_name", "_start", "_torch")

    def __init__(self, events: list[tuple[str, Any, Any]], name: str, torch: Any) -> None:
        self._events = events
        self._name = name
        self._torch = torch
        self._start: Any = None

    def __enter__(self) -> None:
        self._start = self._torch.cuda.Event(enable_timing=True)
        self._start.record()

    def __exit__(self, *exc: object) -> None:
        end = self._torch.cuda.Event(enable_timing=True)
        end.record()
        self._events.append((self._name, self._start, end))


class _Off:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_OFF = _Off()


class PhaseTimers:
    """Accumulates seconds per phase between two ``collect()`` calls (one step)."""

    def __init__(self, enabled: bool = True, cuda: bool = False) -> None:
        self.enabled = enabled
        self._acc: dict[str, float] = {}
        self._phases: dict[str, Any] = {}
        self._events: list[tuple[str, Any, Any]] = []
        self._external: dict[str, float] = {}  # from other threads (communication hooks)
        self._lock = threading.Lock()
        self._torch: Any = None
        if cuda:
            import torch

            self._torch = torch

    def phase(self, name: str) -> Any:
        """A context manager timing its block as ``name`` (the same object every call)."""
        if not self.enabled:
            return _OFF
        p = self._phases.get(name)
        if p is None:
            if self._torch is not None and name not in HOST_PHASES:
                p = _CudaPhase(self._events, name, self._torch)
            else:
                p = _HostPhase(self._acc, name)
            self._phases[name] = p
        return p

    def add(self, name: str, seconds: float) -> None:
        """Add time measured elsewhere; safe from any thread."""
        if self.enabled:
            with self._lock:
                self._external[name] = self._external.get(name, 0.0) + seconds

    def collect(self) -> dict[str, float]:
        """Seconds per phase since the last call; resets."""
        out = self._acc.copy()
        self._acc.clear()
        if self._events:
            self._events[-1][2].synchronize()
            for name, start, end in self._events:
                out[name] = out.get(name, 0.0) + start.elapsed_time(end) / 1000.0
            self._events.clear()
        if self._external:
            with self._lock:
                ext, self._external = self._external, {}
            for name, s in ext.items():
                out[name] = out.get(name, 0.0) + s
        return out


def time_ddp_allreduce(ddp_model: Any, timers: PhaseTimers) -> bool:
    """Report DDP's gradient all-reduce as the ``allreduce`` phase through a comm hook.

    The hook is DDP's default all-reduce (divide by the world size, sum) with a
    clock around it: per step, the span from the first bucket's launch to the
    last bucket's completion. Returns False (and changes nothing) when the model
    already has a hook or refuses one.
    """
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    span: dict[str, float] = {}

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks these annotations: none
        t0 = _clock()
        if bucket.index() == 0 or "first" not in span:
            span["first"] = t0
        fut = default_hooks.allreduce_hook(state, bucket)

        def done(f: Any) -> Any:
            if bucket.is_last():
                timers.add("allreduce", _clock() - span.pop("first", t0))
            return f.value()

        return fut.then(done)

    try:
        ddp_model.register_comm_hook(dist.group.WORLD, hook)
    except Exception:
        return False
    return True
