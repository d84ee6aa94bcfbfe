"""The environment contract with the backend, and torch staying optional."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grace.runtime.config import DEFAULT_URL, RuntimeEnv

from .conftest import REPO


def test_under_grace(tmp_path: Path) -> None:
    env = RuntimeEnv.from_environ({
        "GRACE_JOB_ID": "12", "GRACE_ATTEMPT": "3", "GRACE_NODE": "a100-01",
        "GRACE_WORKDIR": str(tmp_path), "GRACE_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "GRACE_CHECKPOINT_INTERVAL_S": "240", "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1",
    })  # fmt: skip
    assert (env.job_id, env.attempt, env.node, env.rank, env.world_size) == ("12", 3, "a100-01", 5, 8)
    assert env.interval_s == 240.0
    assert env.checkpoint_dir == tmp_path / "checkpoints"
    assert env.attempt_dir == tmp_path / "attempt-3"
    assert env.url == DEFAULT_URL  # under Grace without GRACE_URL: the control plane's default


def test_job_uid() -> None:
    """Unique across control-plane stores, unlike GRACE_JOB_ID; opaque; absent outside Grace."""
    env = RuntimeEnv.from_environ({"GRACE_JOB_ID": "1", "GRACE_JOB_UID": "9f2c41:1"})
    assert (env.job_id, env.job_uid) == ("1", "9f2c41:1")
    assert RuntimeEnv.from_environ({"GRACE_JOB_ID": "1"}).job_uid is None  # an older control plane
    assert RuntimeEnv.from_environ({"GRACE_JOB_UID": " "}).job_uid is None


def test_standalone_defaults() -> None:
    env = RuntimeEnv.from_environ({})
    assert env.job_id is None and env.url is None and env.attempt == 1 and env.interval_s is None
    assert env.job_uid is None
    assert env.checkpoint_dir == env.workdir / "checkpoints"
    assert RuntimeEnv.from_environ({"GRACE_URL": "http://x:1"}).url is None  # no job id: nowhere to post


def test_grace_and_grace_runtime_import_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any 'import torch' now raises ImportError
        "import grace, grace.runtime, grace.runtime.checkpoint, grace.runtime.heartbeat\n"
        "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
