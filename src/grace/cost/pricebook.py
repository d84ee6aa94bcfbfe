"""The price book: every input of the cost planner, with its range and its source.

A planner answer is only as good as assumptions nobody states, so each number
is a :class:`Figure` carrying the value used, the low and high ends the
sensitivity table moves it through, and a ``source`` saying where it came
from. The defaults ship with the package (``grace/cost/data/pricebook.yaml``);
a user's YAML (``grace plan --prices FILE``) overlays them field by field.

Loading is all or nothing, like a spec: the merged book is validated by
pydantic (unknown fields, wrong types) and then by :func:`sanity_problems`
(impossible economics: spot above on-demand, negative prices, amortization of
zero years), and every problem comes back in one :class:`SpecError` naming
the field path and the fix.
"""

from __future__ import annotations

import copy
import math
from importlib import resources
from pathlib import Path
from typing import Any, TypeGuard

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from grace.spec.errors import SpecError, SpecProblem, from_validation_error
from grace.spec.gpus import BUILTIN_GPUS
from grace.spec.loader import read_yaml

DEFAULTS_NAME = "pricebook.yaml"


class Figure(BaseModel):
    """One input: the value used, the range the sensitivity table tries, and its source.

    In an override file a bare number is accepted as ``value`` alone; the loader then
    widens the default's range to include it and marks the source as the override.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float
    low: float
    high: float
    source: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _bare_number(cls, data: Any) -> Any:
        if isinstance(data, int | float) and not isinstance(data, bool):
            return {"value": data, "low": data, "high": data, "source": "given without a source"}
        return data


class OwnedCosts(BaseModel):
    """What owning hardware costs besides the servers: shared by on-prem and colo."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    network_capex_per_node_usd: Figure
    storage_capex_fraction: Figure
    misc_capex_fraction: Figure
    amortization_years: Figure
    maintenance_fraction_per_year: Figure
    residual_value_fraction: Figure
    node_power_overhead: Figure
    pue: Figure
    electricity_usd_per_kwh: Figure
    facility_usd_per_kw_month: Figure
    colo_rent_usd_per_kw_month: Figure
    staff_usd_per_fte_year: Figure
    gpus_per_fte: Figure
    min_fte: Figure


class CloudTerms(BaseModel):
    """A cloud's terms that do not depend on the GPU model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provisioning_delay_s: Figure
    spot_preemptions_per_node_hour: Figure
    failures_per_node_hour: Figure
    restart_overhead_hours: Figure
    egress_usd_per_gb: Figure


class CloudOffers(BaseModel):
    """One cloud's prices for one GPU model; a commitment or spot the cloud lacks is left out."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    on_demand_usd_per_gpu_hour: Figure
    reserved_1y_usd_per_gpu_hour: Figure | None = None
    reserved_3y_usd_per_gpu_hour: Figure | None = None
    spot_usd_per_gpu_hour: Figure | None = None


class GpuPrices(BaseModel):
    """Capex of one server of this GPU model, and what each cloud charges to rent one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_gpus: int = Field(ge=1, le=72)
    server_capex_per_node_usd: Figure
    offers: dict[str, CloudOffers] = Field(default_factory=dict)


class HybridAssumptions(BaseModel):
    """How much of the workload the hybrid option owns (the twin decides the rest, see
    ``grace.cost.hybrid``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owned_fraction: Figure


class SiteFacts(BaseModel):
    """What a building must hold for owned nodes (``grace plan --site-kw``): their weight and
    height, and the racks they go in. Power per node comes from the catalog's board watts
    times ``owned.node_power_overhead``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_weight_kg: Figure
    node_rack_units: Figure
    rack_units: Figure
    rack_kw: Figure
    rack_empty_kg: Figure
    rack_footprint_m2: Figure
    floor_kg_per_m2: Figure


class LifecycleTerms(BaseModel):
    """Procurement and ageing (``grace lifecycle``): how long an order takes, what a lease
    costs, how fast newer GPUs get cheaper per unit of work, how upkeep grows with age."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lead_time_weeks: Figure
    lease_term_months: Figure
    lease_rate_per_month: Figure
    price_performance_doubling_years: Figure
    maintenance_growth_per_year: Figure


class PriceBook(BaseModel):
    """The whole book; build with :func:`load_pricebook`, which also runs the sanity checks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owned: OwnedCosts
    clouds: dict[str, CloudTerms]
    hybrid: HybridAssumptions
    gpus: dict[str, GpuPrices]
    site: SiteFacts
    lifecycle: LifecycleTerms

    def gpu(self, name: str) -> GpuPrices:
        """Prices of one GPU model, or a ValueError listing the models the book has."""
        if name not in self.gpus:
            raise ValueError(f"the price book has no prices for GPU {name!r}; "
                             f"use one of {sorted(self.gpus)} or add it with --prices")
        return self.gpus[name]

    def offers(self, gpu: str, cloud: str) -> CloudOffers:
        prices = self.gpu(gpu)
        if cloud not in prices.offers:
            raise ValueError(f"the price book has no {cloud!r} offers for {gpu}; "
                             f"use one of {sorted(prices.offers)} or add it with --prices")
        return prices.offers[cloud]


# ------------------------------------------------------------------ sanity checks
#: (field, lowest allowed, allowed to equal it, what to do) for owned, cloud and hybrid inputs.
_BOUNDS: dict[str, tuple[float, bool, str]] = {
    "amortization_years": (0.0, False, "hardware must be written off over more than 0 years"),
    "pue": (1.0, True, "PUE is facility power over IT power, at least 1.0"),
    "node_power_overhead": (0.0, False, "a node draws more than 0 W; 1.0 means GPUs only"),
    "gpus_per_fte": (0.0, False, "one engineer runs more than 0 GPUs"),
    "owned_fraction": (0.0, False, "own more than 0% of the workload (or compare cloud options)"),
    "node_rack_units": (0.0, False, "a node takes more than 0 rack units"),
    "rack_units": (1.0, True, "a rack holds at least 1 unit (a standard rack is 42U)"),
    "rack_kw": (0.0, False, "a rack feeds more than 0 kW"),
    "rack_footprint_m2": (0.0, False, "a rack stands on more than 0 m2 (600 x 1200 mm = 0.72)"),
    "floor_kg_per_m2": (0.0, False, "a floor holds more than 0 kg/m2"),
    "lease_term_months": (1.0, True, "a lease runs at least 1 month"),
    "price_performance_doubling_years": (0.0, False, "price-performance doubles in more than "
                                                     "0 years"),
}
_FRACTIONS = {"storage_capex_fraction", "misc_capex_fraction", "maintenance_fraction_per_year",
              "residual_value_fraction", "owned_fraction", "lease_rate_per_month"}


def _figures(book: PriceBook) -> list[tuple[str, str, Figure]]:
    """(path, field name, figure) for every figure in the book."""
    out: list[tuple[str, str, Figure]] = []
    sections: tuple[tuple[str, BaseModel], ...] = (
        ("owned", book.owned), ("hybrid", book.hybrid), ("site", book.site),
        ("lifecycle", book.lifecycle))
    for section, model in sections:
        out += [(f"{section}.{k}", k, getattr(model, k)) for k in type(model).model_fields]
    for cloud, terms in book.clouds.items():
        out += [(f"clouds.{cloud}.{k}", k, getattr(terms, k)) for k in CloudTerms.model_fields]
    for gpu, prices in book.gpus.items():
        out.append((f"gpus.{gpu}.server_capex_per_node_usd", "server_capex_per_node_usd",
                    prices.server_capex_per_node_usd))
        for cloud, offer in prices.offers.items():
            for k in CloudOffers.model_fields:
                fig = getattr(offer, k)
                if fig is not None:
                    out.append((f"gpus.{gpu}.offers.{cloud}.{k}", k, fig))
    return out


def sanity_problems(book: PriceBook) -> list[SpecProblem]:
    """Every input that cannot be right, with the fix; an empty list means the book is usable."""
    problems: list[SpecProblem] = []
    for path, name, fig in _figures(book):
        numbers = {"value": fig.value, "low": fig.low, "high": fig.high}
        if any(not math.isfinite(v) for v in numbers.values()):
            problems.append(SpecProblem(path, "must be a finite number"))
            continue
        if any(v < 0 for v in numbers.values()):
            problems.append(SpecProblem(path, f"must not be negative; got {numbers}"))
            continue
        if not fig.low <= fig.value <= fig.high:
            problems.append(SpecProblem(path, f"needs low <= value <= high; got low={fig.low}, "
                                              f"value={fig.value}, high={fig.high}"))
        if name in _BOUNDS:
            floor, inclusive, fix = _BOUNDS[name]
            bad = [k for k, v in numbers.items() if v < floor or (v == floor and not inclusive)]
            if bad:
                problems.append(SpecProblem(path, f"{'/'.join(bad)} out of range: {fix}"))
        if name in _FRACTIONS and fig.high > 1.0:
            problems.append(SpecProblem(path, f"is a fraction: value, low and high must be <= 1 "
                                              f"(write 0.08 for 8%); got high={fig.high}"))
    for cloud, terms in book.clouds.items():
        rate, over = terms.spot_preemptions_per_node_hour, terms.restart_overhead_hours
        # each figure is moved alone in the sensitivity table, so check each end with the other's value
        loss = max(rate.value * over.value, rate.high * over.value, rate.value * over.high)
        if loss >= 1.0:
            problems.append(SpecProblem(
                f"clouds.{cloud}.spot_preemptions_per_node_hour",
                f"with restart_overhead_hours a spot node would spend all its time restarting "
                f"(rate x overhead = {loss:.2f} >= 1); lower one of them"))
    for gpu, prices in book.gpus.items():
        if gpu not in BUILTIN_GPUS:
            problems.append(SpecProblem(f"gpus.{gpu}", f"unknown GPU model; use a name from "
                                                       f"`grace gpus`: {sorted(BUILTIN_GPUS)}"))
        for cloud, offer in prices.offers.items():
            path = f"gpus.{gpu}.offers.{cloud}"
            if cloud not in book.clouds:
                problems.append(SpecProblem(path, f"no cloud {cloud!r} under clouds:; add its terms "
                                                  f"or use one of {sorted(book.clouds)}"))
            od = offer.on_demand_usd_per_gpu_hour.value
            for k in ("reserved_1y_usd_per_gpu_hour", "reserved_3y_usd_per_gpu_hour",
                      "spot_usd_per_gpu_hour"):
                fig = getattr(offer, k)
                if fig is not None and fig.value > od:
                    what = "spot" if k.startswith("spot") else "a commitment"
                    problems.append(SpecProblem(
                        f"{path}.{k}", f"{what} priced above on-demand ({fig.value} > {od}); "
                                       f"nobody would buy it: check the figure"))
    return problems


# ------------------------------------------------------------------ loading
def default_data() -> dict[str, Any]:
    """The shipped defaults as plain data (read from the package, never from ../shared)."""
    ref = resources.files("grace.cost").joinpath("data", DEFAULTS_NAME)
    with resources.as_file(ref) as path:
        data = read_yaml(path)
    assert isinstance(data, dict)
    return data


def _is_figure(data: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(data, dict) and "value" in data


def overlay(base: dict[str, Any], override: dict[str, Any], source: str) -> dict[str, Any]:
    """``base`` with ``override`` merged in, field by field.

    A bare number over a default figure replaces its value, widens its range to
    include the new value and cites ``source``; a mapping over a figure replaces the
    keys it gives. Keys the defaults lack are kept, so validation reports them.
    """
    out = copy.deepcopy(base)
    for key, value in override.items():
        old = out.get(key)
        if _is_figure(old) and isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = {"value": value, "low": min(old["low"], value),
                        "high": max(old["high"], value), "source": f"override in {source}"}
        elif _is_figure(old) and isinstance(value, dict):
            merged = {**old, **value}
            if "source" not in value:
                merged["source"] = f"override in {source}"
            if "value" in value:
                merged.setdefault("low", value["value"])
                merged.setdefault("high", value["value"])
                if "low" not in value:
                    merged["low"] = min(old["low"], value["value"])
                if "high" not in value:
                    merged["high"] = max(old["high"], value["value"])
            out[key] = merged
        elif isinstance(old, dict) and isinstance(value, dict):
            out[key] = overlay(old, value, source)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_pricebook(data: Any, source: str) -> PriceBook:
    """Validate merged data; every problem (types, unknown fields, sanity) in one SpecError."""
    if not isinstance(data, dict):
        raise SpecError(source, [SpecProblem("", "expected a mapping of price-book sections")])
    try:
        book = PriceBook.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(source, e) from e
    problems = sanity_problems(book)
    if problems:
        raise SpecError(source, problems)
    return book


def load_pricebook(path: Path | str | None = None) -> PriceBook:
    """The defaults, overlaid with the YAML at ``path`` when given."""
    data = default_data()
    source = "built-in price book"
    if path is not None:
        user = read_yaml(path)
        if not isinstance(user, dict):
            raise SpecError(str(path), [SpecProblem("", "expected a mapping such as "
                                                        "`owned: {pue: 1.2}`")])
        data = overlay(data, user, str(path))
        source = str(path)
    return parse_pricebook(data, source)


def figure_sources(book: PriceBook) -> dict[str, dict[str, Any]]:
    """Every figure by path, for echoing in a plan's JSON."""
    return {path: fig.model_dump() for path, _, fig in _figures(book)}


def with_value(book: PriceBook, path: str, value: float) -> PriceBook:
    """A copy of ``book`` with the figure at ``path`` set to ``value`` (for the sensitivity table)."""
    data = book.model_dump()
    node: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = {**node[parts[-1]], "value": value}
    return PriceBook.model_validate(data)
