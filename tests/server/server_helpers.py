"""Helpers shared by the server tests (SSE parsing, request bodies)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def parse_sse(body: str) -> tuple[list[dict[str, Any]], bool]:
    """The JSON events of an SSE body, and whether it ended with ``data: [DONE]``."""
    events: list[dict[str, Any]] = []
    done = False
    for block in body.split("\n\n"):
        block = block.strip()
        if not block or block.startswith(":"):
            continue  # a comment (the server's pings while the prompt is read)
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        assert not done, "data after [DONE]"
        if payload == "[DONE]":
            done = True
        else:
            events.append(json.loads(payload))
    return events, done


USER_HI: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name."}},
            "required": ["city"],
        },
    },
}

TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def loopback_config(app: Any, **options: Any) -> Any:
    """A uvicorn config for ``app`` on a free 127.0.0.1 port (``options``: more settings,
    e.g. ``uvicorn_options(limits)``)."""
    import uvicorn

    return uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
        timeout_keep_alive=30,
        **options,
    )


class ServerThread:
    """A real uvicorn server on a free 127.0.0.1 port, in a background thread."""

    def __init__(
        self,
        app: Any,
        startup: Callable[[], Awaitable[None]] | None = None,
        **options: Any,
    ) -> None:
        import threading

        import uvicorn

        self.app = app
        # uvicorn skips signal handlers outside the main thread; stop it with should_exit.
        self.server = uvicorn.Server(loopback_config(app, **options))
        self._startup = startup
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        # The app's engine lives on this loop: a managed engine starts its child here.
        self.loop = asyncio.get_running_loop()
        if self._startup is not None:
            await self._startup()
        await self.server.serve()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server's event loop and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def __enter__(self) -> ServerThread:
        import time

        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    @property
    def url(self) -> str:
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def parse_named_sse(body: str) -> list[tuple[str, dict[str, Any]]]:
    """The events of an SSE body whose every event is named (``event: NAME``, then one
    ``data:`` line of JSON), as ``(name, data)`` pairs."""
    out: list[tuple[str, dict[str, Any]]] = []
    for block in body.split("\n\n"):
        if not block.strip() or block.startswith(":"):
            continue  # a comment (the server's pings while the prompt is read)
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: "), block
        assert lines[1].startswith("data: "), block
        out.append((lines[0][len("event: ") :], json.loads(lines[1][len("data: ") :])))
    return out
