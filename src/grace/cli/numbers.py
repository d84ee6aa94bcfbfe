"""Numbers on the command line that arithmetic can use.

Click's ``min=``/``max=`` ranges let ``nan`` through (every comparison with it is
false) and ``inf`` past a minimum, and either then surfaces deep in a formula as a
traceback or a figure of ``nan``. ``finite`` is the callback every float option of
the planning verbs carries, so such a value is refused while parsing, naming the flag.
"""

from __future__ import annotations

import math
from typing import Any

import typer

#: No one plans for more GPUs than this (the largest clusters on record are ~10^5).
MAX_GPUS = 1_000_000.0


def refuse_non_finite(value: Any, flag: str) -> None:
    """A BadParameter naming ``flag`` when ``value`` (or any item of it) is nan or inf."""
    for v in value if isinstance(value, list | tuple) else (value,):
        if isinstance(v, float) and not math.isfinite(v):
            raise typer.BadParameter(f"{v} is not a number a plan can use; give a finite "
                                     "value", param_hint=flag)


def finite(param: typer.CallbackParam, value: Any) -> Any:
    """Typer callback: ``value`` unchanged, or refused when it is nan or inf."""
    refuse_non_finite(value, param.opts[0] if param.opts else str(param.name))
    return value


def whole_gpus(param: typer.CallbackParam, value: float | None) -> float | None:
    """Typer callback for a GPU count: a finite whole number from 1 to ``MAX_GPUS``."""
    if value is None:
        return None
    flag = param.opts[0] if param.opts else "--gpus"
    refuse_non_finite(value, flag)
    if value != int(value) or not 1 <= value <= MAX_GPUS:
        raise typer.BadParameter(f"{value:g} is not a GPU count: give a whole number from 1 "
                                 f"to {MAX_GPUS:,.0f}", param_hint=flag)
    return value


__all__ = ["MAX_GPUS", "finite", "refuse_non_finite", "whole_gpus"]
