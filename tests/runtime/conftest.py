"""Helpers for the runtime tests: small models in-process, the examples under torchrun."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def example_env(workdir: Path, attempt: int = 1, **extra: str) -> dict[str, str]:
    """The environment Grace would give a job, minus the control plane (no job id, no URL)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRACE_", "TORCHELASTIC_"))}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(
        GRACE_WORKDIR=str(workdir),
        GRACE_ATTEMPT=str(attempt),
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO / "src"),
        **extra,
    )
    return env


def run_example(
    script: str,
    workdir: Path,
    *args: str,
    nproc: int = 1,
    attempt: int = 1,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``examples/<script>`` in one process, or ``nproc`` under torchrun (gloo, CPU).

    ``env``: more variables on top of :func:`example_env`'s (``GRACE_JOB_UID``, say).
    """
    cmd = [sys.executable, str(REPO / "examples" / script), "--device", "cpu", *args]
    if nproc > 1:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--nnodes=1",
            "--node-rank=0", "--rdzv-backend=static", "--master-addr=127.0.0.1",
            f"--master-port={free_port()}", "--max-restarts=0", *cmd[1:],
        ]  # fmt: skip
    return subprocess.run(
        cmd, env=example_env(workdir, attempt, **(env or {})), cwd=REPO, capture_output=True, text=True,
        timeout=timeout,
    )


def load_params(path: Path) -> dict[str, object]:
    import torch

    return torch.load(path, weights_only=True)


def assert_bitwise_equal(a: dict[str, object], b: dict[str, object]) -> None:
    import torch

    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs"
