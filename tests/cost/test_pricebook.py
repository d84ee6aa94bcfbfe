"""The price book: shipped defaults, overrides, and refusing impossible inputs with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from grace.cost.pricebook import load_pricebook
from grace.spec.errors import SpecError
from grace.spec.gpus import BUILTIN_GPUS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "prices.yaml"


def _load(tmp_path: Path, text: str):
    p = tmp_path / "prices.yaml"
    p.write_text(text)
    return load_pricebook(p)


def _problems(tmp_path: Path, text: str) -> dict[str, str]:
    with pytest.raises(SpecError) as e:
        _load(tmp_path, text)
    return {p.path: p.message for p in e.value.problems}


def test_defaults_load_and_cite_a_source_for_every_figure() -> None:
    book = load_pricebook()
    assert {"H100-SXM", "H200", "A100-80GB", "B200"} <= set(book.gpus)
    assert set(book.gpus) <= set(BUILTIN_GPUS)
    for prices in book.gpus.values():
        offer = prices.offers["hyperscaler"]
        assert offer.reserved_1y_usd_per_gpu_hour and offer.reserved_3y_usd_per_gpu_hour
        assert offer.spot_usd_per_gpu_hour and prices.server_capex_per_node_usd.source
    assert book.gpus["H100-SXM"].offers["hyperscaler"].on_demand_usd_per_gpu_hour.value == 6.88


def test_the_example_override_loads_and_wins(tmp_path: Path) -> None:
    book = load_pricebook(EXAMPLE)
    assert book.owned.pue.value == 1.25
    assert book.owned.pue.source.startswith("override in")
    assert book.owned.electricity_usd_per_kwh.source == "our utility contract, 2026"
    # a bare number widens the default range (1.10 .. 1.58) only where it must
    assert (book.owned.pue.low, book.owned.pue.high) == (1.10, 1.58)
    assert book.owned.amortization_years.value == 5
    assert book.gpus["H200"] == load_pricebook().gpus["H200"]  # untouched sections stay


def test_bare_number_outside_the_range_widens_it(tmp_path: Path) -> None:
    book = _load(tmp_path, "owned:\n  pue: 2.0\n")
    assert (book.owned.pue.low, book.owned.pue.value, book.owned.pue.high) == (1.10, 2.0, 2.0)


def test_unknown_field_is_named_with_its_path(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "owned:\n  peu: 1.2\n")
    assert problems == {"owned.peu": "unknown field; remove it or check its spelling"}


def test_every_impossible_input_is_listed_at_once(tmp_path: Path) -> None:
    problems = _problems(tmp_path, """
owned:
  amortization_years: {value: 0, low: 0, high: 0}
  electricity_usd_per_kwh: -0.1
  maintenance_fraction_per_year: 8
  pue: 0.9
gpus:
  H100-SXM:
    offers:
      hyperscaler:
        spot_usd_per_gpu_hour: 9.0
        reserved_3y_usd_per_gpu_hour: 7.5
""")
    assert "more than 0 years" in problems["owned.amortization_years"]
    assert "must not be negative" in problems["owned.electricity_usd_per_kwh"]
    assert "write 0.08 for 8%" in problems["owned.maintenance_fraction_per_year"]
    assert "at least 1.0" in problems["owned.pue"]
    spot = "gpus.H100-SXM.offers.hyperscaler.spot_usd_per_gpu_hour"
    assert "spot priced above on-demand (9.0 > 6.88)" in problems[spot]
    assert "commitment priced above on-demand" in problems[
        "gpus.H100-SXM.offers.hyperscaler.reserved_3y_usd_per_gpu_hour"]


def test_range_must_contain_the_value(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "owned:\n  pue: {value: 1.3, low: 1.4, high: 1.5}\n")
    assert "low <= value <= high" in problems["owned.pue"]


def test_gpu_must_be_a_catalog_name(tmp_path: Path) -> None:
    problems = _problems(tmp_path, """
gpus:
  H100:
    node_gpus: 8
    server_capex_per_node_usd: 250000
""")
    assert "unknown GPU model" in problems["gpus.H100"]


def test_offer_needs_a_known_cloud(tmp_path: Path) -> None:
    problems = _problems(tmp_path, """
gpus:
  H100-SXM:
    offers:
      mycloud: {on_demand_usd_per_gpu_hour: 3.0}
""")
    assert "no cloud 'mycloud'" in problems["gpus.H100-SXM.offers.mycloud"]


def test_spot_that_never_finishes_work_is_refused(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "clouds:\n  neocloud:\n    spot_preemptions_per_node_hour: 5\n")
    assert "all its time restarting" in problems["clouds.neocloud.spot_preemptions_per_node_hour"]


def test_bad_yaml_and_wrong_types(tmp_path: Path) -> None:
    assert "invalid YAML" in str(_problems(tmp_path, "owned: [pue: \n"))
    problems = _problems(tmp_path, "owned:\n  pue: cheap\n")
    assert any(k.startswith("owned.pue") for k in problems)
