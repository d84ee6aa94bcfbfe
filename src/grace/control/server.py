"""``grace up``: the API and the reconciler loop in one process, on the store.

The reconciler runs in a background thread, one cycle a second (sooner after a
submission is not needed at this scale). Stopping the server (SIGINT/SIGTERM)
stops the loop after its current cycle and releases the leader lease; running
training jobs are left alone, and the next leader adopts them.

One leader per store (``store.lease``): the reconcile loop runs only in the
``grace up`` that holds the store's leader lease; its writes are fenced by the
lease's epoch. On PostgreSQL another ``grace up`` is a standby: it serves the
API read-only, polls the lease, and when it expires takes over (fence,
``recover()``, loop). A leader that loses its lease stops its loop and stands
by. On SQLite, one file of one machine, a second ``grace up`` is refused: an
exclusive ``flock`` on ``<db>.lock``, which the kernel drops when its holder
dies, says whether the store is in use, so a restart after a crash takes over
at once instead of waiting for the TTL.

Everything that can be wrong in the operator's files (cluster, bursting offers
against the cluster's pools) is checked in ``assemble``, before the store is
opened or a port bound, so a bad file ends ``grace up`` with the field and its
fix instead of a loop that fails every cycle.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from sqlalchemy.engine import make_url

from grace.backends.base import Backend
from grace.backends.isolation import Isolation
from grace.backends.local import LocalBackend
from grace.control.admission import Admission, load_admission_for
from grace.control.api import create_app
from grace.control.auth import Authenticator
from grace.control.bursting import LiveBursting
from grace.control.diagnostics import CommandDiagnostics, TimedDiagnostics
from grace.control.heap import freeze_long_lived
from grace.control.kms import KeyEncryptionService, KeyFileKMS, kms_from_spec
from grace.control.notify.outbox import install_routes
from grace.control.notify.signing import load_or_create_key
from grace.control.notify.worker import Deliverer, NotifyLoop
from grace.control.providers import LocalDelayedProvider
from grace.control.reconciler import Reconciler
from grace.control.store.db import Store, make_engine, normalize_url
from grace.control.store.errors import Fenced
from grace.control.store.lease import (
    DEFAULT_TTL_S,
    POLL_EVERY_S,
    RENEW_EVERY_S,
    LeaderLease,
    Leadership,
    local_time,
    this_holder,
)
from grace.control.stragglers import StragglerWatch
from grace.control.tls import check_tls_files
from grace.core.health import HealthTable
from grace.core.policies import get_policy
from grace.core.stragglers import StragglerDetector
from grace.core.topology import Topology
from grace.observe.hub import Observability
from grace.observe.runbook_spec import RunbookSpec, load_runbook
from grace.spec.bursting import BurstingSpec
from grace.spec.cluster import ClusterSpec
from grace.spec.errors import SpecError, SpecProblem
from grace.spec.loader import load_bursting, load_cluster
from grace.spec.notify import NotifyConfig, load_notify_config

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
    health: Path | None = None  # kind: health overrides of the health table
    diagnostic_command: str | None = None  # None: TimedDiagnostics (docs/control_plane.md)
    bursting: Path | None = None  # kind: bursting; rents the cluster's cloud pools (docs/bursting.md)
    lease_ttl_s: float = DEFAULT_TTL_S  # leader lease (store.lease): presumed dead after this
    lease_renew_s: float = RENEW_EVERY_S
    lease_poll_s: float = POLL_EVERY_S  # how often a standby looks for an expired lease
    admin_token_file: Path | None = None  # None: admin.token beside a SQLite store, else ./
    allow_inject: bool = False  # POST /jobs/N/inject, for admins (drills and tests)
    isolation: str = "auto"  # local backend: auto | users | cgroup | none (docs/security.md)
    job_uids: str | None = None  # local backend: tenants' uids, "61000-61999"
    admission: Path | None = None  # kind: admission; the code jobs may run (docs/security.md)
    tls_cert: Path | None = None  # PEM; with tls_key the API serves HTTPS only (control.tls)
    tls_key: Path | None = None
    # wraps each job's checkpoint data key: keyfile:PATH; None: keyfile:<state_dir>/kek.key, made
    # (mode 0600) on first start, so every live job's checkpoints are encrypted (docs/security.md)
    kms: str | None = None
    runbook: Path | None = None  # kind: runbook; None: the shipped one (docs/runbooks.md)
    metrics_refresh_s: float = 10.0  # /metrics renders in the background at most this often
    notify: Path | None = None  # kind: notify; job webhooks' allowed hosts, SMTP (docs/notifications.md)


class StoreInUse(RuntimeError):
    """A second ``grace up`` on a SQLite store that another one serves: refused before it
    writes anything (SQLite has one control plane; PostgreSQL can have standbys)."""


class ReconcileLoop(threading.Thread):
    """``recover()`` once, then a cycle every ``interval_s``; runs only while leading.

    ``Fenced`` ends it at once (another control plane took the lease, so every further
    write would be refused too) and calls ``on_fenced`` so the lease keeper stands by.
    """

    def __init__(self, reconciler: Reconciler, interval_s: float,
                 on_fenced: Callable[[], None] | None = None,
                 on_first_cycle: Callable[[], object] | None = None) -> None:
        super().__init__(name="reconciler", daemon=True)
        self.reconciler = reconciler
        self.interval_s = interval_s
        self.on_fenced = on_fenced
        #: once, after the first cycle that succeeded (``grace up``: ``heap.freeze_long_lived``)
        self.on_first_cycle = on_first_cycle
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        except Fenced as e:
            log.critical("%s; the reconcile loop stops now", e)
            self.stopping.set()
            if self.on_fenced is not None:
                self.on_fenced()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:  # until it succeeds: no cycle may run before the live attempts are adopted
                requeued = self.reconciler.recover()
                break
            except Fenced:
                raise
            except Exception:  # e.g. Slurm's controller unreachable right now
                log.exception("recovery failed; retrying")
                self.stopping.wait(max(self.interval_s, 5.0))
        else:
            return
        if requeued:
            log.warning("requeued jobs whose processes died with the control plane: %s", requeued)
        first = self.on_first_cycle
        while not self.stopping.is_set():
            try:
                self.reconciler.cycle()
                if first is not None:  # the first cycle built the long-lived state
                    first()
                    first = None
            except Fenced:
                raise
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
    local = LocalBackend(spec, cfg.state_dir, isolation=Isolation(cfg.isolation),
                         job_uids=parse_uid_range(cfg.job_uids) if cfg.job_uids else None)
    return local, spec


def parse_uid_range(text: str) -> range:
    """``61000-61999`` (both ends included) as a range; ValueError naming the form."""
    lo, sep, hi = text.partition("-")
    try:
        first, last = int(lo), int(hi)
    except ValueError:
        first = last = -1
    if not sep or first < 1 or last < first:
        raise ValueError(f"--job-uids {text!r}: give FIRST-LAST uids above 0, e.g. 61000-61999")
    return range(first, last + 1)


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
    lock: SqliteLock | None = None  # SQLite: held for the life of the process
    admission: Admission | None = None  # vetted code: the API's submit check, the launch check
    runbook: RunbookSpec | None = None  # --runbook, checked before anything starts
    notify: NotifyConfig | None = None  # --notify: what jobs may ask to be told, and how


def assemble(cfg: ServerConfig) -> ControlPlane:
    """Build the backend, store and reconciler from ``cfg``; raises SpecError on a bad file.

    Bursting rents through ``LocalDelayedProvider``, the one provider that runs
    here: the offers' nodes are declared in the cluster file and join after each
    offer's provisioning delay. A real cloud plugs in behind the ``CloudProvider``
    protocol (grace.control.providers) in its place.
    """
    check_tls_files(cfg.tls_cert, cfg.tls_key)  # a bad file: SpecError, before anything starts
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    backend, spec = make_backend(cfg)
    bursting = load_bursting_for(cfg.bursting, spec) if cfg.bursting else None
    table = HealthTable.from_yaml(cfg.health) if cfg.health else None  # a bad file: SpecError
    # relative script paths are the jobs' own: both backends run them from this cwd
    admission = load_admission_for(cfg.admission, Path.cwd()) if cfg.admission else None
    kms = make_kms(cfg)  # a bad key file: KMSError, before anything starts
    runbook = load_runbook(cfg.runbook) if cfg.runbook else None  # a bad file: SpecError
    notify = load_notify_config(cfg.notify) if cfg.notify else None  # a bad file: SpecError
    load_or_create_key(cfg.state_dir)  # the webhook signing key; a readable one: refused
    topo = Topology.from_spec(spec)
    url = store_url(cfg)
    lock = claim_sqlite(url)  # before the store is opened: a refused second one writes nothing
    store = Store.open(url)
    if notify is not None:  # the job moves' transactions write the tenants' webhooks too
        install_routes(store.session_info, notify.tenants)
    # defer_writes: nothing is written until this process leads (recover registers the nodes)
    diagnostics = (CommandDiagnostics(cfg.diagnostic_command) if cfg.diagnostic_command
                   else TimedDiagnostics())
    reconciler = Reconciler(store, backend, topo, get_policy(cfg.policy), cfg.state_dir,
                            heartbeat_timeout_s=cfg.heartbeat_timeout_s, defer_writes=True,
                            admission=admission, kms=kms,
                            api_url=api_url(cfg),
                            health_table=table, diagnostics=diagnostics,
                            stragglers=StragglerWatch(
                                StragglerDetector(threshold=cfg.straggler_threshold),
                                window_s=cfg.straggler_window_s))
    if bursting is not None:
        provider = LocalDelayedProvider(LiveBursting.pool_nodes(spec, bursting), reconciler.clock)
        reconciler.bursting = LiveBursting(bursting, spec, topo, provider)
    return ControlPlane(store, backend, topo, reconciler, lock, admission, runbook, notify)


def make_kms(cfg: ServerConfig) -> KeyEncryptionService:
    """``--kms``, else ``keyfile:<state_dir>/kek.key``, made on first start (secure by default).

    A path given explicitly must exist: made anew by a typo, it would hold a
    key under which no existing job's data key unwraps. Control planes sharing
    a PostgreSQL store must be given the same key file.
    """
    if cfg.kms:
        return kms_from_spec(cfg.kms)
    return KeyFileKMS(cfg.state_dir / "kek.key", create=True)


def api_url(cfg: ServerConfig) -> str:
    """Where jobs reach this control plane (their GRACE_URL)."""
    scheme = "https" if cfg.tls_cert else "http"
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::") else cfg.host
    return f"{scheme}://{host}:{cfg.port}"


def admin_token_path(cfg: ServerConfig) -> Path:
    """``--admin-token-file``, else ``admin.token`` beside a SQLite store, else in ./."""
    if cfg.admin_token_file is not None:
        return cfg.admin_token_file
    db = sqlite_file(store_url(cfg))
    return (db.parent if db is not None else Path.cwd()) / "admin.token"


class TokenFileInTheWay(RuntimeError):
    """The first admin token has nowhere to go: a file (or link) already stands there."""


def first_admin_token(store: Store, path: Path, say: Callable[[str], None]) -> bool:
    """Secure by default: on a store with no live admin token, make one and write it to
    ``path`` (mode 0600, never over an existing file). True if it made one.

    Raises ``TokenFileInTheWay`` when ``path`` exists (another store's token, say): the
    token is not made, so the next start tries again."""
    from grace.control.store import tokens
    from grace.control.store.models import Role

    now = time.time()
    with store.transaction() as s:
        if tokens.has_admin(s, now):
            return False
        if path.is_symlink() or path.exists():
            raise TokenFileInTheWay(
                f"this store has no admin token yet, and {path} already exists (another "
                "store's?): move it away or give --admin-token-file PATH; nothing was written")
        path.parent.mkdir(parents=True, exist_ok=True)
        _, text = tokens.create(s, name="admin (grace up)", role=Role.ADMIN, tenant=None,
                                created_by="grace up", now=now)
        # O_EXCL: never overwrite (or follow a link planted at) the path; the transaction
        # rolls the token back if the file cannot be written
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
    say(f"admin token written to {path} (mode 0600); the CLI finds it with "
        f"export GRACE_TOKEN_FILE={path}")
    return True


def store_url(cfg: ServerConfig) -> str:
    """``--db``, or the SQLite file in the state directory."""
    return cfg.db_url or f"sqlite:///{cfg.state_dir / 'grace.sqlite'}"


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL; None for PostgreSQL or an in-memory database."""
    parsed = make_url(normalize_url(url))
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(str(parsed.database)).resolve()


class SqliteLock:
    """An exclusive ``flock`` on ``<db>.lock`` for as long as this process lives.

    Why a file lock and not only the lease: the kernel drops it when its holder dies,
    however it dies, so "locked" means a live ``grace up`` serves the file, and a
    ``grace up`` restarted after a SIGKILL takes over at once (the dead holder's lease
    row is taken with ``force``) instead of being refused until the TTL ran out. The
    file's text (``host:pid since time``) is for the refusal message only.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, holder: str) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{holder} since {local_time(time.time())}\n".encode())
        self._fd = fd
        return True

    def note(self) -> str:
        """What the holder wrote: ``host:pid since time`` ("" if unreadable)."""
        try:
            return self.path.read_text().strip()
        except OSError:
            return ""

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


def claim_sqlite(url: str) -> SqliteLock | None:
    """On SQLite, take the file's lock or raise ``StoreInUse`` naming who holds it."""
    path = sqlite_file(url)
    if path is None:
        return None
    lock = SqliteLock(path.with_name(path.name + ".lock"))
    if lock.acquire(this_holder()):
        return lock
    raise StoreInUse(f"the store {path} is in use by {_user_of(url, lock)}: SQLite allows one "
                     "control plane per store (use PostgreSQL, --db postgresql://..., to run "
                     "a standby); nothing was written")


def _user_of(url: str, lock: SqliteLock) -> str:
    """``host:pid since time`` of the running control plane: its lock note, else the lease."""
    note = lock.note()
    if note:
        return note
    store = Store(make_engine(url))  # not Store.open: no migration, nothing written
    try:
        info = LeaderLease(store).current()
    except Exception:  # an older schema, a locked file: the lock alone says it is in use
        info = None
    finally:
        store.close()
    return f"{info.holder} since {info.since}" if info else "another process"


class LeaseKeeper(threading.Thread):
    """This process's part in "one leader per store": lead or stand by, and switch.

    While leading it renews the lease every ``renew_s``; while standing by it polls
    every ``poll_s`` and takes the lease once it expired. Taking it sets the store's
    fence and starts a ``ReconcileLoop`` (``recover()`` first: nodes registered, running
    attempts adopted through their handles). Losing it (a renewal refused, or none
    possible until the lease would expire) stops the loop at once, says so loudly and
    stands by again; the fence stays set until the loop has ended, so nothing that
    loop still writes lands.
    """

    def __init__(self, store: Store, reconciler: Reconciler, lease: LeaderLease,
                 leadership: Leadership, interval_s: float = 1.0,
                 renew_s: float = RENEW_EVERY_S, poll_s: float = POLL_EVERY_S,
                 clock: Callable[[], float] = time.time,
                 say: Callable[[str], None] | None = None,
                 on_first_cycle: Callable[[], object] | None = None) -> None:
        super().__init__(name="leader-lease", daemon=True)
        self.on_first_cycle = on_first_cycle
        self.store = store
        self.reconciler = reconciler
        self.lease = lease
        self.leadership = leadership
        self.interval_s = interval_s
        self.renew_s = renew_s
        self.poll_s = poll_s
        self.clock = clock
        self.say = say or (lambda line: print(line, flush=True))
        self.loop: ReconcileLoop | None = None
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # promotion against shutdown
        self._ending: ReconcileLoop | None = None  # a deposed loop still finishing its cycle
        self._announced: str | None = None

    @property
    def leading(self) -> bool:
        return self.loop is not None

    def start_up(self, *, force: bool = False) -> bool:
        """The first try, before the API serves: lead at once, or say who leads and stand by.

        ``force``: the caller knows the holder is dead (SQLite's file lock is ours)."""
        if self.lease.try_acquire(self.clock(), force=force):
            self._promote()
            return True
        self._stand_by()
        return False

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._renew() if self.leading else self._poll()
            except Exception:  # the store unreachable for a moment: the next turn retries
                log.exception("leader lease: %s failed", "renewal" if self.leading else "poll")
            self._wake.wait(self.renew_s if self.leading else self.poll_s)
            self._wake.clear()

    def _renew(self) -> None:
        loop = self.loop
        now = self.clock()
        try:
            ok = self.lease.renew(now)
        except Exception as e:
            if now < self.lease.expires_at - self.renew_s:
                log.warning("leader lease: renewal failed (%s); retrying", e)
                return
            self._demote(f"it could not be renewed before it expires ({e})")
            return
        if not ok:
            self._demote("another control plane took it over")
        elif loop is not None and not loop.is_alive():  # fenced, yet the lease is ours again?
            self._demote("the reconcile loop stopped")

    def _poll(self) -> None:
        if self._ending is not None:
            if self._ending.is_alive():
                return  # never two loops: lead again only once the deposed one ended
            self._ending = None
            self.store.fence = None
        with self._lock:
            if self.stopping.is_set():
                return
            if self.lease.try_acquire(self.clock()):
                self._promote()
                return
        self._stand_by()

    def _promote(self) -> None:
        holder, epoch = self.lease.fence
        self.store.fence = (holder, epoch)
        self.leadership.set("leader", holder, epoch, self.clock())
        self.loop = ReconcileLoop(self.reconciler, self.interval_s, on_fenced=self._wake.set,
                                  on_first_cycle=self.on_first_cycle)
        self.loop.start()
        self._announced = holder
        self.say(f"leader: {holder} leads the store from {local_time(self.clock())} "
                 f"(epoch {epoch})")

    def _demote(self, why: str) -> None:
        loop, self.loop = self.loop, None
        log.critical("LOST THE LEADER LEASE as %s: %s. The reconcile loop stops now; "
                     "this control plane is a standby", self.lease.holder, why)
        self.leadership.set("standby", "", 0, None)  # the API refuses writes from here on
        if loop is not None:
            loop.stopping.set()
            loop.join(timeout=30)  # its writes are fenced meanwhile
            if loop.is_alive():
                log.error("the deposed reconcile loop is still in a cycle; it is fenced")
                self._ending = loop
        if self._ending is None:
            self.store.fence = None
        self._stand_by()

    def _stand_by(self) -> None:
        info = self.lease.current()
        self.leadership.set("standby", info.holder if info else "", info.epoch if info else 0,
                            info.acquired_at if info else None)
        if info is not None and info.holder != self._announced:
            self.say(f"standby: leader is {info.holder} since {info.since}")
            self._announced = info.holder

    def shutdown(self) -> None:
        """Stop: the keeper, then the loop (after its cycle), then release the lease so a
        standby takes over at its next poll."""
        self.stopping.set()
        self._wake.set()
        if self.is_alive():
            self.join(timeout=40)
        with self._lock:
            loop, self.loop = self.loop, None
        if loop is not None:
            loop.stopping.set()
            loop.join(timeout=10)
        if self.lease.held:
            try:
                self.lease.release(self.clock())
            except Exception:
                log.exception("leader lease: release failed; a standby takes over after the TTL")
        self.leadership.set("standby", "", 0, None)


def serve(cfg: ServerConfig) -> None:
    """Run ``grace up`` until SIGINT/SIGTERM; raises ``StoreInUse`` for a busy SQLite store."""
    plane = assemble(cfg)
    # jobs inherit it, so grace.runtime finds the control plane for heartbeats
    os.environ["GRACE_URL"] = api_url(cfg)
    leadership = Leadership()
    keeper = LeaseKeeper(plane.store, plane.reconciler,
                         LeaderLease(plane.store, ttl_s=cfg.lease_ttl_s), leadership,
                         cfg.interval_s, renew_s=cfg.lease_renew_s, poll_s=cfg.lease_poll_s,
                         on_first_cycle=freeze_long_lived)
    token_file = admin_token_path(cfg)
    first_admin_token(plane.store, token_file, lambda line: print(line, flush=True))
    db = sqlite_file(store_url(cfg))
    if db is not None:
        db.chmod(0o600)  # the store is the control plane's alone; jobs run as other users
    report = getattr(plane.backend, "isolation_report", None)
    app = create_app(plane.store, plane.topo, cfg.state_dir, plane.reconciler, plane.backend,
                     leadership=leadership,
                     auth=Authenticator(plane.store, admin_token_hint=str(token_file)),
                     allow_inject=cfg.allow_inject, admission=plane.admission,
                     access_log=cfg.state_dir / "access.log",
                     observability=Observability(plane.store, plane.topo, cfg.state_dir,
                                                 refresh_s=cfg.metrics_refresh_s,
                                                 runbook=plane.runbook),
                     status=(lambda: {"isolation": report()}) if callable(report) else None,
                     notify=plane.notify)
    obs: Observability = app.state.observability
    plane.reconciler.on_cycle = obs.metrics.cycle_seconds.observe
    obs.start()  # renders /metrics and evaluates the runbook off the request path
    notifier = NotifyLoop(Deliverer.for_server(plane.store, plane.notify, cfg.state_dir,
                                               api_url(cfg)), leadership)
    notifier.start()  # delivers the outbox while this process leads
    previous = _stop_on(signal.default_int_handler)
    freeze_long_lived()  # the topology and the app, before the first request (see heap)
    try:
        keeper.start_up(force=plane.lock is not None)
        keeper.start()
        uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning",
                    ssl_certfile=cfg.tls_cert, ssl_keyfile=cfg.tls_key)
    except KeyboardInterrupt:  # SIGINT/SIGTERM before uvicorn ran, or re-raised after it
        pass
    finally:
        _stop_on(_already_stopping)
        obs.stop()
        notifier.stop()
        try:
            keeper.shutdown()
        finally:
            _restore(previous)
            if plane.lock is not None:
                plane.lock.release()


_Handler = Callable[[int, FrameType | None], Any] | int | None


def _stop_on(handler: _Handler) -> dict[int, _Handler]:
    """SIGTERM like SIGINT: uvicorn shuts down gracefully on either and then re-raises it
    with the handler it found; with the default SIGTERM one that would kill the process
    before ``serve`` could stop the loop and release the lease."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore(previous: dict[int, _Handler]) -> None:
    for sig, handler in previous.items():
        if handler is not None:  # None: not set from Python; nothing to put back
            signal.signal(sig, handler)


def _already_stopping(signum: int, _frame: FrameType | None) -> None:
    log.warning("signal %s: already stopping (releasing the leader lease)", signum)
