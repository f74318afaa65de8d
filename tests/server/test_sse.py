"""SSE framing and disconnect handling shared by the API and the web chat."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import Request

from chatfmt.server.http.sse import ClientGone, event_stream, sse_event, until_disconnect


def fake_request(gone: asyncio.Event) -> Request:
    """A request whose client disconnects when ``gone`` is set."""

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    return Request({"type": "http", "method": "POST", "headers": []}, receive)


def test_sse_event_framing() -> None:
    assert sse_event('{"a":1}') == b'data: {"a":1}\n\n'
    assert sse_event(b"[DONE]") == b"data: [DONE]\n\n"


def test_until_disconnect_returns_or_cancels() -> None:
    async def scenario() -> tuple[int, bool]:
        gone = asyncio.Event()
        value = await until_disconnect(fake_request(gone), asyncio.sleep(0, result=7))
        cancelled = False

        async def slow() -> None:
            nonlocal cancelled
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled = True
                raise

        asyncio.get_running_loop().call_later(0.05, gone.set)
        with pytest.raises(ClientGone):
            await until_disconnect(fake_request(gone), slow())
        return value, cancelled

    assert asyncio.run(scenario()) == (7, True)


def test_event_stream_reports_errors_as_the_last_event() -> None:
    async def events() -> AsyncIterator[str]:
        yield "one"
        raise RuntimeError("boom")

    async def scenario() -> list[bytes]:
        stream = event_stream(
            fake_request(asyncio.Event()),
            events(),
            encode=lambda e: e.encode(),
            on_error=lambda exc: f"error: {exc}",
        )
        return [b async for b in stream]

    assert asyncio.run(scenario()) == [b"one", b"error: boom"]


def test_event_stream_stops_its_producer_when_the_client_leaves() -> None:
    """The producer is cancelled while it is silent (a long cell, a slow first token)."""
    cancelled = asyncio.Event()

    async def events() -> AsyncIterator[str]:
        yield "first"
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        yield "never"

    async def scenario() -> list[bytes]:
        gone = asyncio.Event()
        out: list[bytes] = []
        stream = event_stream(
            fake_request(gone), events(), encode=str.encode, on_error=lambda exc: "error"
        )
        async for chunk in stream:
            out.append(chunk)
            gone.set()  # the client disconnects after the first event
        return out

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) == [b"first"]
    assert cancelled.is_set()
