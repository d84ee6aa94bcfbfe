"""One worker process of ``grace bench storage`` (run as a script; standard library only).

:class:`grace.bench.storage_io.WorkerPool` starts ``k`` of these with
``python storage_worker.py`` and talks to each over its stdin and stdout, one
JSON object per line:

1. the parent sends a task: ``{"op": "write"|"read", "paths": [...],
   "file_bytes": n, "block_bytes": b, "seed": s}``;
2. the worker allocates its page-aligned buffer and answers ``{"ready": true}``
   (or ``{"error": "..."}``);
3. when every worker is ready the parent sends ``"go"`` (or ``"skip"``), so
   all start together; the worker does its part and answers
   ``{"bytes": n, "seconds": t}`` with its own time, or ``{"error": "..."}``.

It exits when its stdin closes. It is a script, not a ``multiprocessing``
child, so it never re-imports the caller's ``__main__`` and is never forked
from a process that holds threads (torch's, for one). SIGINT is ignored: on
Ctrl-C the parent stops the workers itself, once, rather than each printing
a traceback.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any


def write(paths: Sequence[str], file_bytes: int, buf: mmap.mmap) -> int:
    """Write each path front to back in ``len(buf)`` requests, fsync it, close it; bytes written."""
    view = memoryview(buf)
    block = len(buf)
    for path in paths:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)  # fresh files, as fio opens them
        try:
            left = file_bytes
            while left > 0:
                left -= os.write(fd, view[: min(block, left)])
            os.fsync(fd)
        finally:
            os.close(fd)
    return file_bytes * len(paths)


def read(paths: Sequence[str], buf: mmap.mmap) -> int:
    """Read each path front to back into ``buf`` (no allocation per request); bytes read."""
    view = memoryview(buf)
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            while n := f.readinto(view):
                total += n
    return total


def _say(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for line in sys.stdin:
        task = json.loads(line)
        try:
            buf = mmap.mmap(-1, int(task["block_bytes"]))  # page-aligned, like fio's buffers
            if task["op"] == "write":
                buf.write(random.Random(task["seed"]).randbytes(len(buf)))
        except Exception as exc:  # reported to the parent, which raises it
            _say({"error": f"{type(exc).__name__}: {exc}"})
            sys.stdin.readline()  # the parent's skip
            continue
        _say({"ready": True})
        if json.loads(sys.stdin.readline()) != "go":
            _say({"skipped": True})
            continue
        try:
            t0 = time.perf_counter()
            if task["op"] == "write":
                done = write(task["paths"], int(task["file_bytes"]), buf)
            else:
                done = read(task["paths"], buf)
            _say({"bytes": done, "seconds": time.perf_counter() - t0})
        except Exception as exc:  # reported to the parent, which raises it
            _say({"error": f"{type(exc).__name__}: {exc}"})
        finally:
            buf.close()


if __name__ == "__main__":
    serve()
