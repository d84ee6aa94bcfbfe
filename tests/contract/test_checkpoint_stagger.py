"""Checkpoint phases: the twin and the live control plane stagger the same jobs alike.

One cluster (the lab's, with a 0.5 GB/s shared file system), four 1-GPU jobs arriving
10 s apart that never end within the run. The twin replays them with its data-path
model and ``CheckpointPhasing.STAGGERED``; live, a ``Reconciler`` (SQLite store,
scripted backend, fake clock) launches them with the file system from the same spec.
Each job's checkpoint is 12.25 GB (``core.checkpoint_stagger``'s per-GPU default) at
0.5 GB/s: 24.5 s alone, which is the live ``checkpoint_s`` and the twin's write time,
so both worlds see equal loads. The phases pushed live (``GRACE_CHECKPOINT_PHASE_S``)
must equal the ones the twin gave, job for job, and no two may be equal.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from grace.control.reconciler import Reconciler
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.core.checkpoint import LLAMA3_GPU_MTBF_H
from grace.core.checkpoint_stagger import DEFAULT_CHECKPOINT_GB_PER_GPU, CheckpointPhasing
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.runtime.config import PHASE_ENV
from grace.sim.engine import SimConfig, Simulation
from grace.sim.estimates import EstimateModel
from grace.sim.failures import FailureModel
from grace.sim.traces.model import TraceJob
from grace.spec.loader import parse_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "control"))
from helpers import LAB, FakeClock, ScriptedBackend, add_job

FS_WRITE_GBPS = 0.5
WRITE_S = DEFAULT_CHECKPOINT_GB_PER_GPU / FS_WRITE_GBPS  # 24.5 s alone
ARRIVALS = {"a": 0.0, "b": 10.0, "c": 20.0, "d": 30.0}
RUN_S = 10_000.0  # longer than the scenario: every job is running when phases are read


def cluster() -> Any:
    body = yaml.safe_load(LAB.read_text())
    body["storage"] = {"read_gbps": 10.0, "write_gbps": FS_WRITE_GBPS}
    return parse_cluster(body)


class _PhaseRecordingSimulation(Simulation):
    """The twin, noting the phase its data path gives each starting attempt."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.phases: dict[str, float] = {}

    def _dp_checkpoints(self, job, now):  # type: ignore[no-untyped-def]
        touched = super()._dp_checkpoints(job, now)
        assert self.dp is not None
        entry = self.dp.loads.get(int(job.pending.id))
        if entry is not None:
            self.phases[job.trace.job_id] = entry[1]
        return touched


def twin_phases() -> dict[str, float]:
    spec = cluster()
    jobs = [TraceJob(job_id=name, submit_s=at, duration_s=RUN_S, gpus=1)
            for name, at in ARRIVALS.items()]
    failures = FailureModel(gpu_mtbf_h=LLAMA3_GPU_MTBF_H, checkpoint_s=WRITE_S, restart_s=60.0,
                            causes=())
    config = SimConfig(policy=get_policy("grace"), estimates=EstimateModel.NONE,
                       failures=failures, until_s=100.0, data_path=True,
                       checkpoint_phases=CheckpointPhasing.STAGGERED)
    sim = _PhaseRecordingSimulation(Topology.from_spec(spec), jobs, config)
    sim.run()
    return sim.phases


def live_phases(state_dir: Path) -> dict[str, float]:
    state_dir.mkdir(parents=True)
    store = Store.open(f"sqlite:///{state_dir / 'grace.sqlite'}")
    try:
        return _launch_all(store, state_dir)
    finally:
        store.close()


def _launch_all(store: Store, state_dir: Path) -> dict[str, float]:
    spec = cluster()
    backend, clock = ScriptedBackend(spec), FakeClock()
    rec = Reconciler(store, backend, Topology.from_spec(spec), get_policy("grace"), state_dir,
                     clock=clock, checkpoint_s=WRITE_S, restart_s=60.0)
    t0 = clock()
    ids: dict[int, str] = {}
    for name, at in ARRIVALS.items():
        clock.now = t0 + at
        ids[add_job(store, clock(), name, 1)] = name
        rec.cycle()
    with store.read() as s:
        assert all(repo.require_job(s, j).state.value == "running" for j in ids)
    return {ids[spec.job_id]: float(spec.env[PHASE_ENV]) for spec in backend.launches}


def test_twin_and_live_give_the_same_jobs_the_same_phases(tmp_path: Path) -> None:
    twin = twin_phases()
    live = live_phases(tmp_path / "state")
    assert set(twin) == set(live) == set(ARRIVALS)
    assert live == {name: pytest.approx(phase, abs=1e-3) for name, phase in twin.items()}
    assert len({round(p) for p in live.values()}) == len(ARRIVALS)  # all apart
