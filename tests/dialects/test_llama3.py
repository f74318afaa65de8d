"""The llama3 dialect against Meta's reference encoder (``llama-models``: ``ChatFormat`` and the
``tokenizer.model`` it ships), and its parser streamed against whole output."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_jsonl, check_text, parse_cases, read_text, render_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streams import run_turn

from profiles import examples

pytest.importorskip(
    "llama_models", reason="llama-models (the Llama 3 reference encoder) is not installed"
)

from llama_models.datatypes import RawMessage, StopReason
from llama_models.datatypes import ToolCall as RefToolCall
from llama_models.llama3.chat_format import ChatFormat
from llama_models.llama3.tokenizer import Tokenizer as RefTokenizer

from chatfmt import get_dialect
from chatfmt.decoding import ControlSplitter, TurnDecoder
from chatfmt.dialects.llama3 import Llama3
from chatfmt.errors import TokenizerError, ValidationError
from chatfmt.events import Event, ParseResult, event_json, merge_deltas
from chatfmt.messages import Conversation, load_conversation
from chatfmt.segments import Control, Text
from chatfmt.tokenizers.base import Piece, Tokenizer
from chatfmt.tokenizers.tiktoken import llama3, llama3_controls, llama3_from_file

TODAY = "21 September 2024"
DIALECT = Llama3(today=TODAY)
CONTROLS = list(llama3_controls())
HEADER_TEXT = "<|start_header_id|>assistant<|end_header_id|>\n\n"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return llama3()


@pytest.fixture(scope="module")
def ref() -> ChatFormat:
    return ChatFormat(RefTokenizer.get_instance())


# ==== The reference's input: chatfmt messages as llama-models' RawMessage ====

# Meta's JSON tool-calling prompt (llama_models/llama3_1/prompt_format.md), written here from the
# document; test_tool_prompt_matches_the_documented_example checks it against that file.
REF_SYSTEM = "Environment: ipython\n\nCutting Knowledge Date: December 2023\nToday Date: {}\n"
REF_TOOLS = (
    "Answer the user's question by making use of the following functions if needed.\n"
    "If none of the function can be used, please say so.\n"
    "Here is a list of functions in JSON format:\n{}\nReturn function calls in JSON format."
)


def reference_messages(conv: Conversation) -> list[RawMessage]:
    msgs = list(conv.messages)
    out: list[RawMessage] = []
    if conv.tools:
        system = REF_SYSTEM.format(TODAY)
        if msgs and msgs[0].role == "system":
            system += "\n" + msgs.pop(0).text + "\n"
        out.append(RawMessage(role="system", content=system))
        listing = "".join(
            json.dumps({"type": "function", "function": t.function}, indent=4, ensure_ascii=False)
            + "\n"
            for t in conv.tools
        )
        out.append(RawMessage(role="user", content=REF_TOOLS.format(listing)))
    for m in msgs:
        calls = [
            RefToolCall(call_id=c.id, tool_name=c.name, arguments=c.arguments_dict())
            for c in m.tool_calls or ()
        ]
        role = "tool" if m.role in ("tool", "observation") else m.role
        stop = StopReason.end_of_message if calls else StopReason.end_of_turn
        out.append(RawMessage(role=role, content=m.text, tool_calls=calls, stop_reason=stop))
    return out


def reference_ids(ref: ChatFormat, conv: Conversation) -> list[int]:
    """Ids of the reference encoder (which always ends with the assistant header)."""
    tokens: list[int] = ref.encode_dialog_prompt(reference_messages(conv)).tokens
    return tokens


def assert_matches_reference(
    conv: Conversation, tok: Tokenizer, ref: ChatFormat, *, gen: bool = True
) -> list[int]:
    ids = DIALECT.render(conv, tok, add_generation_prompt=gen).ids
    header = [] if gen else DIALECT.render([{"role": "user"}], tok, strict=False).ids[-4:]
    assert ids + header == reference_ids(ref, conv)
    return ids


# ==== Render goldens ====


@pytest.mark.parametrize("case", render_cases("llama3"), ids=lambda p: p.name)
def test_golden(case: Path, tok: Tokenizer, ref: ChatFormat) -> None:
    data = json.loads(read_text(case / "conversation.json"))
    conv = load_conversation(data)
    gen = data.get("add_generation_prompt", True)
    check_text(case / "expected.txt", DIALECT.render_text(conv, add_generation_prompt=gen))
    ids = assert_matches_reference(conv, tok, ref, gen=gen)
    check_json(case / "expected_ids.json", ids, compact=True)


def test_golden_cases_exist() -> None:
    assert len(render_cases("llama3")) >= 6 and len(parse_cases("llama3")) >= 10


# ==== Parse goldens (as tests/dialects/test_parse_golden.py, for llama3) ====


def parse_text(output: str, chunk: int, *, length: bool) -> tuple[list[Event], ParseResult]:
    counter = itertools.count()
    parser = DIALECT.stream_parser(id_factory=lambda: f"call_{next(counter)}")
    turn = TurnDecoder(DIALECT, parser=parser)
    events = [
        e for k in range(0, len(output), chunk) for e in turn.feed_text(output[k : k + chunk])
    ]
    events += turn.finish("length" if length else "stop")
    return events, turn.result()


@pytest.mark.parametrize("case", parse_cases("llama3"), ids=lambda p: p.name)
def test_parse_golden(case: Path) -> None:
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    events, streamed = parse_text(output, 3, length=length)
    _, whole = parse_text(output, max(len(output), 1), length=length)
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in merge_deltas(events)])
    check_json(case / "expected_message.json", streamed.to_openai())
    assert whole.to_openai() == streamed.to_openai()


# ==== The tokenizer ====


def test_tokenizer_matches_the_reference(tok: Tokenizer) -> None:
    reference = RefTokenizer.get_instance()
    assert dict(tok.controls) == reference.special_tokens
    assert tok.vocab_size == reference.n_words == 128256
    assert tok.control_id("<|eot_id|>") == 128009 and tok.control_id("<|python_tag|>") == 128010
    # Meta's encoder cuts runs of over 25,000 (non-)whitespace characters; so does ours.
    for text in ("x" * 30_001 + " " * 26_000 + "é1234", "ab " * 9_000, "<|eot_id|> 12345"):
        assert tok.encode_text(text) == reference.encode(text, bos=False, eos=False)


def test_tokenizer_file_checks(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.model"
    bad.write_text("IQ== 0\n", encoding="utf-8")
    with pytest.raises(TokenizerError, match="128000"):
        llama3_from_file(bad)


# ==== Generated conversations against the reference ====

TRAPS = [*CONTROLS[:12], "<|eot", "_id|>", "<|", "|>", "\n\n", "\n", " ", "\r\n", "é", "e\u0301",
         "🙂", "你好", "{", "}", '"', "\\", "12345", "ipython", "assistant"]  # fmt: skip
short = st.text(max_size=12)
trap_text = st.lists(st.sampled_from(TRAPS) | short, max_size=8).map("".join)
long_text = st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=8), st.integers(50, 400))
any_text = st.just("") | short | trap_text | long_text
primitive = (
    st.none()
    | st.booleans()
    | st.integers()
    | any_text
    | st.floats(allow_nan=False, allow_infinity=False)
)
value = primitive | st.lists(primitive, max_size=3) | st.dictionaries(short, primitive, max_size=3)
arguments = st.dictionaries(short, value, max_size=4)
builtin_call = st.one_of(
    st.tuples(
        st.sampled_from(["brave_search", "wolfram_alpha", "photogen"]),
        st.fixed_dictionaries({"query": any_text.map(lambda t: t.replace('"', "'"))}),
    ),
    st.tuples(st.just("code_interpreter"), st.fixed_dictionaries({"code": any_text})),
)
BUILTINS = ("brave_search", "wolfram_alpha", "photogen", "code_interpreter")
custom_name = (short | trap_text).filter(lambda n: bool(n) and n not in BUILTINS)
custom_calls = st.lists(st.tuples(custom_name, arguments), min_size=1, max_size=3)
tools = st.lists(
    st.builds(
        lambda n, d: {"type": "function", "function": {"name": n, "description": d}},
        custom_name,
        any_text,
    ),
    max_size=2,
)


@st.composite
def conversations(draw: st.DrawFn) -> Conversation:
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(any_text)})
    counter = itertools.count()
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["user", "assistant", "calls", "builtin", "system"]))
        if kind in ("calls", "builtin"):
            drawn = [draw(builtin_call)] if kind == "builtin" else draw(custom_calls)
            calls = [{"id": f"c{next(counter)}", "name": n, "arguments": a} for n, a in drawn]
            content = draw(st.none() | any_text)
            msgs.append({"role": "assistant", "content": content, "tool_calls": calls})
            for c in calls:
                role = draw(st.sampled_from(["tool", "observation"]))
                msgs.append({"role": role, "tool_call_id": c["id"], "content": draw(any_text)})
        else:
            msgs.append({"role": kind, "content": draw(st.none() | any_text)})
    return Conversation.model_validate({"messages": msgs, "tools": draw(tools)})


@settings(max_examples=examples(2.5), suppress_health_check=[HealthCheck.too_slow])
@given(conv=conversations(), gen=st.booleans())
def test_generated_conversations_match_the_reference(
    conv: Conversation, gen: bool, tok: Tokenizer, ref: ChatFormat
) -> None:
    ids = assert_matches_reference(conv, tok, ref, gen=gen)
    # Only the layout makes control ids (3 a turn, <|python_tag|> before code): typed control
    # strings stay text.
    msgs = conv.messages
    turns = len(msgs) - (1 if conv.tools and msgs[0].role == "system" else 0)
    turns += 2 if conv.tools else 0
    tags = sum(1 for m in msgs if m.tool_calls and m.tool_calls[0].name == "code_interpreter")
    expected = 1 + 3 * turns + tags + (2 if gen else 0)
    assert sum(1 for i in ids if i >= 128000) == expected


def test_tool_prompt_matches_the_documented_example() -> None:
    """Meta's own document of the JSON tool prompt (shipped in llama-models) renders as ours."""
    import llama_models

    doc = (Path(llama_models.__file__).parent / "llama3_1" / "prompt_format.md").read_text()
    section = doc[doc.index("## JSON based tool calling") :]
    start = section.index("```\n") + 4
    block = section[start : section.index("\n```", start)]
    tool = {
        "name": "trending_songs",
        "description": "Returns the trending songs on a Music site",
        "parameters": {
            "type": "object",
            "properties": [
                {"n": {"type": "object", "description": "The number of songs to return"}},
                {"genre": {"type": "object", "description": "The genre of the songs to return"}},
            ],
            "required": ["n"],
        },
    }
    conv = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Use tools to get latest trending songs"},
    ]
    text = DIALECT.render_text(conv, tools=[tool])
    # json.dumps(indent=4) breaks the one-item list that the document writes on one line.
    assert re.sub(r'\[\s+"n"\s+\]', '["n"]', text) == block


# ==== Output: streamed, chunked and by id agree ====

OUTPUT_PARTS = [
    '{"name": "get_weather", "parameters": {"city": "Par<|eot"}}',
    '{"type": "function", "name": "f", "parameters": {"x": [1, 2.5, null, true]}}',
    '<|python_tag|>brave_search.call(query="gold <|eom")',
    "<|python_tag|>print('hi')\n",
    '<|python_tag|>{"name": "g", "parameters": {}}',
    '{"name": "h", "parameters": {"cut": "x',
    '```json\n{"name": "k", "parameters": {}}\n```',
]
OUT_TRAPS = [
    "<|eot",
    "_id|>",
    "<|python",
    "{",
    '{"name"',
    "```",
    "\n",
    " ",
    "é",
    "你好",
    "🙂",
    "call(",
]


def outputs() -> st.SearchStrategy[list[Piece]]:
    splitter = ControlSplitter(CONTROLS[:12])

    def split(part: str) -> list[Piece]:
        return [*splitter.feed(part), *splitter.flush()]

    text = (st.sampled_from(OUT_TRAPS) | st.text('abc {}[]":,\n<|>_é🙂', max_size=6)).map(
        lambda t: [t]
    )
    control = st.sampled_from(["<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|end_of_text|>"])
    piece = text | st.sampled_from(OUTPUT_PARTS).map(split) | control.map(lambda c: [Control(c)])
    return st.lists(piece, max_size=12).map(
        lambda runs: [p for run in runs for p in run if p != ""]
    )


def as_text(pieces: list[Piece]) -> str:
    return "".join(p.token if isinstance(p, Control) else p for p in pieces)


def run(tokenizer: Tokenizer | None, feed: list[Any]) -> Any:
    return run_turn(get_dialect("llama3"), tokenizer, feed)


@given(pieces=outputs(), cuts=st.lists(st.integers(0, 10_000), max_size=10))
def test_stream_equals_whole(pieces: list[Piece], cuts: list[int], tok: Tokenizer) -> None:
    text = as_text(pieces)
    # Text with a whole control string written in it cannot be told from the token: skip those.
    joined = "".join(p for p in pieces if isinstance(p, str))
    if any(c in joined for c in CONTROLS[:12]):
        return
    points = sorted({c % (len(text) + 1) for c in cuts})
    chunks = [text[a:b] for a, b in itertools.pairwise([0, *points, len(text)]) if b > a]
    whole = run(None, [text])
    assert run(None, chunks) == whole
    assert run(tok, tok.encode_pieces(pieces)) == whole


def test_typed_eot_in_output_ids_stays_text(tok: Tokenizer) -> None:
    ids = [*tok.encode_text("say <|eot_id|> now"), tok.control_id("<|eot_id|>")]
    turn = TurnDecoder(get_dialect("llama3"), tok)
    for i in ids:
        turn.feed_ids([i])
    turn.finish()
    assert turn.result().content == "say <|eot_id|> now" and turn.stopped_by == "control"


def test_python_tag_calls_parse_by_id(tok: Tokenizer) -> None:
    tag = tok.control_id("<|python_tag|>")
    eom = tok.control_id("<|eom_id|>")
    for body, name, args in [
        ('brave_search.call(query="gold price")', "brave_search", {"query": "gold price"}),
        ('{"name": "f", "parameters": {"a": "é"}}', "f", {"a": "é"}),
        (
            "import os\nprint(os.getcwd())",
            "code_interpreter",
            {"code": "import os\nprint(os.getcwd())"},
        ),
    ]:
        result = DIALECT.parse([tag, *tok.encode_text(body), eom], tok)
        assert [(c.name, c.arguments_dict()) for c in result.tool_calls] == [(name, args)]
        assert result.finish_reason == "tool_calls" and not result.content


def test_malformed_json_degrades_to_text_with_a_warning() -> None:
    out = '{"name": "f", "parameters": {"a": 1]}}'
    result = DIALECT.parse(out)
    assert result.content == out and result.tool_calls == []
    assert result.finish_reason == "stop" and "malformed tool call JSON" in result.warnings[0]


def test_parsed_call_renders_back_as_the_reference_would(tok: Tokenizer, ref: ChatFormat) -> None:
    reply = DIALECT.parse('<|python_tag|>{"name": "f", "parameters": {"city": "Zürich"}}<|eom_id|>')
    conv = Conversation.model_validate(
        {"messages": [{"role": "user", "content": "go"}, *reply.messages]}
    )
    ids = DIALECT.render(conv, tok, strict=False).ids
    assert ids == reference_ids(ref, conv)
    assert '"name": "f", "parameters": {"city": "Z\\u00fcrich"}}<|eom_id|>' in DIALECT.render_text(
        conv, strict=False
    )


# ==== Rules, layout and forcing ====


def test_validation_rules() -> None:
    def fails(rule: str, messages: list[dict[str, Any]]) -> None:
        with pytest.raises(ValidationError) as info:
            DIALECT.validate(Conversation.model_validate({"messages": messages}))
        assert info.value.rule == rule

    user = {"role": "user", "content": "hi"}
    result = {"role": "tool", "tool_call_id": "a"}
    for name, args in [("brave_search", {"q": "x"}), ("photogen", {"query": 'a "b"'})]:
        call = {"id": "a", "name": name, "arguments": args}
        fails("builtin-tool-call", [user, {"role": "assistant", "tool_calls": [call]}, result])
    fails("metadata", [{"role": "user", "content": "hi", "metadata": "x"}])
    fails("tool-pairing", [{"role": "user", "content": "hi"}, {"role": "tool", "content": "r"}])
    fails("empty", [])


def test_blocks_and_separate_text_runs() -> None:
    conv = Conversation.model_validate({"messages": [{"role": "user", "content": "\nhi"}]})
    blocks = DIALECT.render_blocks(conv)
    assert blocks[0].segments == (Control("<|begin_of_text|>"),)
    # The header's "\n\n" and the content are encoded apart, as the reference does.
    assert blocks[1].segments[3:5] == (Text("\n\n"), Text("\nhi")) and blocks[1].messages == (0,)
    assert blocks[-1].text == HEADER_TEXT


def test_forced_call_prefix_parses_as_a_call() -> None:
    turn = TurnDecoder(DIALECT)
    prefix = DIALECT.forced_call_prefix("get_weather")
    turn.prefill([s.text for s in prefix if isinstance(s, Text)])
    turn.feed_text('{"city": "Paris"}}<|eom_id|>')
    turn.finish()
    calls = turn.result().tool_calls
    assert [(c.name, c.arguments_dict()) for c in calls] == [("get_weather", {"city": "Paris"})]


def test_registered() -> None:
    assert isinstance(get_dialect("llama3"), Llama3)
    assert get_dialect("llama3").stop_controls == ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")


@pytest.mark.parametrize(
    "body",
    ['brave_search.call(q="x")', "brave_search.call(query=1)", "photogen.call()",
     'brave_search.call(query="x", n=2)', "brave_search.call(query='say \"hi\"')"],
)  # fmt: skip
def test_built_in_calls_history_could_not_render_are_text(body: str) -> None:
    llama = get_dialect("llama3")
    result = llama.parse(f"<|python_tag|>{body}<|eom_id|>")
    assert result.tool_calls == [] and result.content == f"<|python_tag|>{body}"
    assert "kept as text" in result.warnings[-1]
    history = [{"role": "user", "content": "q"}, result.message.to_openai()]
    llama.render_text(history)  # what the parser returns always renders again
