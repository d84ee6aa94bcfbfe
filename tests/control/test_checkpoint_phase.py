"""Live checkpoint staggering: each launch gets a phase spaced from the running jobs'.

A reconciler on the lab cluster (real SQLite/PostgreSQL store, scripted backend,
fake clock). With a file-system write bandwidth the launch env carries a harmonic
interval and a phase chosen by ``core.checkpoint_stagger`` against the attempts
already running, and the attempt keeps both; without one, today's env.
"""

from __future__ import annotations

from pathlib import Path

from helpers import LAB, FakeClock, ScriptedBackend, add_job

from grace.backends.base import AttemptStatus
from grace.control.reconciler import Reconciler
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.core.checkpoint import choose_interval
from grace.core.checkpoint_stagger import harmonic_interval, job_load, stagger
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.runtime.config import INTERVAL_ENV, PHASE_ENV
from grace.spec.loader import load_cluster

CHECKPOINT_S = 30.0  # the reconciler's default checkpoint cost


def reconciler(store: Store, tmp_path: Path, fs: float | None
               ) -> tuple[Reconciler, ScriptedBackend, FakeClock]:
    spec = load_cluster(LAB)
    backend, clock = ScriptedBackend(spec), FakeClock()
    rec = Reconciler(store, backend, Topology.from_spec(spec), get_policy("grace"),
                     tmp_path / "state", clock=clock, fs_write_gbps=fs)
    return rec, backend, clock


def test_without_a_file_system_figure_launches_are_unphased(store: Store, tmp_path: Path) -> None:
    rec, backend, clock = reconciler(store, tmp_path, None)
    jid = add_job(store, clock(), "a", 1)
    clock.advance(1)
    rec.cycle()
    [launch] = backend.launches
    assert PHASE_ENV not in launch.env
    daly = choose_interval(1.0, CHECKPOINT_S, 60.0).interval_s
    assert launch.env[INTERVAL_ENV] == f"{daly:.0f}"  # today's interval, unrounded
    with store.read() as s:
        a = repo.require_job(s, jid).attempts[0]
        assert a.checkpoint_phase_s is None and a.checkpoint_interval_s is None


def test_each_start_is_phased_against_the_running_attempts(store: Store, tmp_path: Path) -> None:
    # 0.5 GB/s of file system: a 1-GPU job writes 12.25 GB in 30 s (0.41 GB/s) alone, the
    # one that declares a 1B model 14 GB (0.47 GB/s): no two fit together
    rec, backend, clock = reconciler(store, tmp_path, 0.5)
    first = add_job(store, clock(), "first", 1)
    clock.advance(1)
    rec.cycle()
    sized = add_job(store, clock(), "sized", 1, model={"params_b": 1.0})
    later = [sized] + [add_job(store, clock(), f"j{i}", 1) for i in range(2)]
    for _ in range(3):
        clock.advance(1)
        rec.cycle()
    launches = {spec.job_id: spec for spec in backend.launches}
    assert set(launches) == {first, *later}
    interval = harmonic_interval(choose_interval(1.0, CHECKPOINT_S, 60.0).interval_s)
    phases = {}
    for jid, spec in launches.items():
        assert float(spec.env[INTERVAL_ENV]) == interval
        phases[jid] = float(spec.env[PHASE_ENV])
        assert 0.0 <= phases[jid] < interval
    # the same policy, replayed start by start with the earlier ones fixed
    expected: dict[int, float] = {}
    loads = []
    for jid in sorted(launches):
        loads.append(job_load(jid, 1.0, interval, CHECKPOINT_S, 1.0 if jid == sized else None))
        expected[jid] = stagger(loads, 0.5, fixed=dict(expected))[jid]
    assert phases == {j: round(p, 3) for j, p in expected.items()}
    assert len({round(p) for p in phases.values()}) == 4  # no two bursts together
    with store.read() as s:
        for jid, phase in phases.items():
            a = repo.require_job(s, jid).attempts[0]
            assert a.checkpoint_interval_s == interval
            assert a.checkpoint_phase_s is not None
            assert round(a.checkpoint_phase_s, 3) == phase


def test_a_job_with_its_own_interval_keeps_it_unphased(store: Store, tmp_path: Path) -> None:
    rec, backend, clock = reconciler(store, tmp_path, 0.5)
    add_job(store, clock(), "own", 1, env={INTERVAL_ENV: "123"})
    clock.advance(1)
    rec.cycle()
    [launch] = backend.launches
    assert launch.env[INTERVAL_ENV] == "123" and PHASE_ENV not in launch.env


def test_an_ended_attempt_frees_its_phase(store: Store, tmp_path: Path) -> None:
    rec, backend, clock = reconciler(store, tmp_path, 0.5)
    a = add_job(store, clock(), "a", 1)
    clock.advance(1)
    rec.cycle()
    phase_a = float(backend.launches[0].env[PHASE_ENV])
    backend.finish(a, AttemptStatus.SUCCEEDED)
    clock.advance(1)
    rec.cycle()
    add_job(store, clock(), "b", 1)
    clock.advance(1)
    rec.cycle()
    # nothing runs any more: b takes the slot a had
    assert float(backend.launches[-1].env[PHASE_ENV]) == phase_a
