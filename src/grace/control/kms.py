"""The KMS seam: who wraps each job's checkpoint data key (envelope encryption).

Every job gets one random 256-bit data key (``grace.runtime.encryption``
encrypts its checkpoints with it). The store keeps it only *wrapped* by a
key-encryption key (KEK) that lives outside the store, so a copy of the
database, or of the checkpoint directories, is not a copy of the checkpoints'
plaintext. At each launch the control plane unwraps the job's key and hands it
to the attempt as ``GRACE_CHECKPOINT_KEY``.

``KeyEncryptionService`` is all a KMS must do: ``wrap``/``unwrap`` a 32-byte key
with an authenticated ``context`` (``"<store_id>:<job_id>"``, the job's uid), so
a wrapped key copied onto another job's row does not unwrap. Here there is one
implementation, :class:`KeyFileKMS` (a KEK in a local file, mode 0600, ``grace
up --kms keyfile:PATH``). Vault transit or a cloud KMS plugs in behind the
same protocol; docs/security.md ("Encryption at rest") maps it onto their
encrypt/decrypt calls. No cloud client is shipped: none can run here, and the
seam is kept this thin so one is a small adapter.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from pathlib import Path
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from grace.runtime.encryption import KEY_BYTES, DataKey, key_id

#: Prefix of a key wrapped by :class:`KeyFileKMS` (format and version).
KEYFILE_WRAP = "grace-kf1"
#: ``--kms`` schemes this build knows.
SCHEMES = ("keyfile",)


class KMSError(RuntimeError):
    """The KMS cannot be set up, or cannot wrap or unwrap a key; the message says why and what to do."""


class UnwrapError(KMSError):
    """A wrapped data key does not unwrap: another KEK, another job's context, or altered."""


@runtime_checkable
class KeyEncryptionService(Protocol):
    """Wraps and unwraps data keys under a key-encryption key the store never holds.

    ``key_id`` names the KEK (never the key itself) so a refusal can say which
    one wrapped a key. ``wrap`` returns text (it goes into ``jobs.data_key``);
    ``unwrap`` returns the 32 bytes, or raises :class:`UnwrapError` when the
    text was wrapped by another KEK, under another ``context``, or altered.
    """

    @property
    def key_id(self) -> str: ...

    def wrap(self, data_key: bytes, context: str) -> str: ...

    def unwrap(self, wrapped: str, context: str) -> bytes: ...


def _aad(context: str) -> bytes:
    return b"grace data key\0" + context.encode()


class KeyFileKMS:
    """A 32-byte KEK in a local file (base64 text); AES-256-GCM wraps, the context as AAD.

    The file must be readable by its owner only: one readable by group or
    others is refused (the KEK is what keeps every job's checkpoints secret).
    ``create=True`` makes one (mode 0600, from ``os.urandom``) if the file is
    missing: ``grace up``'s default ``<state_dir>/kek.key`` on first start. A
    path given explicitly is not created, so a typo cannot silently mint a new
    KEK under which no existing job's key unwraps.
    """

    def __init__(self, path: Path, create: bool = False) -> None:
        self.path = Path(path)
        if create and not self.path.exists():
            self._create()
        self._kek = self._load()
        self._aead = AESGCM(self._kek)
        self._id = key_id(self._kek)

    def _create(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use that one
            return
        with os.fdopen(fd, "w") as f:
            f.write(base64.b64encode(os.urandom(KEY_BYTES)).decode() + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _load(self) -> bytes:
        how = (f"make one with: head -c 32 /dev/urandom | base64 > {self.path} && chmod 600 {self.path}")
        try:
            st = self.path.stat()
        except FileNotFoundError:
            raise KMSError(
                f"key-encryption key file {self.path} does not exist: {how} (or leave --kms out to use "
                "the default <state-dir>/kek.key, made on first start)"
            ) from None
        if st.st_mode & 0o077:
            raise KMSError(
                f"key-encryption key file {self.path} is readable by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); refusing it: chmod 600 {self.path}"
            )
        try:
            kek = base64.b64decode(self.path.read_text().strip(), validate=True)
        except (binascii.Error, ValueError, UnicodeDecodeError) as e:
            raise KMSError(f"key-encryption key file {self.path} is not base64 ({e}): {how}") from e
        if len(kek) != KEY_BYTES:
            raise KMSError(
                f"key-encryption key file {self.path} holds {len(kek)} bytes, not {KEY_BYTES}: {how}"
            )
        return kek

    @property
    def key_id(self) -> str:
        return self._id

    def wrap(self, data_key: bytes, context: str) -> str:
        DataKey(data_key)  # 32 bytes, or a clear error
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, data_key, _aad(context))
        return f"{KEYFILE_WRAP}:{self._id}:{base64.b64encode(nonce + sealed).decode()}"

    def unwrap(self, wrapped: str, context: str) -> bytes:
        scheme, _, rest = wrapped.partition(":")
        kek_id, _, blob = rest.partition(":")
        if scheme != KEYFILE_WRAP or not blob:
            raise UnwrapError(f"the job's data key is not one {KEYFILE_WRAP} wrapped (it starts {scheme!r})")
        if kek_id != self._id:
            raise UnwrapError(
                f"the job's data key was wrapped by key-encryption key {kek_id}, this control plane has "
                f"{self._id} ({self.path}): start it with the --kms key file that wrapped it"
            )
        try:
            raw = base64.b64decode(blob, validate=True)
            return self._aead.decrypt(raw[:12], raw[12:], _aad(context))
        except (binascii.Error, ValueError, InvalidTag):
            raise UnwrapError(
                f"the job's data key does not unwrap for {context!r}: it was wrapped for another job, "
                "or altered in the store"
            ) from None

    def __repr__(self) -> str:
        return f"KeyFileKMS({str(self.path)!r}, key_id={self._id})"


def kms_from_spec(spec: str, create: bool = False) -> KeyEncryptionService:
    """The KMS a ``--kms`` value names: ``keyfile:PATH``. ``create``: make a missing key file."""
    scheme, sep, arg = spec.partition(":")
    if scheme == "keyfile" and sep and arg:
        return KeyFileKMS(Path(arg).expanduser(), create=create)
    if scheme == "keyfile":
        raise KMSError(f"--kms {spec!r}: keyfile needs a path, e.g. keyfile:/etc/grace/kek.key")
    raise KMSError(
        f"--kms {spec!r}: unknown scheme {scheme!r}; supported: "
        + ", ".join(f"{s}:PATH" for s in SCHEMES)
        + " (Vault transit or a cloud KMS plugs in as a KeyEncryptionService: docs/security.md)"
    )


def new_data_key(kms: KeyEncryptionService, context: str) -> str:
    """A fresh random data key, wrapped: what ``jobs.data_key`` stores."""
    return kms.wrap(DataKey.generate().key, context)


def launch_key(kms: KeyEncryptionService, wrapped: str, context: str) -> str:
    """The job's data key as ``GRACE_CHECKPOINT_KEY`` wants it (base64); raises :class:`UnwrapError`."""
    return DataKey(kms.unwrap(wrapped, context)).b64()


__all__ = [
    "SCHEMES",
    "KMSError",
    "KeyEncryptionService",
    "KeyFileKMS",
    "UnwrapError",
    "kms_from_spec",
    "launch_key",
    "new_data_key",
]
