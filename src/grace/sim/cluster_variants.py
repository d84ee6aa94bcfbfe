"""Cluster variants for a sweep: the same cluster with a share of its nodes taken away.

"What if we bought 20% fewer nodes?" is the question a twin sweep answers beside
the policy: ``--fewer-nodes 0,10,20,30`` replays the trace on the cluster as
written and on copies with 10%, 20% and 30% fewer nodes. Each node group loses
its share (rounded to the nearest whole node, and down to whole NVLink domains so
a rack domain is never split), keeping at least one domain; the first nodes of a
group are the ones kept, so the leaves and pods fill as they did.
"""

from __future__ import annotations

from collections.abc import Sequence

from grace.spec.cluster import ClusterSpec

#: A variant keeps at least a tenth of the cluster: beyond that it answers nothing.
MAX_FEWER_PERCENT = 90.0


def parse_percents(text: str, flag: str = "--fewer-nodes") -> list[float]:
    """``"0,10,30"`` -> ``[0.0, 10.0, 30.0]``; a clear error naming ``flag`` otherwise."""
    out: list[float] = []
    for part in (p.strip().rstrip("%") for p in text.split(",")):
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{flag}: {part!r} is not a number; give percents such as "
                             "0,10,20,30") from None
        if not 0.0 <= value <= MAX_FEWER_PERCENT:
            raise ValueError(f"{flag}: {part}% is outside 0 to {MAX_FEWER_PERCENT:g}; give "
                             "the share of nodes to take away, e.g. 10")
        if value in out:
            raise ValueError(f"{flag}: {part}% given twice; give each percent once")
        out.append(value)
    if not out:
        raise ValueError(f"{flag}: no percent given; e.g. {flag} 0,10,20")
    return out


def with_fewer_nodes(spec: ClusterSpec, percent: float) -> ClusterSpec:
    """``spec`` with ``percent`` of each node group's nodes taken away (see the module)."""
    if percent == 0:
        return spec
    groups = []
    for g in spec.node_groups:
        domain = g.nvlink_domain_nodes
        keep = round(g.count * (1 - percent / 100))
        keep = max(domain, keep - keep % domain)
        keep = min(keep, g.count)
        names = None if g.names is None else g.names[:keep]
        groups.append(g.model_copy(update={"count": keep, "names": names}))
    return spec.model_copy(update={"node_groups": groups})


def variant_label(percent: float) -> str:
    """``10.0`` -> ``"-10% nodes"``; the cluster as written is ``"all nodes"``."""
    return "all nodes" if percent == 0 else f"-{percent:g}% nodes"


def describe(percents: Sequence[float]) -> str:
    return ", ".join(variant_label(p) for p in percents)
