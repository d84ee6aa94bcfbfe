"""Two stores, one working directory: a job's files and checkpoints are its own (issue 12).

Job ids are unique only within a store. Before, a fresh store's job 1 found the
old store's job 1's checkpoint under ``jobs/1`` and "resumed" from it without
training. Now a job lives under ``jobs/<store id>-<job id>`` and each checkpoint
records ``GRACE_JOB_UID``; a checkpoint of another job put in its place is
refused with a message naming both jobs. Real ``grace up`` processes, real
training.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_e2e import ENDED, TRAIN, Server, _kill_leftovers

pytestmark = pytest.mark.slow

TINY = [*TRAIN, "--steps", "30", "--checkpoint-every", "10", "--batch-size", "4"]


def _job(tenant: str = "demo") -> dict:
    return {"name": "tiny", "tenant": tenant, "gpus": 1, "gpu_model": "A100-80GB",
            "command": TINY, "env": {"OMP_NUM_THREADS": "1"}}


def test_a_second_store_in_the_same_directory_starts_its_job_1_from_step_0(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Server(state, ("--db", f"sqlite:///{tmp_path / 'first.sqlite'}"),
                   token_file=tmp_path / "first.token").start()
    try:
        jid = first.submit(_job())
        assert first.wait(jid, ENDED, timeout=120)["state"] == "completed"
        assert "resumed from checkpoint" not in first.get(f"/jobs/{jid}/logs",
                                                         params={"tail": 100000})
    finally:
        first.stop()
    old_dirs = sorted((state / "jobs").iterdir())
    assert len(old_dirs) == 1 and old_dirs[0].name.endswith(f"-{jid}")
    assert any((old_dirs[0] / "checkpoints").iterdir())

    second = Server(state, ("--db", f"sqlite:///{tmp_path / 'second.sqlite'}"),
                    token_file=tmp_path / "second.token").start()
    try:
        again = second.submit(_job())
        assert again == jid  # the same id, in another store
        job = second.wait(again, ENDED, timeout=120)
        assert job["state"] == "completed"
        assert job["attempts"][0]["resumed_from"] is None
        logs = second.get(f"/jobs/{again}/logs", params={"tail": 100000})
        assert "resumed from checkpoint" not in logs and "step 30/30" in logs
        new_dirs = sorted(set((state / "jobs").iterdir()) - set(old_dirs))
        assert len(new_dirs) == 1 and new_dirs[0].name != old_dirs[0].name

        # a checkpoint copied in from the first store's job 1 is refused, naming both jobs:
        # the next job of this store will be job 2, in <this store's prefix>-2
        prefix = new_dirs[0].name.rsplit("-", 1)[0]
        planted = state / "jobs" / f"{prefix}-{again + 1}" / "checkpoints"
        shutil.copytree(old_dirs[0] / "checkpoints", planted)
        victim = second.submit(_job())
        assert victim == again + 1
        job = second.wait(victim, ENDED, timeout=120)
        logs = second.get(f"/jobs/{victim}/logs", params={"tail": 100000})
        first_uid_prefix = old_dirs[0].name.rsplit("-", 1)[0]
        assert "belongs to job" in logs and first_uid_prefix in logs, logs[-3000:]
        assert f":{victim}" in logs  # this job's own uid is named too
        assert job["state"] == "failed" and "step 1/" not in logs  # nothing trained
    finally:
        second.stop()
        _kill_leftovers(state)
