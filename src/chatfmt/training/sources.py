"""Chat data sets as conversations: OpenAI chat JSONL, ShareGPT, and Responses API item lists.

One JSON value per line, read as it streams (a file of any size in bounded memory):

- **OpenAI chat**: ``{"messages": [...], "tools": [...]}``, messages as chat completions takes
  them (``tool_calls``, ``tool`` results, ``reasoning_content``);
- **ShareGPT**: ``{"conversations": [{"from": "human", "value": "..."}, ...]}`` with ``from``
  one of ``system``, ``human``/``user``, ``gpt``/``assistant``/``model``, ``function_call``
  (the value a JSON call ``{"name", "arguments"}`` or a list of them), ``observation``/
  ``tool``/``function_response`` (the result of the call before it); an optional ``system``
  and ``tools``. Turns written ``{"role", "content"}`` are read as OpenAI messages;
- **Responses API**: ``{"input": [items], "instructions": "...", "tools": [...]}`` (an
  ``output`` list is appended to the input, as a stored response's), or a bare list of items:
  ``message``, ``function_call``, ``function_call_output`` and ``reasoning`` items.

Each row keeps its line number and its ``id`` (the row's own, else ``line-N``). A row that is
not one of these is a :class:`RowError` naming the line and what to fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, Literal

from ..errors import ChatFmtError
from ..messages import Conversation, as_conversation

SourceFormat = Literal["auto", "openai", "sharegpt", "responses"]
FORMATS: tuple[str, ...] = ("auto", "openai", "sharegpt", "responses")

_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "observation": "tool",
    "tool": "tool",
    "function_response": "tool",
}


class RowError(ChatFmtError, ValueError):
    """A row of a data set that cannot be read or trained; ``line`` is its line number."""

    def __init__(self, message: str, *, line: int, source: str = "") -> None:
        self.line = line
        self.reason = message
        where = f"{source}, line {line}" if source else f"line {line}"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class Row:
    """One conversation of a data set, with where it came from."""

    line: int
    id: str
    conversation: Conversation


def read_rows(
    stream: IO[str], *, fmt: SourceFormat = "auto", source: str = ""
) -> Iterator[Row | RowError]:
    """The rows of a JSONL stream, in order; a row that cannot be read is yielded as its
    :class:`RowError` (the caller stops there or counts it), blank lines are skipped."""
    for number, text in enumerate(stream, start=1):
        if not text.strip():
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            yield RowError(
                f"not valid JSON ({exc.msg} at column {exc.colno}); each line must hold one "
                "JSON object",
                line=number,
                source=source,
            )
            continue
        except RecursionError:
            yield RowError("JSON nested too deeply", line=number, source=source)
            continue
        try:
            yield row_of(data, line=number, fmt=fmt)
        except RowError as exc:
            yield RowError(exc.reason, line=number, source=source)
        except (ChatFmtError, ValueError) as exc:
            yield RowError(" ".join(str(exc).split()), line=number, source=source)


def row_of(data: Any, *, line: int, fmt: SourceFormat = "auto") -> Row:
    """One parsed JSON row as a :class:`Row` (``fmt="auto"``: told by its keys)."""
    kind = fmt if fmt != "auto" else _detect(data, line)
    row_id = data.get("id") if isinstance(data, Mapping) else None
    if not isinstance(row_id, str | int) or isinstance(row_id, bool):
        row_id = f"line-{line}"
    if kind == "openai":
        conv = _openai(data, line)
    elif kind == "sharegpt":
        conv = _sharegpt(data, line)
    else:
        conv = _responses(data, line)
    return Row(line=line, id=str(row_id), conversation=conv)


def _detect(data: Any, line: int) -> str:
    if isinstance(data, list):
        return "responses"
    if isinstance(data, Mapping):
        if "messages" in data:
            return "openai"
        if "conversations" in data:
            return "sharegpt"
        if "input" in data:
            return "responses"
    raise RowError(
        "not a conversation: expected an object with 'messages' (OpenAI chat), "
        "'conversations' (ShareGPT) or 'input' (Responses API items), or a list of items",
        line=line,
    )


def _field(data: Any, key: str, line: int, kind: type, what: str) -> Any:
    if not isinstance(data, Mapping) or key not in data:
        raise RowError(f"missing '{key}' ({what})", line=line)
    value = data[key]
    if not isinstance(value, kind):
        raise RowError(f"'{key}' must be a {kind.__name__} ({what})", line=line)
    return value


def _tools(data: Any, line: int) -> list[Any] | None:
    tools = data.get("tools") if isinstance(data, Mapping) else None
    if tools is None:
        return None
    if isinstance(tools, str):  # ShareGPT sets often keep the tool list as JSON text
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError:
            raise RowError("'tools' is text but not a JSON list of tools", line=line) from None
    if not isinstance(tools, list):
        raise RowError("'tools' must be a list of tool definitions", line=line)
    return [_chat_tool(t) for t in tools]


def _chat_tool(tool: Any) -> Any:
    """A Responses API (flat) or bare function definition in chat completions' shape."""
    if isinstance(tool, Mapping) and "function" not in tool and "name" in tool:
        fn = {k: v for k, v in tool.items() if k not in ("type", "strict")}
        return {"type": "function", "function": fn}
    return tool


def _openai(data: Any, line: int) -> Conversation:
    messages = _field(data, "messages", line, list, "the chat messages")
    return as_conversation(messages, _tools(data, line))


def _sharegpt(data: Any, line: int) -> Conversation:
    turns = _field(data, "conversations", line, list, "the ShareGPT turns")
    messages: list[dict[str, Any]] = []
    system = data.get("system")
    if isinstance(system, str) and system:
        messages.append({"role": "system", "content": system})
    pending: list[str] = []  # ids of calls not yet answered
    calls = 0
    for k, turn in enumerate(turns):
        if not isinstance(turn, Mapping):
            raise RowError(f"conversations[{k}] must be an object", line=line)
        if "role" in turn:  # the same list written as chat messages
            messages.append(dict(turn))
            continue
        who, value = turn.get("from"), turn.get("value")
        if not isinstance(who, str) or not isinstance(value, str):
            raise RowError(
                f"conversations[{k}] needs string 'from' and 'value' (or 'role' and 'content')",
                line=line,
            )
        if who == "function_call":
            try:
                called = json.loads(value)
            except json.JSONDecodeError:
                raise RowError(
                    f"conversations[{k}] is a function_call whose value is not JSON; write "
                    '{"name": ..., "arguments": {...}}',
                    line=line,
                ) from None
            batch = []
            for c in called if isinstance(called, list) else [called]:
                if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
                    raise RowError(
                        f'conversations[{k}]: a call needs a "name" (and "arguments")', line=line
                    )
                calls += 1
                cid = f"call_{calls}"
                pending.append(cid)
                args = c.get("arguments", {})
                if not isinstance(args, str):
                    args = json.dumps(args, ensure_ascii=False)
                batch.append(
                    {"id": cid, "type": "function",
                     "function": {"name": c["name"], "arguments": args}}
                )  # fmt: skip
            messages.append({"role": "assistant", "content": None, "tool_calls": batch})
            continue
        role = _SHAREGPT_ROLES.get(who)
        if role is None:
            known = ", ".join([*_SHAREGPT_ROLES, "function_call"])
            raise RowError(f"conversations[{k}] has 'from': {who!r}; use one of {known}", line=line)
        message: dict[str, Any] = {"role": role, "content": value}
        if role == "tool":
            if not pending:
                raise RowError(
                    f"conversations[{k}] is a tool result that follows no function_call turn",
                    line=line,
                )
            message["tool_call_id"] = pending.pop(0)
        messages.append(message)
    return as_conversation(messages, _tools(data, line))


def _responses(data: Any, line: int) -> Conversation:
    if isinstance(data, list):
        items: list[Any] = data
        instructions = None
    else:
        value = _field(data, "input", line, (list, str), "the Responses API input")  # type: ignore[arg-type]
        items = (
            [{"type": "message", "role": "user", "content": value}]
            if isinstance(value, str)
            else list(value)
        )
        output = data.get("output")
        if isinstance(output, list):
            items += output
        instructions = data.get("instructions")
    messages: list[dict[str, Any]] = []
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    reasoning: list[str] = []
    for k, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise RowError(f"input item {k} must be an object", line=line)
        kind = item.get("type", "message" if "role" in item else None)
        last = messages[-1] if messages else None
        if kind == "message":
            role = item.get("role")
            content = _item_text(item.get("content"), k, line)
            message: dict[str, Any] = {"role": role, "content": content}
            if role == "assistant" and reasoning:
                message["reasoning_content"] = "\n".join(reasoning)
                reasoning = []
            messages.append(message)
        elif kind == "function_call":
            call = {"id": item.get("call_id") or item.get("id"), "type": "function",
                    "function": {"name": item.get("name"),
                                 "arguments": item.get("arguments", "{}")}}  # fmt: skip
            if last is not None and last["role"] == "assistant" and not reasoning:
                last.setdefault("tool_calls", []).append(call)  # one turn, several calls
            else:
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                if reasoning:
                    message["reasoning_content"] = "\n".join(reasoning)
                    reasoning = []
                messages.append(message)
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"),
                 "content": output if isinstance(output, str) else json.dumps(output)}
            )  # fmt: skip
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            reasoning.append(_item_text(parts, k, line))
        else:
            raise RowError(
                f"input item {k} has type {kind!r}; training data takes message, "
                "function_call, function_call_output and reasoning items",
                line=line,
            )
    if reasoning:
        raise RowError("a reasoning item is not followed by the assistant turn it belongs to",
                       line=line)  # fmt: skip
    return as_conversation(messages, _tools(data, line))


def _item_text(content: Any, k: int, line: int) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RowError(f"input item {k} has no text content", line=line)
    texts = []
    for part in content:
        text = part.get("text") if isinstance(part, Mapping) else part
        if not isinstance(text, str):
            raise RowError(
                f"input item {k} has a content part without text (only text parts: "
                "input_text, output_text, summary_text, reasoning_text)",
                line=line,
            )
        texts.append(text)
    return "".join(texts)
