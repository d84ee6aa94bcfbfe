"""``grace bench scaling``: a training script's throughput and scaling efficiency at 1, 2, 4 ... ranks.

For each rank count ``n`` the script (``examples/train_ddp.py`` by default, or any
script that uses ``grace.runtime`` and takes ``--steps`` and ``--batch-size``) runs
under ``torchrun --standalone --nproc-per-node n`` with a fixed batch per rank (weak
scaling, as data-parallel training grows). Nothing is added to the script: the
figures come from the heartbeat records ``grace.runtime`` always writes to
``$GRACE_WORKDIR/attempt-1/heartbeats-rank<r>.jsonl`` (the same records the control
plane reads), which carry the mean seconds per step and per phase of each window.

- ``step_s[n]``: seconds per step, the slowest rank's, from the records after the
  first (the first step, with its one-off costs, is a record of its own): the
  runtime's ``step_s`` (data to optimizer) plus its ``sync`` phase (the per-step
  agreement between ranks, part of a step's wall time).
- ``throughput[n] = n x batch / step_s[n]``: samples per second, all ranks together.
- ``efficiency[n] = throughput[n] / (n x throughput[1])``, the issue's definition; when 1
  is not among the rank counts, the smallest one stands in for it
  (``(throughput[n] / n) / (throughput[m] / m)``).
- ``phases[n]``: mean seconds per step in each runtime phase (mean over ranks);
  ``allreduce`` is DDP's gradient all-reduce, which runs *inside* ``backward``
  (overlapped), so it is not added to the others.
- ``explanation[n]``: the phases that grew most against the base count, in words.

On a CPU host each rank gets one thread (``OMP_NUM_THREADS=1``) so the base count is
one core's work, as one GPU's would be; past the host's core count ranks share
cores, and the compute phases themselves slow down: the JSON records ``cpus`` so
that reading is possible.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import RenderableType

from grace.bench.net import Backend, BenchError, cuda_available, resolve_backend

#: The phases reported, in the order a step runs them (``allreduce`` overlaps ``backward``).
PHASES = ("data", "h2d", "forward", "backward", "allreduce", "optimizer", "sync")
#: Phases that add up to a step (``allreduce`` is inside ``backward``).
ADDITIVE = ("data", "h2d", "forward", "backward", "optimizer", "sync")
DEFAULT_SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "train_ddp.py"


def parse_ranks(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4] (sorted, no repeats); each >= 1."""
    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise BenchError(f"--ranks: {part!r} is not a whole number; write e.g. 1,2,4") from None
        if n < 1:
            raise BenchError(f"--ranks: {n} is under 1; write e.g. 1,2,4")
        out.add(n)
    if not out:
        raise BenchError("--ranks is empty; write e.g. 1,2,4")
    return sorted(out)


@dataclass(frozen=True)
class RankRun:
    """One rank count's figures, read from its heartbeat records."""

    ranks: int
    step_s: float
    phases: dict[str, float]
    steps_measured: int


def read_heartbeats(attempt_dir: Path, ranks: int) -> RankRun:
    """Fold each rank's records (less its first: step 1) into step time and phases.

    Raises :class:`BenchError` when a rank left no record past its first step
    (too few ``--steps``).
    """
    step_times: list[float] = []
    phase_sums: dict[str, float] = {}
    measured = 0
    for r in range(ranks):
        path = attempt_dir / f"heartbeats-rank{r}.jsonl"
        try:
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError) as e:
            raise BenchError(f"cannot read rank {r}'s heartbeats ({path}): {e}; does the script "
                             "call grace.runtime.init and rt.step_done?") from e
        later = records[1:]
        steps = sum(int(rec.get("steps", 0)) for rec in later)
        if steps == 0:
            raise BenchError(f"rank {r} recorded no step after its first; raise --steps")
        phases: dict[str, float] = {}
        total = 0.0
        for rec in later:
            k = int(rec["steps"])
            ph = rec.get("phases") or {}
            total += k * (float(rec["step_s"]) + float(ph.get("sync", 0.0)))
            for name, v in ph.items():
                phases[name] = phases.get(name, 0.0) + k * float(v)
        step_times.append(total / steps)
        for name, v in phases.items():
            phase_sums[name] = phase_sums.get(name, 0.0) + v / steps
        measured = steps if r == 0 else min(measured, steps)
    mean_phases = {p: phase_sums.get(p, 0.0) / ranks for p in PHASES}
    return RankRun(ranks=ranks, step_s=max(step_times), phases=mean_phases, steps_measured=measured)


def explain(run: RankRun, base: RankRun) -> str:
    """Where the step time grew against ``base``: the phases that grew most, in ms/step."""
    grew = run.step_s - base.step_s
    if grew <= 0:
        return f"step {run.step_s * 1e3:.1f} ms, no slower than at {base.ranks} rank(s)"
    deltas = sorted(((run.phases.get(p, 0.0) - base.phases.get(p, 0.0), p) for p in ADDITIVE),
                    reverse=True)
    parts = [f"{p} +{d * 1e3:.1f} ms" for d, p in deltas[:3] if d >= 5e-5]  # shown as >= 0.1
    allreduce = run.phases.get("allreduce", 0.0)
    note = f" (all-reduce {allreduce * 1e3:.1f} ms inside backward)" if allreduce else ""
    return (f"step {run.step_s * 1e3:.1f} ms vs {base.step_s * 1e3:.1f} ms: "
            + ", ".join(parts) + note)


@dataclass
class ScalingReport:
    """What ``grace bench scaling`` writes and plots."""

    runs: list[RankRun]
    batch_size: int
    steps: int
    script: str
    backend: str
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    host: str = field(default_factory=socket.gethostname)

    @property
    def base(self) -> RankRun:
        return min(self.runs, key=lambda r: r.ranks)

    def throughput(self, run: RankRun) -> float:
        return run.ranks * self.batch_size / run.step_s

    def efficiency(self, run: RankRun) -> float:
        base = self.base
        return (self.throughput(run) / run.ranks) / (self.throughput(base) / base.ranks)

    def to_json(self) -> dict[str, Any]:
        key = {r.ranks: str(r.ranks) for r in self.runs}
        return {
            "throughput": {key[r.ranks]: self.throughput(r) for r in self.runs},
            "efficiency": {key[r.ranks]: self.efficiency(r) for r in self.runs},
            "phases": {key[r.ranks]: r.phases for r in self.runs},
            "step_s": {key[r.ranks]: r.step_s for r in self.runs},
            "explanation": {key[r.ranks]: explain(r, self.base) for r in self.runs},
            "ranks": [r.ranks for r in self.runs],
            "base_ranks": self.base.ranks,
            "batch_size": self.batch_size,
            "steps": self.steps,
            "script": self.script,
            "backend": self.backend,
            "cpus": self.cpus,
            "host": self.host,
            "units": {"throughput": "samples/s, all ranks", "step_s": "seconds",
                      "phases": "seconds per step, mean over ranks"},
        }


def _script_env(workdir: Path, gloo: bool) -> dict[str, str]:
    """A run outside any control plane: no job id or URL (heartbeats only to the jsonl
    files), its own workdir and checkpoints, one thread per rank."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GRACE_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                       "MASTER_ADDR", "MASTER_PORT")}
    src = str(Path(__file__).resolve().parents[2])
    env.update(GRACE_WORKDIR=str(workdir), GRACE_CHECKPOINT_DIR=str(workdir / "checkpoints"),
               GRACE_CHECKPOINT_INTERVAL_S="1000000", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p))
    if gloo:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the script sees no GPU: cpu + gloo
    return env


def run_one(script: Path, ranks: int, steps: int, batch_size: int, workdir: Path,
            gloo: bool, timeout_s: float, extra_args: Sequence[str] = ()) -> RankRun:
    """``torchrun --standalone --nproc-per-node ranks script`` and its heartbeat figures."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={ranks}", str(script), "--steps", str(steps),
            "--batch-size", str(batch_size), *extra_args]
    try:
        done = subprocess.run(argv, env=_script_env(workdir, gloo), capture_output=True,
                              text=True, timeout=timeout_s, cwd=workdir)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{ranks} rank(s) did not finish {steps} steps within {timeout_s:.0f}s; "
                         "lower --steps") from e
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise BenchError(f"{script.name} at {ranks} rank(s) exited {done.returncode}:\n{tail}")
    return read_heartbeats(workdir / "attempt-1", ranks)


def run_scaling_bench(rank_counts: Sequence[int], script: Path = DEFAULT_SCRIPT, steps: int = 100,
                      batch_size: int = 16, backend: Backend = Backend.GLOO,
                      timeout_s: float = 600.0,
                      extra_args: Sequence[str] = ()) -> ScalingReport:
    """Run ``script`` at each rank count in turn (never two at once: they would share the
    cores and each would read slower) and report."""
    if not script.is_file():
        raise BenchError(f"--script {script}: no such file")
    if steps < 3:
        raise BenchError("--steps must be >= 3: the first step is left out as warm-up")
    if batch_size < 1:
        raise BenchError("--batch-size must be >= 1")
    # gloo: the script is shown no GPU; auto/nccl: it picks nccl when it sees CUDA
    gloo = backend is Backend.GLOO or resolve_backend(backend, cuda_available()) is Backend.GLOO
    runs = []
    with tempfile.TemporaryDirectory(prefix="grace-bench-scaling-") as tmp:
        for n in rank_counts:
            workdir = Path(tmp) / f"ranks-{n}"
            workdir.mkdir()
            runs.append(run_one(script.resolve(), n, steps, batch_size, workdir, gloo, timeout_s,
                                extra_args))
    return ScalingReport(runs=runs, batch_size=batch_size, steps=steps, script=str(script),
                         backend="gloo" if gloo else "nccl")


def scaling_table(report: ScalingReport, width: int) -> RenderableType:
    """Ranks, throughput, efficiency and the main phases; the explanation under it."""
    from rich.console import Group
    from rich.text import Text

    from grace.cli.fit import Column, fit_table

    columns = [Column("ranks", justify="right"), Column("samples/s", justify="right"),
               Column("eff", justify="right"), Column("step ms", justify="right"),
               Column("fwd ms", justify="right"), Column("bwd ms", justify="right"),
               Column("allred ms", justify="right"), Column("sync ms", justify="right")]
    rows = []
    base = report.base
    for r in report.runs:
        ph = r.phases
        rows.append([str(r.ranks), f"{report.throughput(r):.0f}", f"{report.efficiency(r):.0%}",
                     f"{r.step_s * 1e3:.1f}", f"{ph['forward'] * 1e3:.1f}",
                     f"{ph['backward'] * 1e3:.1f}", f"{ph['allreduce'] * 1e3:.1f}",
                     f"{ph['sync'] * 1e3:.1f}"])
    caption = (f"{report.backend}, batch {report.batch_size}/rank, {report.cpus} CPU(s); "
               f"eff = throughput / (n x throughput at {base.ranks}); allred is inside bwd")
    why = [Text(f"{r.ranks} ranks: {explain(r, base)}") for r in report.runs if r is not base]
    return Group(fit_table(columns, rows, width, title=f"Scaling of {Path(report.script).name}",
                           caption=caption), *why)


