"""Alibaba PAI 2020 machine inventory (``pai_machine_spec``) → machines and a cluster spec.

The PAI job tables are too large to ship, but the machine table is small and
is the one public inventory of a big heterogeneous training cluster, so it is
useful as a cluster to replay other traces on. The table is read straight out
of ``pai_machine_spec.tar.gz`` (no extraction to disk). It has no header; the
columns come from ``headers/pai_machine_spec.header``:
``machine, gpu_type, cap_cpu, cap_mem, cap_gpu`` (memory in GB).

PAI GPU types map to catalog names: ``P100``, ``T4``, ``V100`` (the 16 GB
part; PAI names the 32 GB one ``V100M32``) and ``V100M32``. ``MISC`` is PAI's
bucket for assorted older GPUs it did not break down, so it has no catalog
model; ``CPU`` machines have no GPUs at all.
"""

from __future__ import annotations

import csv
import io
import re
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grace.sim.traces._common import RowError, field, finite, require_file
from grace.sim.traces.model import LoadReport

#: Columns of the headerless table, per ``headers/pai_machine_spec.header``.
COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")

#: PAI gpu_type → built-in catalog name; None: no catalog model (MISC is undisclosed, CPU has none).
PAI_GPU_MODELS: dict[str, str | None] = {
    "P100": "P100",
    "T4": "T4",
    "V100": "V100-16GB",
    "V100M32": "V100-32GB",
    "MISC": None,
    "CPU": None,
}


@dataclass(frozen=True, slots=True)
class PaiMachine:
    """One PAI machine; ``catalog_model`` is None for MISC, CPU and unknown types."""

    name: str
    gpu_type: str
    gpus: int
    cpus: int
    memory_gb: int
    catalog_model: str | None


def _member(tar: tarfile.TarFile, path: Path) -> tarfile.TarInfo:
    """The archive's one CSV (``pai_machine_spec.csv``), or a ValueError naming what is there."""
    files = [m for m in tar.getmembers() if m.isfile()]
    csvs = [m for m in files if m.name.endswith(".csv")]
    if len(csvs) != 1:
        raise ValueError(
            f"{path}: expected one .csv member in the archive, found {[m.name for m in files]}"
        )
    return csvs[0]


def load_pai_machines(path: Path | str, report: LoadReport | None = None) -> list[PaiMachine]:
    """All machines of the archive, CPU-only ones included (they are part of the inventory).

    Accepts the ``.tar.gz`` or an extracted ``.csv``. Bad rows are counted in
    ``report`` (pass one in to see them), never raised.
    """
    p = require_file(path)
    report = report if report is not None else LoadReport(source=str(p))
    if p.name.endswith((".tar.gz", ".tgz", ".tar")):
        try:
            with tarfile.open(p) as tar:
                member = _member(tar, p)
                fh = tar.extractfile(member)
                assert fh is not None  # a regular file member always has content
                text = fh.read().decode("utf-8-sig")
        except tarfile.TarError as e:
            raise ValueError(f"{p}: not a readable tar archive ({e})") from e
    else:
        text = p.read_text(encoding="utf-8-sig")
    machines: list[PaiMachine] = []
    for row in csv.reader(io.StringIO(text)):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if row[0].strip() == COLUMNS[0] and report.rows == 0:
            continue  # an extracted copy may have had the header prepended
        report.rows += 1
        try:
            name, gpu_type = field(row, 0), field(row, 1)
            cpus = finite(field(row, 2), "cap_cpu")
            mem = finite(field(row, 3), "cap_mem")
            gpus = finite(field(row, 4), "cap_gpu")
            if gpus < 0 or not gpus.is_integer():
                raise RowError("unparseable cap_gpu")
        except RowError as e:
            report.skip(e.reason)
            continue
        if not name:
            report.skip("missing machine name")
            continue
        machines.append(PaiMachine(
            name, gpu_type, int(gpus), int(cpus), int(mem), PAI_GPU_MODELS.get(gpu_type)
        ))
    report.kept = len(machines)
    return machines


def _group_name(gpu_type: str, gpus: int, cpus: int, mem: int) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"{gpu_type.lower()}-{gpus}g-{cpus}c-{mem}gb")


def pai_cluster_spec(
    machines: list[PaiMachine], name: str = "alibaba-pai-2020", unknown_gpu: str | None = None
) -> dict[str, Any]:
    """A ``ClusterSpec``-shaped dict: identical machines grouped into node groups.

    CPU-only machines are left out (a node group needs GPUs). Machines whose
    GPU type has no catalog model (``MISC`` and anything unrecognised) are
    left out too unless ``unknown_gpu`` names a catalog model to stand in for
    them; leaving 2,240 MISC GPUs out is honest, substituting is a modelling
    choice the caller should make knowingly. Groups are named
    ``<type>-<gpus>g-<cpus>c-<mem>gb`` and sorted by size, largest first.
    """
    counts: Counter[tuple[str, str, int, int, int]] = Counter()
    for m in machines:
        if m.gpus <= 0:
            continue
        gpu = m.catalog_model or unknown_gpu
        if gpu is None:
            continue
        counts[(m.gpu_type, gpu, m.gpus, m.cpus, m.memory_gb)] += 1
    groups = [
        {
            "name": _group_name(gpu_type, gpus, cpus, mem),
            "count": n,
            "gpu": gpu,
            "gpus_per_node": gpus,
            "cpu_cores": cpus,
            "memory_gb": mem,
        }
        for (gpu_type, gpu, gpus, cpus, mem), n in sorted(
            counts.items(), key=lambda kv: (-kv[1] * kv[0][2], kv[0])
        )
    ]
    if not groups:
        raise ValueError(
            "no machine has GPUs of a catalog model; pass unknown_gpu=<catalog name> "
            "to stand in for MISC/unknown types"
        )
    return {"name": name, "node_groups": groups}
