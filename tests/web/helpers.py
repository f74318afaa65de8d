"""A scripted model for the web tests: the reply depends on the last user message, so tests
need not run in a fixed order, and a live server built on it. A reasoning model is gpt-oss
(harmony), whose analysis channel is its reasoning."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI

from chatfmt.agent import CodeRunner
from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine, Script
from chatfmt.tokenizers.base import Tokenizer
from chatfmt.web import demo_tools, mount_web

HELLO_REPLY = (
    "Hello! Here is **bold**, *italics* and `inline code`.\n\n"
    "- first item\n- second item\n\n"
    "```python\nprint('hi')\n```\n"
    "<script>alert(1)</script> [a link](https://example.com)<|im_end|>"
)
#: Markdown that must render as a table and nested lists, and markup that must stay inert.
TABLE_REPLY = (
    "Here is a table:\n\n| name | value |\n|:--|--:|\n| alpha | 1 |\n| beta | 22 |\n\n"
    "- fruit\n  - apple\n  - pear\n    1. ripe\n    2. green\n- nuts\n\n"
    "<img src=x onerror=alert(1)> [click me](javascript:alert(2)) [home](https://example.com)\n\n"
    "| " + " | ".join(f"column {i}" for i in range(12)) + " |\n"
    "|" + "---|" * 12 + "\n| " + " | ".join(str(i * 1000) for i in range(12)) + " |\n\n"
    "```python\nprint('" + "a long line of code " * 8 + "')\n```<|im_end|>"
)
WEATHER_CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
)
WEATHER_ANSWER = "It is demo weather in Paris.<|im_end|>"
PLOT_CODE = (
    "import matplotlib\\nmatplotlib.use('module://matplotlib_inline.backend_inline')\\n"
    "import matplotlib.pyplot as plt\\nplt.plot([1, 2, 3], [1, 4, 9])\\n"
    "plt.title('squares')\\nplt.show()\\nprint('plotted')"
)
PLOT_CALL = (
    '<tool_call>\n{"name": "interpreter", "arguments": {"code": "' + PLOT_CODE + '"}}\n'
    "</tool_call><|im_end|>"
)
PLOT_ANSWER = "Here is the plot of the squares.<|im_end|>"
SLOW_REPLY = " ".join(f"word{i}" for i in range(400)) + "<|im_end|>"
#: Reasoning that would be markup if it were ever parsed as HTML or Markdown.
REASONING = (
    "The user says hello. <img src=x onerror=alert(1)> <b>not bold</b> **not strong**\n"
    + " ".join(f"step{i}" for i in range(120))
)
#: A gpt-oss reply: its reasoning (the analysis channel), then its answer.
HARMONY_REPLY = (
    f"<|channel|>analysis<|message|>{REASONING}<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello! **Glad** to help.<|return|>"
)


def rows_call(path: str) -> str:
    """The interpreter call that counts a CSV's rows and writes a summary file beside it."""
    code = (
        f"import pandas as pd\ndf = pd.read_csv({path!r})\nprint('rows:', len(df))\n"
        "df.describe().to_csv('summary.csv')"
    )
    return (
        '<tool_call>\n{"name": "interpreter", "arguments": {"code": '
        + json.dumps(code)
        + "}}\n</tool_call><|im_end|>"
    )


def scripted(tokenizer: Tokenizer) -> Callable[[list[int]], str]:
    """Reply by keyword of the last user message; after a tool result, give the answer."""

    def reply(prompt: list[int]) -> str:
        text = tokenizer.decode(prompt)
        tail = text.rsplit("<|im_start|>user\n", 1)[-1]
        if tail.startswith("<tool_response>"):
            if rows := re.search(r"rows: (\d+)", tail):
                return f"The file has {rows.group(1)} rows.<|im_end|>"
            return PLOT_ANSWER if "plotted" in tail or "[Image]" in tail else WEATHER_ANSWER
        lowered = tail.lower()
        if "rows" in lowered and (upload := re.search(r"Uploaded file: (\S+)", tail)):
            return rows_call(upload.group(1))
        if "weather" in lowered:
            return WEATHER_CALL
        if "table" in lowered:
            return TABLE_REPLY
        if "plot" in lowered:
            return PLOT_CALL
        if "slow" in lowered:
            return SLOW_REPLY
        if "fail" in lowered:
            return "<|im_end|>"
        return HELLO_REPLY

    return reply


def build_app(
    tokenizer: Tokenizer,
    *,
    delay: float = 0.0,
    interpreter_factory: Callable[[], CodeRunner] | None = None,
    context_length: int = 32768,
    dialect: str = "qwen2.5",
    script: Script | None = None,
    model_name: str = "fake-qwen",
    **kwargs: Any,
) -> tuple[FastAPI, FakeEngine]:
    """The web chat over a FakeEngine: by default Qwen2.5 replying by :func:`scripted`."""
    replies = scripted(tokenizer) if script is None else script
    engine = FakeEngine(tokenizer, replies, delay=delay, context_length=context_length)
    app = FastAPI()
    mount_web(
        app,
        engine=engine,
        dialect=get_dialect(dialect),
        tools=demo_tools(),
        interpreter_factory=interpreter_factory,
        model_name=model_name,
        **kwargs,
    )
    return app, engine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def live_server(
    app: FastAPI,
    startup: Callable[[], Awaitable[None]] | None = None,
    shutdown: Callable[[], Awaitable[None]] | None = None,
) -> Iterator[str]:
    """Run ``app`` with uvicorn on 127.0.0.1 in a thread; yield its base URL. ``startup`` and
    ``shutdown`` run on the server's event loop (an engine's child process belongs to it)."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def main() -> None:
        if startup is not None:
            await startup()
        try:
            await server.serve()
        finally:
            if shutdown is not None:
                await shutdown()

    thread = threading.Thread(
        target=asyncio.run, args=(main(),), name="web-test-server", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
