"""Cloud providers: the live seam through which Grace rents and returns nodes.

``CloudProvider`` is deliberately thin, three calls a real cloud API can carry
out: ask for ``count`` nodes of an offer (answered with a request id, since
instances take minutes), report which requested nodes are ready and which spot
nodes the cloud took back, and give nodes back. Everything clever (when, what,
for whom) stays in ``grace.core.bursting``.

Real cloud APIs (EC2 fleets, GCE managed instance groups, a neocloud's REST
API) cannot be reached from here, so this module ships no client for them;
one would implement this protocol and register its instances as the named
nodes of the offer's cloud pool. ``LocalDelayedProvider`` is the one that runs
here: the offer's nodes already exist in the local cluster spec, unprovisioned
until the provider says they are ready, ``provisioning_delay_s`` after the
request on the injected clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from grace.spec.bursting import OfferSpec


@dataclass(frozen=True)
class ProviderReport:
    """What changed since the last poll: nodes (by cluster node name) ready, or reclaimed."""

    ready: tuple[str, ...] = ()
    preempted: tuple[str, ...] = ()


class CloudProvider(Protocol):
    """Rents nodes of an offer; nodes are named as in the cluster spec's cloud pool."""

    name: str

    def request_nodes(self, offer: OfferSpec, count: int) -> str:
        """Ask for ``count`` more nodes; returns a request id. Nodes arrive via ``poll``."""
        ...

    def poll(self) -> ProviderReport:
        """Nodes that became ready, and spot nodes taken back, since the last poll."""
        ...

    def release(self, nodes: Sequence[str]) -> None:
        """Give nodes back; billing stops. Releasing a node not held is a no-op."""
        ...


@dataclass
class _Request:
    id: str
    due_s: float
    nodes: tuple[str, ...]


@dataclass
class LocalDelayedProvider:
    """Provisions the declared nodes of an offer's pool after the offer's delay.

    ``pool_nodes`` maps each offer's pool to its node names (from the cluster
    spec). ``preempt`` plays the cloud reclaiming a spot node, for tests and demos.
    """

    pool_nodes: dict[str, tuple[str, ...]]
    clock: Callable[[], float]
    name: str = "local-delayed"
    held: set[str] = field(default_factory=set)  # requested or ready
    _requests: list[_Request] = field(default_factory=list)
    _reclaimed: list[str] = field(default_factory=list)
    _count: int = 0

    def request_nodes(self, offer: OfferSpec, count: int) -> str:
        free = [n for n in self.pool_nodes.get(offer.pool_name, ()) if n not in self.held]
        if count > len(free):
            raise ValueError(f"offer {offer.name!r}: {count} nodes asked, {len(free)} left in "
                             f"pool {offer.pool_name!r}; declare more nodes or lower max_nodes")
        self._count += 1
        req = _Request(f"{self.name}-{self._count}", self.clock() + offer.provisioning_delay_s,
                       tuple(free[:count]))
        self.held.update(req.nodes)
        self._requests.append(req)
        return req.id

    def poll(self) -> ProviderReport:
        now = self.clock()
        due = [r for r in self._requests if r.due_s <= now]
        self._requests = [r for r in self._requests if r.due_s > now]
        ready = tuple(n for r in due for n in r.nodes if n in self.held)
        gone, self._reclaimed = tuple(self._reclaimed), []
        return ProviderReport(ready=ready, preempted=gone)

    def release(self, nodes: Sequence[str]) -> None:
        self.held.difference_update(nodes)

    def preempt(self, node: str) -> None:
        """The cloud takes a spot node back (reported by the next ``poll``)."""
        if node in self.held:
            self.held.discard(node)
            self._reclaimed.append(node)
