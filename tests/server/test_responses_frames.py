"""The Responses stream's framing: direct bytes for deltas equal pydantic's, and coalescing
merges only deltas of the same part, keeping every character in order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("orjson", reason="the server extra (chatfmt[server]) is not installed")

import itertools

from chatfmt.server.http.bodies import json_bytes
from chatfmt.server.http.sse import sse_event
from chatfmt.server.responses.frames import coalesce, frame
from chatfmt.server.responses.output import PartDelta
from chatfmt.server.responses.wire import DeltaLogprob, DeltaTopLogprob, OutputTextDone

ids = st.sampled_from(["msg_a", "msg_b", 'rs_"q"'])
logprobs = st.lists(
    st.builds(DeltaLogprob, token=st.text(max_size=3), logprob=st.floats(max_value=0),
              top_logprobs=st.lists(st.builds(DeltaTopLogprob, token=st.text(max_size=3),
                                              logprob=st.floats(max_value=0)), max_size=2)),
    max_size=3,
).map(tuple)  # fmt: skip
deltas = st.builds(
    PartDelta, reasoning=st.booleans(), item_id=ids, output_index=st.integers(0, 3),
    content_index=st.just(0), delta=st.text(), logprobs=logprobs,
)  # fmt: skip
others = st.builds(OutputTextDone, item_id=ids, output_index=st.integers(0, 3),
                   content_index=st.just(0), text=st.text(max_size=5))  # fmt: skip


def pydantics_frame(delta: PartDelta, sequence: int) -> bytes:
    event = delta.event()
    event.sequence_number = sequence
    return sse_event(json_bytes(event), event=event.type)


@given(deltas, st.integers(0, 10**6))
def test_delta_frames_are_pydantics_bytes(delta: PartDelta, sequence: int) -> None:
    assert frame(delta, sequence) == pydantics_frame(delta, sequence)


@given(st.lists(st.one_of(deltas, others), max_size=8))
def test_coalescing_merges_runs_of_one_part(events) -> None:
    merged = coalesce(events)

    def key(e):  # type: ignore[no-untyped-def]
        return (type(e), getattr(e, "reasoning", None), e.item_id, e.output_index, e.content_index)

    def text(seq):  # type: ignore[no-untyped-def]
        return [(key(e), e.delta) for e in seq if isinstance(e, PartDelta)]

    # No two neighbours are deltas of the same part; every other event stays where it was.
    for a, b in itertools.pairwise(merged):
        assert not (isinstance(a, PartDelta) and isinstance(b, PartDelta) and key(a) == key(b))
    assert [e for e in merged if not isinstance(e, PartDelta)] == [
        e for e in events if not isinstance(e, PartDelta)
    ]
    # Each part's text is the same, in the same order; so are its tokens' log-probabilities.
    def logprobs(seq, k):  # type: ignore[no-untyped-def]
        return [p for e in seq if isinstance(e, PartDelta) and key(e) == k for p in e.logprobs]

    for k in {key(e) for e in events if isinstance(e, PartDelta)}:
        assert "".join(t for kk, t in text(merged) if kk == k) == "".join(
            t for kk, t in text(events) if kk == k
        )
        assert logprobs(merged, k) == logprobs(events, k)
