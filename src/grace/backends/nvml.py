"""A thin seam over NVML: what GPUs this machine really has, as a ClusterSpec.

The local backend asks here first; when NVML is missing (no ``pynvml``, no
driver) or finds no GPU, it falls back to the ClusterSpec it was given, whose
GPU ids are then just slots. ``pynvml`` (the ``nvidia-ml-py`` package) is
imported lazily and is never a dependency, so a CPU-only laptop or CI never
needs it.

Untested against real hardware in this repository's CI (no GPU there): the
pure part, :func:`cluster_from_gpus` and :func:`match_model`, is unit-tested
with fake NVML records; :func:`probe` has only been exercised where pynvml is
absent.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grace.spec.cluster import ClusterSpec, NodeGroupSpec, PoolSpec
from grace.spec.gpus import BUILTIN_GPUS, GpuModel

#: (pattern on the upper-cased NVML name, minimum GiB or 0, catalog model), first match wins.
#: Order matters: "A100" before "A10", the 80 GB A100 before the 40 GB one.
_RULES: tuple[tuple[str, float, str], ...] = (
    (r"GB200|B200", 0, "B200"),
    (r"H200", 0, "H200"),
    (r"H100", 0, "H100-SXM"),
    (r"A100", 60, "A100-80GB"),
    (r"A100", 0, "A100-40GB"),
    (r"L40S", 0, "L40S"),
    (r"V100", 24, "V100-32GB"),
    (r"V100", 0, "V100-16GB"),
    (r"P100", 0, "P100"),
    (r"\bT4\b", 0, "T4"),
    (r"\bA10G?\b", 0, "A10"),
    (r"MI300X", 0, "MI300X"),
)


@dataclass(frozen=True)
class NvmlGpu:
    """One GPU as NVML reports it; ``index`` is the NVML (PCI bus order) index."""

    index: int
    name: str
    memory_gb: float
    power_w: float | None = None
    mig_enabled: bool = False


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe(import_nvml: Callable[[], Any] | None = None) -> list[NvmlGpu]:
    """The GPUs NVML sees, or ``[]`` when pynvml, the driver or any GPU is missing.

    Any NVML error means "no NVML" rather than a crash: the backend then runs
    on the ClusterSpec it was given.
    """
    try:
        nvml = import_nvml() if import_nvml is not None else importlib.import_module("pynvml")
    except ImportError:
        return []
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return []
    try:
        gpus: list[NvmlGpu] = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            mem = nvml.nvmlDeviceGetMemoryInfo(h).total / 2**30
            try:
                power: float | None = nvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0
            except Exception:
                power = None
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(h)
                mig = bool(current)
            except Exception:  # not MIG-capable
                mig = False
            gpus.append(NvmlGpu(i, _text(nvml.nvmlDeviceGetName(h)), mem, power, mig))
        return gpus
    except Exception:
        return []
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def match_model(nvml_name: str, memory_gb: float) -> str | None:
    """The built-in catalog model an NVML device name denotes, if any."""
    upper = nvml_name.upper()
    for pattern, min_gb, model in _RULES:
        if re.search(pattern, upper) and memory_gb >= min_gb:
            return model
    return None


def _safe_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "gpu"
    return name if name[0].isalnum() else f"n{name}"


def _memory_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        return 64.0


def cluster_from_gpus(
    gpus: list[NvmlGpu], host: str | None = None
) -> tuple[ClusterSpec, dict[str, tuple[int, ...]]]:
    """This machine as a ClusterSpec, plus each node's slot -> NVML index map.

    One node named after the host when all GPUs are one model; a mixed machine
    becomes one node per model (``<host>-<model>``), because a node group is
    homogeneous. A model missing from the catalog is added under ``gpu_models``
    with NVML's memory and power and placeholder speed and price (1 TFLOP/s,
    $1/h): enough to schedule on, not to rank against known models.
    """
    if not gpus:
        raise ValueError("no GPUs: NVML found none, use the given ClusterSpec instead")
    host = _safe_name(host or socket.gethostname())
    by_model: dict[str, list[NvmlGpu]] = {}
    extra: dict[str, GpuModel] = {}
    for g in gpus:
        model = match_model(g.name, g.memory_gb)
        if model is None:
            model = _safe_name(g.name)
            extra.setdefault(
                model,
                GpuModel(
                    name=model,
                    vram_gb=round(g.memory_gb, 1),
                    bf16_tflops=1.0,
                    nvlink_gbps=0.0,
                    board_watts=g.power_w or 300.0,
                    usd_per_hour=1.0,
                ),
            )
        by_model.setdefault(model, []).append(g)
    mixed = len(by_model) > 1
    groups: list[NodeGroupSpec] = []
    slots: dict[str, tuple[int, ...]] = {}
    for model, members in by_model.items():
        node = f"{host}-{_safe_name(model)}" if mixed else host
        supports_mig = bool(BUILTIN_GPUS[model].mig_profiles) if model in BUILTIN_GPUS else False
        groups.append(
            NodeGroupSpec(
                name=node,
                count=1,
                names=[node],
                gpu=model,
                gpus_per_node=len(members),
                cpu_cores=os.cpu_count() or 1,
                memory_gb=round(_memory_gb(), 1),
                mig_gpus_per_node=sum(g.mig_enabled for g in members) if supports_mig else 0,
                pool="local",
            )
        )
        slots[node] = tuple(g.index for g in members)
    spec = ClusterSpec(
        name=f"local-{host}",
        pools=[PoolSpec(name="local")],
        gpu_models=list(extra.values()),
        node_groups=groups,
    )
    return spec, slots
