"""The Messages API's wire models: the message it answers, its content blocks, its stream
events and its errors, serialised as Anthropic's API writes them (every field written,
``null`` included, except those declared with :func:`_omitted`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..http.errors import ApiError

#: Why a reply ended: its turn (``end_turn``), ``max_tokens``, one of the request's
#: ``stop_sequences``, calls (``tool_use``), or the context window before ``max_tokens``.
StopReason = Literal[
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "model_context_window_exceeded"
]


def _is_none(value: object) -> bool:
    return value is None


def _omitted() -> Any:
    """A field left out of the JSON while it is ``None``."""
    return Field(default=None, exclude_if=_is_none)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ==== Content blocks ====


class TextBlock(_Wire):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Wire):
    """The model's reasoning. ``signature`` is chatfmt's opaque string for it (see
    :func:`.output.signature_of`), not a cryptographic signature."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str


class ToolUseBlock(_Wire):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock


class MessageUsage(_Wire):
    """Token counts. ``input_tokens`` are the prompt tokens the engine computed; those it took
    from its prompt cache are ``cache_read_input_tokens`` (Anthropic's rule: the prompt is the
    sum of the three input fields). chatfmt writes no cache entries of its own accord, so
    ``cache_creation_input_tokens`` is 0."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @classmethod
    def of(cls, prompt: int, completion: int, cached: int | None) -> MessageUsage:
        read = min(cached or 0, prompt)
        return cls(
            input_tokens=prompt - read, output_tokens=completion, cache_read_input_tokens=read
        )


class Message(_Wire):
    """The answer of ``POST /v1/messages`` (and the ``message`` of ``message_start``)."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    content: list[ContentBlock]
    model: str
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: MessageUsage


class TokenCount(_Wire):
    """The answer of ``POST /v1/messages/count_tokens``."""

    input_tokens: int


# ==== Stream events ====


class MessageStart(_Wire):
    type: Literal["message_start"] = "message_start"
    message: Message


class BlockStart(_Wire):
    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: ContentBlock


class TextDelta(_Wire):
    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDelta(_Wire):
    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class SignatureDelta(_Wire):
    type: Literal["signature_delta"] = "signature_delta"
    signature: str


class InputJsonDelta(_Wire):
    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


class BlockDelta(_Wire):
    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: TextDelta | ThinkingDelta | SignatureDelta | InputJsonDelta


class BlockStop(_Wire):
    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class StopDelta(_Wire):
    stop_reason: StopReason
    stop_sequence: str | None = None


class MessageDelta(_Wire):
    """The reply's end: why it stopped, and its usage (cumulative, as Anthropic's are: the
    input counts too, since the cached part is known only once the engine has reported it)."""

    type: Literal["message_delta"] = "message_delta"
    delta: StopDelta
    usage: MessageUsage


class MessageStop(_Wire):
    type: Literal["message_stop"] = "message_stop"


class Ping(_Wire):
    type: Literal["ping"] = "ping"


StreamEvent = MessageStart | BlockStart | BlockDelta | BlockStop | MessageDelta | MessageStop | Ping


# ==== Errors ====

ErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
]

#: Anthropic's error type of each status chatfmt answers. The engine down or restarting
#: (503) is ``overloaded_error``: temporary, retry later, as Anthropic's 529 says.
_TYPES: dict[int, ErrorType] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


class MessagesErrorBody(_Wire):
    type: ErrorType
    message: str


class MessagesError(_Wire):
    """Every error under ``/v1/messages``, in Anthropic's shape (also the ``error`` event of a
    stream that failed after it started)."""

    type: Literal["error"] = "error"
    error: MessagesErrorBody

    @classmethod
    def of(cls, error: ApiError) -> MessagesError:
        kind = _TYPES.get(
            error.status, "invalid_request_error" if error.status < 500 else "api_error"
        )
        message = error.message
        # Anthropic's errors name the field in the message ("messages.1.content: ..."): the
        # shape has no param of its own.
        if error.param and not message.startswith(error.param):
            message = f"{error.param}: {message}"
        return cls(error=MessagesErrorBody(type=kind, message=message))


def error_json(error: ApiError) -> bytes:
    """The :data:`~chatfmt.server.http.errors.ErrorWriter` of the Messages API's routes."""
    body = MessagesError.of(error)
    return body.__pydantic_serializer__.to_json(body)
