"""OpenAI wire models for ``/v1/chat/completions`` (the subset chatfmt serves).

Requests accept and ignore fields they do not use (clients send ``user``, ``logprobs``,
``presence_penalty``, ...), but reject wrong types with a 400 naming the field. Messages are
kept as plain dicts here and converted by :func:`chatfmt.messages.from_openai`, whose errors
name the offending message.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionDef(_Lenient):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Lenient):
    include_usage: StrictBool = False


class ChatCompletionRequest(_Lenient):
    """The body of ``POST /v1/chat/completions``."""

    model: str | None = None
    messages: list[dict[str, Any]]
    #: Kept as sent (checked against :class:`ToolDef`): Qwen2.5 renders tools verbatim, key
    #: order and extra keys included, as its official template does.
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    stop: str | list[str] | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: StrictInt | None = None
    n: StrictInt | None = Field(default=None, ge=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    parallel_tool_calls: bool | None = None

    @field_validator("tools")
    @classmethod
    def _tools_shape(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for i, tool in enumerate(value or ()):
            try:
                ToolDef.model_validate(tool)
            except ValidationError as exc:
                first = exc.errors()[0]
                loc = ".".join(str(p) for p in first.get("loc", ()))
                raise ValueError(f"tool {i}: {loc}: {first.get('msg')}") from None
        return value

    @model_validator(mode="after")
    def _stop_list(self) -> ChatCompletionRequest:
        if isinstance(self.stop, list) and len(self.stop) > 16:
            raise ValueError("stop accepts at most 16 sequences")
        return self

    @property
    def stop_list(self) -> list[str]:
        """Stop sequences as a list, empty strings dropped."""
        if self.stop is None:
            return []
        items = [self.stop] if isinstance(self.stop, str) else self.stop
        return [s for s in items if s]

    @property
    def requested_max_tokens(self) -> int | None:
        """``max_completion_tokens`` (the newer name) or ``max_tokens``."""
        return self.max_completion_tokens or self.max_tokens


# ==== Responses (documentation and non-streaming bodies; streaming chunks are built as dicts
# in the hot path and checked against ChatCompletionChunk in tests) ====


class FunctionCall(BaseModel):
    name: str
    arguments: str


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None


class FunctionCallDelta(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta | None = None


class Delta(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChunkChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    delta: Delta
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "chatfmt"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
