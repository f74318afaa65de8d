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

#: Interpreter mode: the model runs Python in a sandboxed Jupyter kernel. "Cannot see files
#: or run code in your head" and "first ... and stop" matter: without them the default model
#: answered questions about an uploaded file with made-up numbers and no run.
INTERPRETER_PROMPT = (
    "You are a helpful assistant with a Python interpreter. You cannot see files or run code "
    "in your head: to answer a question about data, files or calculations, first write Python "
    "code in a ```python block and stop. The code runs and you are shown its output. Then "
    "answer the question in plain words, with the values from that output."
)

#: How a file of each kind is read, named in the note that tells the model of an upload.
_READERS = {
    ".csv": "pandas.read_csv",
    ".tsv": "pandas.read_csv with sep='\\t'",
    ".xlsx": "pandas.read_excel",
    ".xls": "pandas.read_excel",
    ".json": "json.load or pandas.read_json",
    ".parquet": "pandas.read_parquet",
}


def upload_note(path: str) -> str:
    """The line that tells the model of a file given to the interpreter (the web page puts it
    before the user's next message, ``chatfmt chat --file`` in the system prompt). Naming the
    reader is what made the default model read the file rather than guess (measured)."""
    suffix = path[path.rfind(".") :].lower() if "." in path.rsplit("/", 1)[-1] else ""
    reader = _READERS.get(suffix)
    how = f"read it with Python, e.g. {reader}" if reader else "read it with Python"
    return f"Uploaded file: {path} ({how})"


PromptMode = Literal["chat", "tools", "interpreter"]


def default_system_prompt(mode: PromptMode) -> str | None:
    """The default system prompt of ``mode`` (``None``: plain chat has none)."""
    if mode == "tools":
        return TOOLS_PROMPT
    if mode == "interpreter":
        return INTERPRETER_PROMPT
    return None


__all__ = [
    "INTERPRETER_PROMPT",
    "TOOLS_PROMPT",
    "PromptMode",
    "default_system_prompt",
    "upload_note",
]
