"""The server's webhook key, and the signature a receiver checks.

Each webhook body is signed with HMAC-SHA256 under one random key per server,
kept in ``<state_dir>/notify.key`` (mode 0600, made on first start, never
overwritten). The ``Grace-Signature: sha256=<hex>`` header lets a receiver
check that a POST came from this control plane and was not altered; the
operator hands the key to receivers out of band. The body carries the
notification id and time, so a replayed POST is recognisable by its id.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from grace.spec.errors import SpecError, SpecProblem

KEY_FILE = "notify.key"
SIGNATURE_HEADER = "Grace-Signature"
ID_HEADER = "Grace-Notification-Id"
EVENT_HEADER = "Grace-Event"


def load_or_create_key(state_dir: Path) -> bytes:
    """The key in ``state_dir/notify.key``, made (32 random bytes, hex, mode 0600) if absent.

    A key file others can read is refused (a ``SpecError`` naming it and the fix):
    anyone who reads it can forge notifications. ``O_EXCL|O_NOFOLLOW`` never writes through a planted link.
    """
    path = state_dir / KEY_FILE
    if not path.exists() and not path.is_symlink():
        state_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            pass  # made by another process meanwhile: read it below
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
    if path.is_symlink():
        raise _refused(path, "it is a symbolic link; the webhook key must be a plain file")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise _refused(path, f"it is readable by others (mode {mode:o}): anyone who reads it "
                             f"can forge notifications; chmod 600 {path}")
    try:
        key = bytes.fromhex(path.read_text().strip())
    except ValueError:
        key = b""
    if len(key) < 16:
        raise _refused(path, "it holds no key of 16 bytes or more in hex; delete it and a new "
                             "32-byte key is made at the next start")
    return key


def _refused(path: Path, why: str) -> SpecError:
    """A bad key file ends ``grace up`` like a bad spec file: the path and the fix."""
    return SpecError(str(path), [SpecProblem("", why)])


def sign(key: bytes, body: bytes) -> str:
    """The ``Grace-Signature`` value for ``body``: ``sha256=`` and the HMAC's hex."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify(key: bytes, body: bytes, signature: str) -> bool:
    """What a receiver does (constant-time compare)."""
    return hmac.compare_digest(sign(key, body), signature)


__all__ = ["EVENT_HEADER", "ID_HEADER", "KEY_FILE", "SIGNATURE_HEADER", "load_or_create_key",
           "sign", "verify"]
