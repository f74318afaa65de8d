"""CallPolicy: which parsed calls a response carries; the others come back as their JSON text."""

from __future__ import annotations

import json

from chatfmt.events import (
    Event,
    Finish,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from chatfmt.server.chat.policy import CallPolicy


def call(index: int, name: str, arguments: str) -> list[Event]:
    return [
        ToolCallStart(index, f"call_{index}", name),
        ToolCallDelta(index, arguments[:3]),
        ToolCallDelta(index, arguments[3:]),
        ToolCallEnd(index),
    ]


def test_no_rules_pass_every_event_through() -> None:
    events = [TextDelta("hi"), *call(0, "a", '{"x": 1}'), *call(1, "b", "{}"), Finish("tool_calls")]
    policy = CallPolicy()
    assert policy.filter(events) == events
    assert policy.kept_ids == {"call_0", "call_1"} and policy.demoted_text == []


def test_undeclared_call_becomes_text_and_the_turn_stops() -> None:
    policy = CallPolicy(allowed=frozenset({"get_weather"}))
    out = policy.filter([*call(0, "other", '{"q": "é"}'), Finish("tool_calls")])
    assert out == [TextDelta('{"name": "other", "arguments": {"q": "é"}}'), Finish("stop")]
    assert json.loads(policy.demoted_text[0]) == {"name": "other", "arguments": {"q": "é"}}
    assert policy.kept_ids == set()


def test_kept_calls_are_renumbered_from_zero() -> None:
    policy = CallPolicy(allowed=frozenset({"b"}))
    out = policy.filter([*call(0, "a", "{}"), *call(1, "b", '{"k": 2}'), Finish("tool_calls")])
    assert out == [
        TextDelta('{"name": "a", "arguments": {}}'),
        ToolCallStart(0, "call_1", "b"),
        ToolCallDelta(0, '{"k'),
        ToolCallDelta(0, '": 2}'),
        ToolCallEnd(0),
        Finish("tool_calls"),
    ]


def test_max_calls_keeps_the_first() -> None:
    policy = CallPolicy(max_calls=1)
    out = policy.filter(
        [*call(0, "a", '{"n": 1}'), *call(1, "a", '{"n": 2}'), Finish("tool_calls")]
    )
    assert [type(e).__name__ for e in out] == [
        "ToolCallStart",
        "ToolCallDelta",
        "ToolCallDelta",
        "ToolCallEnd",
        "TextDelta",
        "Finish",
    ]
    assert out[-2] == TextDelta('{"name": "a", "arguments": {"n": 2}}')
    assert out[-1] == Finish("tool_calls")
    assert policy.kept_ids == {"call_0"}


def test_none_allowed_demotes_a_call_without_arguments() -> None:
    policy = CallPolicy(allowed=frozenset())
    events: list[Event] = [ToolCallStart(0, "c", "f"), ToolCallEnd(0), Finish("length")]
    assert policy.filter(events) == [TextDelta('{"name": "f", "arguments": {}}'), Finish("length")]


def test_events_split_across_filter_calls() -> None:
    policy = CallPolicy(allowed=frozenset({"a"}), max_calls=1)
    events = [*call(0, "x", '{"a": 1}'), *call(1, "a", "{}")]
    out = [e for ev in events for e in policy.filter([ev])]
    assert out[0] == TextDelta('{"name": "x", "arguments": {"a": 1}}')
    assert out[1] == ToolCallStart(0, "call_1", "a")
    # Deltas of a call the policy never saw are dropped, not crashed on.
    assert policy.filter([ToolCallDelta(7, "{}"), ToolCallEnd(7)]) == []


def test_a_kept_call_cut_by_a_stop_string_does_not_make_the_turn_end_in_calls() -> None:
    # f is complete but not allowed (text); g is allowed but a stop string cut it off.
    from chatfmt import TurnDecoder, get_dialect

    text = (
        '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "g", "arguments": {"a": "xSTOP"}}\n</tool_call>'
    )
    turn = TurnDecoder(get_dialect("qwen2.5"), stop_strings=["STOP"])
    policy = CallPolicy(allowed=frozenset({"g"}))
    events = policy.filter(turn.feed_text(text) + turn.finish())
    assert events[-1] == Finish("stop")
    assert [c.name for c in turn.result().tool_calls] == ["f"]  # complete, yet not allowed
    # The kept call was cut: it ends, but not as a complete (runnable) call.
    assert not any(isinstance(e, ToolCallEnd) and e.complete for e in events)
