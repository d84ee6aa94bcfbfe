"""Durations as people write them."""

from __future__ import annotations

import pytest

from grace.spec.units import format_duration, parse_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90m", 5400), ("2d", 172800), (3600, 3600), (1.5, 1.5), ("3600", 3600),
        ("1.5h", 5400), ("45s", 45), ("10min", 600), ("2hr", 7200), ("1 day", 86400),
        ("3days", 259200), ("2w", 1209600), (" 90 m ", 5400),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["2 weeks", "soon", "", "1e3", "-5m", "5 m s", "h", ".5h"])
def test_unreadable_duration_says_how_to_write_one(value: str) -> None:
    with pytest.raises(ValueError, match="'90m', '2h', '3d'") as info:
        parse_duration(value)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("value", [True, None, [60], {"m": 1}])
def test_non_durations_are_rejected(value: object) -> None:
    with pytest.raises(ValueError, match="'90m'"):
        parse_duration(value)


@pytest.mark.parametrize("value", [0, -1, "0m", 0.0])
def test_duration_must_be_positive(value: object) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45, "45s"), (119, "119s"), (600, "10m"), (5400, "90m"), (12600, "3.5h"), (172800, "2.0d")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(("value", "seconds"), [
    ("1-02:00:00", 93600), ("26:00:00", 93600), ("90:00", 5400), ("02:00:00", 7200),
    ("1-23:59:59", 172799), ("1-02:30", 95400)])
def test_slurm_times_read_as_sbatch_reads_them(value: str, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["1-25:00:00", "10:61", "00:90:00", "1-02:61", "2:00:60"])
def test_slurm_times_with_fields_out_of_range_say_how_to_write_one(value: str) -> None:
    with pytest.raises(ValueError, match="run 0-59") as info:
        parse_duration(value)
    assert repr(value) in str(info.value) and "'1-02:00:00'" in str(info.value)
