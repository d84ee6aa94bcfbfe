"""An attempt's logs as sources labelled ``node/rank``: each line once, from byte offsets.

What the backends leave in an attempt directory (local and Slurm alike)::

    <node>.log                                        torchrun's output on that node
    ranks/<node>/<run>/attempt_0/<local rank>/stdout.log, stderr.log   each rank's own

``torchrun --tee=3`` copies every rank's line into ``<node>.log`` as ``[default<L>]:line``,
so reading every ``*.log`` shows each line twice. The sources here are, per node of the
attempt's placement (in placement order, which is torchrun's node rank), the node's *agent*
lines (``<node>.log`` less those copies: torchrun's banner and errors, the elastic agent's
tracebacks, srun's messages on Slurm; nothing else has them) and each local rank's stdout
and stderr files. The rank files are what the rank wrote, byte for byte; the copies are
torchrun's re-reading of those same files, a poll later, with a prefix. A copy is dropped
only for a local rank whose file was found *before* the node log is read: torchrun opens a
rank's files before it starts the rank, so every copy read has its file already listed,
and a rank without files (a backend that writes none) keeps its lines under ``agent``.

A rank is labelled with its global rank: node ``i`` of the placement runs ranks from the sum
of the GPUs (at least one slot) of the nodes before it, as the static rendezvous numbers
them (``--node-rank=i``). On Slurm the node rank is ``SLURM_NODEID`` (Slurm's order of the
node list); it is the placement order when node names sort as the placement lists them.

Files are read as the job's files always are (``isolation.open_job_file``): no symlink as
the last component, no FIFO, only a regular file the job's uid owns, and only inside the
attempt directory (a planted directory symlink is not followed out of it).

A :class:`Cursor` holds the byte offset of each source. A read returns only whole lines
(a last line without its newline waits for it) unless the attempt has ended, at most
``budget`` bytes in all, starting each time from the source after the last one it read, so
one chatty rank cannot starve the others; a line longer than a source's share is split.
Each line is charged ``LINE_OVERHEAD_BYTES`` on top of its bytes (what it costs to answer
besides its text), so a file of bare newlines cannot make an answer of millions of lines.

The rank directories are found by a bounded walk (``_MAX_RANK_ENTRIES`` directory entries
per node, all levels together) that opens each level without following a symlink and
keeps only ``attempt_*`` directories and decimal local-rank directories: a job that plants
thousands of directories, or links one out of the attempt, costs a bounded read.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from grace.backends.isolation import open_job_file, read_job_file

#: Bytes one answer of a follow read returns at most (plus at most one source's share).
FOLLOW_BYTES = 1 << 20
#: The least a source may read in one answer: a longer line is split there.
MIN_SHARE_BYTES = 16 * 1024
#: Local ranks per node a cursor tracks (a directory named 99999 planted in ``ranks/`` is skipped).
MAX_LOCAL_RANKS = 1024
#: What each line costs against a budget besides its bytes: its share of the answer's JSON
#: (source, stream, quoting) and of the work, so an answer is bounded in lines too.
LINE_OVERHEAD_BYTES = 64
#: Directory entries the walk of one node's ``ranks/`` reads at most, every level together.
_MAX_RANK_ENTRIES = 2 * MAX_LOCAL_RANKS
#: Characters of an encoded cursor the API accepts (it travels in a query string).
MAX_CURSOR_CHARS = 12_000
#: Bytes a cursor may decompress to.
_MAX_CURSOR_JSON = 1 << 20
_CURSOR_PREFIX = "c1."
#: torchrun's tee prefix in a node log: ``[<role><local rank>]:`` (role ``default``).
_TEE = re.compile(rb"^\[default(\d{1,4})\]:")


class Stream(StrEnum):
    """Which file of a node a line came from."""

    AGENT = "agent"  # the node's own log, less the ranks' copies
    STDOUT = "stdout"
    STDERR = "stderr"


class CursorError(ValueError):
    """A cursor that is not one this API handed out (or is for another job or attempt)."""


@dataclass(frozen=True)
class Source:
    """One file to read, and how its lines are labelled."""

    node: str
    slot: int  # 0: the agent's log; 1 + 2L: local rank L's stdout; 2 + 2L: its stderr
    label: str  # "a100-00/rank2" or "a100-00/agent"
    stream: Stream
    path: Path
    tee_ranks: frozenset[int] = frozenset()  # agent only: local ranks whose copies are dropped


@dataclass
class Cursor:
    """Where a follow read stopped: the byte offset of each source, by node and slot."""

    job: int
    attempt: int
    offsets: dict[str, list[int]] = field(default_factory=dict)
    start: int = 0  # the source index the next read begins with (fairness, see the module)

    def get(self, src: Source) -> int:
        slots = self.offsets.get(src.node, [])
        return slots[src.slot] if src.slot < len(slots) else 0

    def set(self, src: Source, offset: int) -> None:
        slots = self.offsets.setdefault(src.node, [])
        slots.extend([0] * (src.slot + 1 - len(slots)))
        slots[src.slot] = offset

    def encode(self) -> str:
        """Opaque to clients: compressed JSON, URL-safe, a few bytes per source."""
        raw = json.dumps({"j": self.job, "a": self.attempt, "o": self.offsets, "s": self.start},
                         separators=(",", ":")).encode()
        return _CURSOR_PREFIX + base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """The cursor ``encode`` wrote; CursorError naming what is wrong for anything else."""
        if not text.startswith(_CURSOR_PREFIX):
            raise CursorError("not a cursor this API returned; omit it to read from the start")
        body = text[len(_CURSOR_PREFIX):]
        try:
            packed = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            inflate = zlib.decompressobj()
            raw = inflate.decompress(packed, _MAX_CURSOR_JSON)
            if inflate.unconsumed_tail or not inflate.eof:
                raise CursorError("a cursor too large or cut short; omit it to read from the start")
            data = json.loads(raw)
        except (binascii.Error, zlib.error, ValueError) as e:
            if isinstance(e, CursorError):
                raise
            raise CursorError("a damaged cursor; pass the last one returned, whole, or omit it") from e
        return cls._from_json(data)

    @classmethod
    def _from_json(cls, data: Any) -> Cursor:
        bad = CursorError("a damaged cursor; pass the last one returned, whole, or omit it")
        if not isinstance(data, dict) or set(data) != {"j", "a", "o", "s"}:
            raise bad
        job, attempt, offsets, start = data["j"], data["a"], data["o"], data["s"]
        if (not all(_count(v) for v in (job, attempt, start)) or min(job, attempt) < 1
                or not isinstance(offsets, dict)):
            raise bad
        for node, slots in offsets.items():
            if (not isinstance(node, str) or not isinstance(slots, list)
                    or len(slots) > 1 + 2 * MAX_LOCAL_RANKS or not all(_count(v) for v in slots)):
                raise bad
        return cls(job, attempt, offsets, start)


def _count(value: Any) -> bool:
    """A non-negative int that fits a file offset (bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62


def _inside(path: Path, root: Path) -> bool:
    """``path``'s directory, links resolved, is ``root`` or below it."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path.parent)
    return real == real_root or real.startswith(real_root + os.sep)


def _open_dir(name: str | Path, dir_fd: int | None = None) -> int | None:
    """A directory opened without following a symlink as its last component, or None."""
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=dir_fd)
    except (OSError, ValueError):  # ValueError: a name with a NUL
        return None


def _local_rank(name: str) -> bool:
    """A name the job chose that is a local rank: ASCII digits, short, below the cap
    (``int()`` of "²" or of 5000 digits raises)."""
    return name.isascii() and name.isdigit() and len(name) <= 4 and int(name) < MAX_LOCAL_RANKS


def _subdirs(fd: int, keep: Callable[[str], bool], left: list[int]) -> list[str]:
    """The names of ``fd``'s subdirectories (not links to one) that ``keep`` accepts, sorted;
    each entry read, kept or not, spends one of ``left[0]``, and the listing stops at 0."""
    names: list[str] = []
    if left[0] <= 0:
        return names
    try:
        with os.scandir(fd) as it:  # it reads a duplicate of ``fd``, and closes that
            for entry in it:
                left[0] -= 1
                if keep(entry.name) and entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
                if left[0] <= 0:
                    break
    except OSError:
        pass
    return sorted(names)


def _rank_files(adir: Path, node: str) -> dict[int, Path]:
    """``{local rank: its directory}`` that torchrun made for ``node`` (the newest per rank):
    ``ranks/<node>/<run>/attempt_*/<local rank>/`` with a ``stdout.log``. A bounded walk that
    follows no directory symlink: see the module."""
    found: dict[int, Path] = {}
    left = [_MAX_RANK_ENTRIES]
    ranks = _open_dir(adir / "ranks")
    if ranks is None:
        return found
    try:
        top = _open_dir(node, ranks) if node not in ("", ".", "..") and "/" not in node else None
    finally:
        os.close(ranks)
    if top is None:
        return found
    try:
        for run in _subdirs(top, lambda name: True, left):
            rfd = _open_dir(run, top)
            if rfd is None:
                continue
            try:
                for att in _subdirs(rfd, lambda name: name.startswith("attempt_"), left):
                    afd = _open_dir(att, rfd)
                    if afd is None:
                        continue
                    try:
                        for local in _subdirs(afd, _local_rank, left):
                            try:
                                os.stat(f"{local}/stdout.log", dir_fd=afd, follow_symlinks=False)
                            except OSError:
                                continue
                            found[int(local)] = adir / "ranks" / node / run / att / local
                    finally:
                        os.close(afd)
            finally:
                os.close(rfd)
    finally:
        os.close(top)
    return found


def sources(adir: Path, placement: Sequence[dict[str, Any]], node: str | None = None) -> list[Source]:
    """Every source of an attempt placed on ``placement`` (the store's ``placement_json``),
    of one ``node`` when named, in placement order: agent, then each rank's stdout, stderr."""
    out: list[Source] = []
    base = 0
    for entry in placement:
        name = str(entry["node"])
        first, base = base, base + max(1, len(entry.get("gpus") or ()))
        if node is not None and name != node:
            continue
        ranks = _rank_files(adir, name)  # before the node log is read: see the module
        out.append(Source(name, 0, f"{name}/agent", Stream.AGENT, adir / f"{name}.log",
                          frozenset(ranks)))
        for local, rdir in sorted(ranks.items()):
            label = f"{name}/rank{first + local}"
            out.append(Source(name, 1 + 2 * local, label, Stream.STDOUT, rdir / "stdout.log"))
            out.append(Source(name, 2 + 2 * local, label, Stream.STDERR, rdir / "stderr.log"))
    return out


def _fit(data: bytes, share: int) -> tuple[int, int]:
    """Where the whole lines at the start of ``data`` that fit ``share`` end (each line
    charged ``LINE_OVERHEAD_BYTES`` besides its bytes; the first whole line always fits),
    and how many lines that is."""
    whole = data.rfind(b"\n") + 1
    count = data.count(b"\n", 0, whole)
    if whole + LINE_OVERHEAD_BYTES * count <= share:
        return whole, count
    cut = lines = 0
    while True:
        end = data.find(b"\n", cut) + 1
        if end == 0 or (lines and end + LINE_OVERHEAD_BYTES * (lines + 1) > share):
            return cut, lines
        cut, lines = end, lines + 1


def _last_lines(raw: bytes, budget: int, max_lines: int | None) -> bytes:
    """The end of ``raw``, whole lines, that fits ``budget`` with each line charged
    ``LINE_OVERHEAD_BYTES`` (the last line always fits), at most ``max_lines`` of them."""
    start, lines = len(raw), 0
    while start > 0 and (max_lines is None or lines < max_lines):
        prev = raw.rfind(b"\n", 0, start - 1) + 1  # where the line before ``start`` begins
        if lines and len(raw) - prev + LINE_OVERHEAD_BYTES * (lines + 1) > budget:
            break
        start, lines = prev, lines + 1
    return raw[start:]


def _split(src: Source, data: bytes) -> list[str]:
    """``data`` (whole lines, the last perhaps without its newline) as lines of text, less
    the agent's copies of rank lines."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    kept: list[str] = []
    for line in lines:
        if src.tee_ranks:
            tee = _TEE.match(line)
            if tee is not None and int(tee.group(1)) in src.tee_ranks:
                continue
        kept.append(line.removesuffix(b"\r").decode(errors="replace"))
    return kept


@dataclass
class Chunk:
    """What one follow read returns."""

    lines: list[dict[str, str]]
    cursor: Cursor
    more: bool  # whole lines are waiting that the budget left out: read again at once
    drained: bool  # every source was read to its end (with ``final``: nothing will follow)


def follow(adir: Path, srcs: Sequence[Source], cursor: Cursor, owner: int | None, *,
           final: bool, budget: int = FOLLOW_BYTES) -> Chunk:
    """The lines after ``cursor``, at most about ``budget`` bytes of them, each line
    charged ``LINE_OVERHEAD_BYTES`` besides its bytes.

    ``final``: the attempt has ended (checked *before* this read, so the files are
    complete): a last line without its newline is returned too.
    """
    lines: list[dict[str, str]] = []
    share = max(MIN_SHARE_BYTES, budget // max(1, len(srcs)))
    spent, more, drained = 0, False, True
    n = len(srcs)
    next_start = cursor.start % n if n else 0
    for i in [(next_start + k) % n for k in range(n)]:
        src = srcs[i]
        if spent >= budget:
            more, drained, next_start = True, False, i
            break
        if not _inside(src.path, adir):
            continue
        f = open_job_file(src.path, owner)
        if f is None:
            continue
        with f:
            try:
                size = os.fstat(f.fileno()).st_size
                offset = cursor.get(src)
                if offset > size:  # truncated or replaced: read it again from its start
                    offset = 0
                f.seek(offset)
                data = f.read(min(share, size - offset))
            except OSError:
                continue
        at_end = offset + len(data) >= size
        whole = data.rfind(b"\n") + 1
        cut, count = _fit(data, share)
        if cut == whole < len(data) and ((final and at_end) or (cut == 0 and len(data) >= share)):
            cut, count = len(data), count + 1  # the attempt ended, or one line fills the share
        for text in _split(src, data[:cut]):
            lines.append({"source": src.label, "stream": str(src.stream), "text": text})
        cursor.set(src, offset + cut)
        spent += cut + LINE_OVERHEAD_BYTES * count
        if offset + cut < size:
            drained = False
            # beyond this read, or whole lines the share left out: not just a line awaiting
            # its newline
            more = more or not at_end or cut < whole
    cursor.start = next_start
    return Chunk(lines, cursor, more, drained)


def tail(adir: Path, srcs: Iterable[Source], owner: int | None, lines_per_source: int,
         max_bytes: int) -> list[str]:
    """The last ``lines_per_source`` lines of each source (of its last ``max_bytes``, each
    line charged ``LINE_OVERHEAD_BYTES`` besides its bytes), each as ``[label] text``: the
    plain-text ``/jobs/N/logs``."""
    out: list[str] = []
    for src in srcs:
        raw = read_job_file(src.path, owner, max_bytes=max_bytes) if _inside(src.path, adir) else None
        if raw is None:
            continue
        if len(raw) == max_bytes:  # the file's end only: its first line is cut, drop it
            raw = raw[raw.find(b"\n") + 1:]
        # the agent's copies of rank lines are dropped after: count them, do not stop early
        raw = _last_lines(raw, max_bytes, None if src.tee_ranks else lines_per_source)
        out += [f"[{src.label}] {text}" for text in _split(src, raw)[-lines_per_source:]]
    return out
