"""The API's access log: one line per request, reads included.

The audit trail (``store.audit``) holds every change, hash-chained in the
store; a read changes nothing and is not in it. Who read what still matters (a
leaked token shows up as reads from an address that never used it), so every
request, of every method, gets one line here:

    2026-12-02T10:11:12.345Z 10.0.0.7:51234 3f9c0a12b4e6 "GET /jobs/12" 200 3.1ms 812B

time (UTC), client address, token id (``-``: none, or not identified), method
and path, status, duration, response bytes. The query string is left out: it
may carry values that do not belong in a log. Anything a client controls
(the path) is escaped, so a line cannot be forged by a request.

``AccessLog`` is a pure ASGI middleware, installed outermost so it times the
whole request and sees the status the client got (a 401 from the auth layer
included). The caller's identity is read after the app has answered, from the
request's state (``scope["state"]``, which is ``request.state``): its
``principal`` (anything with a ``token_id``, such as ``control.auth.Principal``)
or an ``actor`` string. Lines go to the ``grace.access`` logger and, given a
path, to a rotating file created with mode 0600 (its lines name tokens and
addresses).
"""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

LOGGER = "grace.access"
FILE_NAME = "access.log"
MAX_BYTES = 10 * 1024 * 1024
BACKUPS = 5

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class PrivateRotatingFileHandler(RotatingFileHandler):
    """A rotating file whose every generation is created (and kept) with mode 0600."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.fchmod(fd, 0o600)  # a file left by an earlier run may be wider
        return io.TextIOWrapper(io.FileIO(fd, "a"), encoding=self.encoding or "utf-8",
                                errors=self.errors, line_buffering=False)


def _escaped(text: str) -> str:
    """Spaces, quotes, backslashes and control characters as ``\\xNN``: one field, one line."""
    return "".join(f"\\x{ord(c):02x}" if c in ' "\\' or ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0
                   else c for c in text)


def token_id_of(state: MutableMapping[str, Any]) -> str | None:
    """The token id the auth layer left in the request's state, if any."""
    for key in ("principal", "actor"):
        who = state.get(key)
        if isinstance(who, str) and who:
            return who
        found = getattr(who, "token_id", None)
        if found:
            return str(found)
    return None


def format_line(at: float, client: Any, token_id: str | None, method: str, path: str,
                status: int, duration_s: float, size: int) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"
    addr = f"{client[0]}:{client[1]}" if client else "-"
    return (f"{stamp} {_escaped(addr)} {_escaped(token_id) if token_id else '-'} "
            f"\"{_escaped(method)} {_escaped(path)}\" {status} {duration_s * 1000:.1f}ms {size}B")


class AccessLog:
    """ASGI middleware: ``app = AccessLog(app, state_dir / "access.log")`` (or ``None``: the
    logger only). ``close()`` closes the file."""

    def __init__(self, app: ASGIApp, path: Path | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.app = app
        self.clock = clock
        self.logger = logging.getLogger(LOGGER)
        self.path = path
        self._file: logging.Logger | None = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            handler = PrivateRotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS,
                                                 encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(message)s"))
            # a logger of its own, outside the logging tree: the file gets every line
            # whatever the process's logging configuration says
            self._file = logging.Logger(f"{LOGGER}.file", logging.INFO)
            self._file.propagate = False
            self._file.addHandler(handler)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})  # the same dict request.state writes into
        at, started = self.clock(), time.perf_counter()
        status, size = 0, 0

        async def counting_send(message: Message) -> None:
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except BaseException:
            status = status or 500  # what the server answers for an app that raised
            raise
        finally:
            raw = scope.get("raw_path")
            path = raw.decode("latin-1") if isinstance(raw, bytes) else str(scope.get("path", ""))
            path = path.partition("?")[0]  # a server that left the query on it
            self.write(format_line(at, scope.get("client"), token_id_of(state),
                                   str(scope.get("method", "")), path, status,
                                   time.perf_counter() - started, size))

    def write(self, line: str) -> None:
        self.logger.info("%s", line)
        if self._file is not None:
            self._file.info("%s", line)

    def close(self) -> None:
        if self._file is not None:
            for h in list(self._file.handlers):
                h.close()
                self._file.removeHandler(h)


__all__ = ["FILE_NAME", "LOGGER", "AccessLog", "PrivateRotatingFileHandler", "format_line",
           "token_id_of"]
