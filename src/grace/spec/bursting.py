"""BurstingSpec: where each workload class may run, and the cloud offers it may burst to.

Bursting is a routing table plus a trigger. The routing table says, per
workload class, which pool kinds (on-prem, colo, cloud) and which cloud offer
kinds (on-demand, spot, 1- or 3-year reservations) a job may use; the defaults
are the ones users expect: experiments, sweeps and fine-tunes may burst to spot
or on-demand, full runs stay on owned capacity or reserved cloud and never go
on spot, and any job whose data is sensitive stays on-prem. The trigger says
when to rent: the forecast queue wait of burstable work passes a threshold.

Each offer provisions the nodes of one cloud pool of the cluster spec: the
nodes are declared there (so the topology is fixed) and stay unprovisioned,
unusable and unbilled, until the burst policy asks for them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from grace.spec.cluster import ClusterSpec, PoolKind
from grace.spec.job import WorkloadClass
from grace.spec.units import parse_duration


def _duration_or_zero(value: object) -> float:
    """Like ``parse_duration`` but 0 is allowed ("no delay", "burst at once")."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return 0.0
    return parse_duration(value)


Duration = Annotated[float, BeforeValidator(_duration_or_zero)]


class OfferKind(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVED_1Y = "reserved-1y"
    RESERVED_3Y = "reserved-3y"


#: Reservations are paid whether used or not: once provisioned they are never released.
COMMITTED = frozenset({OfferKind.RESERVED_1Y, OfferKind.RESERVED_3Y})


class OfferSpec(BaseModel):
    """One way to rent GPUs, priced per GPU-hour, billed per whole node while provisioned."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf breaks arithmetic later

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    pool: str | None = Field(default=None, description="the cloud pool it provisions; default: name")
    gpu: str
    kind: OfferKind
    usd_per_gpu_hour: float = Field(gt=0)
    gpus_per_node: int = Field(default=8, ge=1, le=72)
    provisioning_delay_s: Duration = Field(default=300.0, ge=0)
    preemptions_per_hour: float = Field(default=0.0, ge=0, description="per node-hour")
    egress_usd_per_gb: float = Field(default=0.0, ge=0)
    max_nodes: int = Field(default=16, ge=0)

    @model_validator(mode="after")
    def _preemption_only_on_spot(self) -> OfferSpec:
        if self.preemptions_per_hour and self.kind is not OfferKind.SPOT:
            raise ValueError(
                f"preemptions_per_hour is {self.preemptions_per_hour:g} but kind is "
                f"{self.kind}; only spot capacity is preempted: set it to 0 or kind: spot")
        return self

    @property
    def pool_name(self) -> str:
        return self.pool or self.name


class RouteSpec(BaseModel):
    """Where one workload class may run."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf breaks arithmetic later

    pools: list[PoolKind] = Field(min_length=1)
    offers: list[OfferKind] = Field(default_factory=list)


_BURSTABLE = [OfferKind.SPOT, OfferKind.ON_DEMAND, OfferKind.RESERVED_1Y, OfferKind.RESERVED_3Y]
_ALL_POOLS = [PoolKind.ON_PREM, PoolKind.COLO, PoolKind.CLOUD]


def _default_routes() -> dict[WorkloadClass, RouteSpec]:
    return {
        WorkloadClass.EXPERIMENT: RouteSpec(pools=_ALL_POOLS, offers=_BURSTABLE),
        WorkloadClass.SWEEP: RouteSpec(pools=_ALL_POOLS, offers=_BURSTABLE),
        WorkloadClass.FINE_TUNE: RouteSpec(pools=_ALL_POOLS, offers=_BURSTABLE),
        WorkloadClass.FULL_RUN: RouteSpec(
            pools=_ALL_POOLS, offers=[OfferKind.RESERVED_1Y, OfferKind.RESERVED_3Y]),
    }


class BurstingSpec(BaseModel):
    """The whole bursting configuration, validated as one unit."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf breaks arithmetic later

    enabled: bool = Field(
        default=True, description="false: cloud pools stay unprovisioned (the owned-only baseline)")
    routes: dict[WorkloadClass, RouteSpec] = Field(default_factory=_default_routes)
    sensitive_data_pools: list[PoolKind] = Field(
        default_factory=lambda: [PoolKind.ON_PREM],
        description="where a job with sensitive_data: true may run, whatever its class")
    max_spot_runtime_s: Duration = Field(
        default=86_400.0, gt=0,
        description="no spot capacity for a job whose runtime limit (or estimate) exceeds it")
    queue_wait_threshold_s: Duration = Field(
        default=3600.0, ge=0, description="burst when forecast queue wait exceeds it (0: always)")
    wait_budget_per_runtime: float = Field(
        default=0.0, ge=0,
        description="a job bursts only if its forecast wait also exceeds this share of its "
                    "runtime (0: the threshold alone)")
    idle_release_s: Duration = Field(default=600.0, ge=0)
    check_interval_s: Duration = Field(
        default=300.0, gt=0, description="how often the burst policy is evaluated")
    max_jobs_examined: int = Field(
        default=128, ge=1, description="waiting jobs the policy examines per evaluation")
    restart_s: Duration = Field(
        default=900.0, ge=0, description="cost of one spot restart: reprovision, image, reload")
    checkpoint_interval_s: Duration = Field(
        default=3600.0, gt=0, description="a preemption loses half of it on average")
    offers: list[OfferSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> BurstingSpec:
        problems: list[str] = []
        missing = [c.value for c in WorkloadClass if c not in self.routes]
        if missing:
            problems.append(f"routes: no route for {missing}; add one per workload class")
        full = self.routes.get(WorkloadClass.FULL_RUN)
        if full is not None and OfferKind.SPOT in full.offers:
            problems.append("routes.full-run.offers: full runs never go on spot; remove spot")
        names = [o.name for o in self.offers]
        pools = [o.pool_name for o in self.offers]
        if len(set(names)) != len(names):
            problems.append(f"offers: offer names must be unique, got {names}")
        if len(set(pools)) != len(pools):
            problems.append(f"offers: each offer needs its own pool, got {pools}")
        on_demand: dict[str, float] = {}
        for o in self.offers:
            if o.kind is OfferKind.ON_DEMAND:
                on_demand[o.gpu] = min(on_demand.get(o.gpu, o.usd_per_gpu_hour), o.usd_per_gpu_hour)
        for i, o in enumerate(self.offers):
            ref = on_demand.get(o.gpu)
            if o.kind is not OfferKind.ON_DEMAND and ref is not None and o.usd_per_gpu_hour > ref:
                problems.append(
                    f"offers[{i}].usd_per_gpu_hour: {o.kind} {o.gpu} at "
                    f"{o.usd_per_gpu_hour:g} $/GPU-h is above on-demand ({ref:g}); a discount "
                    "priced above list is a typo: lower it")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def check_cluster(self, cluster: ClusterSpec) -> list[str]:
        """Problems binding the offers to a cluster's pools, as ``path: fix`` lines."""
        problems: list[str] = []
        kinds = {p.name: p.kind for p in cluster.pools}
        for i, o in enumerate(self.offers):
            where = f"offers[{i}]"
            pool = o.pool_name
            if pool not in kinds:
                problems.append(f"{where}.pool: cluster {cluster.name!r} has no pool {pool!r}; "
                                f"declare it (kind: cloud) or use one of {sorted(kinds)}")
                continue
            if kinds[pool] is not PoolKind.CLOUD:
                problems.append(f"{where}.pool: pool {pool!r} is {kinds[pool]}, not cloud; "
                                "only cloud pools are provisioned on demand")
            groups = [g for g in cluster.node_groups if cluster.pool_of(g) == pool]
            if not groups:
                problems.append(f"{where}.pool: pool {pool!r} has no node groups; declare its "
                                "nodes (they stay unprovisioned until the policy asks)")
            for g in groups:
                if g.gpu != o.gpu:
                    problems.append(f"{where}.gpu: {o.gpu!r} but node group {g.name!r} of pool "
                                    f"{pool!r} has {g.gpu!r}; make them agree")
                if g.gpus_per_node != o.gpus_per_node:
                    problems.append(f"{where}.gpus_per_node: {o.gpus_per_node} but node group "
                                    f"{g.name!r} has {g.gpus_per_node}; make them agree")
        return problems
