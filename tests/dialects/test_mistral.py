"""Mistral v3 and v7 against ``mistral-common``, the vendor's own encoder: every rendered id, the
Tekken vocabulary, validation, and parsing (goldens, streamed and whole, text and ids)."""

from __future__ import annotations

import itertools
import json
import string
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_jsonl, check_text, parse_cases, read_text, render_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streams import outcome

from chatfmt import get_dialect
from chatfmt.decoding import TurnDecoder
from chatfmt.dialects.mistral import new_mistral_call_id
from chatfmt.errors import ValidationError
from chatfmt.events import Event, ParseResult, event_json, merge_deltas
from chatfmt.messages import Conversation, load_conversation
from chatfmt.segments import Control
from chatfmt.tokenizers.base import Tokenizer
from profiles import examples

mc = pytest.importorskip("mistral_common", reason="mistral-common (the reference) is not installed")

from mistral_common.protocol.instruct import messages as mm  # noqa: E402
from mistral_common.protocol.instruct import tool_calls as mt  # noqa: E402
from mistral_common.protocol.instruct.request import ChatCompletionRequest  # noqa: E402
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer  # noqa: E402

DATA = Path(mc.__file__).resolve().parent / "data"
FILES = {
    "v3": "mistral_instruct_tokenizer_240323.model.v3",
    "v7": "mistral_instruct_tokenizer_241114.model.v7",
    "tekken": "tekken_240911.json",  # Mistral Nemo: Tekken vocabulary, instruct v3 layout
}
# Each dialect with the vocabularies whose reference encoder uses its layout.
PAIRS = [("mistral-v3", "v3"), ("mistral-v3", "tekken"), ("mistral-v7", "v7")]
PRIMARY = {"mistral-v3": "v3", "mistral-v7": "v7"}


# ==== The reference and our tokenizers ====


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, tuple[Tokenizer, Any]]:
    from chatfmt.tokenizers import load_tokenizer
    from chatfmt.tokenizers.sentencepiece import SentencePieceTokenizer

    out: dict[str, tuple[Tokenizer, Any]] = {}
    for key, name in FILES.items():
        path = DATA / name
        ours = load_tokenizer(str(path)) if key == "tekken" else SentencePieceTokenizer(path, ())
        out[key] = (ours, MistralTokenizer.from_file(str(path)))
    return out


def to_request(conv: Conversation) -> ChatCompletionRequest:
    """The conversation as the reference's request types."""
    msgs: list[Any] = []
    for m in conv.messages:
        if m.role == "system":
            msgs.append(mm.SystemMessage(content=m.text))
        elif m.role == "user":
            msgs.append(mm.UserMessage(content=m.text))
        elif m.role == "assistant":
            calls = [
                mt.ToolCall(id=c.id, function=mt.FunctionCall(name=c.name, arguments=c.arguments))
                for c in m.tool_calls or ()
            ]
            msgs.append(mm.AssistantMessage(content=m.content, tool_calls=calls or None))
        else:
            msgs.append(mm.ToolMessage(content=m.text, tool_call_id=m.tool_call_id))
    tools = [
        mt.Tool(
            function=mt.Function(
                name=t.name,
                description=t.function.get("description") or "",
                parameters=t.function.get("parameters") or {},
            )
        )
        for t in conv.tools
    ]
    return ChatCompletionRequest(messages=msgs, tools=tools or None)


def reference_ids(reference: Any, conv: Conversation) -> list[int]:
    tokens: list[int] = reference.encode_chat_completion(to_request(conv)).tokens
    return tokens


# ==== Render goldens ====

RENDER = [(d, c) for d in PRIMARY for c in render_cases(d)]


@pytest.mark.parametrize(("dialect", "case"), RENDER, ids=[f"{d}/{c.name}" for d, c in RENDER])
def test_render_golden(
    dialect: str, case: Path, tokenizers: dict[str, tuple[Tokenizer, Any]]
) -> None:
    conv = load_conversation(json.loads(read_text(case / "conversation.json")))
    d = get_dialect(dialect)
    ours, reference = tokenizers[PRIMARY[dialect]]
    prompt = d.render(conv, ours)
    check_text(case / "expected.txt", prompt.text)
    check_json(case / "expected_ids.json", prompt.ids, compact=True)
    assert prompt.ids == reference_ids(reference, conv)
    assert d.render_text(conv) == prompt.text


@pytest.mark.parametrize("case", render_cases("mistral-v3"), ids=lambda c: c.name)
def test_v3_goldens_with_tekken(case: Path, tokenizers: dict[str, tuple[Tokenizer, Any]]) -> None:
    conv = load_conversation(json.loads(read_text(case / "conversation.json")))
    ours, reference = tokenizers["tekken"]
    assert get_dialect("mistral-v3").render(conv, ours).ids == reference_ids(reference, conv)


def test_goldens_exist() -> None:
    assert len(render_cases("mistral-v3")) >= 6 and len(render_cases("mistral-v7")) >= 6
    assert len(parse_cases("mistral-v3")) >= 10


# ==== Generated conversations: every id equals the reference's ====

TRAPS = [
    "[INST]", "[/INST]", "</s>", "<s>", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/TOOL_RESULTS]",
    "[SYSTEM_PROMPT]", "[TOOL_CONTENT]", "<unk>", "▁", " ", "  ", "\n\n", "\t", "", "22",
    "null", '{"a": [1, 2.5]}', ' [1, "x"] ', '"quoted"', "NaN", "{", "你好", "🙂", "e\u0301", "ß",
    "x" * 300,
]  # fmt: skip
TEXT = st.one_of(st.sampled_from(TRAPS), st.text(max_size=40))
NAME = st.from_regex(r"[a-zA-Z0-9_-]{1,12}", fullmatch=True)
CALL_ID = st.text(string.ascii_letters + string.digits, min_size=9, max_size=9)
VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), TEXT
)
ARGS = st.dictionaries(st.text(max_size=6), VALUE, max_size=3)


@st.composite
def conversations(draw: st.DrawFn, v7: bool) -> Conversation:
    msgs: list[dict[str, Any]] = []
    ids = iter(draw(st.lists(CALL_ID, min_size=40, max_size=40, unique=True)))
    names = draw(st.lists(NAME, min_size=1, max_size=3))
    msgs += [{"role": "system", "content": draw(TEXT)} for _ in range(draw(st.integers(0, 2)))]
    turns = draw(st.integers(1, 3))
    for turn in range(turns):
        msgs += [{"role": "user", "content": draw(TEXT)} for _ in range(draw(st.integers(1, 2)))]
        last = turn == turns - 1
        kind = draw(st.sampled_from(["none", "calls"] if last else ["none", "text", "calls"]))
        if kind != "none" and draw(st.booleans()):
            msgs.append({"role": "system", "content": draw(TEXT)})
        if kind == "text":
            msgs.append({"role": "assistant", "content": draw(TEXT.filter(bool))})
        elif kind == "calls":
            calls = [
                {
                    "id": next(ids),
                    "type": "function",
                    "function": {
                        "name": draw(st.sampled_from(names)),
                        "arguments": json.dumps(draw(ARGS), ensure_ascii=draw(st.booleans())),
                    },
                }
                for _ in range(draw(st.integers(1, 3)))
            ]
            content = draw(TEXT.filter(bool)) if v7 and draw(st.booleans()) else None
            msgs.append({"role": "assistant", "content": content, "tool_calls": calls})
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": draw(TEXT)})
            if not last and draw(st.booleans()):
                msgs.append({"role": "assistant", "content": draw(TEXT.filter(bool))})
    tools = [
        {
            "type": "function",
            "function": {
                "name": name,
                **({"description": draw(TEXT)} if draw(st.booleans()) else {}),
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
        for name in names
        if draw(st.booleans())
    ]
    return load_conversation({"messages": msgs, "tools": tools})


@pytest.mark.parametrize(("dialect", "vocab"), PAIRS, ids=[f"{d}-{v}" for d, v in PAIRS])
@settings(max_examples=examples(2.5), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_conversations_match_the_reference(
    dialect: str, vocab: str, tokenizers: dict[str, tuple[Tokenizer, Any]], data: st.DataObject
) -> None:
    conv = data.draw(conversations(dialect == "mistral-v7"), label="conversation")
    ours, reference = tokenizers[vocab]
    assert get_dialect(dialect).render(conv, ours).ids == reference_ids(reference, conv)


@pytest.mark.parametrize("vocab", ["v3", "tekken"])
@given(text=TEXT)
def test_text_encodes_as_the_reference(
    vocab: str, text: str, tokenizers: dict[str, tuple[Tokenizer, Any]]
) -> None:
    ours, reference = tokenizers[vocab]
    raw = reference.instruct_tokenizer.tokenizer
    assert ours.encode_text(text) == raw.encode(text, bos=False, eos=False)


def test_control_tokens_are_the_vocabularys(tokenizers: dict[str, tuple[Tokenizer, Any]]) -> None:
    for key, (ours, reference) in tokenizers.items():
        raw = reference.instruct_tokenizer.tokenizer
        for token in get_dialect("mistral-v7" if key == "v7" else "mistral-v3").controls:
            assert ours.control_id(token) == raw.get_special_token(token), (key, token)
        assert ours.vocab_size == raw.n_words
        assert ours.control_id("[INST]") not in ours.encode_text("[INST] </s>")


def test_new_call_ids_pass_the_reference_rule() -> None:
    for _ in range(50):
        cid = new_mistral_call_id()
        assert len(cid) == 9 and cid.isalnum() and cid.isascii()


# ==== Validation: what the reference refuses, refused with the rule and the fix ====

U = {"role": "user", "content": "hi"}
A = {"role": "assistant", "content": "hello"}
S = {"role": "system", "content": "sys"}


def _call(cid: str = "abcdefghi", name: str = "f") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


AC = {"role": "assistant", "content": None, "tool_calls": [_call()]}
R = {"role": "tool", "tool_call_id": "abcdefghi", "content": "1"}
INVALID = {
    "single_assistant": ([A], "first-message"),
    "tool_after_user": ([U, {**R, "tool_call_id": None}], "tool-pairing"),
    "system_after_assistant": ([U, A, S, U], "order"),
    "empty_assistant": ([U, {"role": "assistant", "content": ""}, U], "content"),
    "short_call_id": ([U, {**AC, "tool_calls": [_call("abc")]}, {**R, "tool_call_id": "abc"}],
                      "tool-call-id"),
    "bad_call_name": ([U, {**AC, "tool_calls": [_call(name="get weather")]}, R], "tool-name"),
    "assistant_after_calls": ([U, AC, A, U], "tool-pairing"),
    "content_and_calls_v3": ([U, {**AC, "content": "x"}, R], "content-and-calls"),
}  # fmt: skip


@pytest.mark.parametrize("case", INVALID, ids=list(INVALID))
def test_what_the_reference_refuses_is_refused(
    case: str, tokenizers: dict[str, tuple[Tokenizer, Any]]
) -> None:
    messages, rule = INVALID[case]
    with pytest.raises(ValidationError) as info:
        get_dialect("mistral-v3").validate(load_conversation(messages))
    assert info.value.rule == rule
    try:
        conv = load_conversation([{**m, "tool_call_id": m.get("tool_call_id") or "zzzzzzzzz"}
                                  if m["role"] == "tool" else m for m in messages])  # fmt: skip
        reference_ids(tokenizers["v3"][1], conv)
    except Exception:
        return
    pytest.fail(f"the reference accepts {case}")


def test_v7_allows_text_and_calls_and_v3_names_the_fix() -> None:
    conv = load_conversation([U, {**AC, "content": "Let me see."}, R])
    get_dialect("mistral-v7").validate(conv)
    with pytest.raises(ValidationError, match=r"drop the text.*mistral-v7"):
        get_dialect("mistral-v3").validate(conv)


def test_lenient_renders_what_strict_refuses() -> None:
    conv = load_conversation([U, {**AC, "tool_calls": [_call("x")]}, {**R, "tool_call_id": "x"}, A])
    text = get_dialect("mistral-v3").render_text(conv, strict=False)
    assert text.endswith(
        '"id": "x"}]</s>[TOOL_RESULTS]{"content": 1, "call_id": "x"}[/TOOL_RESULTS]hello</s>'
    )


# ==== Parsing ====


def _ids() -> itertools.count[int]:
    return itertools.count()


def _parse(
    dialect: str, output: str, chunk: int, *, length: bool
) -> tuple[list[Event], ParseResult]:
    counter = _ids()
    d = get_dialect(dialect)
    parser = d.stream_parser(id_factory=lambda: f"call{next(counter):05d}")  # type: ignore[call-arg]
    turn = TurnDecoder(d, parser=parser)
    events = [
        e for k in range(0, len(output), chunk) for e in turn.feed_text(output[k : k + chunk])
    ]
    events += turn.finish("length" if length else "stop")
    return events, turn.result()


PARSE = parse_cases("mistral-v3")


@pytest.mark.parametrize("case", PARSE, ids=[c.name for c in PARSE])
def test_parse_golden(case: Path) -> None:
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    events, streamed = _parse("mistral-v3", output, 3, length=length)
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in merge_deltas(events)])
    message = streamed.to_openai()
    check_json(case / "expected_message.json", message)
    for dialect in ("mistral-v3", "mistral-v7"):
        for size in (1, max(len(output), 1)):
            _, other = _parse(dialect, output, size, length=length)
            assert other.to_openai() == message


def test_malformed_call_json_degrades_to_text_with_a_warning() -> None:
    result = get_dialect("mistral-v3").parse('[TOOL_CALLS] [{"name" "f"}]')
    assert result.tool_calls == [] and result.finish_reason == "stop"
    assert result.content == '[TOOL_CALLS] [{"name" "f"}]'
    assert "malformed tool call JSON" in result.warnings[0]


OUTPUTS = [read_text(c / "output.txt") for c in PARSE] + [
    'Sure.[TOOL_CALLS][{"name": "a", "arguments": {"s": "é 🙂 [INST] 你好"}}, {"name": "b", '
    '"arguments": {"n": [1, 2.5, null, true]}}]</s>',
]


@pytest.mark.parametrize("vocab", ["v3", "tekken"])
@settings(max_examples=examples(0.5))
@given(data=st.data())
def test_stream_equals_whole_for_text_chunks_and_ids(
    vocab: str, tokenizers: dict[str, tuple[Tokenizer, Any]], data: st.DataObject
) -> None:
    from chatfmt.decoding import split_controls

    output = data.draw(st.sampled_from(OUTPUTS), label="output")
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(output)), max_size=8), label="cuts")))
    dialect = get_dialect("mistral-v3")
    whole = TurnDecoder(dialect)
    events = whole.feed_text(output) + whole.finish()
    expected = outcome(events, whole.result())
    parts = [output[a:b] for a, b in itertools.pairwise([0, *cuts, len(output)]) if b > a]
    streamed = TurnDecoder(dialect)
    events = [e for p in parts for e in streamed.feed_text(p)] + streamed.finish()
    assert outcome(events, streamed.result()) == expected
    ours, _ = tokenizers[vocab]
    ids: list[int] = []
    for piece in split_controls(output, dialect.text_controls):
        ids += (
            [ours.control_id(piece.token)]
            if isinstance(piece, Control)
            else ours.encode_text(piece)
        )
    by_id = TurnDecoder(dialect, ours)
    events = [e for i in ids for e in by_id.feed_ids([i])] + by_id.finish()
    assert outcome(events, by_id.result()) == expected


def test_forced_call_prefix_renders_and_parses_as_the_call(
    tokenizers: dict[str, tuple[Tokenizer, Any]],
) -> None:
    dialect = get_dialect("mistral-v3")
    ours, _ = tokenizers["v3"]
    prefix = dialect.forced_call_prefix("get_time")
    conv = load_conversation(
        [U, {**AC, "tool_calls": [_call(name="get_time")]}, {**R, "content": "x"}]
    )
    full = dialect.render(conv, ours).ids
    # As the server does: control segments stay controls, text segments become text pieces.
    pieces = [p if isinstance(p, Control) else p.text for p in prefix]
    opening = ours.encode_pieces(pieces)
    start = full.index(ours.control_id("[TOOL_CALLS]"))
    assert full[start : start + len(opening) - 1] == opening[:-1]  # the last id may merge on
    turn = TurnDecoder(dialect)
    turn.prefill(pieces)
    turn.feed_text('{"tz": "UTC"}}]</s>')
    turn.finish()
    [call] = turn.result().tool_calls
    assert (call.name, call.arguments, turn.result().finish_reason) == (
        "get_time",
        '{"tz": "UTC"}',
        "tool_calls",
    )
    assert dialect.forced_call_prefix(None) == (prefix[0],)


def test_a_result_too_deep_to_write_back_as_json_is_sent_as_text() -> None:
    nested = "[" * 995 + "]" * 995
    conv = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [_call()]},
        {"role": "tool", "content": nested, "tool_call_id": "abcdefghi"},
    ]
    text = get_dialect("mistral-v3").render_text(conv)
    assert json.dumps({"content": nested, "call_id": "abcdefghi"}) in text
