"""grace.core does no I/O: the checks ruff's banned-api rule (src/grace/core/ruff.toml) cannot make.

Core is the pure policy engine; its callers own files, the terminal, the clock
and randomness, and pass in what it needs. TID251 bans the imported names
(``time.time``, ``random``, ``subprocess``, ...), but a bare builtin call such as
``open(...)`` or ``print(...)`` imports nothing, and ``Path(...).read_text()`` is a
method of an instance, so neither is visible to it. This test walks the AST of
every module under ``src/grace/core`` for those, and also makes sure the ruff
rule itself is still in force for core (and only for core).

Allowed on purpose (see ruff.toml): ``HealthTable.from_yaml`` reads its file
through ``grace.spec.loader``; that call is an import of spec, not one of these.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "src" / "grace" / "core"

#: Builtins that read or write outside the process: files and the terminal.
IO_BUILTINS = frozenset({"open", "print", "input"})
#: Methods that are file I/O whatever the receiver (pathlib, zipfile, importlib.resources all agree).
IO_METHODS = frozenset({"read_text", "write_text", "read_bytes", "write_bytes"})
#: ``open`` is a common method name (a breaker, a window); it counts only on a Path.
PATH_NAMES = frozenset({"Path", "PurePath", "PosixPath", "WindowsPath"})


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name the module binds anywhere: if it binds ``open`` itself, ``open(...)`` is not the builtin.

    Scope-blind on purpose: a module that shadows a builtin anywhere is rare
    enough to be left to review, and this keeps the check free of false failures.
    """
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _is_path(node: ast.expr) -> bool:
    """``Path``, ``pathlib.Path``, or a call of either (``Path(x)``)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id in PATH_NAMES
    return isinstance(node, ast.Attribute) and node.attr in PATH_NAMES


def impure_calls(source: str, filename: str = "<string>") -> list[str]:
    """``file:line: what`` for every I/O call TID251 cannot see."""
    tree = ast.parse(source, filename)
    shadowed = _bound_names(tree) & IO_BUILTINS
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in IO_BUILTINS and func.id not in shadowed:
            found.append(f"{filename}:{node.lineno}: builtin {func.id}()")
        elif isinstance(func, ast.Attribute) and (
            func.attr in IO_METHODS or (func.attr == "open" and _is_path(func.value))
        ):
            found.append(f"{filename}:{node.lineno}: .{func.attr}() (file I/O)")
    return found


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_core_calls_no_io_builtins_and_no_path_io() -> None:
    modules = core_modules()
    assert len(modules) > 10, f"found only {len(modules)} modules under {CORE}"
    found = [
        hit
        for path in modules
        for hit in impure_calls(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert not found, (
        "grace.core is pure: take the data (or a `now`, or a generator) as an argument and let "
        "the caller do the I/O:\n  " + "\n  ".join(found)
    )


@pytest.mark.parametrize(
    ("source", "hits"),
    [
        ("open('x')", ["builtin open()"]),
        ("print('decided')", ["builtin print()"]),
        ("x = input()", ["builtin input()"]),
        ("Path('x').read_text()", [".read_text() (file I/O)"]),
        ("pathlib.Path(p).write_text('y')", [".write_text() (file I/O)"]),
        ("Path(p).open()", [".open() (file I/O)"]),
        ("p = Path(q)\np.read_bytes()", [".read_bytes() (file I/O)"]),
        # not I/O, or not the builtin
        ("breaker.open()", []),
        ("from io import open\nopen('x')", []),  # not the builtin (TID251 bans io.open itself)
        ("def f(print):\n    print(1)", []),
        ("'print(1)'\n# open('x')", []),
        ("log.print_summary(x)", []),
    ],
)
def test_the_checker_finds_what_it_should_and_nothing_else(source: str, hits: list[str]) -> None:
    assert [h.split(": ", 1)[1] for h in impure_calls(source)] == hits


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    return [exe]


PROBE = "import time\n\n\ndef now() -> float:\n    return time.time()\n"


@pytest.mark.parametrize(("where", "banned"), [("src/grace/core/probe.py", True),
                                               ("src/grace/control/probe.py", False)])  # fmt: skip
def test_ruff_bans_the_clock_in_core_and_only_there(where: str, banned: bool) -> None:
    """The nested ruff.toml is in force: a wall-clock read in a core module fails `make test`'s ruff."""
    out = subprocess.run(
        [*_ruff(), "check", "--no-cache", "--output-format", "concise", "--stdin-filename", where, "-"],
        input=PROBE, cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if banned:
        assert out.returncode == 1, out.stdout + out.stderr
        assert "TID251 `time.time` is banned: core is pure: time comes in as `now`" in out.stdout
    else:
        assert out.returncode == 0, out.stdout + out.stderr
