"""The KMS seam (KeyFileKMS) and the launch path: each job's data key made, stored wrapped, handed over.

The launch tests run a real Reconciler against the scripted backend (helpers.py)
on SQLite and PostgreSQL, and read what the attempt was given off its LaunchSpec.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from helpers import LAB, FakeClock, ScriptedBackend, add_job

from grace.backends.base import AttemptStatus
from grace.control.kms import (
    KeyEncryptionService,
    KeyFileKMS,
    KMSError,
    UnwrapError,
    kms_from_spec,
    launch_key,
    new_data_key,
)
from grace.control.reconciler import Reconciler
from grace.control.store import repository as repo
from grace.control.store.db import Store
from grace.control.store.models import JobState
from grace.core.policies import get_policy
from grace.core.topology import Topology
from grace.runtime.encryption import DataKey
from grace.spec.loader import load_cluster

CTX = "store-uuid:7"


def test_keyfile_is_made_0600_on_request_and_wraps_and_unwraps(tmp_path: Path) -> None:
    path = tmp_path / "state" / "kek.key"
    kms = KeyFileKMS(path, create=True)
    assert isinstance(kms, KeyEncryptionService)
    assert path.stat().st_mode & 0o777 == 0o600
    assert len(base64.b64decode(path.read_text())) == 32
    key = os.urandom(32)
    wrapped = kms.wrap(key, CTX)
    assert key.hex() not in wrapped and base64.b64encode(key).decode() not in wrapped
    assert wrapped.startswith(f"grace-kf1:{kms.key_id}:")
    assert kms.unwrap(wrapped, CTX) == key
    assert KeyFileKMS(path).unwrap(wrapped, CTX) == key  # the same file again: the same KEK
    assert kms.wrap(key, CTX) != wrapped  # a fresh nonce every time


def test_a_wrapped_key_is_bound_to_its_job(tmp_path: Path) -> None:
    kms = KeyFileKMS(tmp_path / "kek.key", create=True)
    wrapped = kms.wrap(os.urandom(32), CTX)
    with pytest.raises(UnwrapError, match="does not unwrap for 'store-uuid:8': it was wrapped for another"):
        kms.unwrap(wrapped, "store-uuid:8")
    blob = base64.b64decode(wrapped.rsplit(":", 1)[1])
    altered = wrapped.rsplit(":", 1)[0] + ":" + base64.b64encode(blob[:-1] + bytes([blob[-1] ^ 1])).decode()
    with pytest.raises(UnwrapError, match="altered"):
        kms.unwrap(altered, CTX)


def test_another_kek_refuses_naming_both(tmp_path: Path) -> None:
    a = KeyFileKMS(tmp_path / "a.key", create=True)
    b = KeyFileKMS(tmp_path / "b.key", create=True)
    with pytest.raises(UnwrapError) as err:
        b.unwrap(a.wrap(os.urandom(32), CTX), CTX)
    msg = str(err.value)
    assert f"wrapped by key-encryption key {a.key_id}, this control plane has {b.key_id}" in msg
    assert "--kms key file" in msg


def test_a_key_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "kek.key"
    KeyFileKMS(path, create=True)
    path.chmod(0o640)
    with pytest.raises(KMSError) as err:
        KeyFileKMS(path)
    assert f"readable by group or others (mode 0640); refusing it: chmod 600 {path}" in str(err.value)


def test_bad_key_files_and_specs_say_what_to_do(tmp_path: Path) -> None:
    missing = tmp_path / "nope.key"
    with pytest.raises(KMSError, match="does not exist: make one with: head -c 32 /dev/urandom"):
        kms_from_spec(f"keyfile:{missing}")
    assert not missing.exists()  # a given path is never made
    short = tmp_path / "short.key"
    short.write_text(base64.b64encode(b"x" * 16).decode())
    short.chmod(0o600)
    with pytest.raises(KMSError, match="holds 16 bytes, not 32"):
        KeyFileKMS(short)
    with pytest.raises(KMSError, match="unknown scheme 'vault'; supported: keyfile:PATH"):
        kms_from_spec("vault:transit/grace")
    with pytest.raises(KMSError, match="keyfile needs a path"):
        kms_from_spec("keyfile:")
    made = KeyFileKMS(tmp_path / "ok.key", create=True)
    assert kms_from_spec(f"keyfile:{made.path}").key_id == made.key_id


# ---------------------------------------------------------------------------- launch


def _reconciler(store: Store, state_dir: Path, kms: KeyEncryptionService | None,
                clock: FakeClock) -> tuple[Reconciler, ScriptedBackend]:
    spec = load_cluster(LAB)
    backend = ScriptedBackend(spec)
    rec = Reconciler(store, backend, Topology.from_spec(spec), get_policy("grace"), state_dir,
                     clock=clock, kms=kms)
    return rec, backend


def test_a_launched_job_gets_its_key_and_the_store_only_the_wrapped_one(
    store: Store, tmp_path: Path
) -> None:
    kms = KeyFileKMS(tmp_path / "kek.key", create=True)
    clock = FakeClock()
    rec, backend = _reconciler(store, tmp_path, kms, clock)
    job_id = add_job(store, clock())
    clock.advance(1)
    rec.cycle()
    (launch,) = backend.launches_of(job_id)
    given = DataKey.from_b64(launch.env["GRACE_CHECKPOINT_KEY"])
    with store.read() as s:
        job = repo.require_job(s, job_id)
        wrapped, uid = job.data_key, rec.ctx.dirs.uid(job_id)
    assert wrapped is not None and wrapped.startswith("grace-kf1:")
    assert given.b64() not in wrapped and given.key.hex() not in wrapped
    assert kms.unwrap(wrapped, uid) == given.key  # wrapped for this job's uid
    assert "GRACE_CHECKPOINT_KEY" not in (job.spec_json.get("env") or {})  # the env is not stored

    # the next attempt gets the same key (its checkpoints must stay readable), not a new one
    node = launch.nodes[0].node
    clock.advance(3600)
    backend.finish(job_id, AttemptStatus.FAILED, exit_code=1, failed_node=node,
                   detail=f"rank 0 on node {node} exited 1\nNCCL error: unhandled system error")
    rec.cycle()
    _, second = backend.launches_of(job_id)
    assert second.attempt == 2 and second.env["GRACE_CHECKPOINT_KEY"] == given.b64()
    with store.read() as s:
        assert repo.require_job(s, job_id).data_key == wrapped


def test_without_a_kms_no_key_is_made(store: Store, tmp_path: Path) -> None:
    clock = FakeClock()
    rec, backend = _reconciler(store, tmp_path, None, clock)
    job_id = add_job(store, clock())
    clock.advance(1)
    rec.cycle()
    (launch,) = backend.launches_of(job_id)
    assert "GRACE_CHECKPOINT_KEY" not in launch.env
    with store.read() as s:
        assert repo.require_job(s, job_id).data_key is None


def test_a_key_that_does_not_unwrap_fails_the_job_at_once_saying_why(
    store: Store, tmp_path: Path
) -> None:
    old = KeyFileKMS(tmp_path / "old.key", create=True)
    new = KeyFileKMS(tmp_path / "new.key", create=True)
    clock = FakeClock()
    rec, backend = _reconciler(store, tmp_path, new, clock)
    job_id = add_job(store, clock())
    with store.transaction() as s:  # wrapped by the KEK the control plane used to have
        repo.require_job(s, job_id).data_key = new_data_key(old, rec.ctx.dirs.uid(job_id))
    clock.advance(1)
    rec.cycle()
    assert backend.launches_of(job_id) == []
    with store.read() as s:
        job = repo.require_job(s, job_id)
        assert job.state == JobState.FAILED
        reason = job.reason or ""
    assert reason.startswith("launch-error: checkpoint key: the job's data key does not unwrap: ")
    assert f"wrapped by key-encryption key {old.key_id}, this control plane has {new.key_id}" in reason
    assert "not retried" in reason


def test_launch_key_is_base64_of_the_unwrapped_key(tmp_path: Path) -> None:
    kms = KeyFileKMS(tmp_path / "kek.key", create=True)
    wrapped = new_data_key(kms, CTX)
    assert DataKey.from_b64(launch_key(kms, wrapped, CTX)).key == kms.unwrap(wrapped, CTX)


# ---------------------------------------------------------------------------- grace up


def test_grace_up_encrypts_by_default_with_a_kek_it_makes(tmp_path: Path) -> None:
    from grace.control.server import ServerConfig, assemble

    cfg = ServerConfig(LAB, None, 0, tmp_path / "state")
    plane = assemble(cfg)
    try:
        kms = plane.reconciler.ctx.kms
        assert isinstance(kms, KeyFileKMS) and kms.path == cfg.state_dir / "kek.key"
        assert kms.path.stat().st_mode & 0o777 == 0o600
    finally:
        plane.store.close()
        if plane.lock is not None:
            plane.lock.release()
    again = assemble(cfg)  # a restart keeps the key it made (every job's key unwraps with it)
    try:
        assert again.reconciler.ctx.kms is not None and again.reconciler.ctx.kms.key_id == kms.key_id
    finally:
        again.store.close()
        if again.lock is not None:
            again.lock.release()


def test_grace_up_with_a_missing_or_open_key_file_exits_2_saying_why(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from grace.cli.main import app as cli

    missing = tmp_path / "kek.key"
    args = ["up", "--cluster", str(LAB), "--state-dir", str(tmp_path / "state"), "--port", "0"]
    r = CliRunner().invoke(cli, [*args, "--kms", f"keyfile:{missing}"])
    assert r.exit_code == 2, r.output
    assert "does not exist" in " ".join(r.output.split()) and not missing.exists()
    KeyFileKMS(missing, create=True)
    missing.chmod(0o644)
    r = CliRunner().invoke(cli, [*args, "--kms", f"keyfile:{missing}"])
    assert r.exit_code == 2 and "chmod 600" in " ".join(r.output.split()), r.output
    r = CliRunner().invoke(cli, [*args, "--kms", "aws-kms:alias/grace"])
    assert r.exit_code == 2 and "supported: keyfile:PATH" in " ".join(r.output.split()), r.output
