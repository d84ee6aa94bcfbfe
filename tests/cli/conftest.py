"""The CLI tests reuse the control plane's test doubles (``tests/control/helpers.py``):
a scripted backend, a clock the test moves, real tokens and ``served`` (the real app on
uvicorn in a thread). pytest puts a test's own folder on ``sys.path``, not its
neighbours', so this one is added here."""

from __future__ import annotations

import sys
from pathlib import Path

CONTROL_TESTS = Path(__file__).resolve().parents[1] / "control"
if str(CONTROL_TESTS) not in sys.path:
    sys.path.insert(0, str(CONTROL_TESTS))
