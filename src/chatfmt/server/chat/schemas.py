"""OpenAI wire models for ``/v1/chat/completions`` (the subset chatfmt serves).

Requests accept and ignore fields that do not change the reply (clients send ``user``,
``metadata``, ...), but reject wrong types with a 400 naming the field; every sampling field is
read (:mod:`.sampling` turns them into the engine's parameters). Messages are
kept as plain dicts here and converted by :func:`chatfmt.messages.from_openai`, whose errors
name the offending message.

Responses are built from these models and serialised as OpenAI does: a field declared with
:func:`_omitted` is left out while it is ``None`` (``tool_calls`` of a text reply, the parts of
a streamed delta that did not change); every other field is always written, ``null`` included
(``logprobs``, ``finish_reason`` of a chunk, ``content`` of a reply that only calls tools).
"""

from __future__ import annotations

import json
import re
import threading
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)

from ...events import FinishReason
from ..http.errors import first_problem

#: OpenAI's rule for function names.
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

_TOOL_CHOICES = ("auto", "none", "required")

#: A token id as ``logit_bias`` keys write it.
_TOKEN_ID = re.compile(r"-?[0-9]{1,12}")


def _is_none(value: object) -> bool:
    return value is None


def _omitted() -> Any:
    """A field that is left out of the JSON while it is ``None``."""
    return Field(default=None, exclude_if=_is_none)


# ==== Requests ====


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionDef(_Lenient):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("name")
    @classmethod
    def _name_rule(cls, value: str) -> str:
        if not TOOL_NAME.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a valid tool name: names must match {TOOL_NAME.pattern} "
                "(1 to 64 letters, digits, underscores or dashes); rename the tool"
            )
        return value


class ToolDef(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDef


#: Tool lists that passed :func:`check_tools`, by their JSON text: a client sends the same
#: tools with every request, and checking them again costs more than writing them out.
_CHECKED_TOOLS: dict[str, None] = {}
_CHECKED_TOOLS_MAX = 64
_CHECKED_TOOLS_CHARS = 256 * 1024
_checked_lock = threading.Lock()


def check_tools(value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Tool definitions as sent, each checked against :class:`ToolDef` (for validators)."""
    if not value:
        return value
    try:
        key: str | None = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        key = None
    if key is not None and key in _CHECKED_TOOLS:
        return value  # the same text passed before (a lone surrogate never does)
    _check_each_tool(value)
    if key is not None and len(key) <= _CHECKED_TOOLS_CHARS:
        with _checked_lock:
            while len(_CHECKED_TOOLS) >= _CHECKED_TOOLS_MAX:
                del _CHECKED_TOOLS[next(iter(_CHECKED_TOOLS))]
            _CHECKED_TOOLS[key] = None
    return value


def _check_each_tool(value: list[dict[str, Any]]) -> None:
    for i, tool in enumerate(value):
        try:
            ToolDef.model_validate(tool)
        except ValidationError as exc:
            loc, msg = first_problem(exc.errors())
            raise ValueError(f"tool {i}: {loc}: {msg}") from None
        try:
            json.dumps(tool, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"tool {i} contains a lone surrogate; send valid Unicode text"
            ) from None


#: Tool definitions kept as sent, each checked against :class:`ToolDef`.
ToolList = Annotated[list[dict[str, Any]] | None, AfterValidator(check_tools)]


def _plain_messages(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A list of dicts (JSON off the wire always is) is taken as it is: pydantic would copy
    every message, which cost a returning conversation a fifth of its render. Anything else is
    validated, with pydantic's own errors."""
    if type(value) is list and all(type(m) is dict for m in value):
        return value
    return handler(value)


#: Messages as sent: converted and checked by :func:`chatfmt.messages.from_openai`.
MessageList = Annotated[list[dict[str, Any]], WrapValidator(_plain_messages)]


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Lenient):
    include_usage: StrictBool = False


class JsonSchemaFormat(_Lenient):
    name: str | None = None
    description: str | None = None
    #: ``schema`` in JSON (the attribute name would shadow pydantic's own).
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(_Lenient):
    """OpenAI's ``response_format``: free text, any JSON object, or JSON matching a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError(
                'type "json_schema" needs "json_schema": {"name": ..., "schema": {...}}'
            )
        return self

    @property
    def constraint(self) -> dict[str, Any] | None:
        """The JSON schema the whole reply must match (``None`` for free text)."""
        if self.type == "json_object":
            return {"type": "object"}
        if self.type == "json_schema" and self.json_schema is not None:
            return self.json_schema.json_schema
        return None


def check_logit_bias(value: dict[str, float] | None) -> dict[str, float] | None:
    """Keys are token ids written as strings (OpenAI's form), biases within [-100, 100]; the
    ids are checked against the vocabulary when the request is prepared."""
    for key, bias in (value or {}).items():
        if not _TOKEN_ID.fullmatch(key):
            raise ValueError(
                f"key {key!r} is not a token id: logit_bias maps token ids, written as "
                'strings, to biases, e.g. {"1234": -100}'
            )
        if not -100 <= bias <= 100:
            raise ValueError(f"the bias of token {key} is {bias}; biases go from -100 to 100")
    return value


#: ``logit_bias`` as sent: token ids (strings) to biases, checked by :func:`check_logit_bias`.
LogitBias = Annotated[dict[str, float] | None, AfterValidator(check_logit_bias)]


def stop_sequences(stop: str | list[str] | None) -> list[str]:
    """A request's ``stop`` (one string, a list, or none) as a list, empty strings dropped."""
    items = [] if stop is None else [stop] if isinstance(stop, str) else stop
    return [s for s in items if s]


class SamplingFields(BaseModel):
    """The sampling fields of chat completions, which the Responses API takes too (chatfmt's
    and vLLM's extension): OpenAI's, and vLLM's and llama.cpp's ``top_k`` … ``repetition_penalty``
    (``top_k`` -1 and 0: no limit, as vLLM takes them)."""

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: StrictInt | None = None
    top_k: StrictInt | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = Field(default=None, gt=0)
    logit_bias: LogitBias = None


class BudgetField(BaseModel):
    """A cap on the reply's reasoning tokens, enforced by chatfmt for every reasoning family
    (:class:`chatfmt.driver.ThoughtBudget`): at the cap the thought is closed as the family
    writes it and the model answers. Named as vLLM names it (``thinking_token_budget``);
    llama.cpp's names (``thinking_budget_tokens`` per request, ``reasoning_budget`` on its
    command line) are taken too. ``-1`` (llama.cpp's "unlimited") and ``null``: no cap; ``0``:
    the thought is closed as soon as it opens."""

    thinking_token_budget: StrictInt | None = Field(
        default=None,
        ge=-1,
        validation_alias=AliasChoices(
            "thinking_token_budget", "thinking_budget_tokens", "reasoning_budget"
        ),
    )

    @property
    def thought_cap(self) -> int | None:
        """The cap in tokens (``None``: none)."""
        value = self.thinking_token_budget
        return None if value is None or value < 0 else value


class ChatCompletionRequest(_Lenient, SamplingFields, BudgetField):
    """The body of ``POST /v1/chat/completions`` (and of ``POST /tokenize``)."""

    model: str | None = None
    messages: MessageList
    #: Kept as sent (checked against :class:`ToolDef`): Qwen2.5 renders tools verbatim, key
    #: order and extra keys included, as its official template does.
    tools: ToolList = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    stop: str | list[str] | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=20)
    n: StrictInt | None = Field(default=None, ge=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    #: OpenAI's reasoning level; ``"none"`` turns thinking off where the model can.
    reasoning_effort: str | None = None
    #: The template switches vLLM and SGLang take (``enable_thinking``, ``thinking``,
    #: ``reasoning_effort``); chatfmt renders formats in code, so only those are understood.
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice_shape(cls, value: Any) -> Any:
        # One message for every wrong shape (pydantic would report each union member).
        if value is None or (isinstance(value, str) and value in _TOOL_CHOICES):
            return value
        if isinstance(value, dict) and value.get("type", "function") == "function":
            function = value.get("function")
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                return value
        shown = json.dumps(value, ensure_ascii=False)
        raise ValueError(
            'must be "auto", "none", "required", or {"type": "function", "function": '
            f'{{"name": "<a tool in tools>"}}}} to force a call of that tool; got {shown[:80]}'
        )

    @model_validator(mode="after")
    def _stop_list(self) -> ChatCompletionRequest:
        if isinstance(self.stop, list) and len(self.stop) > 16:
            raise ValueError("stop accepts at most 16 sequences")
        return self

    @field_validator("top_logprobs")
    @classmethod
    def _with_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not info.data.get("logprobs"):
            raise ValueError(
                "top_logprobs needs logprobs: true (it says how many alternatives to list "
                "with each token's log-probability)"
            )
        return value

    @property
    def stop_list(self) -> list[str]:
        """Stop sequences as a list, empty strings dropped."""
        return stop_sequences(self.stop)

    @property
    def requested_max_tokens(self) -> int | None:
        """``max_completion_tokens`` (the newer name) or ``max_tokens``."""
        return self.max_completion_tokens or self.max_tokens


# ==== Responses ====


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionCall(_Wire):
    name: str
    arguments: str


class ToolCallOut(_Wire):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(_Wire):
    role: Literal["assistant"] = "assistant"
    content: str | None
    #: The model's reasoning (gpt-oss's analysis), named as vLLM, llama.cpp and DeepSeek do.
    reasoning_content: str | None = _omitted()
    tool_calls: list[ToolCallOut] | None = _omitted()


class TopLogprob(_Wire):
    """One of the likeliest tokens at a position."""

    token: str
    #: The token's UTF-8 bytes (its text may be part of a character); ``None``: unknown.
    bytes: list[int] | None
    logprob: float


class TokenLogprob(_Wire):
    """A generated token with its log-probability and the likeliest tokens at its place."""

    token: str
    bytes: list[int] | None
    logprob: float
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(_Wire):
    """``logprobs`` of a choice: every token of the reply (text, reasoning and call alike:
    chatfmt reads them all from one token stream), the stop token left out."""

    content: list[TokenLogprob] | None
    refusal: list[TokenLogprob] | None = None


class Choice(_Wire):
    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason
    logprobs: ChoiceLogprobs | None = None


class PromptTokensDetails(_Wire):
    cached_tokens: int


class Usage(_Wire):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    #: What the engine took from its prompt cache, where it reports it.
    prompt_tokens_details: PromptTokensDetails | None = _omitted()

    @classmethod
    def of(cls, prompt: int, completion: int, cached: int | None = None) -> Usage:
        details = PromptTokensDetails(cached_tokens=cached) if cached is not None else None
        return cls(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=details,
        )


class ChatCompletion(_Wire):
    """A whole reply: the body of a ``POST /v1/chat/completions`` without ``stream``."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage


class FunctionCallDelta(_Wire):
    name: str | None = _omitted()
    arguments: str | None = _omitted()


class ToolCallDelta(_Wire):
    """Part of a streamed call: ``id``, ``type`` and the name come only with its first part."""

    index: int
    id: str | None = _omitted()
    type: Literal["function"] | None = _omitted()
    function: FunctionCallDelta | None = _omitted()


class Delta(_Wire):
    role: Literal["assistant"] | None = _omitted()
    content: str | None = _omitted()
    reasoning_content: str | None = _omitted()
    tool_calls: list[ToolCallDelta] | None = _omitted()


class ChunkChoice(_Wire):
    index: int = 0
    delta: Delta
    finish_reason: FinishReason | None = None
    #: The tokens this chunk's delta came from (those of a step that changed nothing visible
    #: go with the next chunk).
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(_Wire):
    """One ``data:`` event of a streamed reply.

    ``usage`` is ``null`` on every chunk but the last when the request asked for usage
    (``stream_options.include_usage``), and left out otherwise; the last chunk then has no
    choices and the usage.
    """

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


class ChatFormat(_Wire):
    """How chatfmt renders and parses for the model (a field of its own on the model card)."""

    dialect: str
    description: str
    #: Requests with tools are refused (see ``description`` for why).
    chat_only: bool


class ModelCard(_Wire):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "chatfmt"
    chat_format: ChatFormat | None = None


class ModelList(_Wire):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeResponse(_Wire):
    """The prompt a chat request renders to (vLLM's ``/tokenize`` shape, plus its text)."""

    count: int
    tokens: list[int]
    max_model_len: int
    text: str


class HealthResponse(_Wire):
    status: Literal["ok", "unavailable"]
    model: str
    engine: str
    dialect: str
    context_length: int
