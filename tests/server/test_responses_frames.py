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
from chatfmt.server.responses.wire import (
    OutputTextDelta,
    OutputTextDone,
    ReasoningTextDelta,
)

ids = st.sampled_from(["msg_a", "msg_b", 'rs_"q"'])
deltas = st.one_of(
    st.builds(OutputTextDelta, item_id=ids, output_index=st.integers(0, 3),
              content_index=st.just(0), delta=st.text()),
    st.builds(ReasoningTextDelta, item_id=ids, output_index=st.integers(0, 3),
              content_index=st.just(0), delta=st.text()),
)  # fmt: skip
others = st.builds(OutputTextDone, item_id=ids, output_index=st.integers(0, 3),
                   content_index=st.just(0), text=st.text(max_size=5))  # fmt: skip


@given(deltas, st.integers(0, 10**6))
def test_delta_frames_are_pydantics_bytes(event, sequence: int) -> None:
    fast = frame(event, sequence)
    event.sequence_number = sequence
    assert fast == sse_event(json_bytes(event), event=event.type)


@given(st.lists(st.one_of(deltas, others), max_size=8))
def test_coalescing_merges_runs_of_one_part(events) -> None:
    merged = coalesce(events)

    def key(e):  # type: ignore[no-untyped-def]
        return (type(e), e.item_id, e.output_index, e.content_index)

    def text(seq):  # type: ignore[no-untyped-def]
        return [(key(e), e.delta) for e in seq if hasattr(e, "delta")]

    # No two neighbours are deltas of the same part; every other event stays where it was.
    for a, b in itertools.pairwise(merged):
        assert not (hasattr(a, "delta") and hasattr(b, "delta") and key(a) == key(b))
    assert [e for e in merged if not hasattr(e, "delta")] == [
        e for e in events if not hasattr(e, "delta")
    ]
    # Each part's text is the same, in the same order.
    for k in {key(e) for e in events if hasattr(e, "delta")}:
        assert "".join(t for kk, t in text(merged) if kk == k) == "".join(
            t for kk, t in text(events) if kk == k
        )
