"""Encrypted checkpoints: bitwise resume, no plaintext on disk, tamper fallback, wrong keys.

In one process (the ``Job`` of test_checkpoints.py, with a data key) for the
fast suite, and under torchrun with 2 ranks on gloo (the DDP example) in the
slow one.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import grace.runtime as gr  # noqa: E402
from grace.runtime import checkpoint as ckpt  # noqa: E402
from grace.runtime.config import RuntimeEnv  # noqa: E402
from grace.runtime.encryption import CHUNK, HEADER_SIZE, TAG, DataKey  # noqa: E402

from .conftest import assert_bitwise_equal, load_params, run_example  # noqa: E402
from .test_checkpoints import Job, same, steps  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

KEY = DataKey(bytes(range(32)))
OTHER = DataKey(bytes(range(1, 33)))
MARKER = b"GRACE-RANK-STATE-MARKER-0123456789"


class Marker:
    """Per-rank state (``extra``) whose pickle holds a known byte string."""

    def state_dict(self) -> dict[str, bytes]:
        return {"m": MARKER}

    def load_state_dict(self, state: dict[str, bytes]) -> None:
        assert state["m"] == MARKER


def ejob(workdir: Path, key: DataKey | None = KEY, **options: Any) -> Job:
    return Job(workdir, checkpoint_key=key, **options)


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and p.name != ckpt.MANIFEST]


def found_in(root: Path, needle: bytes) -> list[str]:
    return [str(p.relative_to(root)) for p in files_under(root) if needle in p.read_bytes()]


def shard(workdir: Path, step: int, name: str = "__0_0.distcp") -> Path:
    return workdir / "checkpoints" / ckpt.step_dirname(step) / name


def rehash_manifest(path: Path) -> None:
    """What an attacker who can write the directory does: make the manifest match the damaged files."""
    manifest = json.loads((path / ckpt.MANIFEST).read_text())
    for name in manifest["files"]:
        digest, size = ckpt.sha256_file(path / name)
        manifest["files"][name] = {"sha256": digest, "size": size}
    (path / ckpt.MANIFEST).write_text(json.dumps(manifest))


# ---------------------------------------------------------------------------- resume


def test_encrypted_resume_continues_bitwise_identically(tmp_path: Path) -> None:
    ref = Job(tmp_path / "ref", checkpoint_interval_s=0)  # plaintext, uninterrupted
    ref.run(10)
    ref.rt.finish()

    crashed = ejob(tmp_path / "run", checkpoint_every_steps=3)
    crashed.run(7)
    crashed.rt.checkpointer.wait()
    assert steps(tmp_path / "run") == [3, 6]
    crashed.rt.heartbeats.close()

    resumed = ejob(tmp_path / "run", attempt=2, checkpoint_every_steps=3)
    assert resumed.rt.resume() == 7
    resumed.run(10)
    resumed.rt.finish()
    assert same(resumed.params(), ref.params())
    assert resumed.losses[10] == ref.losses[10]
    manifest = ckpt.read_manifest(tmp_path / "run" / "checkpoints" / "step-000000009")
    assert manifest is not None
    assert (manifest["encrypted"], manifest["key_id"], manifest["cipher"]) == (
        True, KEY.id, "AES-256-GCM/grace-chunked-v1",
    )  # fmt: skip
    assert ckpt.verify(tmp_path / "run" / "checkpoints" / "step-000000009", key=KEY) is None


# ---------------------------------------------------------------------------- nothing in the clear


@pytest.mark.parametrize("key", [KEY, None], ids=["encrypted", "plaintext"])
def test_no_plaintext_parameter_bytes_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: DataKey | None
) -> None:
    """A distinctive parameter, the rank state and DCP's metadata are grepped for in every file.

    The plaintext run finds all three, so the grep can fail; staging is
    grepped too, at the moment the save has written its files and not yet
    committed them.
    """
    job = ejob(tmp_path, key, extra={"marker": Marker()})
    weight = job.model[0].weight
    with torch.no_grad():
        weight.copy_(torch.arange(weight.numel(), dtype=torch.float32).reshape(weight.shape) * 1.2345 + 0.5)
    pattern = weight.detach().flatten()[100:116].numpy().tobytes()  # 64 bytes of it
    needles = {"parameter": pattern, "rank state": MARKER, "metadata": b"rank_state/0"}
    root = tmp_path / "checkpoints"
    seen_in_staging: dict[str, list[str]] = {}
    real = ckpt.Checkpointer._own_files

    def grep_staging(self: ckpt.Checkpointer, tmp: Path) -> dict[str, dict[str, Any]]:
        assert tmp.parent.name == ckpt.STAGING and any(tmp.iterdir())
        seen_in_staging.update({what: found_in(tmp, n) for what, n in needles.items()})
        return real(self, tmp)

    monkeypatch.setattr(ckpt.Checkpointer, "_own_files", grep_staging)
    job.rt.checkpoint(block=True)  # step 0: the parameter exactly as set
    job.rt.finish()
    assert steps(tmp_path) == [0]
    committed = {what: found_in(root, n) for what, n in needles.items()}
    if key is None:
        assert all(committed.values()), committed
        assert all(seen_in_staging.values()), seen_in_staging
    else:
        assert not any(committed.values()), committed
        assert seen_in_staging and not any(seen_in_staging.values()), seen_in_staging
        again = ejob(tmp_path, attempt=2, extra={"marker": Marker()})
        assert again.rt.resume() == 1
        assert torch.equal(again.model[0].weight, weight)
        again.rt.finish()


# ---------------------------------------------------------------------------- tampering


@pytest.mark.parametrize("rehash", [False, True], ids=["flip", "flip-and-rewrite-manifest"])
def test_a_flipped_byte_falls_back_to_the_previous_checkpoint(tmp_path: Path, rehash: bool) -> None:
    job = ejob(tmp_path, checkpoint_every_steps=3)
    job.run(3)
    at_3 = job.params()
    job.run(6)
    job.rt.finish()
    bad = shard(tmp_path, 6)
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad.write_bytes(bytes(data))
    if rehash:  # the sha256 cannot catch it now; the GCM tag must
        rehash_manifest(bad.parent)
    assert "__0_0.distcp: step-000000006/__0_0.distcp: chunk 0 of 1 fails authentication" in (
        ckpt.verify(bad.parent, key=KEY) or ""
    )
    assert ("sha256 mismatch" in (ckpt.verify(bad.parent) or "")) is not rehash  # keyless: hashes only

    again = ejob(tmp_path, attempt=2)
    assert again.rt.resume() == 4
    assert same(again.params(), at_3)
    assert steps(tmp_path) == [3]
    assert (tmp_path / "checkpoints" / ".corrupt" / "step-000000006" / "__0_0.distcp").exists()
    again.rt.finish()


@pytest.mark.parametrize("where", ["mid-chunk", "header-only", "extended"])
def test_a_truncated_or_extended_shard_falls_back(tmp_path: Path, where: str) -> None:
    job = ejob(tmp_path, checkpoint_every_steps=2)
    job.run(4)
    job.rt.finish()
    bad = shard(tmp_path, 4)
    data = bad.read_bytes()
    cut = {"mid-chunk": data[: len(data) - 100], "header-only": data[:HEADER_SIZE + TAG],
           "extended": data + data[HEADER_SIZE:HEADER_SIZE + 64]}[where]  # fmt: skip
    bad.write_bytes(cut)
    rehash_manifest(bad.parent)  # sizes and hashes agree: only the envelope can tell
    assert "__0_0.distcp" in (ckpt.verify(bad.parent, key=KEY) or "")
    again = ejob(tmp_path, attempt=2)
    assert again.rt.resume() == 3
    assert steps(tmp_path) == [2]
    again.rt.finish()


def test_a_shard_swapped_in_from_another_checkpoint_fails(tmp_path: Path) -> None:
    job = ejob(tmp_path, checkpoint_every_steps=2)
    job.run(4)
    job.rt.finish()
    shutil.copy(shard(tmp_path, 2), shard(tmp_path, 4))  # same job, same key, another step
    rehash_manifest(shard(tmp_path, 4).parent)
    assert "fails authentication" in (ckpt.verify(shard(tmp_path, 4).parent, key=KEY) or "")
    again = ejob(tmp_path, attempt=2)
    assert again.rt.resume() == 3
    again.rt.finish()


# ---------------------------------------------------------------------------- keys


def test_a_wrong_key_fails_loudly_and_touches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = ejob(tmp_path, checkpoint_every_steps=2)
    job.run(4)
    job.rt.finish()
    capsys.readouterr()
    wrong = ejob(tmp_path, OTHER, attempt=2)
    with pytest.raises(gr.CheckpointKeyError) as err:
        wrong.rt.resume()
    msg = str(err.value)
    assert f"encrypted with key {KEY.id}, given key {OTHER.id}" in msg
    assert "the job's data key does not match (wrong KMS key file?)" in msg
    assert "not starting from step 0" in msg
    assert msg in capsys.readouterr().err
    assert steps(tmp_path) == [2, 4] and not (tmp_path / "checkpoints" / ".corrupt").exists()
    right = ejob(tmp_path, attempt=3)
    assert right.rt.resume() == 5
    right.rt.finish()


def test_an_encrypted_checkpoint_without_a_key_is_refused(tmp_path: Path) -> None:
    job = ejob(tmp_path, checkpoint_every_steps=2)
    job.run(2)
    job.rt.finish()
    keyless = ejob(tmp_path, None, attempt=2)
    with pytest.raises(gr.CheckpointKeyError) as err:
        keyless.rt.resume()
    assert f"is encrypted (key {KEY.id}) and this run has no key: set GRACE_CHECKPOINT_KEY" in str(err.value)
    assert steps(tmp_path) == [2]


def test_a_plaintext_checkpoint_is_resumed_with_a_key_and_the_next_one_is_encrypted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = Job(tmp_path, checkpoint_every_steps=2)
    plain.run(2)
    plain.rt.finish()
    capsys.readouterr()
    keyed = ejob(tmp_path, attempt=2, checkpoint_every_steps=2)
    assert keyed.rt.resume() == 3
    assert "is not encrypted (written before encryption was on)" in capsys.readouterr().err
    keyed.run(4)
    keyed.rt.finish()
    m2 = ckpt.read_manifest(tmp_path / "checkpoints" / "step-000000002")
    m4 = ckpt.read_manifest(tmp_path / "checkpoints" / "step-000000004")
    assert m2 is not None and m4 is not None
    assert (m2["encrypted"], m4["encrypted"], m4["key_id"]) == (False, True, KEY.id)


def test_a_manifest_altered_to_say_plaintext_is_caught(tmp_path: Path) -> None:
    job = ejob(tmp_path, checkpoint_every_steps=2)
    job.run(4)
    job.rt.finish()
    path = shard(tmp_path, 4).parent
    manifest = json.loads((path / ckpt.MANIFEST).read_text())
    manifest.update(encrypted=False, key_id=None)
    (path / ckpt.MANIFEST).write_text(json.dumps(manifest))
    assert "the manifest says plaintext" in (ckpt.verify(path, key=KEY) or "")
    again = ejob(tmp_path, attempt=2)
    assert again.rt.resume() == 3
    again.rt.finish()


def test_the_key_comes_from_grace_checkpoint_key(tmp_path: Path) -> None:
    b64 = base64.b64encode(KEY.key).decode()
    env = RuntimeEnv.from_environ({"GRACE_WORKDIR": str(tmp_path), "GRACE_CHECKPOINT_KEY": b64})
    assert env.checkpoint_key == KEY
    assert b64 not in repr(env) and KEY.key.hex() not in repr(env) and KEY.id in repr(KEY)
    assert RuntimeEnv.from_environ({"GRACE_WORKDIR": str(tmp_path)}).checkpoint_key is None
    with pytest.raises(ValueError, match="GRACE_CHECKPOINT_KEY decodes to 16 bytes; it must be base64 of 32"):
        RuntimeEnv.from_environ({"GRACE_CHECKPOINT_KEY": base64.b64encode(b"x" * 16).decode()})
    with pytest.raises(ValueError, match="GRACE_CHECKPOINT_KEY is not valid base64"):
        RuntimeEnv.from_environ({"GRACE_CHECKPOINT_KEY": "not base64!"})


def test_a_big_shard_is_chunked(tmp_path: Path) -> None:
    """A state larger than one chunk: several sealed chunks, read back across their boundaries."""
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 700)  # ~2.7 MiB of float32 weights: 3 chunks
    saver = ckpt.Checkpointer(tmp_path, model, key=KEY, cache_staging=False)
    saver.save(1, b"state", block=True)
    path = tmp_path / "step-000000001"
    size = (path / "__0_0.distcp").stat().st_size
    assert size > HEADER_SIZE + 2 * (CHUNK + TAG)
    want = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.zero_()
    loader = ckpt.Checkpointer(tmp_path, model, key=KEY, cache_staging=False)
    assert loader.load_latest() == (1, b"state")
    assert same(model.state_dict(), want)


# ---------------------------------------------------------------------------- two ranks, gloo

STEPS = ("--steps", "24", "--checkpoint-every", "4", "--log-every", "4", "--keep", "2")


def _ok(proc: Any) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
def test_two_ranks_encrypted_kill_resume_tamper_and_wrong_key(tmp_path: Path) -> None:
    """DDP on 2 gloo ranks, checkpoints encrypted: a killed rank resumes bitwise-identically, the
    checkpoint root holds no parameter bytes, a flipped byte in one rank's shard of the newest
    checkpoint falls back to the previous one (and still ends bitwise-identical), a wrong key
    exits non-zero saying so."""
    key = {"GRACE_CHECKPOINT_KEY": base64.b64encode(KEY.key).decode()}
    ref = tmp_path / "ref"  # plaintext, uninterrupted
    _ok(run_example("train_ddp.py", ref, *STEPS, "--save-params", str(ref / "params.pt"), nproc=2))
    want = load_params(ref / "params.pt")

    run = tmp_path / "run"
    crashed = run_example("train_ddp.py", run, *STEPS, "--fail-at-step", "14", nproc=2, env=key)
    assert crashed.returncode != 0 and "injected failure at step 14" in crashed.stderr
    saved = steps(run)
    assert saved and max(saved) <= 12
    resumed = run_example("train_ddp.py", run, *STEPS, "--save-params", str(run / "params.pt"),
                          nproc=2, attempt=2, env=key)  # fmt: skip
    _ok(resumed)
    assert f"resumed from checkpoint of step {max(saved)}\n" in resumed.stderr
    assert_bitwise_equal(load_params(run / "params.pt"), want)

    # the final parameters are in both runs' last checkpoint (step 24): in the clear in one only
    pattern = next(iter(want.values())).flatten()[:16].numpy().tobytes()  # type: ignore[attr-defined]
    assert found_in(ref / "checkpoints", pattern)
    assert not found_in(run / "checkpoints", pattern)
    assert steps(run) == [20, 24]
    for name in ("__0_0.distcp", "__1_0.distcp"):
        assert ckpt.read_manifest(shard(run, 24).parent)["files"][name]  # type: ignore[index]

    bad = shard(run, 24, "__0_0.distcp")  # rank 1 verifies this one (files are split by rank)
    data = bytearray(bad.read_bytes())
    data[len(data) // 3] ^= 0x80
    bad.write_bytes(bytes(data))
    rehash_manifest(bad.parent)
    (run / "params.pt").unlink()
    again = run_example("train_ddp.py", run, *STEPS, "--save-params", str(run / "params.pt"),
                        nproc=2, attempt=3, env=key)  # fmt: skip
    _ok(again)
    assert "step-000000024 failed verification" in again.stderr and "fails authentication" in again.stderr
    assert "resumed from checkpoint of step 20" in again.stderr
    assert (run / "checkpoints" / ".corrupt" / "step-000000024").is_dir()
    assert_bitwise_equal(load_params(run / "params.pt"), want)

    wrong = {"GRACE_CHECKPOINT_KEY": base64.b64encode(OTHER.key).decode()}
    refused = run_example("train_ddp.py", run, *STEPS, nproc=2, attempt=4, env=wrong, timeout=90)
    assert refused.returncode != 0
    assert "CheckpointKeyError" in refused.stderr and "wrong KMS key file?" in refused.stderr
    assert f"encrypted with key {KEY.id}, given key {OTHER.id}" in refused.stderr
    assert steps(run) == [20, 24]  # nothing quarantined, nothing trained over
