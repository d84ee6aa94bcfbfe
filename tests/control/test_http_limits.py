"""BodySizeLimit: a body over the limit gets 413 with a JSON detail, whether its length is
declared or it arrives chunked; a body within it reaches the app intact."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI, Request
from helpers import served

from grace.control.http_limits import BodySizeLimit

LIMIT = 1024


def make_app(seen: list[int]) -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        body = await request.body()
        seen.append(len(body))
        return {"bytes": len(body), "sum": sum(body)}

    app.add_middleware(BodySizeLimit, max_bytes=LIMIT)
    return app


async def _chunks(total: int, size: int = 100) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        n = min(size, total - sent)
        sent += n
        yield b"\x01" * n


def _post(app: FastAPI, **kw: object) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post("/echo", **kw)  # type: ignore[arg-type]

    return asyncio.run(go())


@pytest.mark.parametrize("size", [0, 1, LIMIT])
def test_a_body_within_the_limit_reaches_the_app_whole(size: int) -> None:
    seen: list[int] = []
    r = _post(make_app(seen), content=b"\x01" * size)
    assert r.status_code == 200, r.text
    assert r.json() == {"bytes": size, "sum": size}
    assert seen == [size]


def test_a_declared_length_over_the_limit_is_refused_before_the_app_runs() -> None:
    seen: list[int] = []
    r = _post(make_app(seen), content=b"x" * (LIMIT + 1))
    assert r.status_code == 413
    assert r.headers["content-type"] == "application/json"
    assert "at most 1 KiB (1024 bytes)" in r.json()["detail"]
    assert f"is {LIMIT + 1} bytes" in r.json()["detail"]
    assert seen == []  # the app never saw it


@pytest.mark.parametrize("size", [LIMIT, LIMIT - 1, 150])
def test_a_chunked_body_within_the_limit_is_handed_over_whole(size: int) -> None:
    seen: list[int] = []
    r = _post(make_app(seen), content=_chunks(size))
    assert r.status_code == 200, r.text
    assert r.json() == {"bytes": size, "sum": size}


def test_a_chunked_body_over_the_limit_is_refused() -> None:
    seen: list[int] = []
    r = _post(make_app(seen), content=_chunks(LIMIT * 50))
    assert r.status_code == 413
    assert "over 1024 bytes" in r.json()["detail"]
    assert seen == []


def test_a_limit_below_one_byte_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        BodySizeLimit(FastAPI(), max_bytes=0)


# -- over a real socket: uvicorn's own parsing of Content-Length and chunked framing --------

def test_over_a_real_socket_both_framings_are_limited() -> None:
    seen: list[int] = []

    def chunked(total: int) -> Iterator[bytes]:
        for _ in range(total // 64):
            yield b"\x01" * 64

    with served(make_app(seen)) as url:
        assert httpx.post(f"{url}/echo", content=b"\x01" * LIMIT).json()["bytes"] == LIMIT
        assert httpx.post(f"{url}/echo", content=b"\x01" * (LIMIT + 1)).status_code == 413
        assert httpx.post(f"{url}/echo", content=chunked(LIMIT)).json()["bytes"] == LIMIT
        big = httpx.post(f"{url}/echo", content=chunked(64 * LIMIT))
        assert big.status_code == 413, big.text
        assert "detail" in big.json()
    assert seen == [LIMIT, LIMIT]
