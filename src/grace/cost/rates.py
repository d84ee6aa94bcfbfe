"""The $/GPU-hour a pool can justify, per node: what showback prices GPU-hours at.

Owned pools (on-prem, colo) use the steady-state rate of ``tco.owned_usd_per_gpu_hour``
for their size; cloud pools the price book's on-demand price. The topology keeps
pool names, not kinds, so the kind is read from the name: a name starting with
``colo`` is colo, one containing ``cloud`` or ``spot`` is cloud, anything else is
on-prem. A GPU model the price book does not price (an L40S, a V100 in a trace)
falls back to the catalog's reference rental price (``GpuModel.usd_per_hour``).
"""

from __future__ import annotations

from collections.abc import Callable

from grace.core.topology import Topology
from grace.cost.pricebook import PriceBook
from grace.cost.tco import owned_usd_per_gpu_hour

DEFAULT_CLOUD = "hyperscaler"


def pool_site(pool: str) -> str:
    """``on-prem``, ``colo`` or ``cloud`` from a pool's name."""
    name = pool.lower()
    if name.startswith("colo"):
        return "colo"
    if "cloud" in name or "spot" in name:
        return "cloud"
    return "on-prem"


def node_rates(topo: Topology, book: PriceBook) -> dict[str, float]:
    """$/GPU-hour of every node, by node name."""
    pool_gpus: dict[tuple[str, str], int] = {}
    for n in topo.nodes:
        key = (n.pool, n.gpu_model)
        pool_gpus[key] = pool_gpus.get(key, 0) + n.gpus
    cache: dict[tuple[str, str], float] = {}
    for (pool, model), gpus in pool_gpus.items():
        site = pool_site(pool)
        prices = book.gpus.get(model)
        if prices is None:
            cache[(pool, model)] = topo.catalog[model].usd_per_hour
        elif site == "cloud":
            offer = prices.offers.get(DEFAULT_CLOUD) or next(iter(prices.offers.values()), None)
            cache[(pool, model)] = (offer.on_demand_usd_per_gpu_hour.value if offer is not None
                                    else topo.catalog[model].usd_per_hour)
        else:
            cache[(pool, model)] = owned_usd_per_gpu_hour(book, model, site, gpus)
    return {n.name: cache[(n.pool, n.gpu_model)] for n in topo.nodes}


def rate_lookup(topo: Topology, book: PriceBook) -> Callable[[str], float]:
    """A function from node name to $/GPU-hour; an unknown name gets the cluster's mean rate."""
    rates = node_rates(topo, book)
    total_gpus = sum(n.gpus for n in topo.nodes)
    mean = sum(rates[n.name] * n.gpus for n in topo.nodes) / total_gpus if total_gpus else 0.0
    return lambda name: rates.get(name, mean)


def cluster_rate(topo: Topology, book: PriceBook) -> float:
    """GPU-weighted mean $/GPU-hour of the cluster (the twin's single showback rate)."""
    return rate_lookup(topo, book)("")
