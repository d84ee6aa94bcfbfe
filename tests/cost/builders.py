"""Builders for the cost tests: a price book with round numbers, worked out by hand.

Built the way a user's override is (``overlay`` over the shipped defaults), so
it also exercises that path.
"""

from __future__ import annotations

from grace.cost.pricebook import PriceBook, default_data, overlay, parse_pricebook

ROUND = {
    "owned": {
        "network_capex_per_node_usd": 40_000, "storage_capex_fraction": 0.10,
        "misc_capex_fraction": 0.0, "amortization_years": 4,
        "maintenance_fraction_per_year": 0.12, "residual_value_fraction": 0.0,
        "node_power_overhead": 1.25, "pue": 1.5, "electricity_usd_per_kwh": 0.10,
        "facility_usd_per_kw_month": 0.0, "colo_rent_usd_per_kw_month": 200,
        "staff_usd_per_fte_year": 120_000, "gpus_per_fte": 100, "min_fte": 1.0,
    },
    "clouds": {"hyperscaler": {"spot_preemptions_per_node_hour": 0.2,
                               "restart_overhead_hours": 0.25, "egress_usd_per_gb": 0.10}},
    "hybrid": {"owned_fraction": 0.5},
    "gpus": {"H100-SXM": {
        "server_capex_per_node_usd": 240_000,
        "offers": {"hyperscaler": {
            "on_demand_usd_per_gpu_hour": 5.0, "reserved_1y_usd_per_gpu_hour": 3.5,
            "reserved_3y_usd_per_gpu_hour": 2.0, "spot_usd_per_gpu_hour": 2.0}}}},
}


def round_book(**owned: float) -> PriceBook:
    data = overlay(default_data(), ROUND, "round.yaml")
    if owned:
        data = overlay(data, {"owned": owned}, "test")
    return parse_pricebook(data, "round.yaml")

