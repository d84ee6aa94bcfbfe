"""Checkpoints in one process (no process group): resume, verification and fallback, retention,
atomic commit, the divergence gate, SIGTERM, ownership (job_uid), and the reconciler's view."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import grace.runtime as gr  # noqa: E402
from grace.runtime import checkpoint as ckpt  # noqa: E402
from grace.runtime.config import RuntimeEnv  # noqa: E402
from grace.runtime.divergence import DivergenceGuard  # noqa: E402

# DCP says it assumes a single process on every save and load; the runtime asks for exactly that.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def env_for(workdir: Path, attempt: int = 1, job_uid: str | None = None) -> RuntimeEnv:
    return RuntimeEnv(
        job_id=None, attempt=attempt, node="test", rank=0, world_size=1, local_rank=0,
        workdir=workdir, checkpoint_dir=workdir / "checkpoints", interval_s=None, url=None,
        job_uid=job_uid,
    )  # fmt: skip


class Job:
    """A small model whose every step draws on the data generator and all three global RNGs."""

    def __init__(self, workdir: Path, attempt: int = 1, job_uid: str | None = None, **options: Any) -> None:
        torch.manual_seed(0)
        random.seed(0)
        np.random.seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.gen = torch.Generator().manual_seed(1)
        options.setdefault("handle_sigterm", False)
        options.setdefault("final_checkpoint", False)
        env = env_for(workdir, attempt, job_uid)
        self.rt = gr.init(self.model, self.opt, data_state=self.gen, env=env, **options)
        self.losses: dict[int, float] = {}

    def step(self, loss_override: float | None = None) -> None:
        with self.rt.phase("data"):
            x = torch.randn(8, 16, generator=self.gen)
            x = x + torch.rand(8, 16) * 0.01 + random.random() * 0.01 + float(np.random.rand()) * 0.01
        with self.rt.phase("forward"):
            loss = self.model(x).pow(2).mean()
        with self.rt.phase("backward"):
            self.opt.zero_grad()
            loss.backward()
        with self.rt.phase("optimizer"):
            self.opt.step()
        self.rt.step_done(loss=loss if loss_override is None else loss_override, tokens=8)
        self.losses[self.rt.step] = loss.item()

    def run(self, until: int) -> None:
        for _ in range(self.rt.step + 1, until + 1):
            self.step()

    def params(self) -> dict[str, Any]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def steps(workdir: Path) -> list[int]:
    return [s for s, _ in ckpt.committed(workdir / "checkpoints")]


# ---------------------------------------------------------------------------- resume


def test_resume_continues_bitwise_identically(tmp_path: Path) -> None:
    ref = Job(tmp_path / "ref", checkpoint_interval_s=0)
    ref.run(10)
    ref.rt.finish()

    crashed = Job(tmp_path / "run", checkpoint_every_steps=3)
    crashed.run(7)  # checkpoints 3 and 6; 6 commits once step 7's loss passed the guard
    crashed.rt.checkpointer.wait()
    assert steps(tmp_path / "run") == [3, 6]
    crashed.rt.heartbeats.close()  # then the process "dies": no finish()

    resumed = Job(tmp_path / "run", attempt=2, checkpoint_every_steps=3)
    assert resumed.rt.resume() == 7
    resumed.run(10)
    resumed.rt.finish()
    assert same(resumed.params(), ref.params())
    assert resumed.losses[10] == ref.losses[10]


def test_resume_without_checkpoint_starts_at_one(tmp_path: Path) -> None:
    job = Job(tmp_path)
    assert job.rt.resume() == 1
    job.rt.finish()


# ---------------------------------------------------------------------------- verification


def test_corrupted_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path) -> None:
    job = Job(tmp_path, checkpoint_every_steps=3)
    job.run(3)
    at_3 = job.params()
    job.run(6)
    job.rt.finish()
    assert steps(tmp_path) == [3, 6]
    shard = tmp_path / "checkpoints" / "step-000000006" / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size
    shard.write_bytes(bytes(data))
    assert "sha256 mismatch" in (ckpt.verify(shard.parent) or "")

    again = Job(tmp_path, attempt=2)
    assert again.rt.resume() == 4
    assert same(again.params(), at_3)
    assert steps(tmp_path) == [3]  # the bad one was set aside, out of everyone's sight
    assert (tmp_path / "checkpoints" / ".corrupt" / "step-000000006" / "__0_0.distcp").exists()
    again.rt.finish()


@pytest.mark.parametrize("damage", ["truncate", "delete_file", "extra_file", "bad_manifest"])
def test_other_damage_is_detected(tmp_path: Path, damage: str) -> None:
    job = Job(tmp_path, checkpoint_every_steps=2)
    job.run(4)
    job.rt.finish()
    path = tmp_path / "checkpoints" / "step-000000004"
    assert ckpt.verify(path) is None
    if damage == "truncate":
        with open(path / "__0_0.distcp", "r+b") as f:
            f.truncate(100)
    elif damage == "delete_file":
        (path / ".metadata").unlink()
    elif damage == "extra_file":
        (path / "__1_0.distcp").write_bytes(b"x")
    else:
        (path / "MANIFEST.json").write_text("{not json")
    assert ckpt.verify(path) is not None
    again = Job(tmp_path, attempt=2)
    assert again.rt.resume() == 3
    again.rt.finish()


def test_manifest_and_the_reconcilers_view(tmp_path: Path) -> None:
    from grace.control.live.files import latest_checkpoint

    job = Job(tmp_path, checkpoint_every_steps=2)
    job.run(4)
    job.rt.finish()
    manifest = json.loads((tmp_path / "checkpoints" / "step-000000004" / "MANIFEST.json").read_text())
    assert manifest["format"] == "grace-dcp/1" and manifest["step"] == 4 and manifest["world_size"] == 1
    assert set(manifest["files"]) == {".metadata", "__0_0.distcp"}
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in manifest["files"].values())
    assert latest_checkpoint(tmp_path) == str(tmp_path / "checkpoints" / "step-000000004")


# ---------------------------------------------------------------------------- retention, atomicity


def test_retention_keeps_the_last_k(tmp_path: Path) -> None:
    job = Job(tmp_path, checkpoint_every_steps=1, keep=2)
    job.run(6)
    job.rt.finish()
    assert steps(tmp_path) == [5, 6]
    assert not any((tmp_path / "checkpoints" / ".staging").iterdir())


def _fail_dcp_write(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.checkpoint import FileSystemWriter

    real = FileSystemWriter.write_data

    def half_then_raise(self: Any, plan: Any, planner: Any) -> Any:
        fut = real(self, plan, planner)
        fut.wait()  # the shard is on disk ...
        raise OSError("disk gone mid-save")  # ... and then the save dies

    monkeypatch.setattr(FileSystemWriter, "write_data", half_then_raise)


def _fail_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(path: Path, fsync: bool = False) -> tuple[str, int]:
        raise OSError("I/O error while hashing")

    monkeypatch.setattr(ckpt, "sha256_file", boom)


def _fail_rename(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst).name.startswith("step-"):
            raise OSError("rename failed")
        real(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", replace)


@pytest.mark.parametrize("block", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize(
    "fail", [_fail_dcp_write, _fail_hashing, _fail_rename], ids=["write", "hash", "rename"]
)
def test_a_save_that_fails_midway_leaves_nothing_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: Any, block: bool
) -> None:
    job = Job(tmp_path, checkpoint_every_steps=2, async_save=not block)
    job.run(2)
    job.run(3)  # step 2's checkpoint commits after step 3
    job.rt.checkpointer.wait()
    assert steps(tmp_path) == [2]
    with monkeypatch.context() as m:
        fail(m)
        job.run(4)
        job.rt.checkpointer.release(True)
        job.rt.checkpointer.wait()
        assert steps(tmp_path) == [2]  # step 4 never became visible
        assert not (tmp_path / "checkpoints" / "step-000000004").exists()
        assert not any((tmp_path / "checkpoints" / ".staging").iterdir())  # and was cleaned up
        assert job.rt.checkpointer.last_error
    job.run(6)  # training went on, and the next checkpoint works
    job.rt.finish()
    assert steps(tmp_path) == [2, 6]


def test_a_crash_mid_save_is_invisible_and_cleaned_at_the_next_start(tmp_path: Path) -> None:
    from grace.control.live.files import latest_checkpoint

    job = Job(tmp_path, checkpoint_every_steps=2)
    job.run(2)
    job.rt.finish()
    root = tmp_path / "checkpoints"
    half = root / ".staging" / "step-000000004-a1-2"  # what a SIGKILL during a save leaves
    half.mkdir(parents=True)
    (half / "__0_0.distcp").write_bytes(b"partial")
    (half / "MANIFEST.json").write_text("{}")
    unmanifested = root / "step-000000006"  # a step dir without a manifest is not a checkpoint
    unmanifested.mkdir()
    (unmanifested / "__0_0.distcp").write_bytes(b"partial")
    assert steps(tmp_path) == [2]
    assert latest_checkpoint(tmp_path) == str(root / "step-000000002")
    again = Job(tmp_path, attempt=2)
    assert not half.exists() and not unmanifested.exists()
    assert again.rt.resume() == 3
    again.rt.finish()


# ---------------------------------------------------------------------------- async


def test_async_save_returns_before_the_commit(tmp_path: Path) -> None:
    job = Job(tmp_path, checkpoint_interval_s=0)
    job.run(2)
    blocked = job.rt.checkpoint()  # async by default, gated until the next step passes the guard
    assert job.rt.checkpointer.pending
    assert steps(tmp_path) == []
    job.run(3)
    job.rt.checkpointer.wait()
    assert steps(tmp_path) == [2]
    manifest = ckpt.read_manifest(tmp_path / "checkpoints" / "step-000000002")
    assert manifest is not None and manifest["block_s"] == pytest.approx(blocked, abs=1e-3)
    job.rt.finish()


# ---------------------------------------------------------------------------- divergence


def test_nan_loss_exits_86_and_keeps_the_last_good_checkpoint(tmp_path: Path) -> None:
    job = Job(tmp_path, checkpoint_every_steps=1, keep=5)
    job.run(4)
    with pytest.raises(gr.Diverged) as err:
        job.step(loss_override=float("nan"))  # step 5
    assert err.value.code == 86
    job.rt.checkpointer.wait()
    # step 4's parameters produced the NaN: its checkpoint (gated) was dropped; 3 is the last good
    assert steps(tmp_path) == [1, 2, 3]
    record = json.loads((tmp_path / "attempt-1" / "diverged.json").read_text())
    assert record == {"step": 5, "reason": "loss is nan", "checkpoint_step": 3}


def test_a_loss_spike_diverges_and_no_checkpoint_is_taken_while_it_is_pending(tmp_path: Path) -> None:
    guard = DivergenceGuard(spike_factor=3.0, window=10, min_history=3, patience=2)
    job = Job(tmp_path, checkpoint_every_steps=1, keep=10, guard=guard)
    job.run(4)
    job.step(loss_override=100.0)  # step 5: a spike, not yet divergence
    assert steps(tmp_path) == [1, 2, 3]  # 4 waits on its gate; 5 is not taken
    with pytest.raises(gr.Diverged) as err:
        job.step(loss_override=100.0)  # step 6: the second spike in a row
    assert "recent average" in err.value.reason
    job.rt.checkpointer.wait()
    assert steps(tmp_path) == [1, 2, 3]


def test_a_single_spike_that_recovers_commits_as_usual(tmp_path: Path) -> None:
    guard = DivergenceGuard(spike_factor=3.0, window=10, min_history=3, patience=2)
    job = Job(tmp_path, checkpoint_every_steps=1, keep=10, guard=guard)
    job.run(4)
    job.step(loss_override=100.0)  # step 5: suspect
    job.step()  # step 6: normal again, so step 4's checkpoint commits and 6 is taken
    job.rt.finish()
    assert steps(tmp_path) == [1, 2, 3, 4, 6]


# ---------------------------------------------------------------------------- SIGTERM


def test_sigterm_checkpoints_the_step_then_exits_143(tmp_path: Path) -> None:
    job = Job(tmp_path, handle_sigterm=True, checkpoint_interval_s=0)
    try:
        job.run(3)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler only raises a flag
        with pytest.raises(gr.Preempted) as err:
            job.step()  # step 4 finishes, then checkpoint and exit
    finally:
        job.rt._stop.uninstall()
    assert err.value.code == 143 and err.value.checkpointed
    assert steps(tmp_path) == [4]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))
    again = Job(tmp_path, attempt=2)
    assert again.rt.resume() == 5
    again.rt.finish()


# ---------------------------------------------------------------------------- heartbeats


def test_heartbeats_carry_the_phase_breakdown(tmp_path: Path) -> None:
    job = Job(tmp_path, checkpoint_every_steps=2, heartbeat_record_s=0.0)
    job.run(4)
    job.rt.finish()
    lines = (tmp_path / "attempt-1" / "heartbeats-rank0.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    # one record per step; a save committed after the last one comes in a zero-step record
    assert [r["step"] for r in records if r["steps"]] == [1, 2, 3, 4]
    assert all(r["steps"] == 0 and "checkpoints" in r for r in records[4:])
    saves = [c for r in records for c in r.get("checkpoints", ())]
    assert [c["step"] for c in saves] == [2, 4]  # every committed save reported once, by rank 0
    assert all(c["seconds"] > 0 and c["bytes"] > 0 for c in saves)
    assert {"data", "forward", "backward", "optimizer"} <= set(records[-1]["phases"])
    assert any("checkpoint" in r["phases"] for r in records)
    assert all(r["tokens_per_s"] > 0 and r["step_s"] > 0 for r in records)


# ---------------------------------------------------------------------------- ownership (job_uid)

A, B = "store-a:1", "store-b:1"  # job 1 of two different stores: same job id, different jobs


def _trained(workdir: Path, job_uid: str | None) -> Job:
    """A job that ran 4 steps and committed checkpoints 2 and 4."""
    job = Job(workdir, job_uid=job_uid, checkpoint_every_steps=2)
    job.run(4)
    job.rt.finish()
    assert steps(workdir) == [2, 4]
    return job


def _copy_checkpoints(src: Path, dst: Path) -> None:
    shutil.copytree(src / "checkpoints", dst / "checkpoints", dirs_exist_ok=True)


def _edit_manifest(path: Path, **changes: Any) -> None:
    """Rewrite a manifest (it is not hashed: only the files it lists are); a value None drops the key."""
    manifest = json.loads((path / "MANIFEST.json").read_text())
    for k, v in changes.items():
        if v is None:
            manifest.pop(k, None)
        else:
            manifest[k] = v
    (path / "MANIFEST.json").write_text(json.dumps(manifest))


def test_every_manifest_records_the_job_uid(tmp_path: Path) -> None:
    _trained(tmp_path / "a", A)
    _trained(tmp_path / "plain", None)
    for step in (2, 4):
        name = f"step-{step:09d}"
        assert ckpt.read_manifest(tmp_path / "a" / "checkpoints" / name)["job_uid"] == A  # type: ignore[index]
        manifest = ckpt.read_manifest(tmp_path / "plain" / "checkpoints" / name)
        assert manifest is not None and manifest["job_uid"] is None  # outside Grace: null, checked by no one


def test_another_jobs_checkpoint_is_refused_naming_both_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _trained(tmp_path / "a", A)
    _copy_checkpoints(tmp_path / "a", tmp_path / "b")  # B's directory now holds A's checkpoints
    capsys.readouterr()

    b = Job(tmp_path / "b", job_uid=B)
    before = b.params()
    with pytest.raises(gr.ForeignCheckpointError) as err:
        b.rt.resume()
    newest = tmp_path / "b" / "checkpoints" / "step-000000004"
    assert isinstance(err.value, gr.CheckpointError)
    assert (err.value.path, err.value.owner, err.value.job_uid) == (newest, A, B)
    msg = str(err.value)
    assert msg.startswith(f"checkpoint {newest} belongs to job {A}, not to this job {B}; ")
    assert "GRACE_CHECKPOINT_DIR" in msg and "delete" in msg
    assert f"grace.runtime: {msg}" in capsys.readouterr().err  # rank 0 says it on stderr too
    # nothing loaded, nothing trained, nothing moved: the other job's files are left as they were
    assert b.rt.step == 0 and same(b.params(), before)
    assert steps(tmp_path / "b") == [2, 4] and not (tmp_path / "b" / "checkpoints" / ".corrupt").exists()
    assert b.rt._finished and not b.rt.heartbeats._thread.is_alive()  # shut down, not left running


def test_the_same_job_resumes_from_its_copied_checkpoint(tmp_path: Path) -> None:
    a = _trained(tmp_path / "a", A)
    _copy_checkpoints(tmp_path / "a", tmp_path / "moved")  # same job, its directory moved
    again = Job(tmp_path / "moved", attempt=2, job_uid=A)
    assert again.rt.resume() == 5
    assert same(again.params(), a.params())
    again.rt.finish()


def test_a_foreign_checkpoint_behind_this_jobs_own_is_refused_too(tmp_path: Path) -> None:
    _trained(tmp_path, A)
    older = tmp_path / "checkpoints" / "step-000000002"
    _edit_manifest(older, job_uid=B)  # the newest (4) is A's own; 2 is B's
    again = Job(tmp_path, attempt=2, job_uid=A)
    with pytest.raises(gr.ForeignCheckpointError) as err:
        again.rt.resume()
    assert (err.value.path, err.value.owner, err.value.job_uid) == (older, B, A)


def test_a_foreign_checkpoint_is_refused_before_a_corrupt_newer_one_is_touched(tmp_path: Path) -> None:
    _trained(tmp_path / "a", A)
    _copy_checkpoints(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b" / "checkpoints" / "step-000000004" / "__0_0.distcp").write_bytes(b"torn")
    b = Job(tmp_path / "b", job_uid=B)
    with pytest.raises(gr.ForeignCheckpointError):
        b.rt.resume()
    assert steps(tmp_path / "b") == [2, 4]  # not quarantined: it is not this job's to move


@pytest.mark.parametrize("key", ["null", "absent"])
@pytest.mark.parametrize("job_uid", [None, A], ids=["no-uid", "uid"])
def test_a_checkpoint_without_job_uid_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], job_uid: str | None, key: str
) -> None:
    old = _trained(tmp_path, None)  # written outside Grace: "job_uid": null
    if key == "absent":  # written before manifests had the field
        for _, path in ckpt.committed(tmp_path / "checkpoints"):
            _edit_manifest(path, job_uid=None)
    capsys.readouterr()
    again = Job(tmp_path, attempt=2, job_uid=job_uid, checkpoint_every_steps=2)
    assert again.rt.resume() == 5
    assert same(again.params(), old.params())
    err = capsys.readouterr().err
    if job_uid is None:
        assert "job_uid" not in err  # as before this check existed: silent
    else:
        assert "warning: checkpoint" in err and "records no job_uid" in err and A in err
    again.run(6)
    again.rt.finish()
    newest = ckpt.read_manifest(tmp_path / "checkpoints" / "step-000000006")
    assert newest is not None and newest["job_uid"] == job_uid  # and from now on it is recorded


def test_a_run_without_job_uid_resumes_any_checkpoint_and_says_whose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside Grace (a person debugging a job's checkpoint on a laptop) nothing is checked."""
    _trained(tmp_path, A)
    capsys.readouterr()
    again = Job(tmp_path, attempt=2, job_uid=None)
    assert again.rt.resume() == 5
    assert f"was written by job {A}; this run has no GRACE_JOB_UID" in capsys.readouterr().err
    again.rt.finish()
