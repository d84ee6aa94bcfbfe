"""``GET /metrics``: the cluster, its jobs and this host's GPUs in Prometheus' text format.

Everything is exposed through prometheus-client (no hand-written exposition):
histograms the control plane observes as things happen (reconcile cycles, API
requests, checkpoint saves), and a collector that turns one reading of the store
(``facts``), the running jobs' heartbeats (``telemetry``) and NVML (``gpu``) into
gauge and counter families. Names are listed in :data:`METRIC_NAMES`; the DCGM
exporter's names and units are kept for per-GPU series, joined to the job and
tenant holding each GPU, and ``grace_gpu_allocation`` lets DCGM exporter's own
series from other hosts be joined the same way
(``DCGM_FI_DEV_GPU_UTIL * on(Hostname, gpu) group_left(job, tenant) grace_gpu_allocation``).

Cost: rendering 31,000 series (16,384 GPUs, 1,000 running jobs) takes prometheus-client
a few hundred milliseconds, so a scrape never waits for one: it is answered with the
last rendering (gzipped when the scraper accepts it, as Prometheus does), and when that
is older than ``refresh_s`` (10 s) a thread renders the next. Figures are thus at most
one scrape interval old (Prometheus scrapes every 15 s or more; DCGM exporter itself
samples every 30 s), and a cluster nobody scrapes pays for a render only every 30 s,
for the alerts (``benchmarks/metrics_scrape.py`` measures both).

Label sets are closed or bounded by the cluster: states and reasons are enums,
``job`` is a live job (a job's series end with it), ``node``/``leaf`` come from
the topology, ``tenant`` from the store's tenants.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from grace.core.health import IN_SERVICE, NodeState
from grace.core.topology import Topology
from grace.observe.constraints import cluster_gpus, verdicts
from grace.observe.facts import ClusterFacts, LiveAttempt
from grace.observe.gpu import GpuSample
from grace.observe.telemetry import PHASES, CheckpointSave, JobTelemetry

log = logging.getLogger(__name__)
# no `_created` series beside each histogram: they double the lines and no dashboard reads them
disable_created_metrics()

CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
API_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
SAVE_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
SIZE_BUCKETS = tuple(float(2**k) for k in range(20, 42, 2))  # 1 MiB .. 2 TiB
#: a showback refresh reads every job's history: on a slower clock than the rest
SHOWBACK_EVERY_S = 60.0


class GpuState:
    """The closed set of ``grace_gpus``' ``state`` label."""

    ALLOCATED = "allocated"
    FREE = "free"
    DRAINING = "draining"
    DRAINED = "drained"
    DOWN = "down"
    ALL = (ALLOCATED, FREE, DRAINING, DRAINED, DOWN)


#: Every family /metrics exposes (histograms by their base name).
METRIC_NAMES = (
    "grace_gpus", "grace_jobs", "grace_pending_jobs", "grace_job_phase_seconds_total",
    "grace_job_phase_share", "grace_job_wait_share", "grace_job_steps_per_second",
    "grace_job_step_seconds", "grace_job_loss", "grace_job_goodput_ratio", "grace_job_leaves",
    "grace_job_gpus", "grace_job_heartbeat_age_seconds", "grace_job_constraint",
    "grace_cluster_constraint_gpus", "grace_checkpoint_save_seconds",
    "grace_checkpoint_size_bytes", "grace_restarts_total", "grace_node_state",
    "grace_node_signals_total", "grace_health_breaker_open", "grace_reconcile_cycle_seconds",
    "grace_api_request_duration_seconds", "grace_tenant_gpu_hours_allocated_total",
    "grace_tenant_gpu_hours_useful_total", "grace_tenant_gpus_held", "grace_tenant_quota_gpus",
    "grace_gpu_allocation", "grace_gpu_telemetry_devices", "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_PROF_SM_ACTIVE",
)


def node_gpu_state(state: str) -> str:
    """What a node's state means for its GPUs that no job holds."""
    if state in {s.value for s in IN_SERVICE}:
        return GpuState.FREE
    if state == NodeState.DRAINING:
        return GpuState.DRAINING
    if state == NodeState.DRAINED:
        return GpuState.DRAINED
    return GpuState.DOWN  # diagnosing, or a state Slurm reports that Grace cannot use


@dataclass
class Showback:
    """GPU-hours allocated and useful per tenant, all time (``cost.showback_live``)."""

    allocated: dict[str, float] = field(default_factory=dict)
    useful: dict[str, float] = field(default_factory=dict)


@dataclass
class Reading:
    """What one refresh renders: the store's facts and the heartbeats of its live jobs."""

    facts: ClusterFacts
    jobs: dict[int, JobTelemetry]
    gpus: list[GpuSample]
    showback: Showback


def cluster_families(r: Reading, topo: Topology, hostname: str) -> Iterator[Metric]:
    """The gauge and counter families of one reading (pure: the benchmark and tests call it)."""
    facts = r.facts
    held: dict[str, set[int]] = {}
    tenant_of_gpu: dict[tuple[str, int], LiveAttempt] = {}
    for a in facts.live:
        for node, slots in a.placement:
            held.setdefault(node, set()).update(slots)
            for g in slots:
                tenant_of_gpu[(node, g)] = a
    counts: Counter[tuple[str, str, str, str]] = Counter()
    node_state = GaugeMetricFamily("grace_node_state", "1 for each node's current health state "
                                   "(core.health.NodeState)", labels=["node", "state"])
    states = {n.name: n.state for n in facts.nodes}
    for info in topo.nodes:
        state = states.get(info.name)
        leaf = topo.leaf_names[info.leaf] if info.leaf < len(topo.leaf_names) else str(info.leaf)
        key = (info.pool, info.gpu_model, leaf)
        taken = min(len(held.get(info.name, ())), info.gpus)
        counts[(GpuState.ALLOCATED, *key)] += taken
        counts[(node_gpu_state(state) if state else GpuState.DOWN, *key)] += info.gpus - taken
        if state:
            node_state.add_metric([info.name, state], 1)
    gpus = GaugeMetricFamily("grace_gpus", "GPUs by state, pool, GPU model and leaf switch",
                             labels=["state", "pool", "gpu_model", "leaf"])
    for (state, pool, model, leaf), n in sorted(counts.items()):
        gpus.add_metric([state, pool, model, leaf], n)
    yield gpus
    yield node_state
    jobs = GaugeMetricFamily("grace_jobs", "jobs by state and tenant", labels=["state", "tenant"])
    for (state, tenant), n in sorted(facts.jobs.items()):
        jobs.add_metric([state, tenant], n)
    yield jobs
    pending = GaugeMetricFamily("grace_pending_jobs", "pending jobs by tenant and typed reason "
                                "(core.decisions.PendingReason; other: a launch failure)",
                                labels=["tenant", "reason"])
    for (tenant, reason), n in sorted(facts.pending.items()):
        pending.add_metric([tenant, reason], n)
    yield pending
    yield from _job_families(r, topo)
    restarts = CounterMetricFamily("grace_restarts_total", "attempts followed by another, by why "
                                   "the earlier ended", labels=["cause"])
    for cause, n in sorted(facts.restarts.items()):
        restarts.add_metric([cause], n)
    yield restarts
    signals = CounterMetricFamily("grace_node_signals_total", "health signals received",
                                  labels=["node", "kind"])
    for (node, kind), n in sorted(facts.signals.items()):
        signals.add_metric([node, kind], n)
    yield signals
    yield GaugeMetricFamily("grace_health_breaker_open", "1 while the breaker stops automatic "
                            "draining (a person must reset it)", value=int(facts.breaker_open))
    yield from _tenant_families(r)
    yield from _gpu_families(r.gpus, tenant_of_gpu, facts, hostname)


def _job_families(r: Reading, topo: Topology) -> Iterator[Metric]:
    labels = ["job", "tenant"]
    fam = {name: GaugeMetricFamily(name, doc, labels=labels) for name, doc in (
        ("grace_job_gpus", "GPUs the job's live attempt holds"),
        ("grace_job_leaves", "leaf switches the live placement spans"),
        ("grace_job_step_seconds", "seconds per step, slowest rank, latest heartbeat"),
        ("grace_job_steps_per_second", "steps per second, latest heartbeat"),
        ("grace_job_loss", "loss at the latest heartbeat (mean over ranks)"),
        ("grace_job_goodput_ratio", "productive step seconds over the live attempt's wall time"),
        ("grace_job_heartbeat_age_seconds", "seconds since the newest heartbeat"))}
    phase_total = CounterMetricFamily("grace_job_phase_seconds_total", "seconds spent per step "
                                      "phase, every reported step (largest rank)",
                                      labels=["job", "tenant", "phase"])
    share = GaugeMetricFamily("grace_job_phase_share", "share of the latest step time per phase "
                              "(mean over ranks)", labels=["job", "tenant", "phase"])
    wait = GaugeMetricFamily("grace_job_wait_share", "share of step time waiting on input (io) or "
                             "on peers (sync: all-reduce and agreement)",
                             labels=["job", "tenant", "kind"])
    now = r.facts.now
    for a in r.facts.live:
        key = [str(a.job_id), a.tenant]
        fam["grace_job_gpus"].add_metric(key, a.gpus)
        leaves = {topo.nodes[topo.by_name[n]].leaf for n, _ in a.placement if n in topo.by_name}
        fam["grace_job_leaves"].add_metric(key, len(leaves))
        t = r.jobs.get(a.job_id)
        if t is None or t.attempt != a.number:
            continue
        for phase in PHASES:
            if phase in t.phase_totals:
                phase_total.add_metric([*key, phase], t.phase_totals[phase])
            if phase in t.phase_share:
                share.add_metric([*key, phase], t.phase_share[phase])
        wait.add_metric([*key, "io"], t.io_share)
        wait.add_metric([*key, "sync"], t.sync_share)
        for name, value in (("grace_job_step_seconds", t.step_s),
                            ("grace_job_steps_per_second", t.steps_per_s),
                            ("grace_job_loss", t.loss)):
            if value is not None:
                fam[name].add_metric(key, value)
        wall = now - a.started_at
        if wall > 0:
            fam["grace_job_goodput_ratio"].add_metric(key, min(1.0, t.productive_s / wall))
        fam["grace_job_heartbeat_age_seconds"].add_metric(key, max(0.0, now - t.last_at))
    yield phase_total
    yield share
    yield wait
    yield from fam.values()
    yield from _constraint_families(r, topo)


def _constraint_families(r: Reading, topo: Topology) -> Iterator[Metric]:
    """The verdict of each live job (1 on its current constraint) and running GPUs per
    constraint (``core.constraint``; label values are the closed enum)."""
    judged = verdicts(r.facts.live, r.jobs, topo)
    job = GaugeMetricFamily("grace_job_constraint", "1 for the job's current constraint "
                            "(core.constraint.Constraint) from its newest heartbeats",
                            labels=["job", "tenant", "constraint"])
    for jid, (a, v) in sorted(judged.items()):
        job.add_metric([str(jid), a.tenant, str(v.constraint)], 1)
    yield job
    cluster = GaugeMetricFamily("grace_cluster_constraint_gpus", "GPUs of running jobs by the "
                                "constraint that limits them", labels=["constraint"])
    for kind, gpus in cluster_gpus(judged).items():
        cluster.add_metric([str(kind)], gpus)
    yield cluster


def _tenant_families(r: Reading) -> Iterator[Metric]:
    held = GaugeMetricFamily("grace_tenant_gpus_held", "GPUs the tenant's live attempts hold",
                             labels=["tenant"])
    by_tenant: Counter[str] = Counter()
    for a in r.facts.live:
        by_tenant[a.tenant] += a.gpus  # type: ignore[assignment]  # GPUs may be fractional
    for tenant in sorted(set(r.facts.quotas) | set(by_tenant)):
        held.add_metric([tenant], by_tenant.get(tenant, 0.0))
    yield held
    quota = GaugeMetricFamily("grace_tenant_quota_gpus", "guaranteed GPUs (absent: unlimited)",
                              labels=["tenant"])
    for tenant, gpus in sorted(r.facts.quotas.items()):
        if gpus is not None:
            quota.add_metric([tenant], gpus)
    yield quota
    for name, doc, values in (
            ("grace_tenant_gpu_hours_allocated_total", "GPU-hours allocated, all time",
             r.showback.allocated),
            ("grace_tenant_gpu_hours_useful_total", "GPU-hours of kept, productive work, all time "
             "(allocated less failures, data and sync waits, checkpoints: docs/cost.md)",
             r.showback.useful)):
        fam = CounterMetricFamily(name, doc, labels=["tenant"])
        for tenant, hours in sorted(values.items()):
            fam.add_metric([tenant], hours)
        yield fam


_DCGM = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util_pct"),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb_used_mib"),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "fb_free_mib"),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power_w"),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temp_c"),
    ("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", "sm_active"),
)


def _gpu_families(samples: list[GpuSample], holders: dict[tuple[str, int], LiveAttempt],
                  facts: ClusterFacts, hostname: str) -> Iterator[Metric]:
    alloc = GaugeMetricFamily("grace_gpu_allocation", "1 per allocated GPU: join DCGM exporter's "
                              "series on (Hostname, gpu) to the job and tenant",
                              labels=["Hostname", "gpu", "job", "tenant"])
    for (node, gpu), a in sorted(holders.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        alloc.add_metric([node, str(gpu), str(a.job_id), a.tenant], 1)
    yield alloc
    yield GaugeMetricFamily("grace_gpu_telemetry_devices", "GPUs NVML sees on this host (0: none, "
                            "or no NVML)", value=len(samples))
    labels = ["gpu", "UUID", "Hostname", "modelName", "job", "tenant"]
    families = [(GaugeMetricFamily(name, doc, labels=labels), attr) for name, doc, attr in _DCGM]
    for s in samples:
        holder = holders.get((hostname, s.index))
        key = [str(s.index), s.uuid, hostname, s.name, str(holder.job_id) if holder else "",
               holder.tenant if holder else ""]
        for fam, attr in families:
            value = getattr(s, attr)
            if value is not None:
                fam.add_metric(key, value)
    for fam, _ in families:
        yield fam


class _Families(Collector):
    """Hands prometheus-client the families of the last refresh."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> Iterable[Metric]:
        return list(self.families)


class GraceMetrics:
    """The registry, its histograms, and the cached rendering /metrics serves.

    ``read`` returns a :class:`Reading` (the hub reads the store, heartbeats and
    NVML); ``refresh()`` renders it (text, and gzip for scrapers that accept it);
    ``scrape()`` returns the newest rendering. With ``background`` set (``grace up``)
    a scrape that finds the rendering older than ``refresh_s`` is answered with it
    at once and a new one is rendered in a thread for the next scrape, so no scrape
    waits on a render; without it (tests, tools) the scrape renders first.
    """

    def __init__(self, topo: Topology, read: Callable[[], Reading], hostname: str,
                 refresh_s: float = 10.0) -> None:
        self.topo, self.read, self.hostname, self.refresh_s = topo, read, hostname, refresh_s
        self.registry = CollectorRegistry(auto_describe=False)
        self.cycle_seconds = Histogram("grace_reconcile_cycle_seconds", "one reconcile cycle",
                                       buckets=CYCLE_BUCKETS, registry=self.registry)
        self.api_seconds = Histogram("grace_api_request_duration_seconds", "API requests, by route "
                                     "template", ["method", "route", "code"], buckets=API_BUCKETS,
                                     registry=self.registry)
        self.save_seconds = Histogram("grace_checkpoint_save_seconds", "committed checkpoint saves, "
                                      "start to commit", buckets=SAVE_BUCKETS, registry=self.registry)
        self.save_bytes = Histogram("grace_checkpoint_size_bytes", "committed checkpoints' size",
                                    buckets=SIZE_BUCKETS, registry=self.registry)
        self._families = _Families()
        self.registry.register(self._families)
        self._lock = threading.Lock()
        self._rendering = threading.Lock()  # one render at a time
        self._rendered = Rendered(b"", b"", -1e18)
        self.last_reading: Reading | None = None
        self.render_s = 0.0  # how long the last refresh took (the benchmark reads it)
        self.background = False

    def observe_save(self, save: CheckpointSave) -> None:
        self.save_seconds.observe(save.seconds)
        self.save_bytes.observe(save.size_bytes)

    def refresh(self) -> Rendered:
        """Read, build the families and render them; the new rendering."""
        with self._rendering:
            t0 = time.perf_counter()
            reading = self.read()
            families = list(cluster_families(reading, self.topo, self.hostname))
            with self._lock:
                self._families.families = families
                text = generate_latest(self.registry)
                self.last_reading = reading
            # level 1: a tenth of the bytes for a few ms; Prometheus always accepts gzip
            rendered = Rendered(text, gzip.compress(text, compresslevel=1), time.monotonic())
            self._rendered = rendered
            self.render_s = time.perf_counter() - t0
            return rendered

    @property
    def age_s(self) -> float:
        return time.monotonic() - self._rendered.at

    def scrape(self) -> Rendered:
        """The newest rendering (see the class docstring for when it is rendered)."""
        current = self._rendered
        if time.monotonic() - current.at <= self.refresh_s:
            return current
        if not self.background or not current.text:
            return self.refresh()
        if not self._rendering.locked():  # a render already under way serves the next scrape
            threading.Thread(target=self._refresh_quietly, name="metrics-render", daemon=True).start()
        return current

    def _refresh_quietly(self) -> None:
        try:
            self.refresh()
        except Exception:  # a store blip: the next scrape tries again
            log.exception("metrics refresh failed")

    def families(self, max_age_s: float | None = None) -> list[Metric]:
        """The last rendering's families plus the live histograms, as objects (alerts read
        these); rendered first when older than ``max_age_s`` (default ``refresh_s``)."""
        if self.age_s > (self.refresh_s if max_age_s is None else max_age_s):
            self.refresh()
        with self._lock:
            return list(self.registry.collect())


@dataclass(frozen=True, slots=True)
class Rendered:
    """One rendering of /metrics: the text, its gzip, and when (monotonic seconds)."""

    text: bytes
    gzipped: bytes
    at: float


class Refresher(threading.Thread):
    """Keeps the alerts current when nobody scrapes: every ``every_s`` it renders (if the
    last rendering is older than that) and hands the families to ``evaluate``."""

    def __init__(self, metrics: GraceMetrics, evaluate: Callable[[], Any] | None = None,
                 every_s: float = 30.0) -> None:
        super().__init__(name="metrics", daemon=True)
        self.metrics = metrics
        self.evaluate = evaluate
        self.every_s = every_s
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                if self.metrics.age_s > self.every_s:
                    self.metrics.refresh()
                if self.evaluate is not None:
                    self.evaluate()
            except Exception:  # a store blip must not end the metrics; the next round retries
                log.exception("metrics refresh failed")
            self.stopping.wait(self.every_s)
