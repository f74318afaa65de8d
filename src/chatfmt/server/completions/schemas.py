"""Wire models of ``/v1/completions``, ``/detokenize`` and ``/v1/chat/render``.

``/v1/completions`` takes OpenAI's legacy request: one prompt, as text or as token ids (a list
holding one prompt, as evaluation harnesses send it, is that prompt; several prompts are
refused: send one request each, as for ``n``), chat completions' sampling fields
(:class:`~chatfmt.server.chat.schemas.SamplingFields`), ``logprobs: k`` (the legacy shape).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator

from ..chat.schemas import SamplingFields, StreamOptions, Usage, stop_sequences

#: OpenAI's default ``max_tokens`` for the legacy completions (vLLM's too).
DEFAULT_MAX_TOKENS = 16


def _one_prompt(value: Any) -> str | list[int]:
    """The request's prompt as one text or one list of ids; a clear error for anything else."""
    if isinstance(value, list) and value and all(isinstance(v, (str, list)) for v in value):
        if len(value) != 1:
            raise ValueError(
                f"holds {len(value)} prompts; chatfmt completes one prompt per request: send "
                "each prompt in a request of its own"
            )
        value = value[0]
    if isinstance(value, str):
        if not value:
            raise ValueError("is empty; send some text or token ids")
        return value
    if isinstance(value, list):
        if not value:
            raise ValueError("is empty; send some text or token ids")
        if not all(type(v) is int for v in value):
            raise ValueError("must be a string or a list of token ids (integers)")
        return list(value)
    raise ValueError(
        "must be a string, a list of token ids, or a list holding one of those"
    )


class CompletionRequest(SamplingFields):
    """The body of ``POST /v1/completions``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | list[int]
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    #: The legacy shape: how many alternatives to list with each token (0: the token's own).
    logprobs: StrictInt | None = Field(default=None, ge=0, le=20)
    echo: StrictBool = False
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: StrictInt | None = Field(default=None, ge=1)
    best_of: StrictInt | None = Field(default=None, ge=1)
    suffix: str | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt(cls, value: Any) -> str | list[int]:
        return _one_prompt(value)

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 16:
            raise ValueError("stop accepts at most 16 sequences")
        return value

    @property
    def stop_list(self) -> list[str]:
        """Stop sequences as a list, empty strings dropped."""
        return stop_sequences(self.stop)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompletionLogprobs(_Wire):
    """OpenAI's legacy log-probabilities: parallel lists, one entry per generated token."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(_Wire):
    text: str
    index: int = 0
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None


class Completion(_Wire):
    """A ``text_completion`` (whole, or one chunk of a stream)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class DetokenizeRequest(BaseModel):
    """The body of ``POST /detokenize`` (vLLM's shape)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[StrictInt]


class DetokenizeResponse(_Wire):
    """The text of the ids, control tokens written out by name."""

    prompt: str


class RenderResponse(_Wire):
    """What ``POST /v1/chat/render`` answers: the prompt a chat request renders to, exactly
    as ``/v1/chat/completions`` would send it to the engine (a forced call's opening
    included), and how generation would stop."""

    dialect: str
    prompt: str
    prompt_token_ids: list[int]
    count: int
    max_model_len: int
    max_tokens: int
    stop_token_ids: list[int]
    stop: list[str]


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "Completion",
    "CompletionChoice",
    "CompletionLogprobs",
    "CompletionRequest",
    "DetokenizeRequest",
    "DetokenizeResponse",
    "RenderResponse",
]
