"""``grace up --bursting FILE``: the server config path to a reconciler that rents.

The long behaviour (renting after the delay, spot reclaims, idle release) is
tests/control/test_bursting_live.py; here, only what ``grace up`` adds: the file
is checked against the cluster's pools before anything starts, and a good one
attaches ``LiveBursting`` with the local provider on the reconciler's clock, so
the offers' nodes stay out of the first cycle's snapshot.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import add_job
from typer.testing import CliRunner

from grace.backends.base import AttemptStatus
from grace.cli.main import app
from grace.control.bursting import LiveBursting
from grace.control.providers import LocalDelayedProvider
from grace.control.server import ControlPlane, ServerConfig, assemble
from grace.control.store import repository as repo
from grace.control.store.models import JobState
from grace.spec.errors import SpecError

CLUSTER = """kind: cluster
name: burst-lab
pools: [{name: lab, kind: on-prem}, {name: spot, kind: cloud}, {name: od, kind: cloud}]
node_groups:
  - {name: lab, count: 1, gpu: L40S, gpus_per_node: 2, cpu_cores: 8, memory_gb: 64, pool: lab}
  - {name: spot, count: 1, gpu: L40S, gpus_per_node: 2, cpu_cores: 8, memory_gb: 64, pool: spot}
  - {name: od, count: 1, gpu: L40S, gpus_per_node: 2, cpu_cores: 8, memory_gb: 64, pool: od}
"""
OFFERS = """kind: bursting
offers:
  - {name: spot, gpu: L40S, kind: spot, usd_per_gpu_hour: 0.5, gpus_per_node: 2,
     preemptions_per_hour: 0.1, provisioning_delay_s: 60, max_nodes: 1}
  - {name: od, gpu: L40S, kind: on-demand, usd_per_gpu_hour: 1.5, gpus_per_node: 2,
     provisioning_delay_s: 60, max_nodes: 1}
"""
#: A100s where the spot pool has L40S, and a pool the cluster does not declare
MISFIT = """kind: bursting
offers:
  - {name: spot, gpu: A100-80GB, kind: spot, usd_per_gpu_hour: 1.2, gpus_per_node: 2}
  - {name: od, pool: cloud-on-demand, gpu: L40S, kind: on-demand, usd_per_gpu_hour: 1.5,
     gpus_per_node: 2}
"""
QUICK = ["python", "-c", "print('done')"]


def files(tmp_path: Path, offers: str) -> tuple[Path, Path]:
    cluster, bursting = tmp_path / "cluster.yaml", tmp_path / "bursting.yaml"
    cluster.write_text(CLUSTER)
    bursting.write_text(offers)
    return cluster, bursting


def config(tmp_path: Path, offers: str) -> ServerConfig:
    cluster, bursting = files(tmp_path, offers)
    return ServerConfig(cluster, None, 0, tmp_path / "state", bursting=bursting)


def test_a_bursting_file_attaches_live_bursting_with_the_local_provider(tmp_path: Path) -> None:
    plane = assemble(config(tmp_path, OFFERS))
    try:
        rec = plane.reconciler
        assert isinstance(rec.bursting, LiveBursting)
        provider = rec.bursting.provider
        assert isinstance(provider, LocalDelayedProvider)
        assert provider.pool_nodes == {"spot": ("spot-00",), "od": ("od-00",)}
        assert provider.clock is rec.clock
        assert rec.bursting.offer_nodes == {plane.topo.by_name["spot-00"],
                                            plane.topo.by_name["od-00"]}
        _two_jobs_one_owned_node(plane)
    finally:
        plane.store.close()


def _two_jobs_one_owned_node(plane: ControlPlane) -> None:
    """Two 2-GPU jobs, one owned node: the second waits, though the unrented spot and
    on-demand nodes are free (without bursting it would start on one of them)."""
    now = plane.reconciler.clock()
    first = add_job(plane.store, now, "first", 2, command=QUICK)
    second = add_job(plane.store, now, "second", 2, command=QUICK)
    plane.reconciler.cycle()
    with plane.store.read() as s:
        placed = {e["node"] for a in repo.get_job(s, first).attempts for e in a.placement_json}
        assert placed == {"lab-00"}
        assert repo.get_job(s, second).state == JobState.PENDING
        assert not list(repo.get_job(s, second).attempts)
    deadline = time.monotonic() + 20  # let the one real process end before the store closes
    while time.monotonic() < deadline and any(
            o.status is AttemptStatus.RUNNING for o in plane.backend.poll()):
        time.sleep(0.1)


def test_offers_that_do_not_fit_the_cluster_stop_start_up_before_the_store_opens(
        tmp_path: Path) -> None:
    cfg = config(tmp_path, MISFIT)
    with pytest.raises(SpecError) as info:
        assemble(cfg)
    err = info.value
    assert err.source == f"{cfg.bursting} (against cluster 'burst-lab')"
    assert [p.path for p in err.problems] == ["offers[0].gpu", "offers[1].pool"]
    assert "make them agree" in err.problems[0].message
    assert "declare it (kind: cloud)" in err.problems[1].message
    assert not (cfg.state_dir / "grace.sqlite").exists()


def test_grace_up_reports_a_misfit_bursting_file_and_exits_2(tmp_path: Path) -> None:
    cluster, bursting = files(tmp_path, MISFIT)
    r = CliRunner().invoke(app, ["up", "--cluster", str(cluster), "--bursting", str(bursting),
                                 "--state-dir", str(tmp_path / "state")])
    assert r.exit_code == 2
    text = " ".join(r.output.split())
    assert "invalid" in text and "2 problem(s)" in text
    assert "offers[1].pool: cluster 'burst-lab' has no pool 'cloud-on-demand'" in text
