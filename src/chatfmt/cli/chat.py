"""``chatfmt chat``: an interactive terminal chat over the agent loop, rendered with rich.

Replies stream as they are generated: on a terminal the answer renders as Markdown (headings,
lists, tables, code) while it streams; piped or written to a file it is the plain text as it
came. Tool calls and interpreter runs are panels with their results, as on the web page (see
``chat_view.py``). A reasoning model's thinking streams before its answer: dimmed on a
terminal, and between ``[thinking]`` and ``[/thinking]`` lines when the output is not a
terminal (a log or a pipe keeps no styles, so the labels say where it ends). The system prompt
in use is shown at the start. ``/reset`` starts over, ``/exit`` (or end of input) quits. Text
from the model and from tools, reasoning included, is shown as plain text: no rich markup and
no terminal control sequences get through.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._imports import require
from ..agent import Agent, AgentResult, CodeRunner, ToolRunner
from ..dialects.base import Dialect
from ..engines.base import Engine, SamplingParams
from ..messages import Message
from ..prompts import PromptMode, default_system_prompt
from .chat_view import ChatView


def choose_system(system: str | None, *, tools: bool, interpreter: bool) -> str | None:
    """The system prompt of a chat: ``system`` when given (``""``: none), else the default of
    the modes in use (the interpreter's, then the tools', a blank line between), else none."""
    if system is not None:
        return system or None
    modes: list[PromptMode] = []
    if interpreter:
        modes.append("interpreter")
    if tools:
        modes.append("tools")
    prompts = [p for p in map(default_system_prompt, modes) if p]
    return "\n\n".join(prompts) or None


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
    view = ChatView(con, figures)
    ask = read_line or (lambda prompt: str(con.input(prompt)))
    agent = Agent(
        engine,
        dialect,
        tools=tools,
        interpreter=interpreter,
        params=SamplingParams(max_tokens=max_tokens, temperature=0.0),
        default_system=False,  # the command chose the system prompt (``--system '' ``: none)
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
    if system:
        shown = view.plain("system: " + " ".join(system.split()), style="dim")
        con.print(shown, no_wrap=True, overflow="ellipsis")
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
                view.stop()
                con.print("\n[dim]interrupted[/dim]")
                history.pop()
                continue
            except Exception as exc:  # engine or runtime failure: report, keep the chat alive
                view.stop()
                con.print(view.Text("\nerror: ", style="red") + view.plain(str(exc)))
                history.pop()
                continue
            if result is not None:
                history = list(result.conversation.messages)
    finally:
        loop.run_until_complete(engine.aclose())
        loop.close()
    return history
