"""What ``--json`` means on verbs whose JSON is a report (``simulate``, ``compare``,
``plan``, ``whatif``, ``showback``): ``--json PATH`` writes it to a file (atomically,
as before), ``--json -`` prints it to stdout, alone, so ``grace plan ... --json - | jq``
reads JSON and nothing else (the table is then not printed; messages go to stderr).
On live verbs ``--json`` is a flag that prints JSON to stdout: ``-`` makes the report
verbs do the same.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

#: ``--json -``: stdout, as ``-`` means for most Unix tools.
STDOUT = "-"


def to_stdout(path: Path | str | None) -> bool:
    """Is ``path`` the ``-`` that asks for JSON on stdout (and no table)?"""
    return path is not None and str(path) == STDOUT


def _jsonable(v: object) -> object:
    """What ``json`` cannot hold (a path, an enum), as text."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return str(v)


def write_json(path: Path | str, payload: object) -> None:
    """``payload`` as indented JSON to ``path``, or to stdout for ``-``. Printed with plain
    ``print``, never Rich: a console would wrap or cut it at the terminal's width."""
    text = json.dumps(payload, indent=2, sort_keys=True, default=_jsonable)
    if to_stdout(path):
        print(text)
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(target)


__all__ = ["STDOUT", "to_stdout", "write_json"]
