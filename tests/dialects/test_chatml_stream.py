"""The ChatML stream parser: accepted call shapes, degradation, and stream == whole."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatfmt.decoding import ControlSplitter
from chatfmt.dialects.chatml import ChatML, Qwen25
from chatfmt.dialects.parsers.hermes import HermesParser
from chatfmt.events import (
    Event,
    Finish,
    ParseResult,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    merge_deltas,
)
from chatfmt.segments import Control
from chatfmt.tokenizers.base import Piece

CONTROLS = ChatML().controls


def ids() -> Iterator[str]:
    n = 0
    while True:
        yield f"call_{n}"
        n += 1


def new_parser() -> HermesParser:
    counter = ids()
    return Qwen25().stream_parser(id_factory=lambda: next(counter))


def run(
    pieces: Sequence[Piece], reason: Literal["stop", "length"] = "stop"
) -> tuple[list[Event], ParseResult]:
    p = new_parser()
    events: list[Event] = []
    for piece in pieces:
        events.extend(p.feed(piece))
    events.extend(p.finish(reason))
    result = p.result()
    check_events(events, result)
    return events, result


def check_events(events: list[Event], result: ParseResult) -> None:
    """Events are well formed, append-only, and add up to the result."""
    assert isinstance(events[-1], Finish) and sum(isinstance(e, Finish) for e in events) == 1
    assert events[-1].reason == result.finish_reason
    text = ""
    final = result.content or ""
    calls: list[dict[str, Any]] = []
    open_index: int | None = None
    # Every announced call in order, complete or not: its final arguments.
    incomplete = {c.index: c for c in result.incomplete_calls}
    complete = iter(result.tool_calls)
    n_calls = len(result.tool_calls) + len(incomplete)
    ordered = [incomplete.get(i) or next(complete) for i in range(n_calls)]
    for e in events:
        if isinstance(e, TextDelta):
            assert e.text and open_index is None
            text += e.text
            assert final.startswith(text)  # prefix stability
        elif isinstance(e, ToolCallStart):
            assert open_index is None and e.index == len(calls) and e.name
            calls.append({"id": e.id, "name": e.name, "arguments": ""})
            open_index = e.index
        elif isinstance(e, ToolCallDelta):
            assert e.index == open_index and e.arguments
            calls[e.index]["arguments"] += e.arguments
            assert ordered[e.index].arguments.startswith(calls[e.index]["arguments"])
        elif isinstance(e, ToolCallEnd):
            assert e.index == open_index
            assert e.complete == (e.index not in incomplete)
            open_index = None
    assert open_index is None
    assert text == final
    assert [(c.id, c.name, c.arguments) for c in ordered] == [
        (c["id"], c["name"], c["arguments"]) for c in calls
    ]
    for c in result.tool_calls:
        assert isinstance(json.loads(c.arguments), dict)


def whole(text: str, reason: Literal["stop", "length"] = "stop") -> ParseResult:
    return run([text], reason)[1]


def summary(r: ParseResult, *, with_ids: bool = True) -> dict[str, Any]:
    out = r.to_openai()
    out["raw"] = [c.raw for c in r.tool_calls]
    if not with_ids:
        for c in out.get("tool_calls", []):
            del c["id"]
    return out


# ==== Accepted shapes ====


def test_plain_text() -> None:
    r = whole("Hello, world!\n")
    assert r.content == "Hello, world!\n" and r.tool_calls == [] and r.finish_reason == "stop"


def test_tagged_call_tags_as_text_or_controls() -> None:
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    r1 = whole(text)
    splitter = ControlSplitter(CONTROLS)
    pieces = [*splitter.feed(text), *splitter.flush()]
    assert Control("<tool_call>") in pieces
    _, r2 = run(pieces)
    for r in (r1, r2):
        assert r.finish_reason == "tool_calls" and r.content is None
        (call,) = r.tool_calls
        assert (call.name, call.arguments, call.raw) == (
            "get_weather",
            '{"city": "Paris"}',
            text,
        )
    assert summary(r1) == summary(r2)


def test_several_calls_in_one_turn() -> None:
    text = (
        "Let me check.\n"
        '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>\n'
        '<tool_call>{"name":"c"}</tool_call>'
    )
    r = whole(text)
    assert r.content == "Let me check."
    assert [(c.name, c.arguments) for c in r.tool_calls] == [
        ("a", '{"x": 1}'),
        ("b", "{}"),
        ("c", "{}"),  # zero-argument call
    ]
    assert r.tool_calls[2].raw == '<tool_call>{"name":"c"}</tool_call>'
    assert r.warnings == []


def test_bare_json_call() -> None:
    r = whole('  {"name": "get_time", "arguments": {"tz": "UTC"}}\n')
    (call,) = r.tool_calls
    assert (call.name, call.arguments, call.raw) == (
        "get_time",
        '{"tz": "UTC"}',
        '{"name": "get_time", "arguments": {"tz": "UTC"}}',
    )
    assert r.content is None and r.finish_reason == "tool_calls"


def test_bare_json_string_arguments_and_parameters_key() -> None:
    r = whole('{"name": "f", "arguments": "{\\"a\\": [1, 2]}"}')
    assert r.tool_calls[0].arguments == '{"a": [1, 2]}'
    r = whole('{"name": "f", "parameters": {"q": "x"}}')
    assert r.tool_calls[0].arguments == '{"q": "x"}'


def test_fenced_json_call() -> None:
    text = '```json\n{"name": "search", "arguments": {"q": "chatfmt"}}\n```'
    r = whole(text + "\n")
    (call,) = r.tool_calls
    assert (call.name, call.arguments, call.raw) == ("search", '{"q": "chatfmt"}', text)
    assert r.content is None and r.warnings == []
    r = whole('```\n{"name": "f", "arguments": {}}\n```')
    assert r.tool_calls[0].name == "f"


def test_json_that_is_not_a_call_is_text() -> None:
    for text in (
        '{"answer": 42}',
        '{"name": "Bob", "age": 3}',
        "{not json at all}",
        "```python\nprint('hi')\n```",
        '```json\n{"a": 1}\n```',
        '{"name": "f", "arguments": [1]}',
        "`x` marks",
    ):
        r = whole(text)
        assert r.content == text and r.tool_calls == [], text


def test_name_after_arguments() -> None:
    p = new_parser()
    ev = p.feed('<tool_call>{"arguments": {"a": "long text"}, ')
    assert not any(isinstance(e, ToolCallStart) for e in ev)  # no name yet
    ev = p.feed('"name": "f"}</tool_call>')
    assert merge_deltas(ev) == [
        ToolCallStart(0, "call_0", "f"),
        ToolCallDelta(0, '{"a": "long text"}'),
        ToolCallEnd(0),
    ]


def test_arguments_stream_as_they_arrive() -> None:
    p = new_parser()
    assert p.feed("<tool_call>\n") == []
    ev = p.feed('{"name": "run", "arguments": {"code": "print(')
    assert merge_deltas(ev) == [
        ToolCallStart(0, "call_0", "run"),
        ToolCallDelta(0, '{"code": "print('),
    ]
    assert p.feed("1)") == [ToolCallDelta(0, "1)")]
    assert p.feed('\\n"') == [ToolCallDelta(0, '\\n"')]
    # A number is only safe once it ends.
    assert p.feed(', "n": 12') == []
    assert merge_deltas(p.feed("}}\n</tool_call>")) == [
        ToolCallDelta(0, ', "n": 12}'),
        ToolCallEnd(0),
    ]
    fin = p.finish()
    assert fin == [Finish("tool_calls")]
    assert p.result().tool_calls[0].arguments == '{"code": "print(1)\\n", "n": 12}'


def test_split_tags_across_chunks() -> None:
    chunks = ["Hi <tool", "_c", "all>", '{"name": "f", "argu', 'ments": {}}</tool_', "call>"]
    _events, r = run(chunks)
    assert r.content == "Hi " and r.tool_calls[0].name == "f"
    assert summary(r) == summary(whole("".join(chunks)))
    p = new_parser()
    assert p.feed("Hello <tool") == [TextDelta("Hello ")]  # the undecided tail is held
    assert p.feed("ing>") == [TextDelta("<tooling>")]


def test_split_utf8_through_the_decoder(qwen: Any) -> None:
    text = 'é🙂 北京\n<tool_call>\n{"name": "f", "arguments": {"city": "北京🙂"}}\n</tool_call>'
    splitter = ControlSplitter(CONTROLS)
    token_ids: list[int] = []
    for piece in [*splitter.feed(text), *splitter.flush()]:
        if isinstance(piece, Control):
            token_ids.append(qwen.control_id(piece.token))
        else:
            token_ids.extend(qwen.encode_text(piece))
    dec = qwen.decoder()
    p = new_parser()
    events: list[Event] = []
    for i in token_ids:
        for piece in dec.feed(i):
            events.extend(p.feed(piece))
    for piece in dec.flush():
        events.extend(p.feed(piece))
    events.extend(p.finish())
    r = p.result()
    check_events(events, r)
    assert all("\ufffd" not in e.text for e in events if isinstance(e, TextDelta))
    assert r.content == "é🙂 北京"
    assert r.tool_calls[0].arguments_dict() == {"city": "北京🙂"}
    assert summary(Qwen25().parse(token_ids, qwen), with_ids=False) == summary(
        whole(text), with_ids=False
    )


def test_length_cut_output() -> None:
    # A call cut off is incomplete: never among the calls, its arguments never completed.
    r = whole('Sure.\n<tool_call>\n{"name": "f", "arguments": {"a": "Par', "length")
    assert r.finish_reason == "length" and r.tool_calls == [] and r.content == "Sure."
    assert r.incomplete_calls[0].arguments == '{"a": "Par'
    assert r.warnings and "cut off" in r.warnings[0] and "not runnable" in r.warnings[0]
    r = whole('<tool_call>\n{"name": "f", "argum', "length")
    assert r.tool_calls == [] and r.incomplete_calls[0].arguments == ""
    # Arguments complete, the call object not: still incomplete.
    r = whole('<tool_call>\n{"name": "f", "arguments": {"a": 1}', "stop")
    assert r.tool_calls == [] and r.incomplete_calls[0].arguments == '{"a": 1}'
    assert r.finish_reason == "stop"
    r = whole('<tool_call>\n{"na', "length")
    assert r.tool_calls == [] and r.content == '<tool_call>\n{"na'
    assert r.finish_reason == "length"
    r = whole("Just text", "length")
    assert r.content == "Just text" and r.finish_reason == "length"


def test_malformed_json_in_tags_degrades_to_text() -> None:
    for text in (
        "<tool_call>\nnot json\n</tool_call>",
        '<tool_call>\n{"name": 5}\n</tool_call>',
        '<tool_call>\n{"nam": "f"}\n</tool_call>',
        "<tool_call>{'name': 'f'}</tool_call>",
    ):
        r = whole(text)
        assert r.content == text and r.tool_calls == [], text
        assert r.warnings, text
    # Broken after the name: the call is incomplete, its arguments as far as they were valid.
    r = whole('<tool_call>{"name": "f", "arguments": {"a": tru}}</tool_call> after')
    assert r.tool_calls == [] and r.incomplete_calls[0].arguments == "{"
    assert r.content == " after" and r.finish_reason == "stop"
    raw = '<tool_call>{"name": "f", "arguments": {"a": tru}}</tool_call>'
    assert r.incomplete_calls[0].raw == raw
    assert r.warnings
    r = whole('<tool_call>{"name": "f", "arguments": {"a": "x", "b": [1, oops]}}</tool_call>')
    assert r.incomplete_calls[0].arguments == '{"a": "x", "b": ['


def test_separator_newlines_are_not_content() -> None:
    r = whole('A\n\n<tool_call>{"name": "f"}</tool_call>\n\n  \n')
    assert r.content == "A\n"
    r = whole('<tool_call>{"name": "f"}</tool_call>\nDone.')
    assert r.content == "\nDone."


def test_stop_control_ends_the_turn() -> None:
    _, r = run(["Hi", Control("<|im_end|>"), "ignored"])
    assert r.content == "Hi"
    r = Qwen25().parse("Hi<|im_end|>\n<|im_start|>user\nmore")
    assert r.content == "Hi"


def test_other_controls_are_text() -> None:
    _, r = run(["a", Control("<|fim_prefix|>"), "b"])
    assert r.content == "a<|fim_prefix|>b"


def test_parse_is_linear() -> None:
    """O(new text) per feed: 4x the output costs about 4x the time, not 16x."""

    def cost(n: int) -> float:
        p = new_parser()
        start = time.perf_counter()
        for _ in range(n):
            p.feed("word ")
        p.feed('\n<tool_call>\n{"name": "w", "arguments": {"text": "')
        for _ in range(n):
            p.feed("abc ")
        p.feed('"}}\n</tool_call>')
        p.finish()
        return time.perf_counter() - start

    cost(2000)
    small = min(cost(5000) for _ in range(3))
    big = min(cost(20000) for _ in range(3))
    assert big < small * 8


# ==== Properties ====

FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_",
    "call>",
    "{",
    "}",
    "[",
    "]",
    '"name"',
    '"arguments"',
    '"parameters"',
    ":",
    ",",
    '"f"',
    '"a\\"b\\u00e9"',
    "\\",
    '"',
    "1",
    "-0.5e3",
    "tru",
    "true",
    "null",
    "```",
    "```json\n",
    "\n",
    " ",
    "é",
    "🙂",
    "text",
    "<",
    "`",
    "\x00",
]
messy = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=30).map("".join)


@st.composite
def well_formed(draw: st.DrawFn) -> str:
    """Outputs a model plausibly writes, in all accepted shapes."""
    out = draw(st.sampled_from(["", "Sure.", "Let me check:\n", "  "]))
    args = draw(
        st.dictionaries(
            st.text(max_size=5),
            st.integers() | st.text(max_size=8) | st.lists(st.booleans(), max_size=2),
            max_size=3,
        )
    )
    name = draw(st.from_regex(r"[a-z_]{1,8}", fullmatch=True))
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=draw(st.booleans()))
    shape = draw(st.sampled_from(["tag", "tag2", "bare", "fence", "string_args", "text"]))
    if shape == "tag":
        out += f"\n<tool_call>\n{body}\n</tool_call>"
    elif shape == "tag2":
        out += f"<tool_call>{body}</tool_call>\n<tool_call>\n{body}\n</tool_call>"
    elif shape == "bare":
        out = "\n" + body + "\n"
    elif shape == "fence":
        out = f"```json\n{body}\n```"
    elif shape == "string_args":
        out = json.dumps({"name": name, "arguments": json.dumps(args)})
    else:
        out += draw(st.text(max_size=20))
    return out


def chunk(text: str, sizes: list[int]) -> list[str]:
    out: list[str] = []
    i = 0
    for s in sizes:
        if i >= len(text):
            break
        out.append(text[i : i + s])
        i += s
    if i < len(text):
        out.append(text[i:])
    return out


def as_pieces(text: str, sizes: list[int], controls: bool) -> list[Piece]:
    if not controls:
        return list(chunk(text, sizes))
    splitter = ControlSplitter(CONTROLS)
    pieces: list[Piece] = []
    for piece in [*splitter.feed(text), *splitter.flush()]:
        if isinstance(piece, Control):
            pieces.append(piece)
        else:
            pieces.extend(chunk(piece, sizes))
    return pieces


outputs = well_formed() | messy


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    text=outputs,
    sizes=st.lists(st.integers(1, 7), max_size=40),
    controls=st.booleans(),
    cut=st.none() | st.integers(0, 200),
)
def test_stream_equals_whole(text: str, sizes: list[int], controls: bool, cut: int | None) -> None:
    reason: Literal["stop", "length"] = "stop"
    if cut is not None:
        text, reason = text[:cut], "length"
    events_whole, r_whole = run([text], reason)
    events_stream, r_stream = run(as_pieces(text, sizes, controls), reason)
    assert merge_deltas(events_stream) == merge_deltas(events_whole)
    assert summary(r_stream) == summary(r_whole)
    # Nothing the model wrote is lost: content plus the calls' raw text covers the output.
    covered = (r_whole.content or "") + "".join(c.raw or "" for c in r_whole.tool_calls)
    assert len(covered.strip()) <= len(text)


@given(text=well_formed())
def test_well_formed_calls_parse_without_warnings(text: str) -> None:
    r = whole(text)
    assert r.warnings == []
    for c in r.tool_calls:
        assert c.raw is not None and c.raw in text


@given(
    pieces=st.lists(
        st.text(max_size=6) | st.sampled_from(FRAGMENTS) | st.sampled_from(CONTROLS).map(Control),
        max_size=30,
    ),
    reason=st.sampled_from(["stop", "length"]),
)
def test_parser_never_raises(pieces: list[Piece], reason: Literal["stop", "length"]) -> None:
    run(pieces, reason)


def test_dialect_parse_text_and_ids(qwen: Any, cl100k: Any) -> None:
    text = 'Hi\n<tool_call>\n{"name": "f", "arguments": {"x": "y"}}\n</tool_call><|im_end|>'
    r = ChatML().parse(text)
    assert r.content == "Hi" and r.tool_calls[0].arguments == '{"x": "y"}'
    token_ids = [*cl100k.encode_text("Hello there"), 100265]
    assert ChatML().parse(token_ids, cl100k).content == "Hello there"


@pytest.mark.parametrize("reason", ["stop", "length"])
def test_empty_output(reason: Literal["stop", "length"]) -> None:
    r = whole("", reason)
    assert r.content is None and r.tool_calls == [] and r.finish_reason == reason


TRICKY = [
    'A\n\n<tool_call>\n{"name": "f"}\n</tool_call>\n\n  \nB\n',
    '<tool_call>{"name": "f", "arguments": {"s": "<tool_call>\\"}\\u00e9"}} junk</tool_call>x',
    '<tool_call>{"name": "f"}<tool_call>{"name": "g", "parameters": {}}</tool_call>',
    '<tool_call>{"arguments": {"a": [1, {"b": null}]}, "name": "f", "x": 1}</tool_call>',
    '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>',
    '<tool_call>{"name": "f", "arguments": "not an object"}</tool_call>',
    '<tool_call>{"name": "f", "arguments": {"a": 1e}}</tool_call>',
    '<tool_call>{"name": "", "arguments": {}}</tool_call>',
    '\n ```json\n{"name": "f", "arguments": {}}\n``` after',
    '```json\n{"name": "f", "arguments": {}}\n`` not closed',
    '```JSON \n{"name": "f", "arguments": {}}',
    "```\nplain code\n```",
    '{"name": "f", "arguments": {}}\n{"name": "g", "arguments": {"x": [true]}}\nthen text',
    '{"name": "f", "arguments": {}}\n<tool_call>{"name": "g"}</tool_call>',
    '{"name": "f"',
    "<tool_call",
    "text <tool_call>",
    "</tool_call> stray close",
    '<tool_call>\n{"name": "f", "arguments": {"a": "x\\',
    '<tool_call>\n{"name": "f", "arguments": {"a": "\\u12',
    '<tool_call>\n{"name": "f", "arguments": {"a": [[[{"b": "c',
]


@pytest.mark.parametrize("text", TRICKY)
@pytest.mark.parametrize("reason", ["stop", "length"])
def test_every_split_point(text: str, reason: Literal["stop", "length"]) -> None:
    events, result = run([text], reason)
    expected = (merge_deltas(events), summary(result))
    for i in range(len(text) + 1):
        ev, r = run([text[:i], text[i:]], reason)
        assert (merge_deltas(ev), summary(r)) == expected, i
    ev, r = run(list(text), reason)
    assert (merge_deltas(ev), summary(r)) == expected


def test_deep_nesting_never_raises() -> None:
    deep = (
        '<tool_call>{"name": "f", "arguments": {"a": ' + "[" * 5000 + "]" * 5000 + "}}</tool_call>"
    )
    r = whole(deep)
    assert r.incomplete_calls[0].name == "f" and r.warnings and r.tool_calls == []
    r = whole('{"a": ' * 5000)
    assert r.content == '{"a": ' * 5000 and r.tool_calls == []
    r = whole('{"name": "f", "arguments": "' + "[" * 5000 + '"}')
    assert r.tool_calls == []


def test_huge_number_in_arguments_never_contradicts_the_stream() -> None:
    from chatfmt.dialects.chatml import Qwen25

    out = '<tool_call>\n{"name": "f", "arguments": {"n": ' + "9" * 5000 + "}}\n</tool_call>"
    p = Qwen25().stream_parser()
    events = [e for k in range(0, len(out), 7) for e in p.feed(out[k : k + 7])]
    events += p.finish()
    streamed = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
    result = p.result()
    assert result.incomplete_calls[0].arguments == streamed and result.tool_calls == []
    assert result.warnings


def test_empty_tags_are_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        HermesParser(open_tag="", close_tag="</x>")
