"""Default system prompts of the agent's modes: what every client starts with.

A small model follows tools better when told the loop it is in: call a tool, read its result,
answer from it. The texts are the defaults of the web page (shown and editable there), of
``chatfmt chat`` and of the Python agent; a caller's own system prompt replaces them. They are
measured with the embedded default model (see ``docs/benchmarks.md``), not guessed.
"""

from __future__ import annotations

from typing import Literal

#: Tools mode: the model may call the tools the dialect renders into the prompt.
TOOLS_PROMPT = (
    "You are a helpful assistant with tools. When a tool can answer the question, call it. "
    "When a tool result arrives, answer the user's question in one or two plain sentences "
    "that state the values from the result. Do not call the same tool again."
)

#: Interpreter mode: the model runs Python in a sandboxed Jupyter kernel.
INTERPRETER_PROMPT = (
    "You are a helpful assistant with a Python interpreter. To compute something, write the "
    "Python code in a ```python block; it runs and you see its output. Then answer the "
    "user's question in plain words, stating the values from the output."
)

PromptMode = Literal["chat", "tools", "interpreter"]


def default_system_prompt(mode: PromptMode) -> str | None:
    """The default system prompt of ``mode`` (``None``: plain chat has none)."""
    if mode == "tools":
        return TOOLS_PROMPT
    if mode == "interpreter":
        return INTERPRETER_PROMPT
    return None


__all__ = ["INTERPRETER_PROMPT", "TOOLS_PROMPT", "PromptMode", "default_system_prompt"]
