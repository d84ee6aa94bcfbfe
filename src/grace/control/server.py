"""``grace up``: the API and the reconciler loop in one process, on the store.

The reconciler runs in a background thread, one cycle a second (sooner after a
submission is not needed at this scale). Stopping the server (SIGINT/SIGTERM)
stops the loop after its current cycle; running training jobs are left alone,
and the next ``grace up`` adopts them.

Everything that can be wrong in the operator's files (cluster, bursting offers
against the cluster's pools) is checked in ``assemble``, before the store is
opened or a port bound, so a bad file ends ``grace up`` with the field and its
fix instead of a loop that fails every cycle.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from grace.backends.base import Backend
from grace.backends.local import LocalBackend
from grace.control.api import create_app
from grace.control.bursting import LiveBursting
from grace.control.providers import LocalDelayedProvider
from grace.control.reconciler import Reconciler
from grace.control.store.db import Store
from grace.control.stragglers import StragglerWatch
from grace.core.policies import get_policy
from grace.core.stragglers import StragglerDetector
from grace.core.topology import Topology
from grace.spec.bursting import BurstingSpec
from grace.spec.cluster import ClusterSpec
from grace.spec.errors import SpecError, SpecProblem
from grace.spec.loader import load_bursting, load_cluster

log = logging.getLogger("grace.server")
DEFAULT_PORT = 8470
DEFAULT_CLUSTER = Path("examples/clusters/lab.yaml")


@dataclass
class ServerConfig:
    cluster: Path | None  # None: the default file, or with Slurm the cluster Slurm reports
    db_url: str | None
    port: int
    state_dir: Path
    policy: str = "grace"
    interval_s: float = 1.0
    host: str = "127.0.0.1"
    backend: str = "local"  # local | slurm (docs/slurm.md)
    slurm_partition: str | None = None  # with slurm: submit to and import only this one
    slurm_default_gpu: str = "A100-80GB"  # with slurm: the model of a GRES gpu without a type
    heartbeat_timeout_s: float = 30.0
    straggler_window_s: float = 30.0
    straggler_threshold: float = 0.10
    bursting: Path | None = None  # kind: bursting; rents the cluster's cloud pools (docs/bursting.md)


class ReconcileLoop(threading.Thread):
    def __init__(self, reconciler: Reconciler, interval_s: float) -> None:
        super().__init__(name="reconciler", daemon=True)
        self.reconciler = reconciler
        self.interval_s = interval_s
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:  # until it succeeds: no cycle may run before the live attempts are adopted
                requeued = self.reconciler.recover()
                break
            except Exception:  # e.g. Slurm's controller unreachable right now
                log.exception("recovery failed; retrying")
                self.stopping.wait(max(self.interval_s, 5.0))
        else:
            return
        if requeued:
            log.warning("requeued jobs whose processes died with the control plane: %s", requeued)
        while not self.stopping.is_set():
            try:
                self.reconciler.cycle()
            except Exception:  # a bad cycle must not kill the loop; the next one retries
                log.exception("reconcile cycle failed")
            self.stopping.wait(self.interval_s)


def make_backend(cfg: ServerConfig) -> tuple[Backend, ClusterSpec]:
    """The backend ``cfg`` names and the cluster Grace schedules on.

    With Slurm the cluster comes from Slurm's own inventory unless a file is given.
    """
    if cfg.backend == "slurm":
        from grace.backends.slurm import SlurmBackend  # only Slurm sites need its tools

        slurm = SlurmBackend(cfg.state_dir, cluster=load_cluster(cfg.cluster) if cfg.cluster else None,
                             partition=cfg.slurm_partition, default_gpu=cfg.slurm_default_gpu)
        return slurm, slurm.inventory()
    if cfg.backend != "local":
        raise ValueError(f"unknown backend {cfg.backend!r}; use local or slurm")
    spec = load_cluster(cfg.cluster or DEFAULT_CLUSTER)
    return LocalBackend(spec, cfg.state_dir), spec


def load_bursting_for(path: Path, cluster: ClusterSpec) -> BurstingSpec:
    """The bursting file, checked against the cluster it will rent for: every offer must
    name a cloud pool of it with the same GPU model and node size. One SpecError lists
    every problem, so the operator fixes the file once."""
    spec = load_bursting(path)
    problems = spec.check_cluster(cluster)
    if problems:
        raise SpecError(f"{path} (against cluster {cluster.name!r})",
                        [SpecProblem(*line.split(": ", 1)) for line in problems])
    return spec


@dataclass
class ControlPlane:
    """What ``serve`` runs: the pieces built and checked, nothing started yet."""

    store: Store
    backend: Backend
    topo: Topology
    reconciler: Reconciler


def assemble(cfg: ServerConfig) -> ControlPlane:
    """Build the backend, store and reconciler from ``cfg``; raises SpecError on a bad file.

    Bursting rents through ``LocalDelayedProvider``, the one provider that runs
    here: the offers' nodes are declared in the cluster file and join after each
    offer's provisioning delay. A real cloud plugs in behind the ``CloudProvider``
    protocol (grace.control.providers) in its place.
    """
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    backend, spec = make_backend(cfg)
    bursting = load_bursting_for(cfg.bursting, spec) if cfg.bursting else None
    topo = Topology.from_spec(spec)
    url = cfg.db_url or f"sqlite:///{cfg.state_dir / 'grace.sqlite'}"
    store = Store.open(url)
    reconciler = Reconciler(store, backend, topo, get_policy(cfg.policy), cfg.state_dir,
                            heartbeat_timeout_s=cfg.heartbeat_timeout_s,
                            stragglers=StragglerWatch(
                                StragglerDetector(threshold=cfg.straggler_threshold),
                                window_s=cfg.straggler_window_s))
    if bursting is not None:
        provider = LocalDelayedProvider(LiveBursting.pool_nodes(spec, bursting), reconciler.clock)
        reconciler.bursting = LiveBursting(bursting, spec, topo, provider)
    return ControlPlane(store, backend, topo, reconciler)


def serve(cfg: ServerConfig) -> None:
    plane = assemble(cfg)
    # jobs inherit it, so grace.runtime finds the control plane for heartbeats
    os.environ["GRACE_URL"] = f"http://{cfg.host}:{cfg.port}"
    loop = ReconcileLoop(plane.reconciler, cfg.interval_s)
    app = create_app(plane.store, plane.topo, cfg.state_dir, plane.reconciler, plane.backend)
    loop.start()
    try:
        uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning")
    finally:
        loop.stopping.set()
        loop.join(timeout=10)
