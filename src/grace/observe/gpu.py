"""Per-GPU telemetry through NVML, named as NVIDIA's DCGM exporter names it.

The seam is :class:`GpuTelemetry`: ``sample()`` returns one :class:`GpuSample`
per GPU NVML sees on this host, or ``[]`` where there is no ``pynvml``, no
driver or no GPU (a CPU-only machine reports that it has none; nothing fails).
``pynvml`` (the optional ``nvidia-ml-py`` package, ``pip install grace[gpu]``)
is imported lazily, as :mod:`grace.backends.nvml` does for inventory.

Names and units follow DCGM exporter's default counters
(``etc/default-counters.csv`` in NVIDIA/dcgm-exporter) so a Grafana board built
for DCGM reads Grace's series too:

=============================  ======================================  =========
DCGM field                     NVML call                               unit
=============================  ======================================  =========
``DCGM_FI_DEV_GPU_UTIL``       ``nvmlDeviceGetUtilizationRates().gpu``  %
``DCGM_FI_DEV_FB_USED``        ``nvmlDeviceGetMemoryInfo().used``       MiB
``DCGM_FI_DEV_FB_FREE``        ``nvmlDeviceGetMemoryInfo().free``       MiB
``DCGM_FI_DEV_POWER_USAGE``    ``nvmlDeviceGetPowerUsage()`` (mW)       W
``DCGM_FI_DEV_GPU_TEMP``       ``nvmlDeviceGetTemperature(GPU)``        C
``DCGM_FI_PROF_SM_ACTIVE``     GPM ``NVML_GPM_METRIC_SM_UTIL`` / 100   ratio
=============================  ======================================  =========

SM activity is a profiling metric: NVML exposes it only through GPU
Performance Monitoring (Hopper and newer), as the change between two samples,
so the first call after start reports none and a device without GPM never
does. Any NVML error on one reading leaves that reading out rather than failing
the scrape.

Not run against a real GPU in this repository's CI (there is none): the tests
drive :class:`GpuTelemetry` through a fake module with NVML's call shapes.
"""

from __future__ import annotations

import contextlib
import importlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRICS_GET_VERSION = 1


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's readings now; a reading NVML could not give is None."""

    index: int
    uuid: str
    name: str
    util_pct: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    sm_active: float | None = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuTelemetry:
    """Samples this host's GPUs; ``import_nvml`` stands in for ``import pynvml`` in tests."""

    def __init__(self, import_nvml: Callable[[], Any] | None = None,
                 hostname: str | None = None) -> None:
        self.hostname = hostname or socket.gethostname()
        self._import = import_nvml or (lambda: importlib.import_module("pynvml"))
        self._nvml: Any = None
        self._tried = False
        self._lock = threading.Lock()
        self._gpm_prev: dict[int, Any] = {}  # index -> the previous GPM sample
        self.why_none = ""  # why sample() is empty: shown by /metrics' help and `grace why`

    def _init(self) -> Any:
        if self._tried:
            return self._nvml
        self._tried = True
        try:
            nvml = self._import()
        except ImportError:
            self.why_none = "pynvml is not installed (pip install 'grace[gpu]')"
            return None
        try:
            nvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.why_none = f"NVML did not start: {e}"
            return None
        self._nvml = nvml
        return nvml

    def sample(self) -> list[GpuSample]:
        """Every GPU's readings, in NVML index order; [] without NVML or GPUs."""
        with self._lock:
            nvml = self._init()
            if nvml is None:
                return []
            try:
                count = int(nvml.nvmlDeviceGetCount())
            except Exception as e:
                self.why_none = f"NVML could not count GPUs: {e}"
                return []
            if count == 0:
                self.why_none = "NVML sees no GPU on this host"
            return [s for i in range(count) if (s := self._one(nvml, i)) is not None]

    def _one(self, nvml: Any, index: int) -> GpuSample | None:
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid, name = _text(nvml.nvmlDeviceGetUUID(h)), _text(nvml.nvmlDeviceGetName(h))
        except Exception:
            return None
        util = used = free = power = temp = None
        with contextlib.suppress(Exception):
            util = float(nvml.nvmlDeviceGetUtilizationRates(h).gpu)
        with contextlib.suppress(Exception):
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
            used, free = mem.used / 2**20, mem.free / 2**20
        with contextlib.suppress(Exception):
            power = nvml.nvmlDeviceGetPowerUsage(h) / 1000.0
        with contextlib.suppress(Exception):
            temp = float(nvml.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU))
        return GpuSample(index, uuid, name, util, used, free, power, temp, self._sm_active(nvml, index, h))

    def _sm_active(self, nvml: Any, index: int, handle: Any) -> float | None:
        """SM activity between the previous sample and this one (GPM); None where unsupported."""
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                return None
            current = nvml.nvmlGpmSampleGet(handle, nvml.nvmlGpmSampleAlloc())
        except Exception:
            return None
        previous = self._gpm_prev.get(index)
        self._gpm_prev[index] = current
        if previous is None:
            return None
        try:
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = 1
            request.sample1, request.sample2 = previous, current
            request.metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL
            value = float(nvml.nvmlGpmMetricsGet(request).metrics[0].value) / 100.0
        except Exception:
            return None
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlGpmSampleFree(previous)
        return min(1.0, max(0.0, value))
