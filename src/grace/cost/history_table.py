"""Reading a headed table whose columns are found by name, for the history loaders.

sacct and cloud-bill exports differ in letter case (``AllocTRES``, ``alloctres``)
and in what a site calls a column, so a loader names the *roles* it reads and each
role's usual column name; ``--columns role=Column,...`` renames any of them, and the
header is matched without regard to case. Only a missing required column (or a
wrong map) raises, naming the column, the columns the file has and the flag that
fixes it; bad cells are the loader's business (``RowError``, counted).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from grace.sim.traces._common import field, pick_delimiter, require_file


def parse_role_map(text: str | None, roles: Sequence[str], example: str) -> dict[str, str]:
    """``"cost_usd=Cost,usage_hours=Hours"`` -> ``{"cost_usd": "Cost", ...}``; None -> {}.

    Raises ValueError naming the bad part, the known roles and ``example`` when a part
    is not ``role=column``, names an unknown role or repeats one.
    """
    if text is None:
        return {}
    allowed = f"roles are {', '.join(roles)}; e.g. {example}"
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        role, sep, column = (s.strip() for s in part.partition("="))
        if not sep or not role or not column:
            raise ValueError(f"--columns part {part!r} is not role=column; {allowed}")
        if role not in roles:
            raise ValueError(f"--columns part {part!r}: unknown role {role!r}; {allowed}")
        if role in out:
            raise ValueError(f"--columns part {part!r}: role {role!r} given twice; {allowed}")
        out[role] = column
    return out


def cell_reader(col: Mapping[str, int]) -> Callable[[list[str], str], str]:
    """A reader of one row's cell by role, given ``headed_rows``' column positions: a role
    whose column the file lacks reads as ``""``, as a blank cell does."""

    def cell(row: list[str], role: str) -> str:
        i = col.get(role)
        return "" if i is None else field(row, i)

    return cell


@contextmanager
def headed_rows(
    path: Path | str,
    columns: Mapping[str, str],
    required: Sequence[str | tuple[str, ...]],
    *,
    what: str,
) -> Iterator[tuple[dict[str, int], Iterator[list[str]]]]:
    """Open ``path``; yield each role's column position (roles whose column is absent are
    left out) and the non-blank rows.

    ``columns`` maps every role to its column name (matched case-insensitively);
    ``required`` lists roles that must be present, or tuples of roles of which at
    least one must be. The delimiter is guessed from the header (``|`` for sacct
    ``--parsable2``, ``,`` for a bill).
    """
    p = require_file(path)
    with p.open(newline="", encoding="utf-8-sig") as f:
        first = f.readline()
        f.seek(0)
        reader = csv.reader(f, delimiter=pick_delimiter(first))
        header = next(reader, None)
        if not header or not any(h.strip() for h in header):
            raise ValueError(f"{what} file {p} is empty; expected a header row")
        names = [h.strip().lower() for h in header]
        index = {role: names.index(col.lower()) for role, col in columns.items()
                 if col.lower() in names}
        for need in required:
            options = (need,) if isinstance(need, str) else need
            if not any(r in index for r in options):
                wanted = " or ".join(repr(columns[r]) for r in options)
                raise ValueError(
                    f"{what} file {p} has no column {wanted}; its columns are "
                    f"{[h.strip() for h in header]}; is --format right? If so, rename with "
                    f"--columns {options[0]}=<your column>")
        yield index, (row for row in reader if row and (len(row) > 1 or row[0].strip()))


__all__ = ["headed_rows", "parse_role_map"]
