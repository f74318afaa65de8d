"""``chatfmt chat``: an interactive terminal chat over the agent loop, rendered with rich.

Replies stream as they are generated; tool calls and interpreter cells are shown with their
results. ``/reset`` starts over, ``/exit`` (or end of input) quits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ._imports import require
from .agent import Agent, AgentResult, CodeRunner, ModelEvent, ToolFinished, ToolRunner, ToolStarted
from .dialects.base import Dialect
from .engines.base import Engine, SamplingParams
from .events import TextDelta
from .messages import INTERPRETER, Message


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
    """Chat until ``/exit`` or end of input; returns the conversation."""
    rich_console = require("rich.console", extra="cli")
    panel = require("rich.panel", extra="cli")
    syntax = require("rich.syntax", extra="cli")
    con = console or rich_console.Console()
    ask = read_line or (lambda prompt: str(con.input(prompt)))
    agent = Agent(
        engine,
        dialect,
        tools=tools,
        interpreter=interpreter,
        params=SamplingParams(max_tokens=max_tokens, temperature=0.0),
    )
    start: list[Message] = [Message(role="system", content=system)] if system else []
    history = list(start)
    con.print(f"[dim]chatfmt chat · {engine.name} · {dialect.name} · /reset, /exit[/dim]")
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

        async def turn(conversation: list[Message]) -> AgentResult | None:
            result = None
            con.print("[bold green]assistant›[/bold green] ", end="")
            async for item in agent.stream(conversation):
                if isinstance(item, AgentResult):
                    result = item
                elif isinstance(item, ModelEvent) and isinstance(item.event, TextDelta):
                    con.print(item.event.text, end="", markup=False, highlight=False)
                elif isinstance(item, ToolStarted):
                    call = item.call
                    if call.name == INTERPRETER:
                        code = str(call.arguments_dict().get("code", ""))
                        body: Any = syntax.Syntax(code, "python", theme="ansi_dark")
                    else:
                        body = f"{call.name}({call.arguments})"
                    con.print()
                    con.print(panel.Panel(body, title=f"call · {call.name}", expand=False))
                elif isinstance(item, ToolFinished):
                    style = "green" if item.ok else "red"
                    con.print(
                        panel.Panel(
                            item.observation, title="result", border_style=style, expand=False
                        ),
                        markup=False,
                    )
                    con.print("[bold green]assistant›[/bold green] ", end="")
            con.print()
            return result

        try:
            result = asyncio.run(turn(history))
        except KeyboardInterrupt:
            con.print("\n[dim]interrupted[/dim]")
            history.pop()
            continue
        except Exception as exc:  # engine or runtime failure: report, keep the chat alive
            con.print(f"\n[red]error:[/red] {exc}", markup=True)
            history.pop()
            continue
        if result is not None:
            history = list(result.conversation.messages)
    return history
