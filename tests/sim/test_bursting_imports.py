"""The bursting adapters stand on their own: no import circle with the drivers.

``grace.sim.bursting`` and ``grace.control.bursting`` return effects and never hold the
simulation or the reconciler, so neither imports its driver (not even for type hints) and
each module of the circle that used to be (engine, bursting, metrics) imports cleanly when
it is the first one a fresh interpreter loads.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import grace

SRC = Path(grace.__file__).resolve().parent
FIRST = ("grace.sim.engine", "grace.sim.bursting", "grace.sim.metrics", "grace.control.bursting")


@pytest.mark.parametrize("module", FIRST)
def test_each_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    r = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def _imported(path: Path) -> set[str]:
    """Every module a file imports, at the top, in functions or under TYPE_CHECKING."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize(("adapter", "drivers"), [
    ("sim/bursting.py", {"grace.sim.engine", "grace.sim.metrics", "grace.sim.runner"}),
    ("control/bursting.py", {"grace.control.reconciler", "grace.control.server",
                             "grace.control.store.repository", "grace.control.store.db"}),
])
def test_adapters_import_none_of_their_drivers(adapter: str, drivers: set[str]) -> None:
    assert _imported(SRC / adapter).isdisjoint(drivers)
