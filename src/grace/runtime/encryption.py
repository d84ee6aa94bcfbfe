"""AES-256-GCM file envelope: checkpoints encrypted at rest, streamed in chunks.

Why a chunked envelope and not one ``AESGCM.encrypt`` per file: a shard can
be many GB, and GCM seals a message whole, so a single seal would hold the
shard twice in memory and could not be read back from the middle. Here a file
is a header and a run of independently sealed chunks (1 MiB of plaintext
each); writing holds at most one chunk, and a reader can seek anywhere
(DCP's reader reads each tensor from its offset) by opening only the chunks
it touches.

Layout::

    header   magic "GRACEAE1" | version u8 | chunk size u32 | key id 8 bytes | nonce prefix 8 bytes
    chunk i  AES-256-GCM(plaintext[i*C:(i+1)*C]) || 16-byte tag   (the last one may be shorter)

Chunk ``i`` is sealed with nonce ``prefix || i`` (u32, big-endian; the prefix
is random per file, so a key never sees a nonce twice across files) and
associated data ``header || i || final || binding``, which is what turns
these attacks into authentication failures (:class:`CheckpointTampered`):

- a flipped byte anywhere (header included: it is in every chunk's AAD);
- chunks reordered, dropped or repeated (``i`` is bound);
- truncation, even at a chunk boundary (only the last chunk is sealed with
  ``final=1``, so a file cut after any other chunk fails on its new last one);
- a file swapped for another of the same job (the ``binding``, e.g.
  ``step-000000120/__0_0.distcp``, names the checkpoint and the file).

A file sealed with another key is refused before any decryption with
:class:`WrongKey`, from the key id in the header: a short hash of the key
(never the key), so the message can name both keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

MAGIC = b"GRACEAE1"
VERSION = 1
#: Plaintext bytes per sealed chunk: what a writer or a reader holds at once.
CHUNK = 1 << 20
TAG = 16
KEY_BYTES = 32
_HEADER = struct.Struct(">8sBI8s8s")  # magic, version, chunk size, key id, nonce prefix
HEADER_SIZE = _HEADER.size
_MAX_CHUNKS = 1 << 32  # the counter is a u32
#: Name of the cipher and envelope, recorded in checkpoint manifests.
CIPHER = "AES-256-GCM/grace-chunked-v1"


class EncryptionError(Exception):
    """An encrypted file cannot be read as given."""


class CheckpointTampered(EncryptionError):
    """The file fails authentication: changed, truncated, extended, reordered or swapped."""


class WrongKey(EncryptionError):
    """The file was sealed with another key than the one given (known from the header, before decrypting)."""

    def __init__(self, what: str, sealed_with: str, given: str) -> None:
        self.sealed_with = sealed_with
        self.given = given
        super().__init__(
            f"{what} is encrypted with key {sealed_with}, given key {given}: the job's data key does not "
            "match (wrong KMS key file?)"
        )


def key_id(key: bytes) -> str:
    """A short public name for a key: 16 hex digits of a domain-separated sha256, never the key."""
    return hashlib.sha256(b"grace key id\0" + key).hexdigest()[:16]


@dataclass(frozen=True)
class DataKey:
    """A job's 256-bit data key. Its repr shows the key id only, so logging one leaks nothing."""

    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.key, bytes) or len(self.key) != KEY_BYTES:
            raise ValueError(f"a data key is {KEY_BYTES} bytes (AES-256), got {len(self.key)}")

    @property
    def id(self) -> str:
        return key_id(self.key)

    def __repr__(self) -> str:
        return f"DataKey(id={self.id})"

    @classmethod
    def generate(cls) -> DataKey:
        return cls(AESGCM.generate_key(bit_length=256))

    @classmethod
    def from_b64(cls, text: str, what: str = "GRACE_CHECKPOINT_KEY") -> DataKey:
        """Parse base64 of 32 bytes; ``what`` names the source in the error."""
        try:
            raw = base64.b64decode(text.strip(), validate=True)
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"{what} is not valid base64 ({e}): it must be base64 of 32 random bytes") from e
        if len(raw) != KEY_BYTES:
            raise ValueError(f"{what} decodes to {len(raw)} bytes; it must be base64 of {KEY_BYTES} bytes")
        return cls(raw)

    def b64(self) -> str:
        return base64.b64encode(self.key).decode()


def _nonce(prefix: bytes, index: int) -> bytes:
    return prefix + index.to_bytes(4, "big")


def _aad(header: bytes, index: int, final: bool, binding: str) -> bytes:
    return header + struct.pack(">IB", index, 1 if final else 0) + binding.encode()


class EncryptingWriter(io.RawIOBase):
    """A write-only binary stream that seals what it is given into ``raw``, chunk by chunk.

    ``tell`` counts plaintext bytes (DCP records item offsets with it, and its
    reader seeks to them through :class:`DecryptingReader`). A full chunk is
    sealed only once a byte beyond it arrives, so :meth:`close` always has the
    last chunk to seal with ``final=1``. :meth:`abort` closes without sealing:
    the file is then detectably truncated, never a shorter file that verifies.
    """

    def __init__(self, raw: BinaryIO, key: DataKey, binding: str, chunk: int = CHUNK) -> None:
        super().__init__()
        self._raw = raw
        self._aead = AESGCM(key.key)
        self._binding = binding
        self._chunk = chunk
        self._prefix = os.urandom(8)
        self._header = _HEADER.pack(MAGIC, VERSION, chunk, bytes.fromhex(key.id), self._prefix)
        self._raw.write(self._header)
        self._pending = bytearray()
        self._sealed = 0

    def writable(self) -> bool:
        return True

    def write(self, b: ReadableBuffer) -> int:
        if self.closed:
            raise ValueError("write to a closed EncryptingWriter")
        view = memoryview(b).cast("B")
        n = len(view)
        while view:
            if len(self._pending) == self._chunk:  # more is coming, so this one is not the last
                self._seal(final=False)
            take = min(self._chunk - len(self._pending), len(view))
            self._pending += view[:take]
            view = view[take:]
        return n

    def _seal(self, final: bool) -> None:
        if self._sealed >= _MAX_CHUNKS:
            raise EncryptionError(f"{self._binding}: more than {_MAX_CHUNKS} chunks")
        aad = _aad(self._header, self._sealed, final, self._binding)
        self._raw.write(self._aead.encrypt(_nonce(self._prefix, self._sealed), bytes(self._pending), aad))
        self._sealed += 1
        self._pending.clear()

    def tell(self) -> int:
        return self._sealed * self._chunk + len(self._pending)

    def flush(self) -> None:
        """Flush the sealed chunks (the pending one is sealed by :meth:`close`)."""
        if not self._raw.closed:
            self._raw.flush()

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        """Seal the final chunk and close ``raw``."""
        if self.closed:
            return
        try:
            self._seal(final=True)
            self._raw.flush()
        finally:
            self._raw.close()
            super().close()

    def abort(self) -> None:
        """Close ``raw`` without sealing the final chunk (the file will fail authentication)."""
        if not self.closed:
            try:
                self._raw.close()
            finally:
                super().close()


@dataclass(frozen=True)
class _Layout:
    chunk: int
    chunks: int
    size: int  # plaintext bytes
    header: bytes
    prefix: bytes


def _layout(raw: BinaryIO, stored: int, key: DataKey, binding: str) -> _Layout:
    """Read and check the header; work out the chunk count and the plaintext size from the file size."""
    header = raw.read(HEADER_SIZE)
    if len(header) < HEADER_SIZE:
        raise CheckpointTampered(f"{binding}: {len(header)} bytes, shorter than an encrypted file's header")
    magic, version, chunk, kid, prefix = _HEADER.unpack(header)
    if magic != MAGIC:
        raise CheckpointTampered(f"{binding}: not a Grace-encrypted file (no {MAGIC.decode()} header)")
    if version != VERSION:
        raise CheckpointTampered(f"{binding}: envelope version {version}, this Grace reads {VERSION}")
    if kid.hex() != key.id:
        raise WrongKey(binding, kid.hex(), key.id)
    if not 0 < chunk <= 1 << 30:
        raise CheckpointTampered(f"{binding}: chunk size {chunk} in the header is impossible")
    body = stored - HEADER_SIZE
    chunks = -(-body // (chunk + TAG))
    last = body - (chunks - 1) * (chunk + TAG)
    if chunks == 0 or last < TAG:
        raise CheckpointTampered(f"{binding}: truncated ({stored} bytes do not hold whole sealed chunks)")
    return _Layout(chunk, chunks, body - chunks * TAG, header, prefix)


class DecryptingReader(io.RawIOBase):
    """A seekable, read-only view of the plaintext of an encrypted file.

    Holds one decrypted chunk at a time; every chunk it returns bytes from has
    passed its GCM tag. Raises :class:`WrongKey` when opened with another key
    and :class:`CheckpointTampered` on the first chunk that fails.
    """

    def __init__(self, raw: BinaryIO, key: DataKey, binding: str) -> None:
        super().__init__()
        self._raw = raw
        self._binding = binding
        self._aead = AESGCM(key.key)
        stored = os.fstat(raw.fileno()).st_size
        self._layout = _layout(raw, stored, key, binding)
        self._pos = 0
        self._cached: tuple[int, bytes] | None = None

    @property
    def size(self) -> int:
        """Plaintext bytes."""
        return self._layout.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET, /) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._layout.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def _chunk(self, index: int) -> bytes:
        if self._cached is not None and self._cached[0] == index:
            return self._cached[1]
        lay = self._layout
        self._raw.seek(HEADER_SIZE + index * (lay.chunk + TAG))
        sealed = self._raw.read(lay.chunk + TAG)
        data = _open(self._aead, lay, index, sealed, self._binding)
        self._cached = (index, data)
        return data

    def readinto(self, b: WriteableBuffer) -> int:
        out = memoryview(b).cast("B")
        done = 0
        while done < len(out) and self._pos < self._layout.size:
            index, offset = divmod(self._pos, self._layout.chunk)
            data = memoryview(self._chunk(index))  # a view: slicing bytes would copy the chunk
            n = min(len(out) - done, len(data) - offset)
            out[done : done + n] = data[offset : offset + n]
            done += n
            self._pos += n
        return done

    def read(self, size: int | None = -1) -> bytes:
        """Exactly ``size`` bytes unless the end comes first (pickle and torch.load rely on it)."""
        left = self._layout.size - self._pos
        n = left if size is None or size < 0 else min(size, left)
        buf = bytearray(max(n, 0))
        got = self.readinto(buf)
        return bytes(buf[:got])

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()
            finally:
                self._cached = None
                super().close()


def _open(aead: AESGCM, lay: _Layout, index: int, sealed: bytes, binding: str) -> bytes:
    final = index == lay.chunks - 1
    try:
        return aead.decrypt(_nonce(lay.prefix, index), sealed, _aad(lay.header, index, final, binding))
    except InvalidTag:
        raise CheckpointTampered(
            f"{binding}: chunk {index} of {lay.chunks} fails authentication (changed, truncated, or not "
            "this checkpoint's file)"
        ) from None


def authenticate(path: Path, key: DataKey, binding: str) -> tuple[str, int]:
    """Check every chunk's tag in one pass; returns (sha256 of the file as stored, its size).

    The sha256 is the same digest the manifest records, so one read of the
    file does both checks. Raises :class:`WrongKey` or :class:`CheckpointTampered`.
    """
    h = hashlib.sha256()
    aead = AESGCM(key.key)
    with open(path, "rb") as raw:
        stored = os.fstat(raw.fileno()).st_size
        lay = _layout(raw, stored, key, binding)
        h.update(lay.header)
        for index in range(lay.chunks):
            sealed = raw.read(lay.chunk + TAG)
            h.update(sealed)
            _open(aead, lay, index, sealed, binding)
    return h.hexdigest(), stored


def is_encrypted(path: Path) -> bool:
    """True if the file starts with the envelope's magic (cheap: reads 8 bytes)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


__all__ = [
    "CHUNK",
    "CIPHER",
    "CheckpointTampered",
    "DataKey",
    "DecryptingReader",
    "EncryptingWriter",
    "EncryptionError",
    "WrongKey",
    "authenticate",
    "is_encrypted",
    "key_id",
]
