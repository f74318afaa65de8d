"""Helpers shared by the server tests (SSE parsing, request bodies)."""

from __future__ import annotations

import json
from typing import Any


def parse_sse(body: str) -> tuple[list[dict[str, Any]], bool]:
    """The JSON events of an SSE body, and whether it ended with ``data: [DONE]``."""
    events: list[dict[str, Any]] = []
    done = False
    for block in body.split("\n\n"):
        block = block.strip()
        if not block:
            continue
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


class ServerThread:
    """A real uvicorn server on a free 127.0.0.1 port, in a background thread."""

    def __init__(self, app: Any) -> None:
        import threading

        import uvicorn

        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="off",
            timeout_keep_alive=30,
        )
        self.app = app
        # uvicorn skips signal handlers outside the main thread; stop it with should_exit.
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        import time

        self.thread.start()
        deadline = time.monotonic() + 30
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
