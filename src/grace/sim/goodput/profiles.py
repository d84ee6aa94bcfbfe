"""Per-model throughput and statistical-efficiency profiles (Pollux's ``app-profiles``).

A profile directory holds, for one model:

- ``placements.csv`` (``placement,local_bsz,step_time,sync_time``): a placement is
  the GPUs used on each node, written as digits (``24`` = two GPUs on one node and
  four on another, in the smallest rotation), measured at several per-GPU batch sizes;
- ``scalability.csv`` (``num_nodes,num_replicas,local_bsz,step_time,sync_time``):
  larger placements, by node and replica count only;
- ``validation-<batch>.csv`` (``progress,iteration,metric,grad_sqr,grad_var``): one
  row per epoch of a run at that total batch size; ``progress`` is cumulative work
  in units of the smallest batch size's steps, ``grad_sqr``/``grad_var`` the
  gradient's squared norm and variance, from which statistical efficiency follows.

Step time is looked up the way the published simulator does, so Grace's replays
can be compared job for job: a measured placement is interpolated linearly in
per-GPU batch size; any other is interpolated linearly (on a Delaunay
triangulation, SciPy's ``LinearNDInterpolator``) over (nodes, replicas, per-GPU
batch) among the per-shape means of the measured placements and the scalability
rows, nodes capped at 16 as measured. A job trains for as many epochs as every
validation run recorded.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: Settings the profile files do not carry. The published simulator caps YOLOv3's
#: per-GPU batch at 8 (the testbed GPUs' memory), below the largest it measured.
MAX_LOCAL_BATCH_OVERRIDES = {"yolov3": 8}
_MAX_PROFILED_NODES = 16


class ProfileError(ValueError):
    """A profile directory is missing a file or holds a bad value; the message names it."""


@dataclass(frozen=True)
class EpochCurve:
    """One validation run: per-epoch cumulative progress and gradient statistics."""

    batch_size: int
    progress: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray


@dataclass
class AppProfile:
    """What the runtime model knows about one model; built by ``load_profiles``."""

    name: str
    curves: dict[int, EpochCurve]  # by total batch size, ascending
    placements: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # id -> bsz, step, sync
    shape_points: np.ndarray  # (nodes, replicas, local_bsz) rows for the fallback
    shape_values: np.ndarray  # (step, sync) rows
    min_local_bsz: int
    max_local_bsz: int
    epochs: int
    _nd: object = field(default=None, repr=False)
    _memo: dict[tuple, tuple[float, float]] = field(default_factory=dict, repr=False)

    @property
    def init_batch_size(self) -> int:
        return min(self.curves)

    @property
    def max_batch_size(self) -> int:
        return max(self.curves)

    def epoch_start(self, epoch: int) -> float:
        """Progress at which ``epoch`` begins: the earliest any validation run got there."""
        if epoch == 0:
            return 0.0
        return float(min(c.progress[epoch - 1] for c in self.curves.values()))

    def grad_stats(self, batch_size: int, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) during ``epoch`` at ``batch_size``, linear between the
        measured batch sizes either side."""
        lo, hi = self._bracket(batch_size)
        a, b = self.curves[lo], self.curves[hi]
        if lo == hi:
            return float(a.grad_sqr[epoch]), float(a.grad_var[epoch])
        w = (batch_size - lo) / (hi - lo)
        return (float((1 - w) * a.grad_sqr[epoch] + w * b.grad_sqr[epoch]),
                float((1 - w) * a.grad_var[epoch] + w * b.grad_var[epoch]))

    def _bracket(self, batch_size: int) -> tuple[int, int]:
        sizes = list(self.curves)
        if not sizes[0] <= batch_size <= sizes[-1]:
            raise ProfileError(
                f"{self.name}: batch size {batch_size} is outside the measured "
                f"{sizes[0]}..{sizes[-1]}; ask for a batch size in that range")
        lo = max(s for s in sizes if s <= batch_size)
        hi = min(s for s in sizes if s >= batch_size)
        return lo, hi

    def step_time(self, per_node: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        """(step time, of which gradient sync) in seconds for GPUs per node ``per_node``
        (any order) at per-GPU batch ``local_bsz``."""
        key = (canonical_placement(per_node), local_bsz)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._lookup(*key)
        return hit

    def _lookup(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        pid = "".join(map(str, placement))
        measured = self.placements.get(pid)
        if measured is not None:
            bsz, step, sync = measured
            if not bsz[0] <= local_bsz <= bsz[-1]:
                raise ProfileError(f"{self.name}: per-GPU batch {local_bsz} is outside the "
                                   f"measured {int(bsz[0])}..{int(bsz[-1])} for placement {pid}")
            return float(np.interp(local_bsz, bsz, step)), float(np.interp(local_bsz, bsz, sync))
        if self._nd is None:
            from scipy.interpolate import LinearNDInterpolator

            self._nd = LinearNDInterpolator(self.shape_points, self.shape_values)
        point = [min(len(placement), _MAX_PROFILED_NODES), sum(placement), local_bsz]
        step, sync = self._nd([point])[0]  # type: ignore[operator]
        if not (math.isfinite(step) and math.isfinite(sync)):
            raise ProfileError(f"{self.name}: placement {pid} at per-GPU batch {local_bsz} "
                               "is outside every measured shape")
        return float(step), float(sync)


def canonical_placement(per_node: tuple[int, ...]) -> tuple[int, ...]:
    """The profiles' name for a placement: GPUs per node, largest first (the order a
    most-free-first allocation visits nodes in), then the smallest rotation."""
    counts = tuple(sorted((c for c in per_node if c), reverse=True))
    if not counts:
        raise ProfileError("a placement needs at least one GPU")
    return min(counts[i:] + counts[:i] for i in range(len(counts)))


def load_profiles(root: Path | str) -> dict[str, AppProfile]:
    """Every model directory under ``root`` (``app-profiles/``), by directory name."""
    base = Path(root)
    if not base.is_dir():
        raise ProfileError(f"--profiles {base}: not a directory; pass the app-profiles/ folder")
    out = {d.name: load_profile(d) for d in sorted(base.iterdir()) if d.is_dir()}
    if not out:
        raise ProfileError(f"--profiles {base}: no model directories in it")
    return out


def load_profile(directory: Path) -> AppProfile:
    name = directory.name
    curves: dict[int, EpochCurve] = {}
    for path in sorted(directory.glob("validation-*.csv")):
        stem = path.stem.removeprefix("validation-")
        if not stem.isdigit():
            raise ProfileError(f"{path}: the name must be validation-<batch size>.csv")
        rows = _read(path, ("progress", "grad_sqr", "grad_var"))
        curves[int(stem)] = EpochCurve(int(stem), rows["progress"], rows["grad_sqr"], rows["grad_var"])
    if not curves:
        raise ProfileError(f"{directory}: no validation-<batch size>.csv files")
    curves = dict(sorted(curves.items()))
    pl = _read(directory / "placements.csv", ("placement", "local_bsz", "step_time", "sync_time"),
               keep_text=("placement",))
    placements: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    shapes: dict[tuple[int, int, float], list[tuple[float, float]]] = {}
    for pid, bsz, step, sync in zip(pl["placement"], pl["local_bsz"], pl["step_time"],
                                    pl["sync_time"], strict=True):
        placements.setdefault(pid, (np.empty(0), np.empty(0), np.empty(0)))
        b, s, y = placements[pid]
        placements[pid] = (np.append(b, bsz), np.append(s, step), np.append(y, sync))
        digits = [int(ch) for ch in pid]
        shapes.setdefault((len(digits), sum(digits), float(bsz)), []).append((step, sync))
    for pid, (b, s, y) in placements.items():
        order = np.argsort(b, kind="stable")
        placements[pid] = (b[order], s[order], y[order])
    sc = _read(directory / "scalability.csv",
               ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"))
    keys = sorted(shapes)
    points = [list(k) for k in keys] + [
        [n, r, b] for n, r, b in zip(sc["num_nodes"], sc["num_replicas"], sc["local_bsz"], strict=True)]
    values = [list(np.mean(shapes[k], axis=0)) for k in keys] + [
        [s, y] for s, y in zip(sc["step_time"], sc["sync_time"], strict=True)]
    local = pl["local_bsz"]
    return AppProfile(
        name=name, curves=curves, placements=placements,
        shape_points=np.array(points, dtype=float), shape_values=np.array(values, dtype=float),
        min_local_bsz=int(local.min()),
        max_local_bsz=MAX_LOCAL_BATCH_OVERRIDES.get(name, int(local.max())),
        epochs=min(len(c.progress) for c in curves.values()),
    )


def _read(path: Path, columns: tuple[str, ...], keep_text: tuple[str, ...] = ()) -> dict:
    if not path.is_file():
        raise ProfileError(f"{path}: missing; a profile directory needs placements.csv, "
                           "scalability.csv and validation-<batch>.csv")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise ProfileError(f"{path}: missing column(s) {missing}")
        rows = list(reader)
    if not rows:
        raise ProfileError(f"{path}: no rows")
    out: dict[str, object] = {}
    for c in columns:
        if c in keep_text:
            out[c] = [r[c].strip() for r in rows]
            continue
        try:
            out[c] = np.array([float(r[c]) for r in rows])
        except ValueError as e:
            raise ProfileError(f"{path}: column {c!r} has a value that is not a number ({e})") from e
    return out
