"""The examples end to end: a killed rank, SIGTERM and divergence, each in real processes.

The acceptance criterion: a run interrupted by a killed rank and resumed from its
checkpoint ends with parameters bitwise identical to an uninterrupted run of
the same seed and world size (the data order and RNG states are in the checkpoint).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grace.runtime import checkpoint as ckpt

from .conftest import REPO, assert_bitwise_equal, example_env, load_params, run_example

pytest.importorskip("torch")

STEPS = ("--steps", "24", "--checkpoint-every", "4", "--log-every", "4")


def _ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_ddp.py", "train_fsdp.py"])
def test_killed_rank_then_resume_is_bitwise_identical(tmp_path: Path, script: str) -> None:
    ref = tmp_path / "uninterrupted"
    ref_run = run_example(script, ref, *STEPS, "--save-params", str(ref / "params.pt"), nproc=2)
    _ok(ref_run)

    run = tmp_path / "interrupted"
    crashed = run_example(script, run, *STEPS, "--fail-at-step", "14", nproc=2)
    assert crashed.returncode != 0
    assert "injected failure at step 14" in crashed.stderr
    saved = [s for s, _ in ckpt.committed(run / "checkpoints")]
    assert saved and max(saved) <= 12  # nothing past the crash; step 12 only if its commit beat it

    resumed = run_example(script, run, *STEPS, "--save-params", str(run / "params.pt"), nproc=2, attempt=2)
    _ok(resumed)
    m = re.search(r"resumed from checkpoint of step (\d+)", resumed.stderr)
    assert m is not None and int(m.group(1)) == max(saved)
    assert_bitwise_equal(load_params(run / "params.pt"), load_params(ref / "params.pt"))
    # and the same losses are printed from the resumed step on
    ref_log = [ln.split(" (")[0] for ln in ref_run.stdout.splitlines() if ln.startswith("step ")]
    tail = [ln for ln in ref_log if int(ln.split()[1].split("/")[0]) > int(m.group(1))]
    assert tail and all(ln in resumed.stdout for ln in tail)

    if script == "train_ddp.py":  # each rank reports its own phases, the all-reduce included
        for rank in (0, 1):
            records = [json.loads(x) for x in (ref / "attempt-1" / f"heartbeats-rank{rank}.jsonl").open()]
            assert records[-1]["step"] == 24
            assert {"data", "forward", "backward", "allreduce", "optimizer", "sync"} <= set(
                records[-1]["phases"]
            )


@pytest.mark.slow
def test_sigterm_checkpoints_exits_143_and_resumes_bitwise(tmp_path: Path) -> None:
    args = ("--steps", "40", "--log-every", "1", "--checkpoint-interval-s", "0")
    ref = tmp_path / "ref"
    _ok(run_example("train_ddp.py", ref, *args, "--save-params", str(ref / "params.pt")))

    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "train_ddp.py"), "--device", "cpu", *args,
         "--sleep-per-step", "0.05"],
        env=example_env(run), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("step 10/"):
            break
    proc.send_signal(signal.SIGTERM)  # as the backend does for a drain, a preemption, a cancel
    start = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert time.monotonic() - start < 20
    m = re.search(r"stopped by SIGTERM after step (\d+) \(checkpointed\)", err)
    assert m is not None, err
    stopped = int(m.group(1))
    assert [s for s, _ in ckpt.committed(run / "checkpoints")] == [stopped]
    assert "Traceback" not in err

    resumed = run_example("train_ddp.py", run, *args, "--save-params", str(run / "params.pt"), attempt=2)
    _ok(resumed)
    assert f"resumed from checkpoint of step {stopped}" in resumed.stderr
    assert_bitwise_equal(load_params(run / "params.pt"), load_params(ref / "params.pt"))


@pytest.mark.slow
def test_nan_loss_ends_the_run_with_86_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    proc = run_example(
        "train_ddp.py", tmp_path, "--steps", "30", "--checkpoint-every", "3", "--diverge-at-step", "11"
    )
    assert proc.returncode == 86, proc.stderr
    assert "diverged at step 11: loss is nan" in proc.stderr
    assert [s for s, _ in ckpt.committed(tmp_path / "checkpoints")] == [3, 6, 9]
    record = json.loads((tmp_path / "attempt-1" / "diverged.json").read_text())
    assert record["checkpoint_step"] == 9


@pytest.mark.slow
def test_a_job_handed_another_jobs_checkpoint_exits_non_zero_saying_why(tmp_path: Path) -> None:
    """A fresh store's job 1 given an old store's job 1's directory: it must fail loudly, not finish.

    Before job_uid, it "resumed" at the old job's last step and exited 0 without training.
    """
    old, new = "old-store:1", "new-store:1"
    args = ("--steps", "4", "--checkpoint-every", "2", "--log-every", "1")
    _ok(run_example("train_ddp.py", tmp_path / "old", *args, env={"GRACE_JOB_UID": old}))
    shutil.copytree(tmp_path / "old" / "checkpoints", tmp_path / "new" / "checkpoints")

    # two ranks: both must stop (neither may hang in a collective waiting for the other)
    proc = run_example("train_ddp.py", tmp_path / "new", *args, nproc=2, timeout=90,
                       env={"GRACE_JOB_UID": new})  # fmt: skip
    assert proc.returncode != 0, proc.stdout
    newest = tmp_path / "new" / "checkpoints" / "step-000000004"
    assert f"grace.runtime: checkpoint {newest} belongs to job {old}, not to this job {new}; " in proc.stderr
    assert "ForeignCheckpointError" in proc.stderr and "GRACE_CHECKPOINT_DIR" in proc.stderr
    assert not re.search(r"^step \d+/", proc.stdout, re.M) and "done" not in proc.stdout  # trained nothing

    # the same job's own directory resumes, and finishes at once: it was done
    again = run_example("train_ddp.py", tmp_path / "old", *args, attempt=2, env={"GRACE_JOB_UID": old})
    _ok(again)
    assert "resumed from checkpoint of step 4" in again.stderr
