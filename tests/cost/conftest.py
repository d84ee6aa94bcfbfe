"""Fixtures for the cost tests."""

from __future__ import annotations

import pytest

from grace.cost.pricebook import PriceBook

from .builders import round_book


@pytest.fixture
def book() -> PriceBook:
    return round_book()
