"""A limit on the size of a request body, as pure ASGI middleware (HTTP 413).

Why: every request body is parsed into memory whole (JSON), and what a job
submits is stored and read back every reconcile cycle. Without a limit a
client can send a 10 MB name, or a 1 GB body, and the control plane holds it
in memory (and in the store) for as long as the job lives. The largest valid
request is a job spec whose command is at most 1 MiB (``spec.launch_limits``)
and whose env is at most 256 KiB; JSON's quotes, commas and escapes can double
that, so the default limit is 4 MiB. What is *stored* is bounded by the spec's
own limits (names 200 characters, the command 1 MiB), not by this one.

Both ways a body can arrive are bounded: a ``Content-Length`` over the limit is
refused before a byte of the body is read; a chunked body (no length given) is
read up to the limit and refused as soon as it passes it, and otherwise handed
to the app whole. The refusal is JSON like every other error of the API:
``{"detail": "..."}`` naming the limit.

Pure ASGI rather than ``@app.middleware("http")``: it must see the body as it
streams in, before FastAPI reads it, and it must answer without calling the app.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The default limit: a job spec at its largest (1 MiB command, 256 KiB env) fits as JSON.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


def _size(n: int) -> str:
    if n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    if n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} bytes"


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class BodySizeLimit:
    """Refuse request bodies over ``max_bytes`` with 413 and a JSON ``detail``."""

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self, got: str) -> str:
        return (f"the request body {got}; at most {_size(self.max_bytes)} "
                f"({self.max_bytes} bytes) is accepted: put large data in a file the job reads")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = [v for k, v in scope.get("headers", ()) if k.lower() == b"content-length"]
        if declared:
            try:
                length = int(declared[0])
            except ValueError:
                await _reply(send, 400, f"Content-Length {declared[0][:40]!r} is not a number")
                return
            if length > self.max_bytes:
                await _reply(send, 413, self._too_large(f"is {length} bytes"))
                return
            # the server enforces the declared length, so the body cannot be longer
            await self.app(scope, receive, send)
            return
        await self._chunked(scope, receive, send)

    async def _chunked(self, scope: Scope, receive: Receive, send: Send) -> None:
        """No length given: read the body up to the limit, then hand it over whole."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message]), send)
                return
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > self.max_bytes:
                await _reply(send, 413, self._too_large(f"is over {self.max_bytes} bytes"))
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay([{"type": "http.request", "body": b"".join(chunks),
                                         "more_body": False}], receive), send)


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    """A ``receive`` that yields ``messages`` first, then waits on ``then`` (disconnects)."""
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is None:
            return {"type": "http.disconnect"}
        return await then()

    return receive
