"""Output that fits: tables, names and durations readable at 80 columns and through a pipe.

A Slurm user reads ``grace jobs`` in an 80-column terminal or pipes it to ``less`` or
``grep`` (Rich then assumes 80 columns, or ``$COLUMNS``). Left to itself Rich shrinks
every column in proportion and cuts each cell at its end, so three sweep trials all
read ``sweep-s…``, a state reads ``complet…`` and a long reason wraps to a column of
one-word lines. The helpers here decide instead, per column, what may give way:

- identifiers, states and figures are never cut (``Fit.KEEP``);
- names are elided in the middle (``Fit.MIDDLE``): ``sweep-s…-3`` keeps both the
  family and the trial, so neighbours stay distinguishable;
- free text such as a reason is kept to one line and cut at its end (``Fit.END``), its
  full text being one ``grace job N`` away, or printed in full under the table
  (``Fit.NOTE``) where nothing else shows it;
- details that must be read in full wrap inside their column (``Fit.WRAP``).

Widths are shared max-min fairly among the columns that may give way, and a table whose
unbreakable columns alone are wider than the console is split into several tables that
each repeat the key column, so no line is ever wider than the console.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from rich import box
from rich.cells import cell_len
from rich.console import Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

ELLIPSIS = "…"

#: What one table cell holds: plain text (never read as Rich markup: a reason such as
#: ``[rank 3] lost`` must print as written) or a styled ``Text``.
Cell = str | Text


class Fit(StrEnum):
    """How a column gives way when the table is wider than the console."""

    KEEP = "keep"  # never cut: ids, states, figures
    MIDDLE = "middle"  # one line, elided in the middle: names
    END = "end"  # one line, cut at the end: free text whose full form is shown elsewhere
    NOTE = "note"  # one line, cut at the end, and in full under the table where it was cut
    WRAP = "wrap"  # wrapped onto more lines, never cut: details read in full


@dataclass(frozen=True)
class Column:
    """One column: its header, how it gives way, and the narrowest it may become."""

    header: str
    fit: Fit = Fit.KEEP
    justify: JustifyMethod = "left"
    #: a column that gives way keeps at least this many cells (or its header, if wider):
    #: narrower, a name or a reason says nothing
    min_width: int = 8
    #: its share of the width left to the columns that give way, against theirs: a name,
    #: which tells rows apart, may claim more than a tenant
    weight: int = 1


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines, tabs) made one space: a table row
    is one line, and a reason with a traceback in it must not break the layout."""
    return " ".join(text.split())


def _take(text: str, cells: int, from_end: bool = False) -> str:
    """The longest prefix (or suffix) of ``text`` that fills at most ``cells`` cells
    (a CJK character takes two)."""
    chars = reversed(text) if from_end else iter(text)
    out: list[str] = []
    used = 0
    for ch in chars:
        w = cell_len(ch)
        if used + w > cells:
            break
        out.append(ch)
        used += w
    return "".join(reversed(out)) if from_end else "".join(out)


def elide(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, elided in the middle: ``sweep-seed-12`` in 10
    is ``sweep…d-12``. The start names the family and the end the member (trial, seed,
    rank), so both are kept; the start gets the odd cell."""
    if cell_len(text) <= width:
        return text
    if width <= 0:
        return ""
    room = width - cell_len(ELLIPSIS)
    if room <= 0:
        return ELLIPSIS
    tail = _take(text, room // 2, from_end=True)
    head = _take(text, room - cell_len(tail))
    return head + ELLIPSIS + tail


def elide_end(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, cut at its end (``…`` marks the cut): for free
    text, whose start says what it is about."""
    if cell_len(text) <= width:
        return text
    if width <= 0:
        return ""
    return _take(text, width - cell_len(ELLIPSIS)) + ELLIPSIS


def elide_distinct(texts: Sequence[str], width: int) -> list[str]:
    """Each of ``texts`` elided in the middle to ``width``, keeping different texts
    different: where ``sweep-seed-1-lr-3e-4`` and ``sweep-seed-2-lr-3e-4`` would both read
    ``sweep-…3e-4``, the cut moves so the first place they differ shows between two
    ellipses (``swe…ed-1-l…3e-4``). Texts that cannot be told apart in ``width`` keep the
    plain middle elision."""
    out = [elide(t, width) for t in texts]
    groups: dict[str, set[str]] = {}
    for t, e in zip(texts, out, strict=True):
        groups.setdefault(e, set()).add(t)
    for e, members in groups.items():
        if len(members) < 2:
            continue
        differ = len(_common_prefix(sorted(members)))
        moved = {t: _window(t, differ, width) for t in members}
        taken = set(out) - {e}
        if len(set(moved.values())) == len(members) and taken.isdisjoint(moved.values()) and all(
                cell_len(m) <= width for m in moved.values()):
            out = [moved[t] if o == e and t in moved else o
                   for t, o in zip(texts, out, strict=True)]
    return out


def _common_prefix(texts: Sequence[str]) -> str:
    first, last = texts[0], texts[-1]  # sorted: the two that differ soonest
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def _window(text: str, at: int, width: int) -> str:
    """``text`` as its start, ``…``, a window around index ``at``, ``…``, its end."""
    room = width - 2 * cell_len(ELLIPSIS)
    edge = max(1, room // 4)
    mid = room - 2 * edge
    if mid < 1 or len(text) <= width:
        return elide(text, width)
    start = min(max(edge, at - mid // 2), len(text) - edge - mid)
    return text[:edge] + ELLIPSIS + text[start:start + mid] + ELLIPSIS + text[len(text) - edge:]


def duration(seconds: float | None) -> str:
    """A duration as people read it, two units at most: ``45s``, ``12m03s``, ``3h05m``,
    ``2d04h``; ``-`` when there is none. Raw seconds (``11107s``) make a reader divide."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _gap_cells(n: int) -> int:
    """Cells a table of ``n`` columns spends between them (the style ``_table`` draws:
    one cell of padding and one of separator between neighbours, none at the edges)."""
    return 2 * max(0, n - 1)


def _natural(col: Column, cells: Sequence[Cell]) -> int:
    texts = [c.plain if isinstance(c, Text) else c for c in cells]
    if col.fit in (Fit.MIDDLE, Fit.END, Fit.NOTE):
        texts = [one_line(t) for t in texts]
    widest = max((max((cell_len(line) for line in t.splitlines()), default=0)
                  for t in texts), default=0)
    return max(cell_len(col.header), widest)


def _floor(col: Column, natural: int) -> int:
    return natural if col.fit is Fit.KEEP else min(natural, max(col.min_width,
                                                                cell_len(col.header)))


def _allocate(columns: Sequence[Column], naturals: Sequence[int], width: int) -> list[int] | None:
    """Each column's width so the table fits ``width``, or None when even the columns at
    their narrowest do not. Columns that may give way share what the unbreakable ones
    leave max-min fairly by weight: the smallest needs (per unit of weight) are met in
    full, the rest split in proportion to their weights."""
    budget = width - _gap_cells(len(columns))
    widths = list(naturals)
    flexible = [i for i, c in enumerate(columns) if c.fit is not Fit.KEEP]
    left = budget - sum(naturals[i] for i, c in enumerate(columns) if c.fit is Fit.KEEP)
    if sum(_floor(columns[i], naturals[i]) for i in flexible) > left:
        return None
    if sum(naturals[i] for i in flexible) <= left:
        return widths
    todo = sorted(flexible, key=lambda i: naturals[i] / columns[i].weight)
    for n, i in enumerate(todo):
        floors_after = sum(_floor(columns[j], naturals[j]) for j in todo[n + 1:])
        weights = sum(columns[j].weight for j in todo[n:])
        share = max(_floor(columns[i], naturals[i]), left * columns[i].weight // weights)
        widths[i] = min(naturals[i], share, left - floors_after)
        left -= widths[i]
    return widths


#: Where a word too long for its column breaks: after a dot or a slash first
#: (``gpus.H100-SXM.offers.`` / ``hyperscaler.``), so a price-book path or a file path
#: wraps between its parts; a part still too wide breaks after a dash or underscore.
_PART_END = re.compile(r"(?<=[./])")
_SUBPART_END = re.compile(r"(?<=[_-])")


def break_long_words(text: str, width: int) -> str:
    """``text`` with each word wider than ``width`` cells broken onto new lines between
    its parts, every line as full as fits; a piece still wider is left to fold. Words
    that fit, and the spaces between words, are left for the table to wrap."""
    if width <= 0:
        return text

    def pieces(word: str) -> list[str]:
        out: list[str] = []
        for part in (p for p in _PART_END.split(word) if p):
            out += [part] if cell_len(part) <= width else [
                p for p in _SUBPART_END.split(part) if p]
        return out

    def split(word: str) -> str:
        if cell_len(word) <= width:
            return word
        lines: list[str] = []
        line = ""
        for piece in pieces(word):
            if line and cell_len(line + piece) > width:
                lines.append(line)
                line = ""
            line += piece
        return "\n".join([*lines, line])

    return re.sub(r"\S+", lambda m: split(m.group(0)), text)


def _cells(col: Column, values: Sequence[Cell], width: int) -> list[Text]:
    """One column's cells as ``Text`` (never markup), names and free text cut to ``width``,
    long words in wrapped columns broken between their parts."""
    if col.fit is Fit.WRAP:
        return [v if isinstance(v, Text) else Text(break_long_words(v, width)) for v in values]
    texts = [v if isinstance(v, Text) else Text(v) for v in values]
    if col.fit not in (Fit.MIDDLE, Fit.END, Fit.NOTE):
        return texts
    flat = [one_line(t.plain) for t in texts]
    cut = (elide_distinct(flat, width) if col.fit is Fit.MIDDLE
           else [elide_end(f, width) for f in flat])
    return [t if c == t.plain else Text(c, style=t.style) for t, c in zip(texts, cut, strict=True)]


def _table(columns: Sequence[Column], widths: Sequence[int], rows: Sequence[Sequence[Cell]],
           title: str | None) -> list[RenderableType]:
    """The table under its title (a line of its own, wrapped at the console's width, not
    the table's), then the notes of its ``Fit.NOTE`` cells that were cut: ``key: text``."""
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for col, w in zip(columns, widths, strict=True):
        wrap = col.fit is Fit.WRAP
        t.add_column(col.header, justify=col.justify, width=w, no_wrap=not wrap,
                     overflow="fold" if wrap else "ellipsis")
    cells = [_cells(c, [r[i] for r in rows], w)
             for i, (c, w) in enumerate(zip(columns, widths, strict=True))]
    notes: list[RenderableType] = []
    for n, row in enumerate(rows):
        t.add_row(*(col[n] for col in cells))
        for i, c in enumerate(columns):
            value = row[i]
            full = value.plain if isinstance(value, Text) else value
            if c.fit is Fit.NOTE and cells[i][n].plain != one_line(full):
                key = row[0].plain if isinstance(row[0], Text) else row[0]
                notes.append(Text(f"{key} {c.header}: {full}"))
    head: list[RenderableType] = [] if title is None else [Text(title, style="table.title")]
    return [*head, t, *notes]


def fit_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int,
              title: str | None = None, caption: str | None = None,
              key_columns: int = 1) -> RenderableType:
    """``rows`` under ``columns`` as a table no wider than ``width`` cells.

    When the unbreakable columns alone are too wide (showback's ten figures at 80
    columns), the columns are dealt into several tables in order, each repeating the
    first ``key_columns`` (the tenant, the job id) so every figure stays next to what it
    is about; the caption goes under the last one.
    """
    if any(len(r) != len(columns) for r in rows):
        raise ValueError(f"every row needs {len(columns)} cells, one per column")
    naturals = [_natural(c, [r[i] for r in rows]) for i, c in enumerate(columns)]
    widths = _allocate(columns, naturals, width)
    if widths is not None or len(columns) <= key_columns + 1:
        if widths is None:  # a key and one column that cannot fit: let the last give way
            widths = list(naturals)
        return Group(*_table(columns, widths, rows, title), *_caption(caption))
    keys = list(range(key_columns))
    groups: list[list[int]] = []
    current = list(keys)
    for i in range(key_columns, len(columns)):
        trial = [*current, i]
        if len(current) > key_columns and _allocate(
                [columns[j] for j in trial], [naturals[j] for j in trial], width) is None:
            groups.append(current)
            current = [*keys, i]
        else:
            current = trial
    groups.append(current)
    parts: list[RenderableType] = []
    for n, group in enumerate(groups):
        cols = [columns[j] for j in group]
        part_widths = _allocate(cols, [naturals[j] for j in group], width) or [
            naturals[j] for j in group]
        part_title = title if n == 0 or title is None else f"{title} (continued)"
        parts += _table(cols, part_widths, [[r[j] for j in group] for r in rows], part_title)
    return Group(*parts, *_caption(caption))


def _caption(caption: str | None) -> list[Text]:
    return [] if caption is None else [Text(caption)]
