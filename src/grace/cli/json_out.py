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
import os
import tempfile
from pathlib import Path

import typer

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


def _finite(v: object) -> object:
    """``v`` with every NaN or infinity replaced by None: ``json`` would write them as bare
    ``NaN``/``Infinity`` tokens, which no strict JSON reader accepts."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite(x) for x in v]
    return v


def require_writable(path: Path | str | None, flag: str) -> None:
    """Refuse, before any work, an output path that cannot be written: a directory, a
    parent that is missing or not a directory, or one where no file can be created
    (``/proc`` passes permission checks but refuses new files). ``-`` is stdout."""
    if path is None or to_stdout(path):
        return
    target = Path(path)
    parent = target.parent
    fix = "give a file path in a directory you can write"
    if target.is_dir():
        raise typer.BadParameter(f"{target} is a directory; {fix}", param_hint=flag)
    if parent.exists() and not parent.is_dir():
        raise typer.BadParameter(f"{parent} is not a directory; {fix}", param_hint=flag)
    probe = parent
    while not probe.exists():  # write_json creates missing parents: test the nearest one
        probe = probe.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=".grace-probe-", dir=probe)
    except OSError as e:
        raise typer.BadParameter(f"cannot write {target} ({e.strerror}); {fix}",
                                 param_hint=flag) from None
    os.close(fd)
    os.unlink(tmp)


def check_json_out(value: Path | None) -> Path | None:
    """A typer callback for ``--json PATH``: refused while parsing, before any work."""
    require_writable(value, "--json")
    return value


def check_html_out(value: Path | None) -> Path | None:
    """A typer callback for ``--html PATH``: refused while parsing, before any work."""
    if value is not None and to_stdout(value):
        raise typer.BadParameter("the report is a file; give a path ending in .html",
                                 param_hint="--html")
    require_writable(value, "--html")
    return value


def write_json(path: Path | str, payload: object) -> None:
    """``payload`` as indented JSON to ``path``, or to stdout for ``-``. Printed with plain
    ``print``, never Rich: a console would wrap or cut it at the terminal's width."""
    text = json.dumps(_finite(payload), indent=2, sort_keys=True, default=_jsonable,
                      allow_nan=False)
    if to_stdout(path):
        print(text)
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(target)


__all__ = ["STDOUT", "check_html_out", "check_json_out", "require_writable", "to_stdout",
           "write_json"]
