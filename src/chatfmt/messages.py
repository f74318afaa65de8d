"""The conversation model: messages, tool calls and tool definitions, and OpenAI conversion.

The internal model is small and dialect-neutral. OpenAI chat messages are converted at the edge
(:func:`from_openai` / :meth:`Message.to_openai`); dialects map roles themselves (a ``tool``
message is a ChatGLM3 ``observation``, an ``observation`` renders in ChatML as a tool result).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from .errors import ValidationError

Role = Literal["system", "user", "assistant", "tool", "observation"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool", "observation")
#: OpenAI roles with another name here: legacy ``function`` results, ``developer`` prompts.
_ROLE_ALIASES = {"function": "tool", "developer": "system"}

#: Metadata of a ChatGLM3 assistant turn that holds code for the interpreter; also the tool name
#: under which chatfmt reports interpreter calls.
INTERPRETER = "interpreter"


def new_call_id() -> str:
    """A fresh OpenAI-style tool call id (``call_`` + 24 hex digits)."""
    return "call_" + secrets.token_hex(12)


if TYPE_CHECKING:
    from pydantic._internal._model_construction import ModelMetaclass as _PydanticMeta
else:
    _PydanticMeta = type(BaseModel)  # the public way to name pydantic's metaclass


class _OwnErrors(_PydanticMeta):
    """Constructing a model raises chatfmt's :class:`ValidationError` (the field and the problem
    in one line), not pydantic's multi-line report. A metaclass rather than ``__init__``:
    pydantic runs a custom ``__init__`` on every validation, which made rendering 30% slower."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except PydanticValidationError as exc:
            raise ValidationError(
                f"invalid {cls.__name__}: {_first_error(exc)}", rule="schema"
            ) from None


class _Model(BaseModel, metaclass=_OwnErrors):
    model_config = ConfigDict(extra="forbid", frozen=True)


_M = TypeVar("_M", bound=_Model)


class ToolCall(_Model):
    """One call of a tool by the assistant.

    ``arguments`` is the JSON text of an object, as in OpenAI's API. ``raw`` is the exact text
    the model wrote for this call when it was parsed from model output; dialects render it
    verbatim so that history re-renders to the tokens the model produced.
    """

    id: str = Field(default_factory=new_call_id)
    name: str
    arguments: str = "{}"
    raw: str | None = None

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments_to_json(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            try:
                return json.dumps(dict(value), ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"tool call arguments are not JSON-serialisable: {exc}") from None
        return value

    @field_validator("arguments")
    @classmethod
    def _arguments_are_object(cls, value: str) -> str:
        try:
            decoded = _STRICT_JSON.decode(value)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"tool call arguments must be a JSON object, got invalid JSON ({exc.msg}); "
                "a call cut off by max_tokens (finish_reason 'length') is not runnable: "
                "leave it and its result out of the history"
            ) from None
        except (ValueError, RecursionError) as exc:  # huge integers, absurd nesting
            raise ValueError(f"tool call arguments cannot be read: {exc}") from None
        if not isinstance(decoded, dict):
            raise ValueError(
                f"tool call arguments must be a JSON object, got {type(decoded).__name__}"
            )
        # Escapes such as "\ud800" are valid JSON (a model may write them): renderers that
        # re-serialise keep such code points escaped.
        return value

    @model_validator(mode="after")
    def _valid_text(self) -> ToolCall:
        _check_unicode(self.id, "tool call id")
        _check_unicode(self.name, "tool call name")
        return self

    def arguments_dict(self) -> dict[str, Any]:
        """The arguments decoded into a dict."""
        decoded: dict[str, Any] = json.loads(self.arguments)
        return decoded


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (JSON numbers are finite)")


#: One decoder for every call's arguments: ``json.loads`` with an option builds a new one
#: each time, a tenth of reading a call.
_STRICT_JSON = json.JSONDecoder(parse_constant=_no_constant)


def _check_unicode(text: str, what: str) -> None:
    """Reject lone surrogates: they are not Unicode text, and tokenizers fail on them."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise ValueError(
            f"{what} contains a lone surrogate (U+{ord(bad):04X}) at position {exc.start}; "
            "send valid Unicode text"
        ) from None


def _join_parts(value: Any) -> Any:
    """Normalise OpenAI content parts (``[{"type": "text", "text": ...}]``) to one string."""
    if isinstance(value, list):
        texts: list[str] = []
        for i, part in enumerate(value):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type") == "text":
                text = part.get("text")
                if not isinstance(text, str):
                    raise ValueError(f"content part {i} has no string 'text'")
                texts.append(text)
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ValueError(
                    f"content part {i} has type {kind!r}; only text parts are supported"
                )
        return "".join(texts)
    return value


class Message(_Model):
    """One message of a conversation.

    ``content`` may be given as a string or a list of OpenAI text parts (joined into one
    string). ``metadata`` is written verbatim in the header line (ChatGLM3: a tool name or
    ``interpreter``; ChatML: after the role, separated by a space). ``reasoning`` is an
    assistant's chain of thought (OpenAI-compatible servers' ``reasoning_content``): dialects
    with a reasoning channel (harmony) render it where the model's format keeps it, the others
    leave it out, as their templates do.
    """

    role: Role
    content: str | None = None
    reasoning: str | None = None
    metadata: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _content_parts(cls, value: Any) -> Any:
        return _join_parts(value)

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _openai_tool_calls(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return tuple(_tool_call_from_openai(c) if isinstance(c, Mapping) else c for c in value)
        return value

    @model_validator(mode="after")
    def _metadata_one_line(self) -> Message:
        if self.metadata is not None:
            if "\n" in self.metadata or "\r" in self.metadata:
                raise ValueError("metadata must be a single line (it is the header line of a turn)")
            _check_unicode(self.metadata, "metadata")
        if self.reasoning is not None and self.role != "assistant":
            raise ValueError(
                f"only assistant messages carry reasoning; remove it from this {self.role} message"
            )
        for what, text in (
            ("content", self.content),
            ("reasoning", self.reasoning),
            ("tool_call_id", self.tool_call_id),
            ("name", self.name),
        ):
            if text:
                _check_unicode(text, what)
        return self

    @property
    def text(self) -> str:
        """The content, or the empty string when there is none."""
        return self.content or ""

    def to_openai(self) -> dict[str, Any]:
        """This message as an OpenAI chat message dict (``observation`` becomes ``tool``)."""
        role = "tool" if self.role == "observation" else self.role
        out: dict[str, Any] = {"role": role, "content": self.content}
        if self.reasoning is not None:
            out["reasoning_content"] = self.reasoning
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


def _tool_call_from_openai(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = call.get("function")
    if isinstance(fn, Mapping):
        out: dict[str, Any] = {"name": fn.get("name"), "arguments": fn.get("arguments", "{}")}
        if call.get("id") is not None:
            out["id"] = call["id"]
        return out
    # ``raw`` is set only by chatfmt's parsers on the objects they create: raw text is rendered
    # verbatim (tags included), so it must never come from a request or a file.
    return {k: v for k, v in call.items() if k != "raw"}


class Tool(_Model):
    """A tool definition, kept as the caller gave it.

    ``definition`` is either an OpenAI tool (``{"type": "function", "function": {...}}``) or a
    bare function object (``{"name", "description", "parameters"}``). Dialects that render tools
    verbatim (Qwen2.5) use it as given, key order included; others use the function object.
    """

    definition: dict[str, Any]

    @model_validator(mode="after")
    def _has_name(self) -> Tool:
        fn = self.function
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(
                "a tool needs a non-empty 'name' (OpenAI shape: "
                '{"type": "function", "function": {"name": ..., "parameters": ...}})'
            )
        # Dialects write the definition into the prompt as JSON: it must be valid JSON text.
        try:
            text = json.dumps(self.definition, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"the tool definition is not valid JSON: {exc}") from None
        _check_unicode(text, "the tool definition")
        _remember_json(self.definition, text)
        return self

    @property
    def json_text(self) -> str:
        """``json.dumps(definition, ensure_ascii=False)``, written once when the tool was
        checked (a definition is not to be changed in place after the tool is made)."""
        hit = _TOOL_JSON.get(id(self.definition))
        if hit is not None and hit[0] is self.definition:
            return hit[1]
        return json.dumps(self.definition, ensure_ascii=False)

    @classmethod
    def of(cls, value: Tool | Mapping[str, Any]) -> Tool:
        """Accept a :class:`Tool` or a tool dict in either shape."""
        if isinstance(value, Tool):
            return value
        return cls(definition=dict(value))

    @property
    def function(self) -> dict[str, Any]:
        """The function object: ``{"name", "description", "parameters"}``."""
        fn = self.definition.get("function")
        if self.definition.get("type") == "function" and isinstance(fn, dict):
            return fn
        return self.definition

    @property
    def name(self) -> str:
        name: str = self.function["name"]
        return name


#: Tool definitions' JSON text by the definition's identity, each kept with its definition (so
#: that the id stays its own): dialects that show tools verbatim reuse it on every request
#: that offers the same tools. Kept apart from the model so that a tool's equality and copies
#: are pydantic's own; ``model_copy(update=...)`` makes a new definition, so a miss.
_TOOL_JSON: dict[int, tuple[dict[str, Any], str]] = {}
_TOOL_JSON_MAX = 4096


def _remember_json(definition: dict[str, Any], text: str) -> None:
    if len(_TOOL_JSON) >= _TOOL_JSON_MAX:
        _TOOL_JSON.clear()  # a crude bound: servers see few distinct tool lists
    _TOOL_JSON[id(definition)] = (definition, text)


class Conversation(_Model):
    """Messages plus the tools offered to the model."""

    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return tuple(Tool.of(t) if isinstance(t, Mapping | Tool) else t for t in value)
        return value


def from_openai(messages: Iterable[Mapping[str, Any]], *, first_index: int = 0) -> list[Message]:
    """Convert OpenAI chat messages into :class:`Message` objects.

    ``function`` results (the legacy API) become ``tool`` messages; ``developer`` becomes
    ``system``; an assistant's ``reasoning_content`` (or ``reasoning``, as some servers name it)
    is its :attr:`Message.reasoning`. Raises :class:`~chatfmt.errors.ValidationError` naming
    the bad message.
    """
    out: list[Message] = []
    for i, raw in enumerate(messages, start=first_index):
        fast = message_from_openai_fast(raw)
        if fast is not None:
            out.append(fast)
            continue
        if not isinstance(raw, Mapping):
            raise ValidationError(
                f"expected an object with 'role' and 'content', got {type(raw).__name__}", index=i
            )
        role = raw.get("role")
        data: Mapping[str, Any] = raw  # the common case is validated as it is, uncopied
        if role not in ROLES or "refusal" in raw or "reasoning_content" in raw:
            # (A role that is not a string, such as a list, cannot be looked up: unknown too.)
            if role not in ROLES and not (isinstance(role, str) and role in _ROLE_ALIASES):
                raise ValidationError(
                    f"unknown role {role!r}; use one of {', '.join(ROLES)}",
                    index=i,
                    rule="role",
                )
            data = {k: v for k, v in raw.items() if k not in ("refusal", "reasoning_content")}
            data["role"] = _ROLE_ALIASES.get(role, role)
            if raw.get("reasoning_content") is not None:
                data["reasoning"] = raw["reasoning_content"]
        try:
            out.append(Message.model_validate(data))
        except ValueError as exc:
            problem = _first_error(exc)
            if "reasoning_content" in raw and problem.startswith("reasoning:"):
                problem = "reasoning_content" + problem.removeprefix("reasoning")
            raise ValidationError(problem, index=i, rule="schema") from None
    return out


#: Keys of an OpenAI message that :func:`message_from_openai_fast` builds without pydantic.
_FAST_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})
_ROLE_SET = frozenset(ROLES)
_MESSAGE_DEFAULTS: dict[str, Any] = {
    "role": None,
    "content": None,
    "reasoning": None,
    "metadata": None,
    "tool_calls": None,
    "tool_call_id": None,
    "name": None,
}


def _built(cls: type[_M], fields: dict[str, Any], fields_set: set[str]) -> _M:
    """An instance of ``cls`` from fields already checked, as pydantic itself would hold it
    (validating costs ~8 µs a message, most of a cold render's Python time)."""
    obj = cls.__new__(cls)
    object.__setattr__(obj, "__dict__", fields)
    object.__setattr__(obj, "__pydantic_fields_set__", fields_set)
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


def _is_text(value: object) -> bool:
    """A string with no lone surrogate (what :func:`_check_unicode` accepts)."""
    if type(value) is not str:
        return False
    if value.isascii():  # O(1) in CPython: the common case costs nothing
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _fast_call(call: object) -> ToolCall | None:
    """A plainly well-formed OpenAI call dict as a :class:`ToolCall`; ``None``: validate it."""
    if type(call) is not dict:
        return None
    fn = call.get("function")
    cid = call.get("id")
    if type(fn) is not dict or not _is_text(cid):
        return None  # also a call without an id: the validating path makes a fresh one
    name = fn.get("name")
    arguments = fn.get("arguments", "{}")
    if not _is_text(name) or type(arguments) is not str:
        return None
    try:
        decoded = _STRICT_JSON.decode(arguments)
    except (ValueError, RecursionError):
        return None
    if type(decoded) is not dict:
        return None
    return _built(
        ToolCall,
        {"id": cid, "name": name, "arguments": arguments, "raw": None},
        {"id", "name", "arguments"},
    )


def message_from_openai_fast(raw: Mapping[str, Any]) -> Message | None:
    """The :class:`Message` that :func:`from_openai` makes of ``raw``, built without pydantic
    when ``raw`` is plainly well-formed (known role, string or null content and ids, calls
    with ids and JSON-object arguments); ``None`` for anything else, which the validating path
    then accepts or rejects with its own error. Equal to the validated message, field for
    field (tests/test_messages_fast.py)."""
    if type(raw) is not dict:
        return None
    role = raw.get("role")
    if type(role) is not str or role not in _ROLE_SET:
        return None
    content = raw.get("content")
    if len(raw) == 2 and type(content) is str and (content.isascii() or _is_text(content)):
        # {"role": ..., "content": "..."}, most of a chat: the shortest way.
        fields = dict(_MESSAGE_DEFAULTS)
        fields["role"] = role
        fields["content"] = content
        return _built(Message, fields, {"role", "content"})
    if not _FAST_KEYS.issuperset(raw):
        return None
    fields = dict(_MESSAGE_DEFAULTS)
    for key in ("content", "tool_call_id", "name"):
        value = raw.get(key)
        if value is not None:
            if not _is_text(value):
                return None
            fields[key] = value
    calls = raw.get("tool_calls")
    if calls is not None:
        if type(calls) is not list:
            return None
        built = []
        for call in calls:
            tool_call = _fast_call(call)
            if tool_call is None:
                return None
            built.append(tool_call)
        fields["tool_calls"] = tuple(built)
    fields["role"] = role
    return _built(Message, fields, set(raw))


def conversation_of(messages: tuple[Message, ...], tools: tuple[Tool, ...] = ()) -> Conversation:
    """``Conversation(messages=messages, tools=tools)`` for messages and tools that are already
    :class:`Message` and :class:`Tool` objects, without pydantic walking them again (~2 µs a
    message: 0.4 ms for a 200-message chat, on every request)."""
    if type(messages) is not tuple or type(tools) is not tuple:
        raise TypeError("conversation_of takes tuples of messages and tools")
    return _built(Conversation, {"messages": messages, "tools": tools}, {"messages", "tools"})


def load_conversation(data: Any) -> Conversation:
    """Build a :class:`Conversation` from the CLI file shape.

    Accepts ``{"messages": [...], "tools": [...]}`` or a bare list of messages.
    """
    if isinstance(data, list):
        data = {"messages": data}
    if not isinstance(data, Mapping) or "messages" not in data:
        raise ValidationError(
            "a conversation is a list of messages or an object with a 'messages' list"
        )
    messages = data["messages"]
    if not isinstance(messages, list):
        raise ValidationError("'messages' must be a list")
    return Conversation(
        messages=tuple(from_openai(messages)), tools=_tools(data.get("tools") or [])
    )


def _tools(value: Any) -> tuple[Tool, ...]:
    """Tool definitions, each checked; errors name the tool's index."""
    if not isinstance(value, list | tuple):
        raise ValidationError("'tools' must be a list of tool definitions")
    tools: list[Tool] = []
    for i, t in enumerate(value):
        if not isinstance(t, Mapping | Tool):
            raise ValidationError(f"tool {i} must be an object, got {type(t).__name__}")
        try:
            tools.append(Tool.of(t))
        except ValueError as exc:
            raise ValidationError(f"tool {i}: {_first_error(exc)}") from None
    return tuple(tools)


def as_conversation(
    value: Conversation | Sequence[Message | Mapping[str, Any]],
    tools: Sequence[Tool | Mapping[str, Any]] | None = None,
) -> Conversation:
    """Coerce messages (objects or OpenAI dicts) and tools into a :class:`Conversation`.

    Raises :class:`~chatfmt.errors.ValidationError` naming what is wrong.
    """
    if isinstance(value, Conversation):
        if tools is None:
            return value
        return Conversation(messages=value.messages, tools=_tools(tools))
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise ValidationError(
            f"messages must be a list of messages, got {type(value).__name__}", rule="schema"
        )
    msgs: list[Message]
    if not any(isinstance(m, Message) for m in value):
        msgs = from_openai(value)  # type: ignore[arg-type]
    else:
        msgs = [
            m if isinstance(m, Message) else from_openai([m], first_index=i)[0]
            for i, m in enumerate(value)
        ]
    return Conversation(messages=tuple(msgs), tools=_tools(tools or []))


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first.get("msg", exc)).removeprefix("Value error, ")
        return f"{loc}: {msg}" if loc else msg
    return str(exc)
