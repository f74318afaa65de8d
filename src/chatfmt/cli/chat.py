"""``chatfmt chat``: an interactive terminal chat over the agent loop, rendered with rich.

Replies stream as they are generated; tool calls and interpreter cells are shown with their
results. A reasoning model's thinking streams before its answer: dimmed on a terminal, and
between ``[thinking]`` and ``[/thinking]`` lines when the output is not a terminal (a log or a
pipe keeps no styles, so the labels say where it ends). ``/reset`` starts over, ``/exit`` (or
end of input) quits. Text from the model and from tools, reasoning included, is shown as plain
text: no rich markup and no terminal control sequences get through.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._imports import require
from ..agent import (
    Agent,
    AgentResult,
    CodeRunner,
    ModelEvent,
    ToolFinished,
    ToolRunner,
    ToolStarted,
    TurnFinished,
)
from ..dialects.base import Dialect
from ..engines.base import Engine, SamplingParams
from ..events import ReasoningDelta, TextDelta
from ..messages import INTERPRETER, Message

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """Model and tool text without terminal control sequences (it must not drive the terminal)."""
    return _CONTROL.sub("", text)


class _View:
    """Prints agent events to a rich console, every untrusted string as plain text. A terminal
    cannot show an interpreter's figure, so each is saved as a PNG in ``image_dir`` and its
    path is printed. That directory is this process's own (never the sandbox's working
    directory, where the code could plant a link under the next figure's name), and files are
    created new (``O_EXCL | O_NOFOLLOW``)."""

    def __init__(self, console: Any, image_dir: Path | None = None) -> None:
        self.con = console
        self.image_dir = image_dir
        self.saved = 0
        self.thinking = False  # reasoning is being shown and has not been closed yet
        self.Text = require("rich.text", extra="cli").Text
        self.Panel = require("rich.panel", extra="cli").Panel
        self.Syntax = require("rich.syntax", extra="cli").Syntax

    def plain(self, text: str, style: str = "") -> Any:
        return self.Text(_printable(text), style=style)

    def prompt(self) -> None:
        self.con.print("[bold green]assistant›[/bold green] ", end="")

    def start_thinking(self) -> None:
        # A terminal shows the reasoning dimmed; anything else (a file, a pipe) would lose
        # the style, so the reasoning is set apart by labels there.
        self.thinking = True
        if self.con.is_terminal:
            self.con.print(self.Text("thinking", style="dim italic"))
        else:
            self.con.print("[thinking]", markup=False)

    def end_thinking(self) -> None:
        """Close the reasoning being shown (the answer, a call or the turn's end follows)."""
        if not self.thinking:
            return
        self.thinking = False
        self.con.print()
        if not self.con.is_terminal:
            self.con.print("[/thinking]", markup=False)

    def show(self, item: object) -> None:
        if isinstance(item, ModelEvent) and isinstance(item.event, ReasoningDelta):
            if item.event.text:
                if not self.thinking:
                    self.start_thinking()
                style = "dim" if self.con.is_terminal else ""
                self.con.print(self.plain(item.event.text, style=style), end="")
        elif isinstance(item, ModelEvent) and isinstance(item.event, TextDelta):
            if item.event.text.strip():  # the answer has begun (not just a line break)
                self.end_thinking()
            self.con.print(self.plain(item.event.text), end="")
        elif isinstance(item, TurnFinished):
            self.end_thinking()
        elif isinstance(item, ToolStarted):
            call = item.call
            if call.name == INTERPRETER:
                code = _printable(str(call.arguments_dict().get("code", "")))
                body: Any = self.Syntax(code, "python", theme="ansi_dark")
            else:
                body = self.plain(f"{call.name}({call.arguments})")
            self.con.print()
            self.con.print(self.Panel(body, title=self.plain(f"call · {call.name}"), expand=False))
        elif isinstance(item, ToolFinished):
            style = "green" if item.ok else "red"
            self.con.print(
                self.Panel(
                    self.plain(item.observation), title="result", border_style=style, expand=False
                )
            )
            for image in item.images:
                self.save_image(image)
            self.prompt()

    def save_image(self, image: Any) -> None:
        data = _png_bytes(image)
        if data is None or not data.startswith(_PNG) or self.image_dir is None:
            return
        self.saved += 1
        path = self.image_dir / f"figure-{self.saved}.png"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            self.con.print(self.plain(f"[figure not saved: {exc}]", style="red"))
            return
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        self.con.print(self.plain(f"[figure saved: {path}]", style="cyan"))


_PNG = b"\x89PNG\r\n\x1a\n"


def _png_bytes(image: Any) -> bytes | None:
    if isinstance(image, bytes | bytearray | memoryview):
        return bytes(image)
    if isinstance(image, str):  # base64, perhaps as a data URL
        with contextlib.suppress(ValueError):
            return base64.b64decode(image.split(",", 1)[-1], validate=True)
    return None


def run_chat(
    engine: Engine,
    dialect: Dialect,
    *,
    tools: ToolRunner | None = None,
    interpreter: CodeRunner | None = None,
    system: str | None = None,
    console: Any = None,
    read_line: Callable[[str], str] | None = None,
    max_tokens: int = 1024,
) -> list[Message]:
    """Chat until ``/exit`` or end of input; returns the conversation. Closes the engine."""
    con = console or require("rich.console", extra="cli").Console()
    figures = Path(tempfile.mkdtemp(prefix="chatfmt-figures-")) if interpreter else None
    view = _View(con, figures)
    ask = read_line or (lambda prompt: str(con.input(prompt)))
    agent = Agent(
        engine,
        dialect,
        tools=tools,
        interpreter=interpreter,
        params=SamplingParams(max_tokens=max_tokens, temperature=0.0),
    )

    async def turn(conversation: list[Message]) -> AgentResult | None:
        result = None
        view.prompt()
        async for item in agent.stream(conversation):
            if isinstance(item, AgentResult):
                result = item
            else:
                view.show(item)
        con.print()
        return result

    start: list[Message] = [Message(role="system", content=system)] if system else []
    history = list(start)
    con.print(f"[dim]chatfmt chat · {engine.name} · {dialect.name} · /reset, /exit[/dim]")
    # One event loop for the whole session: engines keep their connections per loop.
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                line = ask("[bold cyan]you›[/bold cyan] ")
            except EOFError:
                break
            text = line.strip()
            if text in ("/exit", "/quit"):
                break
            if text == "/reset":
                history = list(start)
                con.print("[dim]conversation cleared[/dim]")
                continue
            if not text:
                continue
            history.append(Message(role="user", content=text))
            task = loop.create_task(turn(history))
            try:
                result = loop.run_until_complete(task)
            except KeyboardInterrupt:
                task.cancel()
                loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
                view.end_thinking()
                con.print("\n[dim]interrupted[/dim]")
                history.pop()
                continue
            except Exception as exc:  # engine or runtime failure: report, keep the chat alive
                view.end_thinking()
                con.print(view.Text("\nerror: ", style="red") + view.plain(str(exc)))
                history.pop()
                continue
            if result is not None:
                history = list(result.conversation.messages)
    finally:
        loop.run_until_complete(engine.aclose())
        loop.close()
    return history
