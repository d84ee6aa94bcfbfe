"""Durations and sizes as people write them ("90m", "2d", "1.5h", 3600)."""

from __future__ import annotations

import math
import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d|day|days|w)?\s*$")
_SLURM_TIME = re.compile(r"^\s*(?:(\d+)-)?(\d+(?::\d{1,2}){1,2})\s*$")
_SECONDS = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600,
            "d": 86400, "day": 86400, "days": 86400, "w": 604800}


def parse_duration(value: object) -> float:
    """Seconds from a number or a string like ``"90m"``; raises ValueError with the fix."""
    if isinstance(value, bool):
        raise ValueError(
            "a duration must be a number of seconds or a string like '90m', '2h', '3d'"
        )
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _SECONDS[m.group(2)]
    elif isinstance(value, str) and (m := _SLURM_TIME.match(value)):
        # Slurm's --time: [D-]HH:MM:SS, [D-]HH:MM with a day, or MM:SS
        days = int(m.group(1) or 0)
        parts = [int(p) for p in m.group(2).split(":")]
        if days and len(parts) == 2:
            parts.append(0)  # D-HH:MM
        lead = 0 if days else 3 - len(parts)  # the first field given may run over (90:00)
        while len(parts) < 3:
            parts.insert(0, 0)
        if any(parts[i] > 59 for i in (1, 2) if i > lead) or (days and parts[0] > 23):
            raise ValueError(
                f"cannot read duration {value!r}: minutes and seconds run 0-59, and hours "
                "0-23 after a day count; write e.g. '1-02:00:00' (1 day 2 hours) or '26:00:00'")
        seconds = float(days * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2])
    else:
        raise ValueError(
            f"cannot read duration {value!r}; write seconds (3600), a string like "
            "'90m', '2h', '3d', or Slurm's '1-02:00:00' / '02:00:00'"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"duration must be positive and finite, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest readable form: 45s, 12m, 3.5h, 2.0d."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
