"""What the runtime leaves in a job's directory that the control plane reads."""

from __future__ import annotations

import os
from pathlib import Path


def last_heartbeat(attempt_dir: Path) -> float | None:
    """When any rank of the attempt last wrote a heartbeat (the runtime's jsonl files)."""
    newest = None
    try:  # one scandir, no glob: the watches ask this of every running attempt each cycle
        with os.scandir(attempt_dir) as entries:
            for f in entries:
                if not (f.name.startswith("heartbeats-rank") and f.name.endswith(".jsonl")):
                    continue
                try:
                    m = f.stat().st_mtime
                except OSError:
                    continue
                newest = m if newest is None else max(newest, m)
    except OSError:  # no directory (yet): no heartbeat
        return None
    return newest


def latest_checkpoint(workdir: Path) -> str | None:
    """The newest committed checkpoint directory of a job, if any (the runtime writes them)."""
    root = workdir / "checkpoints"
    if not root.is_dir():
        return None
    done = sorted(p for p in root.iterdir() if p.is_dir() and (p / "MANIFEST.json").exists())
    return str(done[-1]) if done else None


__all__ = ["last_heartbeat", "latest_checkpoint"]
