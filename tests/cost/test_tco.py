"""Every TCO formula on a worked example (H100-SXM, 700 W boards, the round price book)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from grace.cost import tco
from grace.cost.pricebook import PriceBook

from .builders import round_book


def test_node_power_from_board_watts() -> None:
    # 8 GPUs x 700 W = 5.6 kW of boards, x 1.25 for CPUs, NICs, fans = 7.0 kW
    assert tco.node_kw(700, 8, 1.25) == pytest.approx(7.0)


def test_capex_per_node_adds_storage_misc_and_network() -> None:
    # 240,000 x (1 + 0.10 + 0) + 40,000 = 304,000
    assert tco.capex_per_node(240_000, 40_000, 0.10, 0.0) == pytest.approx(304_000)


def test_monthly_running_costs() -> None:
    assert tco.energy_usd_per_month(7.0, 1.5, 0.10) == pytest.approx(766.5)  # 7 x 1.5 x 0.1 x 730
    assert tco.space_usd_per_month(7.0, 200) == pytest.approx(1400)
    assert tco.maintenance_usd_per_month(240_000, 0.12) == pytest.approx(2400)  # 28,800 / 12
    assert tco.staff_fte(80, 100, 1.0) == 1.0  # 0.8 FTE of work, but never less than 1
    assert tco.staff_fte(500, 100, 1.0) == 5.0
    assert tco.staff_usd_per_month(1.0, 120_000) == pytest.approx(10_000)


def test_owned_rates_per_gpu_on_prem_and_colo(book: PriceBook) -> None:
    onprem = tco.owned_rates(book, "H100-SXM", "on-prem")
    assert onprem.capex_per_gpu_usd == pytest.approx(38_000)  # 304,000 / 8
    assert onprem.node_kw == pytest.approx(7.0)
    # (766.5 energy + 0 space + 2,400 maintenance) / 8
    assert onprem.opex_per_gpu_month_usd == pytest.approx(395.8125)
    colo = tco.owned_rates(book, "H100-SXM", "colo")
    assert colo.opex_per_gpu_month_usd == pytest.approx((766.5 + 1400 + 2400) / 8)  # 570.8125


def test_steady_state_rate_of_an_owned_pool(book: PriceBook) -> None:
    # capital 38,000 / (48 x 730) = 1.08447; running 395.8125 / 730 = 0.54221;
    # staff 10,000 / 80 GPUs / 730 = 0.17123
    expected = 38_000 / 35_040 + 395.8125 / 730 + 10_000 / 80 / 730
    assert tco.owned_usd_per_gpu_hour(book, "H100-SXM", "on-prem", 80) == pytest.approx(expected)
    assert expected == pytest.approx(1.79791, abs=1e-5)


def test_spot_billed_hours_carry_the_preemption_overhead() -> None:
    # 0.2 preemptions per node-hour x 0.25 h each = 5% of billed time lost
    assert tco.spot_billed_hours(950, 0.2, 0.25) == pytest.approx(1000)
    with pytest.raises(ValueError, match="no work"):
        tco.spot_billed_hours(1, 4.0, 0.25)


def test_purchases_lives_and_book_value() -> None:
    assert [tco.purchases_by_month(m, 48) for m in (1, 47, 48, 49, 96, 97)] == [1, 1, 1, 2, 2, 3]
    # straight line from 100% to the residual 20% over 48 months: 36 months old = 40%
    assert tco.book_value_fraction(36, 48, 0.2) == pytest.approx(0.4)
    assert tco.book_value_fraction(48, 48, 0.2) == pytest.approx(0.2)


def test_owned_hardware_sells_at_book_value_after_the_last_month() -> None:
    rates = tco.owned_rates(round_book(residual_value_fraction=0.2), "H100-SXM", "on-prem")
    # 80 GPUs: 3,040,000 at month 0; 80 x 395.8125 + 10,000 staff = 41,665 a month
    series = tco.owned_cash_series(36, 80, rates, 10_000)
    assert series[0] == pytest.approx(3_040_000 + 41_665)
    assert series[-1] == pytest.approx(3_040_000 + 36 * 41_665)  # cash spent: no sale in it
    # after month 36: sold at 40% of capex = 1,216,000 back
    assert tco.owned_resale_usd(36, 80, rates) == pytest.approx(1_216_000)


@pytest.mark.parametrize("residual", [0.0, 0.2, 0.35])
@pytest.mark.parametrize("months", [1, 12, 36, 47, 48, 49, 60, 96, 97, 120])
def test_owned_cash_never_falls_from_one_month_to_the_next(months: int, residual: float) -> None:
    """The plan's cash curves are drawn from these series: a drop in the last month (the
    sale, once folded in) or at a life's end (a residual credited before the next purchase)
    reads as money coming back while the hardware is still in use."""
    rates = tco.owned_rates(round_book(residual_value_fraction=residual), "H100-SXM", "on-prem")
    series = tco.owned_cash_series(months, 80, rates, 10_000)
    assert all(b >= a for a, b in pairwise(series))
    assert 0 <= tco.owned_resale_usd(months, 80, rates) < series[-1]  # 0: a whole life, no residual


def test_owned_cash_buys_again_after_a_life() -> None:
    rates = tco.owned_rates(round_book(residual_value_fraction=0.2), "H100-SXM", "on-prem")
    series = tco.owned_cash_series(60, 80, rates, 10_000)
    # month 48: the first server's life is over, but it is traded in only with the next
    assert series[47] == pytest.approx(3_040_000 + 48 * 41_665)
    # month 49: second purchase, the first sold at its 20% residual
    assert series[48] == pytest.approx(3_040_000 * (2 - 0.2) + 49 * 41_665)
    # after month 60: the second server is 12 months old, worth 0.2 + 0.8 x 0.75 = 80%
    assert series[-1] - tco.owned_resale_usd(60, 80, rates) == pytest.approx(
        3_040_000 * (2 - 0.2 - 0.8) + 60 * 41_665)  # 5,539,900, as before the sale moved


def test_commitments_bill_whole_terms() -> None:
    assert tco.commitment_billed_months(12, 12) == 12
    assert tco.commitment_billed_months(13, 12) == 24
    assert tco.commitment_billed_months(48, 36) == 72
