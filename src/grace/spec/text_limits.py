"""What a name or a free-text field a user sends may hold, so that every store keeps it.

A spec's strings end up in database columns, file names, cgroup names and
terminal tables. Input that one of them cannot hold must be refused where the
user sees the field (a 422 naming it), not found later as a 500 from the store:

* PostgreSQL's text types cannot hold a NUL character at all (SQLite can, so a
  NUL that "works" on one store fails on the other);
* the name columns are ``VARCHAR(200)`` (``store.models``): PostgreSQL refuses
  a longer value, SQLite silently keeps it;
* control characters (newlines, escapes) in a name forge lines in logs and
  tables and cannot be typed back on a command line;
* a tenant names a cgroup and a quota row and is typed in every ``--tenant``:
  letters, digits and ``. _ -``, starting with a letter or digit, 63 at most
  (a DNS label's length, which also keeps cgroup paths short).

Free text (a drain's reason, a signal's detail) may hold newlines and tabs but
never a NUL or other control characters, and has a length limit of its own.

These checks guard the edge, where input arrives. A spec read back from the store
(``Job.spec``, the reconciler's snapshot) is validated again with ``STORED`` as
pydantic's context, which skips them: a job accepted before they existed (a
tenant with a space, on SQLite a longer name) must keep running, not fail every
cycle. That is why the lengths live in these checks, not in ``Field(max_length)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import AfterValidator, ValidationInfo

#: pydantic context for a spec read back from the store: the edge checks here are skipped.
STORED: dict[str, bool] = {"stored": True}
#: The name columns' width (``String(200)`` in ``store.models``).
MAX_NAME_CHARS = 200
#: A tenant is a DNS-label-like word: it names cgroups, quota rows and CLI arguments.
MAX_TENANT_CHARS = 63
TENANT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
#: The longest free-text field (a reason, a detail): a paragraph, not a file.
MAX_TEXT_CHARS = 2000
#: C0 controls, DEL and C1 controls: never in a name.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: In free text, tab, newline and carriage return are allowed.
_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _surrogate(text: str) -> bool:
    """A lone surrogate cannot be encoded as UTF-8, so no store can keep it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _described(char: str) -> str:
    return "a NUL byte" if char == "\0" else f"the control character {char!r}"


def name_problem(text: str, what: str, max_chars: int = MAX_NAME_CHARS) -> str | None:
    """Why ``text`` cannot be a name (``what`` says which), or None when it can."""
    if not text.strip():
        return f"{what} is blank: give it a name"
    if len(text) > max_chars:
        return f"{what} is {len(text)} characters; at most {max_chars} characters: shorten it"
    if m := _CONTROL.search(text):
        return f"{what} holds {_described(m.group())}: use printable characters only"
    if _surrogate(text):
        return f"{what} is not valid text (a lone surrogate): fix its encoding"
    return None


def tenant_problem(text: str, what: str = "the tenant") -> str | None:
    """Why ``text`` cannot name a tenant, or None when it can."""
    if TENANT_PATTERN.fullmatch(text) is None:
        shown = text if len(text) <= 70 else text[:67] + "..."
        return (f"{what} {shown!r} is not a valid tenant name: use 1 to {MAX_TENANT_CHARS} "
                "letters, digits, '.', '_' or '-', starting with a letter or digit "
                "(e.g. research)")
    return None


def text_problem(text: str, what: str, max_chars: int = MAX_TEXT_CHARS) -> str | None:
    """Why ``text`` cannot be kept as free text (newlines and tabs are fine), or None."""
    if len(text) > max_chars:
        return f"{what} is {len(text)} characters; at most {max_chars}: shorten it"
    if m := _TEXT_CONTROL.search(text):
        return f"{what} holds {_described(m.group())}: remove it"
    if _surrogate(text):
        return f"{what} is not valid text (a lone surrogate): fix its encoding"
    return None


def _checked(problem: Callable[[str], str | None]) -> AfterValidator:
    def check(value: str, info: ValidationInfo) -> str:
        if isinstance(info.context, dict) and info.context.get("stored"):
            return value  # accepted once already: see STORED
        why = problem(value)
        if why is not None:
            raise ValueError(why)
        return value

    return AfterValidator(check)


def name_check(what: str, max_chars: int = MAX_NAME_CHARS) -> AfterValidator:
    """A pydantic validator for a name field: ``Annotated[str, name_check("the name")]``."""
    return _checked(lambda v: name_problem(v, what, max_chars))


def tenant_check(what: str = "the tenant") -> AfterValidator:
    """A pydantic validator for a tenant field (see ``TENANT_PATTERN``)."""
    return _checked(lambda v: tenant_problem(v, what))


def text_check(what: str, max_chars: int = MAX_TEXT_CHARS) -> AfterValidator:
    """A pydantic validator for a free-text field (a reason, a detail)."""
    return _checked(lambda v: text_problem(v, what, max_chars))
