"""DCP's file storage with every file it writes or reads going through the encryption envelope.

The seam is DCP's ``FileSystem``: ``FileSystemWriter`` and ``FileSystemReader``
open every file (shards, ``.metadata``, and with them each rank's pickled
rank state) through ``self.fs.create_stream(path, mode)``. Replacing that one
method means no plaintext byte of a checkpoint reaches the disk, staging
included, whatever DCP writes, and nothing else about DCP changes: offsets it
records are plaintext offsets, and the reading stream presents the plaintext
(seekable) so its ``_ReaderView`` slices and ``torch.load`` work as before.
DCP's per-item stream transforms (``_extensions``) were the other candidate;
they leave ``.metadata`` in plaintext and seal items, not files, so a
truncated or swapped file would not be caught as such.

Every file is bound (the envelope's AAD) to ``<scope>/<name>``: ``scope`` is the
committed checkpoint's directory name (``step-000000120``), known before the
save starts and read back from the path on load, so a file copied from
another checkpoint fails authentication. DCP writes ``.metadata`` as
``.metadata.tmp`` and renames it, so a ``.tmp`` suffix is not part of the name bound.
"""

from __future__ import annotations

import io
import os
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from grace.runtime.encryption import DataKey, DecryptingReader, EncryptingWriter


def binding(scope: str, path: str | os.PathLike[str]) -> str:
    """The name a file is sealed under: ``<scope>/<file name, less a trailing .tmp>``."""
    return f"{scope}/{Path(path).name.removesuffix('.tmp')}"


class EncryptedFileSystem(FileSystem):
    """DCP's local ``FileSystem`` whose streams encrypt on write and decrypt on read."""

    def __init__(self, key: DataKey, scope: str) -> None:
        self.key = key
        self.scope = scope

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[io.IOBase, None, None]:
        bound = binding(self.scope, path)
        if mode == "wb":
            writer = EncryptingWriter(open(path, "wb"), self.key, bound)  # noqa: SIM115  # closed below
            try:
                yield writer
            except BaseException:
                writer.abort()  # unsealed: the half-written file fails authentication
                raise
            writer.close()
        elif mode == "rb":
            reader = DecryptingReader(open(path, "rb"), self.key, bound)  # noqa: SIM115
            try:
                yield reader
            finally:
                reader.close()
        else:
            raise ValueError(f"encrypted checkpoint streams open 'wb' or 'rb', not {mode!r}")


def writer(path: Path, key: DataKey, scope: str, **options: Any) -> FileSystemWriter:
    """A ``FileSystemWriter`` into ``path`` whose files are sealed with ``key`` under ``scope``."""
    w = FileSystemWriter(path, **options)
    w.fs = EncryptedFileSystem(key, scope)
    return w


def reader(path: Path, key: DataKey, scope: str | None = None) -> FileSystemReader:
    """A ``FileSystemReader`` of an encrypted checkpoint; ``scope`` defaults to the directory's name."""
    r = FileSystemReader(path)
    r.fs = EncryptedFileSystem(key, scope or Path(path).name)
    return r


__all__ = ["EncryptedFileSystem", "binding", "reader", "writer"]
