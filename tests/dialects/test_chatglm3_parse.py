"""ChatGLM3 output parsing: whole and streamed, from text and from ids.

An independent whole-output reference (``reference_parse``, after the official
``process_response``, with ``ast`` literals instead of ``eval``) checks the stream parser.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from chatfmt.dialects.chatglm3 import ChatGLM3
from chatfmt.dialects.glm import fenced_code
from chatfmt.errors import PyCallError
from chatfmt.events import (
    Event,
    Finish,
    ParseResult,
    SegmentEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    merge_deltas,
)
from chatfmt.messages import Message, ToolCall
from chatfmt.pycall import is_argument_name, parse_tool_call
from chatfmt.segments import Control
from chatfmt.tokenizers.base import Piece
from chatfmt.tokenizers.sentencepiece import SentencePieceTokenizer

ROLES = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
ROLE_RE = re.compile("|".join(re.escape(r) for r in ROLES))


def ids_factory() -> Any:
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def dialect() -> ChatGLM3:
    return ChatGLM3(id_factory=ids_factory())


# ==== Reference (whole output) ====


def ref_code(body: str) -> str:
    if body.startswith("```"):
        nl = body.find("\n")
        if nl < 0:
            return ""
        region, skip = body[nl:], 1
    else:
        region, skip = body, 0
    m = re.search(r"\n```\s*\Z", region)
    return (region[: m.start()] if m else region)[skip:]


def ref_text(s: str) -> str:
    while ROLE_RE.search(s):
        s = ROLE_RE.sub("", s)
    return s.strip()


def reference_parse(output: str) -> list[tuple[str, str, Any]]:
    """``(kind, metadata-or-name, text-or-arguments)`` per segment of text output."""
    cut = min(
        (i for i in (output.find("<|user|>"), output.find("<|observation|>")) if i >= 0),
        default=len(output),
    )
    output = output[:cut].replace("<|system|>", "")
    out: list[tuple[str, str, Any]] = []
    for response in output.split("<|assistant|>"):
        if not response:
            continue
        if "\n" in response:
            metadata, content = response.split("\n", 1)
            content = content.removeprefix(" ")
        else:
            metadata, content = "", response
        name = metadata.strip()
        raw_metadata, metadata = metadata, metadata.replace("\r", "")
        if not name:
            out.append(("text", metadata, ref_text(content)))
        elif name == "interpreter":
            if not content.strip() or (content.startswith("```") and "\n" not in content):
                # No code at all (nothing, or a fence that never opened a line): the demo
                # would run nothing; chatfmt reports the segment as an incomplete call
                # (nothing to run) and keeps no message for it.
                continue
            out.append(("call", name, {"code": ref_code(content)}))
        else:
            try:
                if any(c.isspace() for c in name) or name.startswith("`"):
                    raise PyCallError("not a name")
                out.append(("call", name, parse_tool_call(ref_code(content))))
            except PyCallError:
                out.append(("text", "", ref_text(f"{raw_metadata}\n{content}")))
    return out


def summary(result: ParseResult) -> list[tuple[str, str, Any]]:
    out: list[tuple[str, str, Any]] = []
    for m in result.messages:
        if m.tool_calls:
            (call,) = m.tool_calls
            out.append(("call", call.name, call.arguments_dict()))
        else:
            out.append(("text", m.metadata or "", m.content))
    return out


# ==== Helpers ====


def run_pieces(
    pieces: list[Piece], reason: str = "stop"
) -> tuple[list[Event], ParseResult, list[list[Event]]]:
    parser = dialect().stream_parser()
    steps = [parser.feed(p) for p in pieces]
    steps.append(parser.finish(reason))  # type: ignore[arg-type]
    return [e for s in steps for e in s], parser.result(), steps


def chunk(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def run_text_chunks(chunks: list[str], reason: str = "stop") -> tuple[list[Event], ParseResult]:
    from chatfmt.decoding import ControlSplitter

    splitter = ControlSplitter(ROLES)
    pieces: list[Piece] = []
    for c in chunks:
        pieces.extend(splitter.feed(c))
    pieces.extend(splitter.flush())
    # Stop at a stop control the way Dialect.parse does.
    events, result, _ = run_pieces(_until_stop(pieces), reason)
    return events, result


def _until_stop(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, Control) and p.token in ChatGLM3.stop_controls:
            break
        out.append(p)
    return out


def check_consistency(events: list[Event], result: ParseResult) -> None:
    """Deltas concatenate to the result; every call is opened, fed and closed in order."""
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == (result.content or "")
    calls = result.tool_calls
    # Every announced call ends either complete (in a message) or incomplete (reported apart:
    # an interpreter segment with no code, a fence left open), never both, never neither.
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    ends = {e.index: e.complete for e in events if isinstance(e, ToolCallEnd)}
    assert sorted(ends) == [s.index for s in starts]
    complete = [s for s in starts if ends[s.index]]
    assert [(s.id, s.name) for s in complete] == [(c.id, c.name) for c in calls]
    incomplete = [s for s in starts if not ends[s.index]]
    assert [(s.id, s.name) for s in incomplete] == [(c.id, c.name) for c in result.incomplete_calls]
    for s, c in zip(complete, calls, strict=True):
        args = "".join(
            e.arguments for e in events if isinstance(e, ToolCallDelta) and e.index == s.index
        )
        assert args == c.arguments
    # Each segment ends with a SegmentEnd; one whose call was incomplete has no message.
    kept_ends, cut = [], False
    for e in events:
        if isinstance(e, ToolCallEnd) and not e.complete:
            cut = True
        elif isinstance(e, SegmentEnd):
            if not cut:
                kept_ends.append(e.metadata)
            cut = False
    assert kept_ends == [m.metadata for m in result.messages]
    assert isinstance(events[-1], Finish)
    assert events[-1].reason == result.finish_reason


# ==== Examples ====


def test_text_output() -> None:
    result = dialect().parse("\n Hello, I'm ChatGLM3.  \n")
    assert result.content == "Hello, I'm ChatGLM3."
    assert result.finish_reason == "stop"
    assert result.messages == [
        Message(role="assistant", metadata="", content="Hello, I'm ChatGLM3.")
    ]


def test_prompt_md_tool_call_output() -> None:
    out = (
        "\n 好的，让我们来查看今天的天气<|assistant|>get_current_weather\n"
        ' ```python\ntool_call(location="beijing", unit="celsius")\n```<|observation|>'
    )
    events, result = run_text_chunks([out])
    assert result.content == "好的，让我们来查看今天的天气"
    (call,) = result.tool_calls
    assert call.id == "call_0"
    assert call.name == "get_current_weather"
    assert call.arguments_dict() == {"location": "beijing", "unit": "celsius"}
    assert call.raw == '```python\ntool_call(location="beijing", unit="celsius")\n```'
    assert result.finish_reason == "tool_calls"
    assert merge_deltas(events) == [
        TextDelta("好的，让我们来查看今天的天气"),
        SegmentEnd(""),
        ToolCallStart(0, "call_0", "get_current_weather"),
        ToolCallDelta(0, '{"location": "beijing", "unit": "celsius"}'),
        ToolCallEnd(0),
        SegmentEnd("get_current_weather"),
        Finish("tool_calls"),
    ]
    assert result.to_openai()["tool_calls"][0]["function"]["name"] == "get_current_weather"


def test_interpreter_streams_code() -> None:
    out = "interpreter\n ```python\nimport json\nprint('中\"文')\n```"
    chunks = list(out)
    events, result = run_text_chunks(chunks)
    (call,) = result.tool_calls
    assert call.name == "interpreter"
    assert call.arguments_dict() == {"code": "import json\nprint('中\"文')"}
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas[0].arguments == '{"code": "'
    assert deltas[-1].arguments == '"}'
    assert len(deltas) > 5  # streamed as it arrived, not at the end
    # The code streams before the segment ends.
    first_code = next(
        i for i, e in enumerate(events) if isinstance(e, ToolCallDelta) and "i" in e.arguments
    )
    assert first_code < len(events) - 4
    check_consistency(events, result)


def test_several_segments_and_calls() -> None:
    out = (
        "\n Let me compute.<|assistant|>interpreter\n ```python\n1+1\n```"
        "<|assistant|>get_w\n ```python\ntool_call(city='北京')\n```"
        "<|assistant|>\n Done."
    )
    result = dialect().parse(out)
    assert [m.metadata for m in result.messages] == ["", "interpreter", "get_w", ""]
    assert result.content == "Let me compute.Done."
    assert [c.id for c in result.tool_calls] == ["call_0", "call_1"]
    assert result.finish_reason == "tool_calls"
    assert result.message.to_openai()["content"] == "Let me compute.Done."


def test_stop_controls_end_the_turn() -> None:
    parser = dialect().stream_parser()
    assert parser.feed("\nHi ") == [TextDelta("Hi")]  # the trailing space waits
    events = parser.feed(Control("<|user|>"))
    events += parser.feed("ignored")
    events += parser.finish()
    assert parser.result().content == "Hi"
    for stop in ("<|observation|>", "</s>"):
        p = dialect().stream_parser()
        p.feed("\nA")
        p.feed(Control(stop))
        p.feed(" B")
        p.finish()
        assert p.result().content == "A"


def test_other_controls_are_dropped() -> None:
    p = dialect().stream_parser()
    for piece in ["\nA", Control("sop"), "B", Control("<|system|>"), "C", Control("<s>")]:
        p.feed(piece)
    p.finish()
    assert p.result().content == "ABC"


def test_role_strings_stripped_from_text() -> None:
    parser = dialect().stream_parser()
    events = parser.feed("\nHi <|us")
    events += parser.feed("er|> there <|assistant")
    events += parser.feed("|>!<|us<|user|>er|><|x")
    events += parser.finish()
    assert parser.result().content == "Hi  there !<|x"
    check_consistency(events, parser.result())


def test_metadata_without_newline_is_text() -> None:
    assert dialect().parse("no newline at all  ").content == "no newline at all"
    assert dialect().parse("get_weather").tool_calls == []


def test_empty_output_and_empty_segments() -> None:
    result = dialect().parse("")
    assert result.messages == []
    assert result.finish_reason == "stop"
    result = dialect().parse("<|assistant|><|assistant|>\n x")
    assert [m.content for m in result.messages] == ["x"]


def test_bad_tool_call_degrades_to_text() -> None:
    out = "get_w\n ```python\ntool_call(city=open('x'))\n```"
    events, result = run_text_chunks([out])
    assert result.tool_calls == []
    assert result.content == "get_w\n```python\ntool_call(city=open('x'))\n```"
    assert result.messages[0].metadata == ""
    assert len(result.warnings) == 1
    assert "get_w" in result.warnings[0] and "function call" in result.warnings[0]
    assert result.finish_reason == "stop"
    check_consistency(events, result)


def test_injection_payload_degrades_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "x"
    payloads = [
        f"tool_call(__import__('os').system('touch {marker}'))",
        f"tool_call(a=__import__('os').system('touch {marker}'))",
        f"tool_call(a=(lambda: __import__('os').system('touch {marker}'))())",
        f"tool_call(a=[__import__('os').system('touch {marker}') for _ in 'x'])",
        f"tool_call(a=f\"{{__import__('os').system('touch {marker}')}}\")",
        "tool_call(a=" + "[" * 10_000 + "]" * 10_000 + ")",
        "tool_call(a=" + "-" * 100_000 + "1)",
    ]
    for payload in payloads:
        out = f"get_w\n ```python\n{payload}\n```"
        result = dialect().parse(out)
        assert result.tool_calls == []
        assert result.content == f"get_w\n```python\n{payload}\n```"
        assert result.warnings
    assert not marker.exists()
    # The literal payload of the brief, at its literal path (only if it was not there before).
    if not Path("/tmp/x").exists():
        dialect().parse("get_w\n```python\ntool_call(__import__('os').system('touch /tmp/x'))\n```")
        assert not Path("/tmp/x").exists()


def test_bad_names_degrade() -> None:
    out = "two words\n ```python\ntool_call(a=1)\n```"
    result = dialect().parse(out)
    assert result.tool_calls == [] and result.warnings


def test_truncated_output() -> None:
    # Code cut off is never runnable: an incomplete call, its code as written.
    r = dialect().parse("interpreter\n ```python\nprint(1", finish_reason="length")
    assert r.finish_reason == "length" and r.tool_calls == []
    assert r.incomplete_calls[0].arguments == '{"code": "print(1'
    r = dialect().parse("interpreter\n ```python\nprint(1")  # stopped with its fence open
    assert r.finish_reason == "stop" and r.tool_calls == [] and r.incomplete_calls
    r = dialect().parse("interpreter\nprint(1)")  # unfenced, ended by the stop: complete
    assert r.tool_calls[0].arguments_dict() == {"code": "print(1)"}
    r = dialect().parse("get_w\n ```python\ntool_call(a=", finish_reason="length")
    assert r.finish_reason == "length"
    assert r.tool_calls == [] and r.warnings
    r = dialect().parse("interpreter\n ```pyth", finish_reason="length")
    assert r.tool_calls == [] and r.incomplete_calls[0].arguments == '{"code": "'


def test_unfenced_call_is_accepted() -> None:
    r = dialect().parse("get_w\ntool_call(a=1)")
    assert r.tool_calls[0].arguments_dict() == {"a": 1}


def test_default_ids_are_openai_like() -> None:
    r = ChatGLM3().parse("interpreter\n```python\nx\n```")
    assert r.tool_calls[0].id.startswith("call_")
    assert ChatGLM3().stream_parser(id_factory=lambda: "fixed").feed("interpreter\n")[0] == (
        ToolCallStart(0, "fixed", "interpreter")
    )


def test_finish_twice_and_feed_after_finish() -> None:
    p = dialect().stream_parser()
    assert p.feed("\nA") == [TextDelta("A")]
    assert p.finish() == [SegmentEnd(""), Finish("stop")]
    assert p.finish() == []
    assert p.feed("more") == []


# ==== From ids ====


def _assistant_ids(
    glm: SentencePieceTokenizer, messages: list[Message]
) -> tuple[list[int], list[int]]:
    """(output ids after the generation prompt, full ids) for assistant ``messages``."""
    d = ChatGLM3()
    user = [Message(role="user", content="q")]
    prompt = d.render(user, glm, strict=False).ids
    full = d.render(user + messages, glm, add_generation_prompt=False, strict=False).ids
    assert full[: len(prompt)] == prompt
    return full[len(prompt) :], full


def test_parse_ids_prompt_md(glm: SentencePieceTokenizer) -> None:
    msgs = [
        Message(role="assistant", content="好的，让我们来查看今天的天气"),
        Message(
            role="assistant",
            tool_calls=(
                ToolCall(
                    name="get_current_weather", arguments={"location": "beijing", "unit": "celsius"}
                ),
            ),
        ),
    ]
    out, full = _assistant_ids(glm, msgs)
    result = dialect().parse([*out, glm.control_id("<|observation|>")], glm)
    assert result.content == "好的，让我们来查看今天的天气"
    assert result.tool_calls[0].arguments_dict() == {"location": "beijing", "unit": "celsius"}
    # The model's own tokens come back when the parsed turn is rendered as history.
    again = (
        ChatGLM3()
        .render(
            [Message(role="user", content="q"), *result.messages], glm, add_generation_prompt=False
        )
        .ids
    )
    assert again == full


def test_split_utf8_across_ids(glm: SentencePieceTokenizer) -> None:
    text = "今天北京的天气怎么样？🌤 𠀀 é"
    msgs = [
        Message(role="assistant", content=text),
        Message(
            role="assistant",
            tool_calls=(ToolCall(name="interpreter", arguments={"code": f"print('{text}')"}),),
        ),
    ]
    out, _ = _assistant_ids(glm, msgs)
    assert any(glm.processor.is_byte(i) for i in out)  # multi-byte chars split over byte pieces
    dec = glm.decoder()
    parser = dialect().stream_parser()
    events: list[Event] = []
    for i in out:
        for piece in dec.feed(i):
            assert "\ufffd" not in piece if isinstance(piece, str) else True
            events += parser.feed(piece)
    for piece in dec.flush():
        events += parser.feed(piece)
    events += parser.finish()
    result = parser.result()
    assert result.content == text
    assert result.tool_calls[0].arguments_dict() == {"code": f"print('{text}')"}
    check_consistency(events, result)
    assert summary(result) == summary(dialect().parse(out, glm))


# ==== Properties ====

# U+2581 is SentencePiece's space symbol: it decodes to " " (in the official decode too).
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\u2581"), max_size=30)
CLEAN_TEXT = TEXT.map(ref_text)
NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True).filter(
    lambda s: s != "interpreter"
)
ARG_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(is_argument_name)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(TEXT, c, max_size=3),
    max_leaves=8,
)
SEGMENT = st.one_of(
    CLEAN_TEXT.map(lambda t: Message(role="assistant", content=t)),
    st.builds(
        lambda n, a: Message(role="assistant", tool_calls=(ToolCall(name=n, arguments=a),)),
        NAMES,
        st.dictionaries(ARG_NAMES, JSON, max_size=3),
    ),
    TEXT.map(
        lambda code: Message(
            role="assistant",
            tool_calls=(ToolCall(name="interpreter", arguments={"code": code}),),
        )
    ),
)


@given(st.lists(SEGMENT, min_size=1, max_size=4), st.lists(st.integers(0, 10_000), max_size=8))
def test_render_parse_round_trip(
    glm: SentencePieceTokenizer, turn: list[Message], cuts: list[int]
) -> None:
    out, full = _assistant_ids(glm, turn)
    result = dialect().parse(out, glm)
    want = [
        ("call", m.tool_calls[0].name, m.tool_calls[0].arguments_dict())
        if m.tool_calls
        else ("text", "", m.content)
        for m in turn
    ]
    assert summary(result) == want
    assert not result.warnings
    again = (
        ChatGLM3()
        .render(
            [Message(role="user", content="q"), *result.messages],
            glm,
            add_generation_prompt=False,
            strict=False,  # several calls in a row have no results yet
        )
        .ids
    )
    assert again == full
    # Streaming the ids one by one gives the same.
    dec = glm.decoder()
    pieces = [p for i in out for p in dec.feed(i)] + dec.flush()
    events, streamed, _ = run_pieces(pieces)
    assert summary(streamed) == want
    check_consistency(events, streamed)


FRAGMENTS = st.sampled_from(
    [
        *ROLES,
        "\n",
        " ",
        "  ",
        "\n```",
        "```python\n",
        "```",
        "`",
        "tool_call(",
        "a=1",
        "b='x'",
        ", ",
        ")",
        "interpreter",
        "get_w",
        "<|",
        "|>",
        "user",
        "<|us",
        "er|>",
        "中文",
        "\r",
        "\t",
        "x",
        "sop",
        "__import__('os')",
    ]
)
OUTPUTS = st.lists(st.one_of(FRAGMENTS, st.text(max_size=5)), max_size=25).map("".join)


@given(OUTPUTS, st.lists(st.integers(0, 10_000), max_size=12), st.sampled_from(["stop", "length"]))
def test_stream_equals_whole_and_reference(output: str, cuts: list[int], reason: str) -> None:
    whole_events, whole = run_text_chunks([output], reason)
    events, streamed = run_text_chunks(chunk(output, cuts), reason)
    assert merge_deltas(events) == merge_deltas(whole_events)
    assert streamed.messages == whole.messages
    assert streamed.warnings == whole.warnings
    assert streamed.finish_reason == whole.finish_reason
    check_consistency(events, streamed)
    if reason == "stop":
        assert summary(whole) == reference_parse(output)
    else:
        # Cut by length: a call still open is incomplete (the demo's parser has no notion of a
        # cut); the text segments are still the demo's.
        texts = [s for s in summary(whole) if s[0] == "text"]
        assert texts == [s for s in reference_parse(output) if s[0] == "text"][: len(texts)]


@given(OUTPUTS.filter(lambda s: "\u2581" not in s))  # U+2581 decodes to " " (see TEXT)
def test_ids_equal_text(glm: SentencePieceTokenizer, output: str) -> None:
    ids: list[int] = []
    # One SentencePiece call per run between control tokens, as a model's output decodes.
    for is_control, run in itertools.groupby(
        ChatGLM3().pieces(output, None), key=lambda p: isinstance(p, Control)
    ):
        if is_control:
            ids.extend(glm.control_id(p.token) for p in run if isinstance(p, Control))
        else:
            ids.extend(glm.encode_text("".join(p for p in run if isinstance(p, str))))
    from_ids = dialect().parse(ids, glm)
    from_text = dialect().parse(output)
    assert from_ids.messages == from_text.messages


@given(OUTPUTS, st.lists(st.integers(0, 10_000), max_size=12))
def test_deltas_are_prefix_stable(output: str, cuts: list[int]) -> None:
    """After every feed, what has been streamed is a prefix of the final text and arguments."""
    _, whole = run_text_chunks([output])
    parser = dialect().stream_parser()
    text = ""
    args: dict[int, str] = {}
    # Every announced call's final arguments by its index: the complete calls in order, and
    # the incomplete ones (a code-less interpreter segment, say) with what they streamed.
    partial = {c.index: c.arguments for c in whole.incomplete_calls}
    complete = iter(c.arguments for c in whole.tool_calls)
    total = len(partial) + len(whole.tool_calls)
    final_args = [partial[k] if k in partial else next(complete) for k in range(total)]
    for piece in _until_stop(ChatGLM3().pieces(output, None)):
        for sub in chunk(piece, cuts) if isinstance(piece, str) else [piece]:
            for e in parser.feed(sub):
                if isinstance(e, TextDelta):
                    text += e.text
                elif isinstance(e, ToolCallDelta):
                    args[e.index] = args.get(e.index, "") + e.arguments
            assert (whole.content or "").startswith(text)
            for k, a in args.items():
                assert final_args[k].startswith(a)


PIECES = st.lists(
    st.one_of(
        st.text(max_size=8),
        FRAGMENTS,
        st.sampled_from([*ROLES, "</s>", "<s>", "[gMASK]", "sop"]).map(Control),
    ),
    max_size=30,
)


@given(PIECES, st.sampled_from(["stop", "length"]))
def test_parser_never_raises(pieces: list[Piece], reason: str) -> None:
    events, result, _ = run_pieces(pieces, reason)
    check_consistency(events, result)


@given(st.text(max_size=60))
def test_fenced_code_matches_reference(body: str) -> None:
    assert fenced_code(body) == ref_code(body)
    for extra in ("```python\n", "```\n", "```py"):
        assert fenced_code(extra + body) == ref_code(extra + body)
        assert fenced_code(extra + body + "\n```") == ref_code(extra + body + "\n```")


def test_stream_is_linear_in_new_text() -> None:
    """Long outputs fed in small pieces do not re-scan what came before."""
    import time

    def timed(n: int) -> float:
        parser = dialect().stream_parser()
        parser.feed("interpreter\n```python\n")
        start = time.perf_counter()
        for _ in range(n):
            parser.feed("x = 1 <|us\n")
        parser.feed(Control("<|assistant|>"))
        parser.feed("\n")
        for _ in range(n):
            parser.feed("word <|us ")
        parser.finish()
        return time.perf_counter() - start

    small, big = timed(2_000), timed(20_000)
    assert big < small * 30  # linear would be ~10x; quadratic ~100x


def test_huge_integer_argument_degrades_to_text() -> None:
    d = ChatGLM3()
    out = "get_weather\n```python\ntool_call(a=0x" + "f" * 4000 + ")\n```"
    result = d.parse(out)
    assert not result.tool_calls and result.warnings
