"""Tenant quotas for a replay, from a YAML file or a two-column CSV of relative sizes.

YAML: ``tenants: {vision: {guaranteed_gpus: 64, borrow_limit_gpus: 64, weight: 2}}``.
CSV: ``tenant,size`` rows (such as Philly's ``vc,node num`` in
``shared/traces/helios/philly_vc.csv``); each tenant's guarantee is its size's
share of the total, times the cluster's GPUs, so the same file works for a
cluster of any size.
"""

from __future__ import annotations

import csv
from pathlib import Path

from grace.core.quotas import TenantQuota
from grace.spec.errors import SpecError, SpecProblem
from grace.spec.loader import read_yaml


def load_quotas(path: Path | str, cluster_gpus: int) -> dict[str, TenantQuota]:
    p = Path(path)
    if p.suffix.lower() == ".csv":
        return _from_csv(p, cluster_gpus)
    data = read_yaml(p)
    tenants = data.get("tenants") if isinstance(data, dict) else None
    if not isinstance(tenants, dict) or not tenants:
        raise SpecError(str(p), [SpecProblem("tenants", "expected a mapping of tenant -> quota")])
    out: dict[str, TenantQuota] = {}
    problems: list[SpecProblem] = []
    allowed = {"guaranteed_gpus", "borrow_limit_gpus", "weight", "preemptions_per_hour"}
    for name, q in tenants.items():
        if not isinstance(q, dict):
            problems.append(SpecProblem(f"tenants.{name}", "expected a mapping of quota fields"))
            continue
        unknown = set(q) - allowed
        if unknown:
            problems.append(SpecProblem(f"tenants.{name}.{sorted(unknown)[0]}",
                                        f"unknown field; use {sorted(allowed)}"))
            continue
        try:
            vals = {k: float(v) for k, v in q.items()}
        except (TypeError, ValueError):
            problems.append(SpecProblem(f"tenants.{name}", "quota values must be numbers"))
            continue
        if any(v < 0 for v in vals.values()):
            problems.append(SpecProblem(f"tenants.{name}", "quota values must not be negative"))
            continue
        if "preemptions_per_hour" in vals:
            vals["preemptions_per_hour"] = int(vals["preemptions_per_hour"])
        out[str(name)] = TenantQuota(**vals)  # type: ignore[arg-type]
    if problems:
        raise SpecError(str(p), problems)
    return out


def _from_csv(p: Path, cluster_gpus: int) -> dict[str, TenantQuota]:
    try:
        rows = list(csv.reader(p.open()))
    except OSError as e:
        raise SpecError(str(p), [SpecProblem("", f"cannot read file: {e.strerror}")]) from e
    sizes: dict[str, float] = {}
    problems = []
    for i, row in enumerate(rows[1:], start=2):
        if len(row) < 2:
            problems.append(SpecProblem(f"line {i}", "expected two columns: tenant,size"))
            continue
        try:
            sizes[row[0].strip()] = float(row[1])
        except ValueError:
            problems.append(SpecProblem(f"line {i}", f"size {row[1]!r} is not a number"))
    if problems or not sizes:
        raise SpecError(str(p), problems or [SpecProblem("", "no tenants listed")])
    total = sum(sizes.values())
    return {t: TenantQuota(guaranteed_gpus=cluster_gpus * s / total, weight=s / total * len(sizes))
            for t, s in sizes.items()}
