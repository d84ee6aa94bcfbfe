"""The diagnostics a drained node runs before Grace returns it: the seam, and what runs here.

``core.health`` asks for a level-2 diagnostic (about 2 minutes) once a node Grace
drained is empty, then level 3 (about 15 minutes) before it returns it
(NVIDIA DCGM's run levels; shared/REFERENCES.md). A real site runs ``dcgmi diag
-r <level>`` on the node. Neither DCGM nor a GPU exists on the machines this
project is built and tested on, so the seam is kept thin:

- ``TimedDiagnostics`` passes each level after its duration: the timing of a
  real run without its verdict (the default; say so to operators);
- ``CommandDiagnostics`` runs an operator's command (``{node}`` and ``{level}``
  substituted) in a worker thread; exit 0 is a pass. On Slurm, for instance,
  ``srun -w {node} dcgmi diag -r {level}``.

Both report through ``result``, polled by the reconciler, so no cycle waits.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
from typing import Protocol

#: DCGM run levels' typical durations, seconds (level 2 "medium", level 3 "long").
LEVEL_SECONDS = {1: 10.0, 2: 120.0, 3: 900.0}


class Diagnostics(Protocol):
    def start(self, node: str, level: int, reset_first: bool, now: float) -> float:
        """Begin a run; returns when its result is expected (epoch seconds)."""
        ...

    def result(self, node: str, level: int, now: float) -> bool | None:
        """Passed (True), failed (False) or not finished yet (None)."""
        ...

    def running(self, node: str, level: int) -> bool:
        """Whether this process started the run (one that died with an earlier control
        plane is started again)."""
        ...


class TimedDiagnostics:
    """Every level passes once its duration has passed (no DCGM here: see the module doc)."""

    def __init__(self, seconds: dict[int, float] | None = None) -> None:
        self.seconds = dict(LEVEL_SECONDS if seconds is None else seconds)
        self._due: dict[tuple[str, int], float] = {}

    def start(self, node: str, level: int, reset_first: bool, now: float) -> float:
        due = now + self.seconds.get(level, LEVEL_SECONDS[3])
        self._due[(node, level)] = due
        return due

    def result(self, node: str, level: int, now: float) -> bool | None:
        due = self._due.get((node, level))
        if due is None:
            return None
        if now < due:
            return None
        del self._due[(node, level)]
        return True

    def running(self, node: str, level: int) -> bool:
        return (node, level) in self._due


class CommandDiagnostics:
    """An operator's diagnostic command, one worker thread per run; exit 0 passes."""

    def __init__(self, template: str, timeout_s: float = 3600.0) -> None:
        self.template = template
        self.timeout_s = timeout_s
        self._results: dict[tuple[str, int], bool | None] = {}
        self._lock = threading.Lock()

    def start(self, node: str, level: int, reset_first: bool, now: float) -> float:
        argv = shlex.split(self.template.format(node=node, level=level))
        key = (node, level)
        with self._lock:
            self._results[key] = None

        def run() -> None:
            try:
                ok = subprocess.run(argv, capture_output=True, timeout=self.timeout_s,
                                    check=False).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            with self._lock:
                self._results[key] = ok

        threading.Thread(target=run, name=f"diag-{node}-{level}", daemon=True).start()
        return now + LEVEL_SECONDS.get(level, LEVEL_SECONDS[3])

    def result(self, node: str, level: int, now: float) -> bool | None:
        with self._lock:
            done = self._results.get((node, level))
            if done is not None:
                del self._results[(node, level)]
            return done

    def running(self, node: str, level: int) -> bool:
        with self._lock:
            return (node, level) in self._results


__all__ = ["LEVEL_SECONDS", "CommandDiagnostics", "Diagnostics", "TimedDiagnostics"]
