"""Stream events → server-sent event bytes, cheaply where it counts: per token.

Nearly every event of a streamed response is a text or reasoning delta. The builder makes them
as :class:`.output.PartDelta` tuples and their bytes are written here directly (the same bytes
pydantic writes for the wire model, checked by a property test). Deltas that were produced
while the client was still receiving earlier ones are merged into one event
(:func:`coalesce`), so a client slower than the engine gets fewer, larger deltas instead of a
growing backlog of one-token events.
"""

from __future__ import annotations

import orjson
from pydantic import TypeAdapter

from ..http.bodies import json_bytes
from ..http.sse import sse_event
from .output import BuiltEvent, PartDelta
from .wire import DeltaLogprob, ResponseEvent, StreamEvent

# Indexed by PartDelta.reasoning.
_HEADS = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":',
    b'event: response.reasoning_text.delta\ndata: {"type":"response.reasoning_text.delta",'
    b'"item_id":',
)
_AFTER_DELTA = (b',"logprobs":[],"sequence_number":', b',"sequence_number":')
#: A text delta's log-probabilities, written as pydantic writes them in the event.
_LOGPROBS = TypeAdapter(tuple[DeltaLogprob, ...])


def frame(event: StreamEvent | PartDelta, sequence: int) -> bytes:
    """``event`` as one server-sent event, numbered ``sequence``."""
    if isinstance(event, PartDelta):
        # (No lone surrogate that orjson would refuse: TurnDecoder replaced them, and
        # pydantic cannot write one either.)
        after = _AFTER_DELTA[event.reasoning]
        if event.logprobs and not event.reasoning:  # (reasoning deltas have none)
            after = b',"logprobs":%b,"sequence_number":' % _LOGPROBS.dump_json(event.logprobs)
        return b"".join(
            (
                _HEADS[event.reasoning],
                orjson.dumps(event.item_id),
                b',"output_index":%d,"content_index":%d,"delta":'
                % (event.output_index, event.content_index),
                orjson.dumps(event.delta),
                after,
                b"%d}\n\n" % sequence,
            )
        )
    event.sequence_number = sequence
    if isinstance(event, ResponseEvent):
        # Written as the whole body and the store write a response (see
        # ResponseObject.body), so that its numbers read the same in all three.
        data = json_bytes(event.model_dump(mode="json"))
    else:
        data = json_bytes(event)
    return sse_event(data, event=event.type)


def coalesce(events: list[BuiltEvent]) -> list[BuiltEvent]:
    """``events`` with each run of deltas to the same part merged into one delta."""
    if len(events) < 2:
        return events
    out: list[BuiltEvent] = []
    for event in events:
        last = out[-1] if out else None
        if (
            type(event) is PartDelta
            and type(last) is PartDelta
            and last[:4] == event[:4]  # the same kind of delta to the same part
        ):
            logprobs = last.logprobs + event.logprobs if event.logprobs else last.logprobs
            out[-1] = last._replace(delta=last.delta + event.delta, logprobs=logprobs)
        else:
            out.append(event)
    return out


__all__ = ["coalesce", "frame"]
