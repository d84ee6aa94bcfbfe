"""Tenant quotas: a guaranteed share, a borrowable share above it, and a weight.

Borrowing is only for preemptible jobs, because borrowed GPUs must be
reclaimable: when a tenant below its guarantee has a job that cannot start,
borrowing jobs of other tenants are preempted to make room. So a tenant's
usage never exceeds its guarantee except by work that can be taken back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TenantQuota:
    """Limits for one tenant, in GPUs (slices count by their compute share)."""

    guaranteed_gpus: float = math.inf
    borrow_limit_gpus: float = math.inf  # extra GPUs it may borrow above the guarantee
    weight: float = 1.0
    preemptions_per_hour: int = 20  # how many of its jobs may be preempted per hour

    @property
    def max_gpus(self) -> float:
        return self.guaranteed_gpus + self.borrow_limit_gpus


UNLIMITED = TenantQuota()


def fair_share(quota: TenantQuota, usage_gpus: float) -> float:
    """A tenant's fair-share key: the GPUs it holds over its weight. Under a fair-share
    policy ``decide`` visits the tenant with the lowest key first (and reads it again
    after each start); ``grace shares`` and ``grace priority`` show this same number."""
    return usage_gpus / quota.weight


class QuotaCheck:
    """Outcome of asking whether a job of ``gpus`` may run for its tenant."""

    ALLOWED = "allowed"
    BORROWING = "borrowing"
    OVER = "over"


def check_quota(quota: TenantQuota, usage: float, gpus: float, preemptible: bool) -> str:
    if usage + gpus <= quota.guaranteed_gpus + 1e-9:
        return QuotaCheck.ALLOWED
    if preemptible and usage + gpus <= quota.max_gpus + 1e-9:
        return QuotaCheck.BORROWING
    return QuotaCheck.OVER
