"""``POST /v1/messages``'s request (and ``count_tokens``'), and its translation into the chat
request chatfmt renders.

The Messages API says what chat completions say in other shapes: ``system`` apart from the
messages, content blocks (``text``, ``tool_use`` in assistant turns, ``tool_result`` in user
turns, earlier ``thinking``), tools with ``input_schema``, ``tool_choice`` ``auto`` / ``any`` /
``tool`` / ``none``, ``stop_sequences``, a ``thinking`` switch. A request becomes a
:class:`~chatfmt.server.chat.schemas.ChatCompletionRequest`, so rendering, constraints and
parsing are exactly the chat endpoint's.

Every field is honoured, accepted as a documented no-op (it changes nothing chatfmt could act
on: :data:`NO_OP_FIELDS`), or refused with a 400 naming it, as Anthropic's API refuses fields
it does not know.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from ..chat.schemas import TOOL_NAME, ChatCompletionRequest
from ..http.errors import ApiError
from .thinking import budget_of, thinking_of, thinking_of_signature

#: Top-level fields accepted and not acted on: prompt-caching marks (the engine caches every
#: prompt's prefix by itself), server-side context editing (the conversation is rendered as
#: sent), metadata, the service tier and speed, the region, and ``output_config.effort``
#: (``output_config.format`` is honoured).
NO_OP_FIELDS = frozenset(
    {
        "cache_control",
        "context_management",
        "metadata",
        "service_tier",
        "speed",
        "inference_geo",
    }
)

#: Fields that ask for what chatfmt does not serve: a 400 that says so.
_REFUSED = {
    "container": "code-execution containers are Anthropic's server tools, which chatfmt does "
    "not run",
    "mcp_servers": "chatfmt does not connect to MCP servers; declare their tools in 'tools' "
    "and run them yourself",
}

#: Keys a content block may carry beside its own: prompt-caching marks (no-op), and the
#: citations of earlier replies' text (what the text says is rendered; its sources are not).
_BLOCK_NO_OPS = frozenset({"cache_control", "citations"})

_BLOCK_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
    "tool_use": frozenset({"type", "id", "name", "input", "caller"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error"}),
}

_TOOL_KEYS = frozenset(
    {
        "type",
        "name",
        "description",
        "input_schema",
        "strict",
        "cache_control",
        "eager_input_streaming",
        "defer_loading",
        "allowed_callers",
    }
)

#: Between the text blocks of one message (and of ``system``): blocks are separate
#: paragraphs, never words to glue together.
BLOCK_SEPARATOR = "\n\n"


def bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


class _Body(BaseModel):
    """What ``POST /v1/messages`` and ``count_tokens`` share: the conversation, its tools and
    how the model may think or answer."""

    model_config = ConfigDict(extra="allow")  # checked by _known_fields, with a better message

    model: str
    messages: list[Any]
    system: str | list[Any] | None = None
    tools: list[Any] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    # No-ops (NO_OP_FIELDS): accepted with any JSON value Anthropic's API takes there.
    cache_control: dict[str, Any] | None = None
    context_management: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    speed: str | None = None
    inference_geo: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name in data:
            if name in _REFUSED and data[name] is not None:
                raise ValueError(f"{name} is not supported: {_REFUSED[name]}; leave it out")
        unknown = [k for k in data if k not in cls.model_fields and k not in _REFUSED]
        if unknown:
            raise ValueError(
                f"{unknown[0]}: this field is not part of the Messages API as chatfmt serves "
                f"it; remove it (fields: {', '.join(sorted(cls.model_fields))})"
            )
        return data


class CountTokensRequest(_Body):
    """The body of ``POST /v1/messages/count_tokens``."""


class MessagesRequest(_Body):
    """The body of ``POST /v1/messages``."""

    max_tokens: StrictInt = Field(ge=1)
    stop_sequences: list[str] | None = Field(default=None, max_length=16)
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: StrictInt | None = Field(default=None, ge=0)
    stream: StrictBool = False


@dataclass
class ChatForm:
    """A Messages request as chatfmt renders it: the chat request, where each of its messages
    came from (``system``, ``messages.3``, ``messages.4.content.0``, for errors that name a
    message), and what the reply's thinking blocks show."""

    chat: ChatCompletionRequest
    origins: list[str]
    show_thinking: bool = True


def chat_form(req: _Body) -> ChatForm:
    """The chat request ``req`` amounts to, or a 400 naming the field that cannot be served."""
    messages, origins = chat_messages(req)
    enabled, show_thinking = thinking_of(req.thinking)
    body: dict[str, Any] = {
        "messages": messages,
        "tools": chat_tools(req.tools),
        "response_format": _response_format(req.output_config),
    }
    choice = req.tool_choice
    if choice is not None:
        body["tool_choice"], parallel = _tool_choice(choice)
        if parallel is False:
            body["parallel_tool_calls"] = False
    if enabled is not None:
        body["chat_template_kwargs"] = {"enable_thinking": enabled}
    body["thinking_token_budget"] = budget_of(req.thinking)
    if isinstance(req, MessagesRequest):
        # max_tokens is applied once the prompt is rendered (see service.py): the room left
        # in the context window bounds it, as Anthropic's API does.
        stops = req.stop_sequences or []
        for i, stop in enumerate(stops):
            if not stop:
                raise bad("a stop sequence must not be empty", f"stop_sequences.{i}")
        body.update(stop=stops or None, temperature=req.temperature, top_p=req.top_p)
        body["top_k"] = req.top_k  # checked against what the engine honours, as chat's is
        body["stream"] = req.stream
    try:
        chat = ChatCompletionRequest.model_validate(
            {k: v for k, v in body.items() if v is not None}
        )
    except ValueError as exc:
        raise bad(f"invalid request: {exc}") from None
    return ChatForm(chat, origins, show_thinking)


# ==== Messages and content blocks ====


def system_text(system: str | list[Any], param: str = "system") -> str:
    """``system`` as text: a string, or text blocks."""
    if isinstance(system, str):
        return system
    return BLOCK_SEPARATOR.join(_text_block(b, f"{param}.{i}") for i, b in enumerate(system))


def chat_messages(req: _Body) -> tuple[list[dict[str, Any]], list[str]]:
    """``system`` and ``messages`` as chat messages, and the field each came from."""
    out: list[dict[str, Any]] = []
    origins: list[str] = []
    if req.system is not None and req.system != []:
        out.append({"role": "system", "content": system_text(req.system)})
        origins.append("system")
    if not req.messages:
        raise bad("messages is empty; send at least one user message", "messages")
    for i, message in enumerate(req.messages):
        param = f"messages.{i}"
        if not isinstance(message, dict):
            raise bad("a message must be an object with 'role' and 'content'", param)
        extra = sorted(set(message) - {"role", "content"})
        if extra:
            raise bad(
                f"unknown message field {extra[0]!r}; a message has 'role' and 'content'", param
            )
        role = message.get("role")
        if "content" not in message:
            raise bad("a message needs 'content' (a string or a list of content blocks)", param)
        blocks = _blocks(message["content"], f"{param}.content")
        if role == "user":
            _user(blocks, f"{param}.content", out, origins)
        elif role == "assistant":
            out.append(_assistant(blocks, f"{param}.content"))
            origins.append(param)
        elif role == "system":
            texts = [_text_block(b, f"{param}.content.{j}") for j, b in enumerate(blocks)]
            out.append({"role": "system", "content": BLOCK_SEPARATOR.join(texts)})
            origins.append(param)
        else:
            raise bad(
                f"role {role!r} is not one of 'user', 'assistant' (or 'system')", f"{param}.role"
            )
    last = req.messages[-1]
    if isinstance(last, dict) and last.get("role") == "assistant":
        raise bad(
            "the last message is an assistant message, which asks for the reply to continue it "
            "(prefill); chatfmt does not continue a partial reply: end with a user message",
            f"messages.{len(req.messages) - 1}",
        )
    return out, origins


def _blocks(content: Any, param: str) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise bad("content must be a string or a list of content blocks", param)
    return content


def _kind(block: Any, param: str) -> str:
    """A block's type, checked against the keys that type may carry."""
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(kind, str):
        raise bad("a content block must be an object with a string 'type'", param)
    if kind in ("image", "document"):
        raise bad(
            f"{kind} blocks are not supported: the served model reads text only; send the "
            "content as text blocks",
            f"{param}.type",
        )
    keys = _BLOCK_KEYS.get(kind)
    if keys is None:
        raise bad(
            f"content block type {kind!r} is not supported; chatfmt reads text, tool_use, "
            "tool_result, thinking and redacted_thinking blocks",
            f"{param}.type",
        )
    extra = sorted(set(block) - keys - _BLOCK_NO_OPS)
    if extra:
        raise bad(f"unknown field {extra[0]!r} in a {kind} block", f"{param}.{extra[0]}")
    return kind


def _typed(blocks: list[Any], param: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Each block of a message's content with its place (``param``'s index) and checked type."""
    for j, block in enumerate(blocks):
        where = f"{param}.{j}"
        yield where, _kind(block, where), block


def _text_block(block: Any, param: str) -> str:
    if _kind(block, param) != "text":
        raise bad(f"only text blocks are allowed here, not {block['type']!r}", f"{param}.type")
    text = block.get("text")
    if not isinstance(text, str):
        raise bad("a text block needs a string 'text'", f"{param}.text")
    return text


def _user(blocks: list[Any], param: str, out: list[dict[str, Any]], origins: list[str]) -> None:
    """A user turn: its tool results (each the tool message of its call), then its text."""
    texts: list[str] = []
    for where, kind, block in _typed(blocks, param):
        if kind == "text":
            texts.append(_text_block(block, where))
        elif kind == "tool_result":
            if texts:
                # Anthropic's rule too: the results answer the calls right before them.
                raise bad("tool_result blocks must come before any text in a user message", where)
            out.append(_tool_result(block, where))
            origins.append(where)
        else:
            raise bad(f"a user message cannot carry {kind} blocks", f"{where}.type")
    if texts or not blocks:
        out.append({"role": "user", "content": BLOCK_SEPARATOR.join(texts)})
        origins.append(param.removesuffix(".content"))


#: What an error result's text starts with: chat formats have no flag for it, so the model
#: reads it.
ERROR_PREFIX = "Error: "


def _tool_result(block: dict[str, Any], param: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise bad("a tool_result block needs the 'tool_use_id' of its tool_use", param)
    content = block.get("content", "")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = BLOCK_SEPARATOR.join(
            _text_block(b, f"{param}.content.{k}") for k, b in enumerate(content)
        )
    else:
        raise bad("a tool_result's content must be a string or text blocks", f"{param}.content")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise bad("is_error must be true or false", f"{param}.is_error")
    if is_error:
        text = ERROR_PREFIX + text if text else ERROR_PREFIX.rstrip(": ")
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _assistant(blocks: list[Any], param: str) -> dict[str, Any]:
    """An assistant turn as one chat message: its text, its thinking as the message's
    reasoning (rendered where the format keeps it), its tool_use blocks as calls."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for where, kind, block in _typed(blocks, param):
        if kind == "text":
            texts.append(_text_block(block, where))
        elif kind == "thinking":
            thoughts.append(_thought(block, where))
        elif kind == "redacted_thinking":
            continue  # another server's encrypted reasoning: nothing chatfmt can render
        elif kind == "tool_use":
            calls.append(_call(block, where))
        else:
            raise bad(f"an assistant message cannot carry {kind} blocks", f"{where}.type")
    message: dict[str, Any] = {"role": "assistant", "content": BLOCK_SEPARATOR.join(texts)}
    if calls:
        message["tool_calls"] = calls
        if not texts:
            message["content"] = None
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    return message


def _thought(block: dict[str, Any], param: str) -> str:
    text = block.get("thinking")
    if not isinstance(text, str):
        raise bad("a thinking block needs a string 'thinking'", f"{param}.thinking")
    if text:
        return text
    # A reply whose thinking was not shown (display "omitted") carries it in its signature.
    signature = block.get("signature")
    return thinking_of_signature(signature) if isinstance(signature, str) else ""


def _call(block: dict[str, Any], param: str) -> dict[str, Any]:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id:
        raise bad("a tool_use block needs a string 'id'", f"{param}.id")
    if not isinstance(name, str) or not name:
        raise bad("a tool_use block needs a string 'name'", f"{param}.name")
    if not isinstance(arguments, dict):
        raise bad("a tool_use block's 'input' must be an object", f"{param}.input")
    caller = block.get("caller")
    if caller is not None and (not isinstance(caller, dict) or caller.get("type") != "direct"):
        raise bad(
            "only calls made by the model itself (caller 'direct') can be sent", f"{param}.caller"
        )
    function = {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}
    return {"id": call_id, "type": "function", "function": function}


# ==== Tools ====


def chat_tools(tools: list[Any] | None) -> list[dict[str, Any]] | None:
    """Custom tools as chat function tools (the schema kept as sent: some formats render it
    verbatim); server tools (web search, code execution, ...) are refused by type."""
    if tools is None:
        return None
    out = []
    for j, tool in enumerate(tools):
        param = f"tools.{j}"
        if not isinstance(tool, dict):
            raise bad("a tool must be an object with 'name' and 'input_schema'", param)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise bad(
                f"tool type {kind!r} is one of Anthropic's server tools, which chatfmt does not "
                "run; declare a custom tool (name, description, input_schema) and run it yourself",
                f"{param}.type",
            )
        extra = sorted(set(tool) - _TOOL_KEYS)
        if extra:
            raise bad(f"unknown tool field {extra[0]!r}", f"{param}.{extra[0]}")
        name = tool.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise bad(
                f"{name!r} is not a valid tool name: names must match {TOOL_NAME.pattern}",
                f"{param}.name",
            )
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise bad(
                "a tool needs an 'input_schema' object (a JSON schema)", f"{param}.input_schema"
            )
        if tool.get("defer_loading") not in (None, False):
            raise bad(
                "deferred tool loading (tool search) is not supported; leave it out",
                f"{param}.defer_loading",
            )
        callers = tool.get("allowed_callers")
        if callers is not None and callers != ["direct"]:
            raise bad(
                "tools called from code execution are not supported; only 'direct' callers",
                f"{param}.allowed_callers",
            )
        if not isinstance(tool.get("eager_input_streaming", False), bool | None):
            raise bad(
                "eager_input_streaming must be true or false", f"{param}.eager_input_streaming"
            )
        function: dict[str, Any] = {"name": name}
        if "description" in tool:
            function["description"] = tool["description"]
        function["parameters"] = schema
        if "strict" in tool:
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: dict[str, Any]) -> tuple[Any, bool | None]:
    """``tool_choice`` as chat's, and whether parallel calls are allowed (``None``: not said).
    ``any`` is OpenAI's ``required``, ``tool`` a named forced call."""
    kind = choice.get("type")
    keys = {"type", "disable_parallel_tool_use"} | ({"name"} if kind == "tool" else set())
    extra = sorted(set(choice) - keys)
    if extra:
        raise bad(f"unknown tool_choice field {extra[0]!r}", f"tool_choice.{extra[0]}")
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise bad(
            "disable_parallel_tool_use must be true or false",
            "tool_choice.disable_parallel_tool_use",
        )
    parallel = False if disable else None
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", parallel
    if kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str):
            raise bad('tool_choice of type "tool" needs the "name" of a tool', "tool_choice.name")
        return {"type": "function", "function": {"name": name}}, False
    raise bad(
        'tool_choice type must be "auto", "any", "tool" (with a "name") or "none"',
        "tool_choice.type",
    )


def _response_format(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """``output_config``: its JSON ``format`` is constrained as chat's ``response_format``
    (strict: Anthropic's structured outputs always follow the schema); ``effort`` is a no-op."""
    if not config:
        return None
    extra = sorted(set(config) - {"effort", "format"})
    if extra:
        raise bad(f"unknown output_config field {extra[0]!r}", f"output_config.{extra[0]}")
    effort = config.get("effort")
    if effort is not None and not isinstance(effort, str):
        raise bad("output_config.effort must be a string", "output_config.effort")
    fmt = config.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise bad(
            'output_config.format must be {"type": "json_schema", "schema": {...}}',
            "output_config.format",
        )
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise bad("output_config.format needs a 'schema' object", "output_config.format.schema")
    extra = sorted(set(fmt) - {"type", "schema"})
    if extra:
        raise bad(
            f"unknown output_config.format field {extra[0]!r}", f"output_config.format.{extra[0]}"
        )
    return {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": True},
    }
