"""A cloud bill as a history: GPU-hours by instance type and period, and what they cost.

A team that rents all its GPUs has no job log, but it has a bill. One line per
period (a day, a week, a month) and instance type::

    usage_start,usage_end,instance_type,usage_hours,cost_usd,capacity_errors,launch_requests
    2026-01-05,2026-01-12,p5.48xlarge,336,18493.44,2,9

Columns (any order and letter case; ``--columns cost_usd=Cost,...`` renames):

- ``usage_start``, ``usage_end``: ISO dates or date-times. The end is exclusive,
  as AWS's Cost and Usage Report and GCP's billing export write it; a bare date
  equal to its start means that one day.
- ``instance_type`` (required) and ``usage_hours`` (instance-hours) or
  ``gpu_hours``: instance-hours become GPU-hours through :data:`INSTANCE_GPUS`;
  an instance type not in that table needs a ``gpu_hours`` column (its row is
  skipped otherwise, the reason naming the type).
- ``cost_usd`` (required): what the line cost, after any discount.
- ``capacity_errors``, ``launch_requests`` (optional): launches the cloud refused
  for want of capacity (``InsufficientInstanceCapacity``,
  ``ZONE_RESOURCE_POOL_EXHAUSTED``) out of those tried; blank: not recorded.

A bill has no jobs: no queue waits, no node counts, no run times. The indicators
that need them say "unknown" for a bill; capacity difficulty reads the errors.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

from grace.cost.history import DAY_S, CloudUsage, History, HistoryFormat
from grace.cost.history_table import cell_reader, headed_rows, parse_role_map
from grace.sim.traces._common import RowError, finite, timestamp_s

#: instance type (lower case, Azure's ``Standard_`` prefix dropped) -> (catalog GPU model,
#: GPUs per instance). Source: the SkyPilot catalog (github.com/skypilot-org/skypilot-catalog)
#: as transcribed in shared/pricing/: ``skypilot_v8_aws_gpu_training.csv`` (AWS rows
#: InstanceType, AcceleratorName, AcceleratorCount: p5.48xlarge H100 8, p5e.48xlarge and
#: p5en.48xlarge H200 8, p4de.24xlarge A100-80GB 8, p4d.24xlarge A100 8, p6-b200.48xlarge
#: B200 8), ``skypilot_v6_azure_gpu.csv`` (Standard_ND96isr_H100_v5 H100 8,
#: Standard_ND96amsr_A100_v4 A100-80GB 8) and ``skypilot_v8_gcp_gpu.csv``, whose host rows
#: (a3-highgpu-8g, a3-megagpu-8g, a3-ultragpu-8g, a2-ultragpu-8g) carry no accelerator
#: column: their GPUs are the catalog's accelerator rows of the same count (H100 8,
#: H100-MEGA 8, H200 8, A100-80GB 8) that GCP attaches to those machine types (GCP's
#: accelerator-optimized machine family: a3 = H100/H200, a2-ultragpu = A100 80GB).
#: The catalog's H100 rows of these 8-GPU SXM servers are the price book's H100-SXM.
INSTANCE_GPUS: dict[str, tuple[str, int]] = {
    "p5.48xlarge": ("H100-SXM", 8),
    "p5e.48xlarge": ("H200", 8),
    "p5en.48xlarge": ("H200", 8),
    "p4de.24xlarge": ("A100-80GB", 8),
    "p4d.24xlarge": ("A100-40GB", 8),
    "p6-b200.48xlarge": ("B200", 8),
    "a3-highgpu-8g": ("H100-SXM", 8),
    "a3-megagpu-8g": ("H100-SXM", 8),
    "a3-ultragpu-8g": ("H200", 8),
    "a2-ultragpu-8g": ("A100-80GB", 8),
    "nd96isr_h100_v5": ("H100-SXM", 8),
    "nd96amsr_a100_v4": ("A100-80GB", 8),
}

#: role -> the column's usual name
COLUMNS = {r: r for r in ("usage_start", "usage_end", "instance_type", "usage_hours",
                          "gpu_hours", "cost_usd", "capacity_errors", "launch_requests")}
REQUIRED: tuple[str | tuple[str, ...], ...] = (
    "usage_start", "usage_end", "instance_type", ("usage_hours", "gpu_hours"), "cost_usd")


def instance_gpus(instance_type: str) -> tuple[str, int] | None:
    """(GPU model, GPUs per instance) for a known instance type, else None."""
    key = instance_type.strip().lower()
    key = key.removeprefix("standard_")
    return INSTANCE_GPUS.get(key)


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _count(text: str, what: str) -> int | None:
    if not text:
        return None
    value = finite(text, what)
    if value < 0 or not value.is_integer():
        raise RowError(f"bad {what}")
    return int(value)


def _amount(text: str, what: str) -> float:
    value = finite(text, what)
    if value < 0:
        raise RowError(f"negative {what}")
    return value


def load_cloud_bill(path: Path | str, columns: str | None = None) -> History:
    """Read a cloud bill CSV (see the module docstring); bad lines are counted, not raised."""
    names = {**COLUMNS, **parse_role_map(columns, list(COLUMNS),
                                         "usage_hours=Hours,cost_usd=Cost")}
    history = History(source=str(path), format=HistoryFormat.CLOUD_BILL)
    pending: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    with headed_rows(path, names, REQUIRED, what="cloud bill") as (col, rows):
        cell = cell_reader(col)
        for row in rows:
            history.rows += 1
            try:
                start_text, end_text = cell(row, "usage_start"), cell(row, "usage_end")
                start, end = timestamp_s(start_text), timestamp_s(end_text)
                if end == start and _is_date(end_text):
                    end = start + DAY_S
                if end <= start:
                    raise RowError("period ends before it starts")
                itype = cell(row, "instance_type")
                if not itype:
                    raise RowError("missing instance type")
                known = instance_gpus(itype)
                gpu_text = cell(row, "gpu_hours")
                if gpu_text:
                    gpu_hours = _amount(gpu_text, "GPU-hours")
                elif known is None:
                    raise RowError(f"unknown instance type {itype!r}: add a gpu_hours column")
                else:
                    gpu_hours = _amount(cell(row, "usage_hours"), "usage hours") * known[1]
                cost = _amount(cell(row, "cost_usd"), "cost")
                errors = _count(cell(row, "capacity_errors"), "capacity error count")
                launches = _count(cell(row, "launch_requests"), "launch request count")
            except RowError as e:
                skipped[e.reason] = skipped.get(e.reason, 0) + 1
                continue
            pending.append({"start_s": start, "end_s": end, "instance_type": itype,
                            "gpu_model": None if known is None else known[0],
                            "gpu_hours": gpu_hours, "cost_usd": cost,
                            "capacity_errors": errors, "launch_requests": launches})
    history.skipped = skipped
    if pending:
        t0 = min(u["start_s"] for u in pending)
        history.origin_epoch_s = t0
        pending.sort(key=lambda u: (u["start_s"], u["instance_type"]))
        history.usage = [CloudUsage(**{**u, "start_s": u["start_s"] - t0,
                                       "end_s": u["end_s"] - t0}) for u in pending]
    return history


__all__ = ["INSTANCE_GPUS", "instance_gpus", "load_cloud_bill"]
