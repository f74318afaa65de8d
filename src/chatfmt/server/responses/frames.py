"""Stream events → server-sent event bytes, cheaply where it counts: per token.

Nearly every event of a streamed response is a text or reasoning delta. Their bytes are built
directly (the same bytes pydantic writes, checked by a property test), and deltas that were
produced while the client was still receiving earlier ones are merged into one event
(:func:`coalesce`), so a client slower than the engine gets fewer, larger deltas instead of a
growing backlog of one-token events.
"""

from __future__ import annotations

import orjson

from ..http.bodies import json_bytes
from ..http.sse import sse_event
from .wire import OutputEvent, OutputTextDelta, ReasoningTextDelta, ResponseEvent, StreamEvent

_HEADS = {
    OutputTextDelta: (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":'
    ),
    ReasoningTextDelta: (
        b"event: response.reasoning_text.delta\n"
        b'data: {"type":"response.reasoning_text.delta","item_id":'
    ),
}
_AFTER_DELTA = {
    OutputTextDelta: b',"logprobs":[],"sequence_number":',
    ReasoningTextDelta: b',"sequence_number":',
}


def frame(event: StreamEvent, sequence: int) -> bytes:
    """``event`` as one server-sent event, numbered ``sequence``."""
    if isinstance(event, OutputTextDelta | ReasoningTextDelta):
        kind = type(event)
        try:
            return b"".join(
                (
                    _HEADS[kind],
                    orjson.dumps(event.item_id),
                    b',"output_index":%d,"content_index":%d,"delta":'
                    % (event.output_index, event.content_index),
                    orjson.dumps(event.delta),
                    _AFTER_DELTA[kind],
                    b"%d}\n\n" % sequence,
                )
            )
        except orjson.JSONEncodeError:  # a lone surrogate: pydantic's way below
            pass
    event.sequence_number = sequence
    if isinstance(event, ResponseEvent):
        # Written as the whole body and the store write a response (see
        # ResponseObject.body), so that its numbers read the same in all three.
        data = json_bytes(event.model_dump(mode="json"))
    else:
        data = json_bytes(event)
    return sse_event(data, event=event.type)


def coalesce(events: list[OutputEvent]) -> list[OutputEvent]:
    """``events`` with each run of deltas to the same part merged into one delta."""
    if len(events) < 2:
        return events
    out: list[OutputEvent] = []
    for event in events:
        last = out[-1] if out else None
        if (
            isinstance(event, OutputTextDelta | ReasoningTextDelta)
            and type(last) is type(event)
            and isinstance(last, OutputTextDelta | ReasoningTextDelta)
            and (last.item_id, last.output_index, last.content_index)
            == (event.item_id, event.output_index, event.content_index)
        ):
            out[-1] = type(last).model_construct(
                item_id=last.item_id,
                output_index=last.output_index,
                content_index=last.content_index,
                delta=last.delta + event.delta,
            )
        else:
            out.append(event)
    return out


__all__ = ["coalesce", "frame"]
