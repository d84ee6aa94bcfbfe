"""What a job's command and environment may hold so that every launch can exec them.

A job's ``command`` and ``env`` end up in ``execve`` on every node of every
attempt. Input that exec refuses is not a transient launch failure: it fails
the same way at every retry, forever. So the same checks run twice: at submit
(``JobSpec``'s validators, so the user gets a 422 naming the field) and at
launch (``LaunchSpec.check``, for specs stored before these checks or built by
hand), and both use the functions here, so they can never disagree.

Why these numbers:

* Linux refuses ``execve`` with E2BIG when any single argv or envp string,
  counting its terminating NUL, is longer than ``MAX_ARG_STRLEN`` (32 pages =
  131072 bytes on 4 KiB pages, see ``include/uapi/linux/binfmts.h``). A command
  argument may therefore be at most 131071 bytes.
* All of argv and envp together must fit in ``ARG_MAX`` (a quarter of the stack
  limit: 2 MiB with the usual 8 MiB stack), shared with the control plane's own
  environment that a local attempt inherits and with the wrappers (torchrun, the
  rank shim) around the command. An env value of at most 32 KiB, 256 KiB for the
  whole env and 1 MiB for the whole command keep a job well inside it.
* A NUL cannot be passed at all: C strings end at it (Python raises
  ``ValueError: embedded null byte``), so it is refused rather than truncated.
* An env name must be a name a shell and ``os.environ`` agree on: ``A=B`` as a
  name would silently become ``A`` with value ``B=...`` in the child.

Bytes are counted as exec sees them: the string encoded with the filesystem
encoding (UTF-8 with surrogateescape), which is what ``subprocess`` does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from grace.spec.errors import SpecProblem

#: Linux's limit on one argv/envp string, terminating NUL included (include/uapi/linux/binfmts.h).
MAX_ARG_STRLEN = 131072
#: The longest command argument exec accepts: MAX_ARG_STRLEN less the NUL that ends it.
MAX_COMMAND_ARG_BYTES = MAX_ARG_STRLEN - 1
#: All arguments together (each counted with its NUL): well inside the usual 2 MiB ARG_MAX.
MAX_COMMAND_BYTES = 1024 * 1024
#: One environment value; larger data belongs in a file whose path the job gets.
MAX_ENV_VALUE_BYTES = 32 * 1024
#: One environment name; with the value limit, ``NAME=value`` stays far below MAX_ARG_STRLEN.
MAX_ENV_NAME_BYTES = 1024
#: The whole env the job adds (each ``NAME=value`` counted with its NUL).
MAX_ENV_BYTES = 256 * 1024
#: What POSIX shells accept as a variable name.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _encoded(text: str) -> bytes | None:
    """``text`` as exec will get it, or None if it cannot be encoded (a lone surrogate)."""
    try:
        return os.fsencode(text)
    except UnicodeEncodeError:
        return None


def _exec_bytes(text: str, what: str) -> tuple[bytes | None, str]:
    """``text`` as exec gets it, or None and why exec cannot pass it (``what`` names it)."""
    if "\0" in text:
        return None, f"{what} holds a NUL byte, which exec cannot pass: remove it"
    raw = _encoded(text)
    if raw is None:
        return None, f"{what} is not valid text (a lone surrogate): fix its encoding"
    return raw, ""


def _kib(n: int) -> str:
    return f"{n // 1024} KiB" if n % 1024 == 0 else f"{n} bytes"


def command_problems(command: Sequence[str] | None, field: str = "command") -> list[SpecProblem]:
    """Why ``command`` cannot be exec'd, one problem per bad argument; [] when it can.

    Every message names the argument in words (never ``path: text`` at its start),
    so a validator can join them into one pydantic error without its message being
    mistaken for a list of field paths (see ``spec.errors``).
    """
    if command is None or isinstance(command, str | bytes) or len(command) == 0:
        return [SpecProblem(field, "the command is empty: give the program and its arguments, "
                                   "e.g. ['python', 'train.py']")]
    problems: list[SpecProblem] = []
    total = 0
    for i, arg in enumerate(command):
        where = f"{field}[{i}]"
        if not isinstance(arg, str):
            problems.append(SpecProblem(where, f"the command's argument {i} is a "
                                               f"{type(arg).__name__}, not a string: quote it"))
            continue
        raw, why = _exec_bytes(arg, f"the command's argument {i}")
        if raw is None:
            problems.append(SpecProblem(where, why))
            continue
        if i == 0 and not arg.strip():
            problems.append(SpecProblem(where, "the command's program (argument 0) is blank: "
                                               "name the program to run, e.g. python"))
        if len(raw) > MAX_COMMAND_ARG_BYTES:
            problems.append(SpecProblem(
                where, f"the command's argument {i} is {len(raw)} bytes; exec accepts at most "
                       f"{MAX_COMMAND_ARG_BYTES} (Linux MAX_ARG_STRLEN): put the data in a file "
                       "and pass its path"))
        total += len(raw) + 1
    if total > MAX_COMMAND_BYTES:
        problems.append(SpecProblem(
            field, f"the command is {total} bytes in all; at most {_kib(MAX_COMMAND_BYTES)}: "
                   "put long argument lists in a file the program reads"))
    return problems


def env_problems(env: Mapping[str, str] | None, field: str = "env") -> list[SpecProblem]:
    """Why ``env`` cannot be passed to exec, one problem per bad variable; [] when it can.

    A bad name is reported at ``field`` itself (it cannot be written as a path);
    a bad value at ``field.NAME``.
    """
    if not env:
        return []
    problems: list[SpecProblem] = []
    total = 0
    for name, value in env.items():
        if not isinstance(name, str) or not isinstance(value, str):
            problems.append(SpecProblem(field, f"the environment variable {name!r} must map a "
                                               "string name to a string value: quote the value"))
            continue
        raw_name = _encoded(name)
        if raw_name is None or "\0" in name or ENV_NAME.fullmatch(name) is None:
            problems.append(SpecProblem(
                field, f"the environment variable name {name!r} is not valid: use letters, "
                       "digits and _, not starting with a digit (e.g. MY_FLAG)"))
            continue
        if len(raw_name) > MAX_ENV_NAME_BYTES:
            problems.append(SpecProblem(
                field, f"the environment variable name {name[:40]}... is {len(raw_name)} "
                       f"bytes; at most {MAX_ENV_NAME_BYTES}: shorten it"))
            continue
        where = f"{field}.{name}"
        raw, why = _exec_bytes(value, f"the value of {name}")
        if raw is None:
            problems.append(SpecProblem(where, why))
            continue
        if len(raw) > MAX_ENV_VALUE_BYTES:
            problems.append(SpecProblem(
                where, f"the value of {name} is {len(raw)} bytes; at most "
                       f"{_kib(MAX_ENV_VALUE_BYTES)} per value: put the data in a file and "
                       "pass its path"))
        total += len(raw_name) + 1 + len(raw) + 1
    if total > MAX_ENV_BYTES:
        problems.append(SpecProblem(
            field, f"the environment is {total} bytes in all; at most {_kib(MAX_ENV_BYTES)}: "
                   "move large values into files"))
    return problems


def launch_problems(command: Sequence[str] | None, env: Mapping[str, str] | None) -> list[SpecProblem]:
    """Everything in a launch's command and env that exec would refuse."""
    return [*command_problems(command), *env_problems(env)]


def joined(problems: Sequence[SpecProblem]) -> str:
    """One message for a validator: the problems' own sentences, ``;``-separated."""
    return "; ".join(p.message for p in problems)
