"""Can this building host the owned cluster? ``grace plan --site-kw``.

A plan that says "own" is worth nothing if the site cannot feed, cool, rack or
carry the nodes: the seeds tell of a team that bought 32 A100s and could run 16
for want of power. So the planner checks the site before it prices owning there,
with figures that recompute by hand from what it echoes:

- a node draws ``node_kw = node_gpus x board_watts / 1000 x node_power_overhead``
  (``tco.node_kw``; board watts from the GPU catalog); the overhead's low and high
  give the range (a DGX H100: 6.5-8.5 kW, so 64 H100s draw 52-68 kW, 60 kW at the
  value: the seed's "roughly 60kW under load");
- the nodes the site can power are ``floor(site_kw x (1 + tolerance) / node_kw)``,
  and cool ``floor(cooling_kw x (1 + tolerance) / node_kw)`` (all the electrical power a
  node draws becomes heat); ``nodes_powered`` is the least of those and the nodes
  needed, and ``nodes_in_boxes`` the rest, bought but dark;
- a rack holds ``min(floor(rack_kw x (1 + tolerance) / node_kw), floor(rack_units /
  node_rack_units), floor((floor_rating x footprint - empty_rack) / node_weight))``
  nodes: its power, its height, and what the floor under it carries. The floor limit
  spreads heavy nodes over more racks; only a floor that cannot carry even one node in
  a rack refuses the site. ``racks = ceil(nodes_powered / nodes_per_rack)`` (each of
  the three limits alone is echoed as ``racks_by_kw``, ``racks_by_units``,
  ``racks_by_floor``), the fullest rack weighs ``empty + nodes_in_it x node_weight``
  and loads the floor with that over its footprint.

``tolerance`` (0.5%) is the precision of the overhead itself: ``1.34`` is given to
three figures and stands for 1.335-1.345 (+-0.4%), so a draw that overshoots a feed by
less than that is inside the figure's own rounding. (The seed's 7.5 kW a DGX H100 is
1.3393 x 5.6 kW; at 1.34, 64 H100s draw 60.03 kW, and a 60 kW site hosts them.)

Colo is another building (its rent is per kW): the check applies to ``on-prem`` and to
the owned part of ``hybrid``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from grace.cost.pricebook import PriceBook
from grace.cost.tco import node_kw
from grace.spec.gpus import BUILTIN_GPUS

#: a draw within this share over a feed still fits: the rounding of node_power_overhead
KW_TOLERANCE = 0.005
_EPS = 1e-9


class SiteLimit(StrEnum):
    """What stops the site hosting every node (``limited_by`` lists the ones that bind)."""

    POWER = "power"  # the site's feed
    COOLING = "cooling"  # the heat the site can remove
    RACK_POWER = "rack-power"  # one node draws more than a rack feeds
    RACK_UNITS = "rack-units"  # one node is taller than a rack
    FLOOR = "floor"  # one node in a rack overloads the floor


@dataclass(frozen=True)
class SiteSpec:
    """What the user says the building has; None takes the price book's ``site:`` figure
    (``cooling_kw`` None: the same as ``site_kw``)."""

    site_kw: float
    cooling_kw: float | None = None
    rack_kw: float | None = None
    floor_kg_per_m2: float | None = None

    def __post_init__(self) -> None:
        for name in ("site_kw", "cooling_kw", "rack_kw", "floor_kg_per_m2"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a number above 0, got {v}")


def nodes_within(kw: float, per_node_kw: float) -> int:
    """Whole nodes a supply of ``kw`` feeds: ``floor(kw x (1 + KW_TOLERANCE) / node_kw)``."""
    return math.floor(kw * (1.0 + KW_TOLERANCE) / per_node_kw + _EPS)


def nodes_on_floor(floor_kg_per_m2: float, footprint_m2: float, rack_empty_kg: float,
                   node_weight_kg: float) -> int:
    """Nodes one rack may hold before it overloads the floor under it:
    ``floor((floor_rating x footprint - empty_rack) / node_weight)`` (at least 0)."""
    return max(0, math.floor((floor_kg_per_m2 * footprint_m2 - rack_empty_kg)
                             / node_weight_kg + _EPS))


def racks_for(nodes: int, per_rack: int) -> int:
    """``ceil(nodes / per_rack)``; 0 nodes need no rack (and a rack that holds none, 0)."""
    return 0 if nodes <= 0 or per_rack <= 0 else math.ceil(nodes / per_rack)


@dataclass(frozen=True)
class SiteFit:
    """The site check for one owned cluster, inputs echoed beside every result."""

    # inputs
    gpus: float
    site_kw: float
    cooling_kw: float
    rack_kw: float
    floor_kg_per_m2: float
    node_gpus: int
    board_watts: float
    node_power_overhead: float
    node_power_overhead_low: float
    node_power_overhead_high: float
    node_weight_kg: float
    node_rack_units: float
    rack_units: float
    rack_empty_kg: float
    rack_footprint_m2: float
    kw_tolerance: float
    # results
    node_kw: float
    draw_kw: float
    draw_kw_low: float
    draw_kw_high: float
    nodes_needed: int
    nodes_by_power: int
    nodes_by_cooling: int
    nodes_powered: int
    nodes_in_boxes: int
    nodes_per_rack_by_kw: int
    nodes_per_rack_by_units: int
    nodes_per_rack_by_floor: int
    nodes_per_rack: int
    nodes_fit: int
    racks_by_kw: int
    racks_by_units: int
    racks_by_floor: int
    racks: int
    rack_weight_kg: float
    floor_load_kg_per_m2: float
    limited_by: tuple[SiteLimit, ...]
    reason: str

    @property
    def feasible(self) -> bool:
        return not self.limited_by

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["limited_by"] = [str(x) for x in self.limited_by]
        out["feasible"] = self.feasible
        return out


def _reason(f: dict[str, Any], limits: list[SiteLimit]) -> str:
    """One sentence per binding limit, with the flag or price-book figure that moves it."""
    if not limits:
        return (f"fits: {f['nodes_needed']} nodes draw {f['draw_kw']:.1f} kW of "
                f"{f['site_kw']:g} kW, in {f['racks']} rack{'' if f['racks'] == 1 else 's'}")
    one_node = (f["rack_empty_kg"] + f["node_weight_kg"]) / f["rack_footprint_m2"]
    texts = {
        SiteLimit.POWER: f"power: the site feeds {f['site_kw']:g} kW (--site-kw), "
                         f"{f['nodes_by_power']} of {f['nodes_needed']} nodes at "
                         f"{f['node_kw']:.2f} kW each",
        SiteLimit.COOLING: f"cooling: the site removes {f['cooling_kw']:g} kW "
                           f"(--cooling-kw), {f['nodes_by_cooling']} of "
                           f"{f['nodes_needed']} nodes",
        SiteLimit.RACK_POWER: f"rack power: a node draws {f['node_kw']:.2f} kW, more than a "
                              f"rack's {f['rack_kw']:g} kW (--rack-kw)",
        SiteLimit.RACK_UNITS: f"rack units: a node takes {f['node_rack_units']:g}U, more than "
                              f"a {f['rack_units']:g}U rack (site.rack_units)",
        SiteLimit.FLOOR: f"floor: a rack with one node loads it at {one_node:.0f} kg/m2 "
                         f"({f['rack_empty_kg'] + f['node_weight_kg']:.0f} kg on "
                         f"{f['rack_footprint_m2']:g} m2), over its rating of "
                         f"{f['floor_kg_per_m2']:g} kg/m2 (--floor-kg-per-m2)",
    }
    return (f"{f['nodes_fit']} of {f['nodes_needed']} nodes fit; "
            + "; ".join(texts[x] for x in limits))


def site_fit(book: PriceBook, gpu: str, gpus: float, spec: SiteSpec) -> SiteFit:
    """Check ``gpus`` owned GPUs of model ``gpu`` against the site (formulas: module doc)."""
    s, o = book.site, book.owned
    g = book.gpu(gpu).node_gpus
    watts = BUILTIN_GPUS[gpu].board_watts
    over = o.node_power_overhead
    kw = node_kw(watts, g, over.value)
    need = max(1, math.ceil(gpus / g - _EPS))
    cooling = spec.cooling_kw if spec.cooling_kw is not None else spec.site_kw
    rack_kw = spec.rack_kw if spec.rack_kw is not None else s.rack_kw.value
    floor = spec.floor_kg_per_m2 if spec.floor_kg_per_m2 is not None else s.floor_kg_per_m2.value
    by_power, by_cooling = nodes_within(spec.site_kw, kw), nodes_within(cooling, kw)
    powered = min(need, by_power, by_cooling)
    per_kw = nodes_within(rack_kw, kw)
    per_units = math.floor(s.rack_units.value / s.node_rack_units.value + _EPS)
    per_floor = nodes_on_floor(floor, s.rack_footprint_m2.value, s.rack_empty_kg.value,
                               s.node_weight_kg.value)
    per_rack = min(per_kw, per_units, per_floor)
    # the tighter of power and cooling is named (power on a tie: cooling defaults to it)
    limits = [lim for lim, binds in ((SiteLimit.POWER, by_power < need and by_power <= by_cooling),
                                     (SiteLimit.COOLING, by_cooling < min(need, by_power)),
                                     (SiteLimit.RACK_POWER, per_kw == 0),
                                     (SiteLimit.RACK_UNITS, per_units == 0),
                                     (SiteLimit.FLOOR, per_floor == 0)) if binds]
    fit = powered if per_rack > 0 else 0
    in_fullest = min(per_rack, fit)
    weight = s.rack_empty_kg.value + in_fullest * s.node_weight_kg.value if fit else 0.0
    f: dict[str, Any] = {
        "gpus": gpus, "site_kw": spec.site_kw, "cooling_kw": cooling, "rack_kw": rack_kw,
        "floor_kg_per_m2": floor, "node_gpus": g, "board_watts": watts,
        "node_power_overhead": over.value, "node_power_overhead_low": over.low,
        "node_power_overhead_high": over.high, "node_weight_kg": s.node_weight_kg.value,
        "node_rack_units": s.node_rack_units.value, "rack_units": s.rack_units.value,
        "rack_empty_kg": s.rack_empty_kg.value, "rack_footprint_m2": s.rack_footprint_m2.value,
        "kw_tolerance": KW_TOLERANCE, "node_kw": kw, "draw_kw": need * kw,
        "draw_kw_low": need * node_kw(watts, g, over.low),
        "draw_kw_high": need * node_kw(watts, g, over.high),
        "nodes_needed": need, "nodes_by_power": by_power, "nodes_by_cooling": by_cooling,
        "nodes_powered": powered, "nodes_in_boxes": need - fit,
        "nodes_per_rack_by_kw": per_kw, "nodes_per_rack_by_units": per_units,
        "nodes_per_rack_by_floor": per_floor, "nodes_per_rack": per_rack, "nodes_fit": fit,
        "racks_by_kw": racks_for(fit, per_kw), "racks_by_units": racks_for(fit, per_units),
        "racks_by_floor": racks_for(fit, per_floor), "racks": racks_for(fit, per_rack),
        "rack_weight_kg": weight,
        "floor_load_kg_per_m2": weight / s.rack_footprint_m2.value,
    }
    return SiteFit(**f, limited_by=tuple(limits), reason=_reason(f, limits))


def site_figures(book: PriceBook) -> dict[str, dict[str, Any]]:
    """The price book's ``site.*`` and ``owned.node_power_overhead`` figures with their
    sources, for the plan's echoed inputs."""
    out = {f"site.{k}": getattr(book.site, k).model_dump() for k in type(book.site).model_fields}
    out["owned.node_power_overhead"] = book.owned.node_power_overhead.model_dump()
    return out
