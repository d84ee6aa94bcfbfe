"""Any job log with a header row, given which column plays which role.

Sites keep their own logs (Slurm ``sacct``, a scheduler's database dump), so
rather than one loader per site this one takes a column map:
``submit=Submit,duration=Elapsed,gpus=NGPU,tenant=Account`` (see
:func:`parse_column_map`). Roles: ``submit``, ``duration`` and ``gpus`` are
required; ``tenant``, ``id``, ``limit``, ``name`` and the data-path figures
``model_gb``, ``grad_gb``, ``read_gbps``, ``step_s`` are optional.

Values it understands:

- submit: a number (× ``time_unit``) or an ISO-8601 timestamp
  (``2023-01-05T10:00:00``, as sacct prints it). The first readable row fixes
  which; a later row of the other kind is skipped, since mixing epoch numbers
  with dates would put jobs decades apart.
- duration: a number (× ``time_unit``) or Slurm Elapsed ``[D-][HH:]MM:SS``.
- gpus: a whole number, or a Slurm TRES string such as
  ``billing=8,cpu=8,gres/gpu=2,mem=64G`` (the ``gres/gpu`` count is used).
- limit: the time limit the user asked for (sacct ``Timelimit``): a number
  (× ``time_unit``), Slurm ``[D-]HH:MM:SS``, ``D-HH[:MM]`` or ``MM:SS``,
  ``UNLIMITED`` (no limit); blank or ``Partition_Limit`` leaves it unsaid (the
  user model draws one). With ``--estimates user`` it is the job's estimate and
  enforced limit. A bad value skips the row, the reason naming the column.
- name: the job name (sacct ``JobName``); names such as ``finetune-...``,
  ``sweep-...`` or ``pretrain-...`` decide the workload class.
- model_gb, grad_gb, read_gbps, step_s: what the job moves, for the twin's
  data-path model (``TraceJob.model_gb``, ``grad_gb_per_step``,
  ``read_gbps_per_gpu``, ``step_compute_s``): non-negative numbers (GB, GB per
  step, GB/s per GPU, seconds); blank leaves one unsaid (``sim.data_path``'s
  documented default fills it). A bad value skips the row.

The delimiter is guessed from the header (``,``, ``|`` as in
``sacct --parsable2``, tab or ``;``). Use ``sacct -X`` so job steps do not
appear as extra jobs. Workload classes are guessed at replay time from name,
size and requested limit (``classify``), with sweeps detected from arrival
bursts when a tenant column is given.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from grace.sim.traces._common import (
    RowError,
    csv_table,
    duration_s,
    field,
    finish,
    finite,
    gpu_count,
    mark_sweeps,
    seconds_per,
    time_limit_s,
    timestamp_s,
    unique_id,
)
from grace.sim.traces.model import LoadReport, Trace

REQUIRED_ROLES = ("submit", "duration", "gpus")
#: data-path roles -> TraceJob fields (read only by the twin's opt-in data-path model)
DATA_PATH_ROLES = {"model_gb": "model_gb", "grad_gb": "grad_gb_per_step",
                   "read_gbps": "read_gbps_per_gpu", "step_s": "step_compute_s"}
OPTIONAL_ROLES = ("tenant", "id", "limit", "name", *DATA_PATH_ROLES)
ROLES = REQUIRED_ROLES + OPTIONAL_ROLES

_TRES_GPU = re.compile(r"(?:^|,)gres/gpu(?::[^=,]*)?=(\d+)")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def parse_column_map(text: str) -> dict[str, str]:
    """``"submit=Submit,duration=Elapsed,gpus=NGPU"`` → ``{"submit": "Submit", ...}``.

    Raises ValueError naming the bad part and the allowed roles when a part
    is not ``role=column``, a role is unknown or repeated, or a required
    role is missing.
    """
    allowed = f"roles are {', '.join(REQUIRED_ROLES)} (required) and {', '.join(OPTIONAL_ROLES)} (optional)"
    mapping: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        role, sep, column = (s.strip() for s in part.partition("="))
        if not sep or not role or not column:
            raise ValueError(f"column map part {part!r} is not role=column; {allowed}")
        if role not in ROLES:
            raise ValueError(f"column map part {part!r}: unknown role {role!r}; {allowed}")
        if role in mapping:
            raise ValueError(f"column map part {part!r}: role {role!r} given twice; {allowed}")
        mapping[role] = column
    _check_roles(mapping)
    return mapping


def _check_roles(columns: dict[str, str]) -> None:
    unknown = sorted(set(columns) - set(ROLES))
    if unknown:
        raise ValueError(f"unknown column role(s) {unknown}; roles are {list(ROLES)}")
    missing = [r for r in REQUIRED_ROLES if not columns.get(r)]
    if missing:
        raise ValueError(
            f"column map lacks required role(s) {missing}; write e.g. "
            "submit=Submit,duration=Elapsed,gpus=NGPU (optional: tenant=..., id=..., "
            "limit=Timelimit, name=JobName)"
        )


def _gpus(text: str) -> int:
    if "=" in text:  # Slurm TRES: the gres/gpu count, 0 if the job had none
        m = _TRES_GPU.search(text)
        return gpu_count(m.group(1) if m else "0")
    return gpu_count(text)


def _fact(text: str, what: str) -> float:
    value = finite(text, what)
    if value < 0:
        raise RowError(f"negative {what}")
    return value


def load_csv(path: Path | str, columns: dict[str, str], time_unit: str = "s") -> Trace:
    """Load a headed CSV whose columns ``columns`` maps to roles; bad rows are counted, not raised."""
    _check_roles(columns)
    scale = seconds_per(time_unit)
    # A role the caller named must exist, optional or not: a typo in tenant=
    # should not quietly put every job in one tenant.
    required = [columns[r] for r in ROLES if columns.get(r)]
    report = LoadReport(source=str(path))
    pending: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    numeric_submit: bool | None = None
    with csv_table(path, required, delimiter=None) as (col, rows):
        i_sub, i_dur, i_gpu = (col[columns[r]] for r in REQUIRED_ROLES)
        i_ten = col.get(columns.get("tenant", ""))
        i_id = col.get(columns.get("id", ""))
        i_lim = col.get(columns.get("limit", ""))
        i_name = col.get(columns.get("name", ""))
        i_facts = [(f, col[columns[r]]) for r, f in DATA_PATH_ROLES.items() if columns.get(r)]
        for row in rows:
            n = report.rows
            report.rows += 1
            try:
                raw_submit = field(row, i_sub)
                if not raw_submit:
                    raise RowError("missing submit time")
                is_number = bool(_NUMBER.match(raw_submit))
                if numeric_submit is not None and is_number != numeric_submit:
                    raise RowError("submit format differs from earlier rows")
                submit = finite(raw_submit, "submit time") * scale if is_number else timestamp_s(raw_submit)
                duration = duration_s(field(row, i_dur), scale, elapsed=True)
                gpus = _gpus(field(row, i_gpu))
                tenant = (field(row, i_ten) if i_ten is not None else "") or "default"
                raw_id = (field(row, i_id) if i_id is not None else "") or str(n)
                limit = (time_limit_s(field(row, i_lim), scale, columns["limit"])
                         if i_lim is not None else None)
                name = (field(row, i_name) if i_name is not None else "") or None
                facts = {f: _fact(field(row, i), f) for f, i in i_facts if field(row, i)}
            except RowError as e:
                report.skip(e.reason)
                continue
            numeric_submit = is_number
            pending.append({
                "job_id": unique_id(raw_id, seen),
                "submit_s": submit,
                "duration_s": duration,
                "gpus": gpus,
                "tenant": tenant,
                "limit_s": limit,
                "name": name,
                **facts,
            })
    if i_ten is not None:
        mark_sweeps(pending)
    return finish(pending, report)
