"""Alibaba cluster-trace-gpu-v2023 ("openb", the FGD paper's GPU-sharing cluster).

Pods (``openb_pod_list_*.csv``): ``name, cpu_milli, memory_mib, num_gpu,
gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time,
scheduled_time``, times in seconds. What makes this trace worth replaying is
GPU sharing: a pod with ``num_gpu == 1`` and ``gpu_milli < 1000`` asks for a
fraction of one GPU, which becomes ``TraceJob(gpus=1, gpu_milli=...)``.
Multi-GPU pods always ask for whole GPUs (``gpu_milli`` is 1000 on every one
of them in every variant file). CPU-only pods (``num_gpu == 0``) are skipped
with reason ``"cpu_only"`` unless ``keep_cpu_only``: a replay schedules GPUs, but
the packing experiment (``sim.packing``) keeps them, as FGD does, because their
CPU and memory on a GPU node can strand that node's GPUs. A kept one is
``TraceJob(gpus=0)``.

Duration is ``deletion_time - creation_time``. Pods still running when the
trace was cut have the cut time as deletion, so long durations are censored,
not true run lengths. Pending pods that never ran are kept: they are demand.

``qos`` sets priority and preemption the way Kubernetes/Alibaba use it:
latency-sensitive (``LS``) and ``Guaranteed`` pods get priority 2 and are not
preemptible, ``Burstable`` 1, best-effort (``BE``) 0; the last two may be
preempted. There is no tenant column, so every pod is tenant ``"default"``.

``gpu_spec`` (empty, ``"T4"``, ``"V100M16|V100M32"``...) is a GPU-type
constraint. It becomes ``gpu_model`` only when it names one model that the
catalog knows; the raw text is always kept in ``TraceJob.gpu_spec``.

The ``multigpu*`` variant files carry only the resource columns (no times),
so they cannot be replayed and raise ValueError for the missing column.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grace.sim.traces._common import (
    RowError,
    csv_table,
    field,
    finish,
    finite,
    positive_duration,
)
from grace.sim.traces.model import LoadReport, Trace

#: openb GPU model names → built-in catalog names (``grace.spec.gpus``).
#: G1, G2 and G3 are models Alibaba did not disclose: no catalog entry.
OPENB_GPU_MODELS: dict[str, str | None] = {
    "P100": "P100",
    "T4": "T4",
    "V100M16": "V100-16GB",
    "V100M32": "V100-32GB",
    "A10": "A10",
    "G1": None,
    "G2": None,
    "G3": None,
}

_QOS: dict[str, tuple[int, bool]] = {  # qos -> (priority, preemptible)
    "LS": (2, False),
    "Guaranteed": (2, False),
    "Burstable": (1, True),
    "BE": (0, True),
}

POD_REQUIRED = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time")
POD_OPTIONAL = ("gpu_spec", "qos", "cpu_milli", "memory_mib")
NODE_REQUIRED = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


def catalog_model(openb_name: str) -> str | None:
    """The catalog name of one openb GPU model, None when undisclosed or unknown."""
    return OPENB_GPU_MODELS.get(openb_name.strip())


def _spec_model(spec: str) -> str | None:
    """A catalog model when ``spec`` names exactly one known model, else None."""
    names = {s.strip() for s in spec.split("|") if s.strip()}
    return catalog_model(names.pop()) if len(names) == 1 else None


#: why a CPU-only pod was skipped (``LoadReport.skipped`` key)
CPU_ONLY = "cpu_only"


def load_openb_pods(path: Path | str, keep_cpu_only: bool = False) -> Trace:
    """Load an openb pod list; fractional pods keep their ``gpu_milli``.

    ``keep_cpu_only``: keep pods that ask for no GPU (``gpus == 0``) instead of
    skipping them as ``"cpu_only"``.
    """
    report = LoadReport(source=str(path))
    pending: list[dict[str, Any]] = []
    seen: set[str] = set()
    with csv_table(path, POD_REQUIRED, POD_OPTIONAL) as (col, rows):
        i_spec, i_qos = col.get("gpu_spec"), col.get("qos")
        i_cpu, i_mem = col.get("cpu_milli"), col.get("memory_mib")
        for row in rows:
            report.rows += 1
            try:
                name = field(row, col["name"]) or f"openb-row-{report.rows - 1}"
                num_gpu = finite(field(row, col["num_gpu"]), "GPU count")
                if num_gpu == 0 and not keep_cpu_only:
                    raise RowError(CPU_ONLY)
                if num_gpu < 0 or not num_gpu.is_integer():
                    raise RowError("unparseable GPU count")
                milli = finite(field(row, col["gpu_milli"]), "gpu_milli")
                gpu_milli: int | None = None
                if num_gpu == 0:
                    pass  # a CPU-only pod: gpu_milli says nothing
                elif num_gpu == 1 and 0 < milli < 1000:
                    gpu_milli = int(milli)
                elif milli != 1000:
                    raise RowError("gpu_milli outside 1..1000")
                created = finite(field(row, col["creation_time"]), "creation_time")
                deleted = finite(field(row, col["deletion_time"]), "deletion_time")
                duration = positive_duration(deleted - created)
                spec = field(row, i_spec) if i_spec is not None else ""
                qos = field(row, i_qos) if i_qos is not None else ""
                cpu = int(finite(field(row, i_cpu), "cpu_milli")) if i_cpu is not None else 0
                mem = int(finite(field(row, i_mem), "memory_mib")) if i_mem is not None else 0
            except RowError as e:
                report.skip(e.reason)
                continue
            if name in seen:
                report.skip("duplicate pod name")
                continue
            seen.add(name)
            gpus = int(num_gpu)
            priority, preemptible = _QOS.get(qos, (0, True))
            pending.append({
                "job_id": name,
                "submit_s": created,
                "duration_s": duration,
                "gpus": gpus,
                "gpu_milli": gpu_milli,
                "gpu_model": _spec_model(spec) if spec else None,
                "gpu_spec": spec or None,
                "priority": priority,
                "preemptible": preemptible,
                "cpu_milli": cpu,
                "memory_mib": mem,
            })
    return finish(pending, report)


@dataclass(frozen=True, slots=True)
class OpenbNode:
    """One GPU node of the openb cluster; ``model`` is openb's name, ``catalog_model`` Grace's."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str
    catalog_model: str | None


def load_openb_nodes(path: Path | str, report: LoadReport | None = None) -> list[OpenbNode]:
    """Load ``openb_node_list_*.csv``; nodes without GPUs are skipped ("no GPU").

    Pass a ``LoadReport`` to learn what was skipped; the list is what a
    cluster builder wants, so it is returned bare.
    """
    report = report if report is not None else LoadReport(source=str(path))
    nodes: list[OpenbNode] = []
    with csv_table(path, NODE_REQUIRED) as (col, rows):
        for row in rows:
            report.rows += 1
            try:
                gpus = finite(field(row, col["gpu"]), "GPU count")
                if gpus == 0:
                    raise RowError("no GPU")
                if gpus < 0 or not gpus.is_integer():
                    raise RowError("unparseable GPU count")
                cpu = finite(field(row, col["cpu_milli"]), "cpu_milli")
                mem = finite(field(row, col["memory_mib"]), "memory_mib")
                model = field(row, col["model"])
                name = field(row, col["sn"]) or f"openb-node-row-{report.rows - 1}"
            except RowError as e:
                report.skip(e.reason)
                continue
            if not model:
                report.skip("missing GPU model")
                continue
            nodes.append(OpenbNode(name, int(cpu), int(mem), int(gpus), model, catalog_model(model)))
    report.kept = len(nodes)
    return nodes
