"""``grace up``: the API and the reconciler loop in one process, on the store.

The reconciler runs in a background thread, one cycle a second (sooner after a
submission is not needed at this scale). Stopping the server (SIGINT/SIGTERM)
stops the loop after its current cycle; running training jobs are left alone,
and the next ``grace up`` adopts them.
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
from grace.control.reconciler import Reconciler
from grace.control.store.db import Store
from grace.control.stragglers import StragglerWatch
from grace.core.policies import get_policy
from grace.core.stragglers import StragglerDetector
from grace.core.topology import Topology
from grace.spec.cluster import ClusterSpec
from grace.spec.loader import load_cluster

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


def serve(cfg: ServerConfig) -> None:
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    backend, spec = make_backend(cfg)
    # jobs inherit it, so grace.runtime finds the control plane for heartbeats
    os.environ["GRACE_URL"] = f"http://{cfg.host}:{cfg.port}"
    topo = Topology.from_spec(spec)
    url = cfg.db_url or f"sqlite:///{cfg.state_dir / 'grace.sqlite'}"
    store = Store.open(url)
    reconciler = Reconciler(store, backend, topo, get_policy(cfg.policy), cfg.state_dir,
                            heartbeat_timeout_s=cfg.heartbeat_timeout_s,
                            stragglers=StragglerWatch(
                                StragglerDetector(threshold=cfg.straggler_threshold),
                                window_s=cfg.straggler_window_s))
    loop = ReconcileLoop(reconciler, cfg.interval_s)
    app = create_app(store, topo, cfg.state_dir, reconciler, backend)
    loop.start()
    try:
        uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning")
    finally:
        loop.stopping.set()
        loop.join(timeout=10)
