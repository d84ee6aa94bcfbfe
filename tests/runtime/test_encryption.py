"""The AES-256-GCM file envelope on its own: round trips, seeks, and every way a file can be wrong."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from grace.runtime.encryption import (
    HEADER_SIZE,
    TAG,
    CheckpointTampered,
    DataKey,
    DecryptingReader,
    EncryptingWriter,
    WrongKey,
    authenticate,
    is_encrypted,
    key_id,
)

KEY = DataKey(bytes(32))
C = 64  # a small chunk, so files of a few hundred bytes have several


def seal(path: Path, data: bytes, key: DataKey = KEY, binding: str = "ck/f", step: int = 37) -> None:
    w = EncryptingWriter(open(path, "wb"), key, binding, chunk=C)  # noqa: SIM115  # closed by w
    for i in range(0, len(data), step):
        w.write(data[i : i + step])
    assert w.tell() == len(data)
    w.close()


def read_all(path: Path, key: DataKey = KEY, binding: str = "ck/f") -> bytes:
    with DecryptingReader(open(path, "rb"), key, binding) as r:
        return r.read()


@pytest.mark.parametrize("n", [0, 1, C - 1, C, C + 1, 3 * C, 5 * C + 7])
def test_round_trip_and_random_seeks(tmp_path: Path, n: int) -> None:
    data = os.urandom(n)
    path = tmp_path / "f"
    seal(path, data)
    chunks = max(1, -(-n // C))
    assert path.stat().st_size == HEADER_SIZE + n + chunks * TAG
    # a plaintext of a few bytes turns up in 1 + 16 random-looking bytes by chance (1 in
    # 15 for n = 1): only a longer one says the data was written in the clear
    assert data not in path.read_bytes()[HEADER_SIZE:] or n < 16
    rng = random.Random(n)
    with DecryptingReader(open(path, "rb"), KEY, "ck/f") as r:
        assert r.size == n and r.read() == data
        for _ in range(50):
            a, k = rng.randint(0, n), rng.randint(0, n + 5)
            r.seek(a)
            assert r.read(k) == data[a : a + k] and r.tell() == min(a + k, n)
        if n >= 3:
            r.seek(-3, os.SEEK_END)
            assert r.read() == data[-3:]
        buf = bytearray(n)
        r.seek(0)
        assert r.readinto(buf) == n and bytes(buf) == data
    digest, size = authenticate(path, KEY, "ck/f")
    assert size == path.stat().st_size and len(digest) == 64
    assert is_encrypted(path)


def test_one_large_write_is_sealed_chunk_by_chunk(tmp_path: Path) -> None:
    data = os.urandom(10 * C + 3)
    seal(tmp_path / "f", data, step=len(data))
    assert read_all(tmp_path / "f") == data


def _damaged(tmp_path: Path, how: str) -> Path:
    data = os.urandom(4 * C)  # exactly 4 chunks
    path = tmp_path / "f"
    seal(path, data)
    raw = bytearray(path.read_bytes())
    sealed = C + TAG
    if how == "flip-body":
        raw[HEADER_SIZE + sealed + 5] ^= 0x01
    elif how == "flip-tag":
        raw[HEADER_SIZE + sealed - 1] ^= 0x01
    elif how == "flip-header":
        raw[HEADER_SIZE - 1] ^= 0x01  # the nonce prefix: the header is in every chunk's AAD
    elif how == "truncate-at-chunk":
        raw = raw[: HEADER_SIZE + 3 * sealed]  # three whole chunks: the third was not sealed final
    elif how == "truncate-mid-chunk":
        raw = raw[: HEADER_SIZE + 2 * sealed + 20]
    elif how == "drop-middle-chunk":
        raw = raw[: HEADER_SIZE + sealed] + raw[HEADER_SIZE + 2 * sealed :]
    elif how == "swap-chunks":
        a, b = HEADER_SIZE, HEADER_SIZE + sealed
        raw[a : a + sealed], raw[b : b + sealed] = raw[b : b + sealed], raw[a : a + sealed]
    elif how == "append":
        raw += raw[HEADER_SIZE : HEADER_SIZE + sealed]
    elif how == "header-only":
        raw = raw[:HEADER_SIZE]
    elif how == "not-encrypted":
        raw = bytearray(data)
    path.write_bytes(bytes(raw))
    return path


HOW = ["flip-body", "flip-tag", "flip-header", "truncate-at-chunk", "truncate-mid-chunk",
       "drop-middle-chunk", "swap-chunks", "append", "header-only", "not-encrypted"]  # fmt: skip


@pytest.mark.parametrize("how", HOW)
def test_every_damage_fails_authentication(tmp_path: Path, how: str) -> None:
    path = _damaged(tmp_path, how)
    with pytest.raises(CheckpointTampered):
        authenticate(path, KEY, "ck/f")
    with pytest.raises(CheckpointTampered):
        read_all(path)


def test_a_file_bound_to_another_name_fails(tmp_path: Path) -> None:
    seal(tmp_path / "f", b"x" * 100, binding="step-000000002/__0_0.distcp")
    with pytest.raises(CheckpointTampered, match="fails authentication"):
        authenticate(tmp_path / "f", KEY, "step-000000004/__0_0.distcp")
    authenticate(tmp_path / "f", KEY, "step-000000002/__0_0.distcp")


def test_a_wrong_key_is_named_before_decrypting(tmp_path: Path) -> None:
    seal(tmp_path / "f", b"secret" * 50)
    other = DataKey(b"\x01" * 32)
    with pytest.raises(WrongKey) as err:
        read_all(tmp_path / "f", other)
    assert str(err.value) == (
        f"ck/f is encrypted with key {KEY.id}, given key {other.id}: the job's data key does not match "
        "(wrong KMS key file?)"
    )
    with pytest.raises(WrongKey):
        authenticate(tmp_path / "f", other, "ck/f")


def test_an_aborted_writer_leaves_a_file_that_does_not_verify(tmp_path: Path) -> None:
    w = EncryptingWriter(open(tmp_path / "f", "wb"), KEY, "ck/f", chunk=C)  # noqa: SIM115
    w.write(os.urandom(3 * C))
    w.abort()
    with pytest.raises(CheckpointTampered):
        authenticate(tmp_path / "f", KEY, "ck/f")


def test_nonces_differ_per_file(tmp_path: Path) -> None:
    seal(tmp_path / "a", b"same" * 40)
    seal(tmp_path / "b", b"same" * 40)
    assert (tmp_path / "a").read_bytes() != (tmp_path / "b").read_bytes()


def test_key_ids_and_parsing() -> None:
    assert key_id(KEY.key) == KEY.id and len(KEY.id) == 16 and KEY.id not in KEY.key.hex()
    assert repr(KEY) == f"DataKey(id={KEY.id})"
    assert DataKey.from_b64(KEY.b64()) == KEY
    assert DataKey.generate() != DataKey.generate()
    with pytest.raises(ValueError, match="32 bytes"):
        DataKey(b"short")
