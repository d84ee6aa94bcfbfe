"""One error type for everything a user can get wrong in a spec.

A spec is loaded whole or not at all, so a caller either gets a valid object or
a ``SpecError`` listing every problem, each with the field path and a fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import ValidationError


@dataclass(frozen=True)
class SpecProblem:
    """One bad field: where it is and what to do about it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(ValueError):
    """Raised for any invalid user input; ``problems`` names each bad field."""

    def __init__(self, source: str, problems: list[SpecProblem]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s)\n{lines}")


_FIXES = {
    "extra_forbidden": "unknown field; remove it or check its spelling",
    "missing": "required field is missing; add it",
    "int_parsing": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
    "literal_error": None,
    "enum": None,
}


_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal",
                 "too_short", "too_long", "string_too_short", "string_pattern_mismatch"}
_LINE_PATH = re.compile(r"^[A-Za-z_][\w.\[\]]*: ")


def _shown(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error about a 10 MB string must not
    send the 10 MB back (or print it)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({len(text)} characters)"


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before", "function-plain"):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def from_validation_error(source: str, err: ValidationError, prefix: str = "") -> SpecError:
    """Turn pydantic's error list into problems with readable paths and fixes."""
    problems: list[SpecProblem] = []
    for e in err.errors(include_url=False):
        loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and "[" in p))
        path = _path(loc)
        if prefix:
            path = f"{prefix}.{path}" if path else prefix
        msg = e["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        fix = _FIXES.get(e["type"])
        if fix and e["type"] in ("extra_forbidden", "missing"):
            msg = fix
        elif fix:
            msg = f"{msg} ({fix}; got {_shown(e.get('input'))})"
        elif e["type"] in _RANGE_ERRORS:
            msg = f"{msg}; got {_shown(e.get('input'))}"
        if e["type"] == "value_error" and _LINE_PATH.match(msg.split("\n")[0]):
            # a model-level check that names its own field paths, one per line
            for line in msg.split("\n"):
                sub, _, text = line.partition(": ")
                full = f"{path}.{sub}" if path else sub
                problems.append(SpecProblem(full, text))
            continue
        problems.append(SpecProblem(path, msg))
    return SpecError(source, problems)
