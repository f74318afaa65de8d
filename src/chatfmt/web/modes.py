"""The page's modes (chat, tools, interpreter): which tools each offers the model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ..agent import ToolRunner
from ..messages import INTERPRETER

Mode = Literal["chat", "tools", "interpreter"]
MODES: tuple[Mode, ...] = get_args(Mode)

#: The tool definition offered to the model in interpreter mode; the agent runs calls of it in
#: the conversation's kernel.
INTERPRETER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": INTERPRETER,
        "description": (
            "Run Python code in a stateful Jupyter kernel and return its output. Variables "
            "persist between calls. Matplotlib figures are shown to the user as images."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run"}},
            "required": ["code"],
        },
    },
}


class InterpreterOnly:
    """The tool runner of interpreter mode: offers the interpreter (``offered``: as a tool
    definition in the prompt), refuses anything else.

    The agent sends calls named ``interpreter`` to its interpreter before asking the runner.
    A model whose format has no interpreter turn asks for runs with a fenced Python block
    (``dialects/parsers/fence.py``); it is not shown the tool: the default model, shown it,
    copies the definition into its code or squeezes multi-line code into one JSON line
    (measured, see docs/benchmarks.md). A call of it still runs.
    """

    def __init__(self, *, offered: bool = True) -> None:
        self.offered = offered

    def openai_tools(self) -> list[dict[str, Any]]:
        return [INTERPRETER_TOOL] if self.offered else []

    async def acall(
        self, name: str, arguments: str | Mapping[str, Any], *, timeout: float | None = None
    ) -> Any:
        from ..tools import ToolResult

        return ToolResult.failure(
            name, f"no tool named '{name}'; only '{INTERPRETER}' is available"
        )


@dataclass(frozen=True)
class Modes:
    """What this server offers: ``tools`` (tool mode) and whether it has an interpreter;
    ``interpreter_tool``: whether interpreter mode shows the model the interpreter as a tool
    (False where the dialect takes fenced blocks as run requests)."""

    tools: ToolRunner | None
    interpreter: bool
    interpreter_tool: bool = True

    def problem(self, mode: Mode) -> str | None:
        """Why ``mode`` is not available here (``None``: it is)."""
        if mode == "tools" and self.tools is None:
            return "tool mode is not available: the server has no tools registered"
        if mode == "interpreter" and not self.interpreter:
            return "interpreter mode is not available: the server has no code interpreter"
        return None

    def available(self) -> list[Mode]:
        return [m for m in MODES if self.problem(m) is None]

    def runner(self, mode: Mode | None) -> ToolRunner | None:
        """The tool runner of ``mode``'s agent loop (``None``: no tools)."""
        if mode == "tools":
            return self.tools
        if mode == "interpreter":
            return InterpreterOnly(offered=self.interpreter_tool)
        return None

    def tool_definitions(self, mode: Mode | None) -> list[dict[str, Any]]:
        """The tools ``mode`` shows the model, as OpenAI definitions."""
        runner = self.runner(mode)
        return runner.openai_tools() if runner is not None else []
