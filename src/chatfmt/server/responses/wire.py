"""The Responses API's wire shapes: output items, stream events and the response object.

These are the objects chatfmt writes (the subset of OpenAI's schema it serves), built by
:mod:`.output` and :mod:`.service` and written by :mod:`.routes`. Fields are declared in the
order they are written (an event's first ones by its base class). Every field is always
written, ``null`` included (``error``, ``usage`` while in progress, ``temperature`` not asked
for), except ``encrypted_content``, which a reasoning item has only when asked for
(``include``).

An event's ``sequence_number`` is its place in the stream, set when the stream writes it (0
until then): one builder serves the whole response and the stream, and only the stream counts.

Lists that chatfmt writes empty unless asked (``annotations``, ``logprobs``, ``summary``) are
tuples defaulting to ``()``: an immutable default is shared, where a list would be copied for
every event, and streaming builds one event per token. They are JSON arrays all the same.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]


def _is_none(value: object) -> bool:
    return value is None


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ==== Output items ====


class UrlCitation(_Wire):
    """A span of the text that cites a URL (the kind that needs no OpenAI file store)."""

    type: Literal["url_citation"] = "url_citation"
    start_index: int
    end_index: int
    url: str
    title: str


class TopLogprob(_Wire):
    token: str
    bytes: list[int]
    logprob: float


class Logprob(_Wire):
    """A token of an ``output_text`` part with its log probability."""

    token: str
    bytes: list[int]
    logprob: float
    top_logprobs: list[TopLogprob]


class OutputTextPart(_Wire):
    """A message's text. chatfmt cites nothing (``annotations`` stays empty); ``logprobs``
    lists the text's tokens when the request asked for them (``include:
    ["message.output_text.logprobs"]`` or ``top_logprobs``)."""

    type: Literal["output_text"] = "output_text"
    text: str
    annotations: tuple[UrlCitation, ...] = ()
    logprobs: tuple[Logprob, ...] = ()


class ReasoningTextPart(_Wire):
    """Reasoning as the model wrote it (gpt-oss's analysis channel)."""

    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class SummaryTextPart(_Wire):
    type: Literal["summary_text"] = "summary_text"
    text: str


class MessageItem(_Wire):
    id: str
    type: Literal["message"] = "message"
    status: ItemStatus
    role: Literal["assistant"] = "assistant"
    content: list[OutputTextPart]


class ReasoningItem(_Wire):
    id: str
    type: Literal["reasoning"] = "reasoning"
    status: ItemStatus
    summary: tuple[SummaryTextPart, ...] = ()
    content: list[ReasoningTextPart]
    #: The reasoning in one opaque string (see :func:`.output.reasoning_blob`), only when the
    #: request asked for it: OpenAI leaves it out otherwise.
    encrypted_content: str | None = Field(default=None, exclude_if=_is_none)


class FunctionCallItem(_Wire):
    id: str
    type: Literal["function_call"] = "function_call"
    status: ItemStatus
    call_id: str
    name: str
    arguments: str
    #: The namespace tool the function belongs to (written only for a namespaced one).
    namespace: str | None = Field(default=None, exclude_if=_is_none)


OutputItem = Annotated[MessageItem | ReasoningItem | FunctionCallItem, Field(discriminator="type")]
ContentPart = Annotated[OutputTextPart | ReasoningTextPart, Field(discriminator="type")]


# ==== The response object ====


class ResponseError(_Wire):
    code: str
    message: str


class IncompleteDetails(_Wire):
    reason: Literal["max_output_tokens"]


class InputTokensDetails(_Wire):
    cached_tokens: int
    #: Not counted by chatfmt (always 0); OpenAI's schema requires the field.
    cache_write_tokens: int = 0


class OutputTokensDetails(_Wire):
    #: Not counted apart from the output by chatfmt (always 0), reasoning included.
    reasoning_tokens: int = 0


class Usage(_Wire):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int

    @classmethod
    def of(cls, prompt: int, completion: int, cached: int | None) -> Usage:
        return cls(
            input_tokens=prompt,
            input_tokens_details=InputTokensDetails(cached_tokens=cached or 0),
            output_tokens=completion,
            output_tokens_details=OutputTokensDetails(),
            total_tokens=prompt + completion,
        )


class ReasoningConfig(BaseModel):
    """The ``reasoning`` a request sent, echoed in the response as OpenAI does."""

    effort: str | None = None
    summary: str | None = None


class ResponseObject(_Wire):
    """A response: the body of ``POST /v1/responses``, what the store keeps, and what the
    stream's ``response.*`` events carry. ``text``, ``tool_choice`` and ``tools`` echo the
    request as it was sent."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    #: The request's ``reasoning`` as it was applied (``None``: not sent).
    reasoning: ReasoningConfig | None = None
    store: bool
    temperature: float | None
    text: dict[str, Any]
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    top_p: float | None
    truncation: Literal["disabled"] = "disabled"
    usage: Usage | None
    metadata: dict[str, str]
    #: Tools of the request that are not in the prompt (hosted ones chatfmt cannot run), each
    #: ``{"index", "type", "reason"}``; written only when there are some.
    tools_left_out: list[dict[str, Any]] | None = Field(default=None, exclude_if=_is_none)

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values, as the store keeps them."""
        return self.model_dump(mode="json")

    def body(self) -> str:
        """The whole-response body. Written by :func:`json.dumps`, as the store writes it, so
        that ``GET /v1/responses/{id}`` answers the same text (pydantic would write a small
        number the request sent, such as ``top_p: 1e-05``, as ``0.00001``)."""
        return json.dumps(self.as_json(), ensure_ascii=False)


# ==== Stream events ====


# An event's fields are written in OpenAI's order: ``type`` first, ``sequence_number`` last.
# Pydantic writes a base class's fields before its subclass's, and a field a subclass
# declares again (each event's own ``type`` literal) in the base's place; so the bases below
# declare ``type`` first, and ``sequence_number`` is declared by whichever class ends the
# event's fields.


class _ItemChange(_Wire):
    """An output item added or done (each event names its own ``type``)."""

    type: str
    output_index: int
    item: OutputItem
    sequence_number: int = 0


class _ItemIdEvent(_Wire):
    """An event about one output item, named by its id."""

    type: str
    item_id: str
    output_index: int


class _PartEvent(_ItemIdEvent):
    """An event about one content part of an item."""

    content_index: int


class _PartChange(_PartEvent):
    """A content part added or done."""

    part: ContentPart
    sequence_number: int = 0


class OutputItemAdded(_ItemChange):
    """An item begins, shown as it is then (no content yet, a call with no arguments)."""

    type: Literal["response.output_item.added"] = "response.output_item.added"


class OutputItemDone(_ItemChange):
    type: Literal["response.output_item.done"] = "response.output_item.done"


class ContentPartAdded(_PartChange):
    type: Literal["response.content_part.added"] = "response.content_part.added"


class ContentPartDone(_PartChange):
    type: Literal["response.content_part.done"] = "response.content_part.done"


class DeltaTopLogprob(_Wire):
    token: str
    logprob: float


class DeltaLogprob(_Wire):
    """A token of a text delta with its log probability (the events' shape: no ``bytes``)."""

    token: str
    logprob: float
    top_logprobs: list[DeltaTopLogprob]


class OutputTextDelta(_PartEvent):
    type: Literal["response.output_text.delta"] = "response.output_text.delta"
    delta: str
    logprobs: tuple[DeltaLogprob, ...] = ()
    sequence_number: int = 0


class OutputTextDone(_PartEvent):
    type: Literal["response.output_text.done"] = "response.output_text.done"
    text: str
    logprobs: tuple[DeltaLogprob, ...] = ()
    sequence_number: int = 0


class ReasoningTextDelta(_PartEvent):
    type: Literal["response.reasoning_text.delta"] = "response.reasoning_text.delta"
    delta: str
    sequence_number: int = 0


class ReasoningTextDone(_PartEvent):
    type: Literal["response.reasoning_text.done"] = "response.reasoning_text.done"
    text: str
    sequence_number: int = 0


class FunctionCallArgumentsDelta(_ItemIdEvent):
    type: Literal["response.function_call_arguments.delta"] = (
        "response.function_call_arguments.delta"
    )
    delta: str
    sequence_number: int = 0


class FunctionCallArgumentsDone(_ItemIdEvent):
    type: Literal["response.function_call_arguments.done"] = "response.function_call_arguments.done"
    name: str
    arguments: str
    sequence_number: int = 0


class ResponseEvent(_Wire):
    """The response as a whole: created and in progress before its output, then how it
    ended (``completed``, ``incomplete``, or ``failed`` after an ``error`` event)."""

    type: Literal[
        "response.created",
        "response.in_progress",
        "response.completed",
        "response.incomplete",
        "response.failed",
    ]
    response: ResponseObject
    sequence_number: int = 0


class ErrorEvent(_Wire):
    """A failure after the stream began (its status code is already sent)."""

    type: Literal["error"] = "error"
    code: str
    message: str
    param: str | None = None
    sequence_number: int = 0


#: The output items and their content, piece by piece, as the stream sends them
#: (:class:`.output.OutputBuilder` makes the per-token deltas as plain tuples).
OutputEvent = (
    OutputItemAdded
    | OutputItemDone
    | ContentPartAdded
    | ContentPartDone
    | OutputTextDelta
    | OutputTextDone
    | ReasoningTextDelta
    | ReasoningTextDone
    | FunctionCallArgumentsDelta
    | FunctionCallArgumentsDone
)

#: Every event the stream writes.
StreamEvent = OutputEvent | ResponseEvent | ErrorEvent
