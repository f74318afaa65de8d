"""The decode pipeline: one turn parsed whole, streamed as text chunks, and streamed as ids one
by one gives the same message, for every dialect and tokenizer.

The generated outputs put control-token names and marker prefixes inside ordinary words
(``isopropyl`` holds ChatGLM3's ``sop``), split multi-byte characters across ids, and mix in
real calls, stops and half-written tags: the class of the ``chatfmt parse --stream`` data loss.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatfmt import get_dialect
from chatfmt.decoding import ControlSplitter, TurnDecoder, held_suffix, split_controls
from chatfmt.dialects.base import Dialect
from chatfmt.events import (
    Event,
    Finish,
    ParseResult,
    ToolCallEnd,
    ToolCallStart,
    merge_deltas,
)
from chatfmt.segments import Control
from chatfmt.tokenizers.base import Piece, Tokenizer

# ==== Generated outputs ====

TRAPS = [
    "isopropyl", "sop", "eop", "gMASKed", "[gMASK", "[gMASK]", "[MASK]", "<|use", "<|user",
    "<|assistant", "<|observ", "<tool_", "</tool_c", "<tool_call", "im_start", "<|im_st",
    "<|im_start|", "<|endof", "``", "```", "```json\n", '{"name"', "tool_call(", "interpreter",
    " ", "\n", "\n\n", "é", "你好", "🙂", "ß",
]  # fmt: skip
ALPHABET = "abcxyz XYZ019{}[]()<>|/\"'`:,_=-\n\t\r" + "é你🙂"

CHATML_PARTS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "sop <|im_st"}}\n</tool_call>',
    '{"name": "f", "arguments": {"x": [1, 2.5, null, true]}}',
    '```json\n{"name": "g", "arguments": {"s": "sop\\n🙂"}}\n```',
    '{"name": "f", "arguments": "{\\"a\\": 1}"}',
    '<tool_call>\n{"name": "h", "arguments": {"cut": "sop',
]  # fmt: skip
CHATML_CONTROLS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"]
GLM_CONTROLS = ["<|assistant|>", "<|user|>", "<|observation|>", "<|system|>"]
GLM_PARTS = [
    "<|assistant|>", "<|user|>", "<|observation|>", "<|system|>",
    '<|assistant|>get_weather\n```python\ntool_call(city="isopropyl", n=3)\n```',
    "<|assistant|>interpreter\n```python\nprint('sop im_start')\n```",
    "<|assistant|>bad name\n```python\ntool_call(x=__import__('os'))\n```",
    "<|assistant|>\n isopropyl alcohol ",
]  # fmt: skip


def outputs(controls: list[str], parts: list[str]) -> st.SearchStrategy[list[Piece]]:
    """Model output as the model produced it: the family's ``controls`` as tokens, and text
    that may hold control *names* and prefixes but never a whole control string (text cannot
    tell that one apart from the token). The list is the test's own, not the dialect's."""
    splitter = ControlSplitter(controls)

    def split(part: str) -> list[Piece]:
        return [*splitter.feed(part), *splitter.flush()]

    text = st.one_of(st.sampled_from(TRAPS), st.text(ALPHABET, max_size=6)).map(lambda t: [t])
    piece = st.one_of(text, st.sampled_from(parts).map(split))
    return (
        st.lists(piece, max_size=16)
        .map(lambda runs: merge_text([p for run in runs for p in run]))
        .filter(lambda ps: not any(_holds_control(controls, p) for p in ps))
    )


def merge_text(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        elif p != "":
            out.append(p)
    return out


def _holds_control(controls: list[str], piece: Piece) -> bool:
    return isinstance(piece, str) and any(c in piece for c in controls)


CUTS = st.lists(st.integers(0, 10_000), max_size=12)

# ==== The three ways in ====


def as_text(pieces: list[Piece]) -> str:
    return "".join(p.token if isinstance(p, Control) else p for p in pieces)


def as_ids(tok: Tokenizer, pieces: list[Piece]) -> list[int]:
    """The ids the model produced: control ids where the vocabulary has the token, and each
    run of text encoded with specials off (one call per run, as a model's output decodes)."""
    ids: list[int] = []
    for p in pieces:
        if isinstance(p, Control) and tok.has_control(p.token):
            ids.append(tok.control_id(p.token))
        else:
            ids.extend(tok.encode_text(p.token if isinstance(p, Control) else p))
    return ids


def chunks(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def run_text(dialect: Dialect, parts: list[str]) -> tuple[list[Event], ParseResult]:
    turn = TurnDecoder(dialect)
    events = [e for part in parts for e in turn.feed_text(part)]
    events += turn.finish()
    return events, turn.result()


def run_ids(dialect: Dialect, tok: Tokenizer, ids: list[int]) -> tuple[list[Event], ParseResult]:
    turn = TurnDecoder(dialect, tok)
    events = [e for i in ids for e in turn.feed_ids([i])]
    events += turn.finish()
    return events, turn.result()


def outcome(events: list[Event], result: ParseResult) -> Any:
    """What must agree: the merged events and the result, call ids aside (they are random)."""
    evs = [
        ToolCallStart(e.index, "", e.name) if isinstance(e, ToolCallStart) else e
        for e in merge_deltas(events)
    ]
    msgs = []
    for m in result.messages:
        d = m.to_openai()
        for c in d.get("tool_calls") or ():
            c["id"] = ""
        msgs.append(json.dumps(d, sort_keys=True))
    return evs, msgs, result.finish_reason, result.warnings


# ==== Every dialect, every tokenizer ====

GLM4_CONTROLS = ["<|assistant|>", "<|user|>", "<|observation|>", "<|system|>", "<|endoftext|>"]
GLM4_PARTS = [
    "<|assistant|>", "<|user|>", "<|observation|>", "<|endoftext|>",
    '<|assistant|>get_weather\n{"city": "isopropyl <sop>", "n": 3}',
    "<|assistant|>search\n[1, 2]",
    '<|assistant|>bad name\n{"x": 1}',
    "<|assistant|>\n isopropyl alcohol ",
]  # fmt: skip
GEMMA_CONTROLS = ["<start_of_turn>", "<end_of_turn>", "<eos>", "<bos>"]
GEMMA_PARTS = ["<end_of_turn>", "<eos>", "<start_of_turn>", "Paris.\n\n<h1>Title</h1>  \t"]
LLAMA3_CONTROLS = ["<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|end_of_text|>"]
LLAMA3_PARTS = [
    '{"name": "get_weather", "parameters": {"city": "isopropyl <|eot"}}',
    '<|python_tag|>brave_search.call(query="gold <|eom")',
    '<|python_tag|>{"name": "g", "parameters": {}}',
    '{"name": "h", "parameters": {"cut": "x',
    "<|eot_id|>", "<|eom_id|>",
]  # fmt: skip
MISTRAL_CONTROLS = ["[TOOL_CALLS]", "</s>", "[INST]", "[/INST]"]
MISTRAL_PARTS = [
    '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "isopropyl [INST"}}]',
    '[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": [1]}}]',
    '[TOOL_CALLS][{"name": "h", "arguments": {"cut": "x',
    "[TOOL_CALLS]not json", "</s>",
]  # fmt: skip
MISTRAL11_CONTROLS = ["[TOOL_CALLS]", "[CALL_ID]", "[ARGS]", "</s>", "[INST]"]
MISTRAL11_PARTS = [
    '[TOOL_CALLS]get_weather[ARGS]{"city": "isopropyl [INST"}',
    '[TOOL_CALLS]a[CALL_ID]abcdefghi[ARGS]{}[TOOL_CALLS]b[ARGS]{"x": [1]}',
    '[TOOL_CALLS]h[ARGS]{"cut": "x', "[TOOL_CALLS]bad name[ARGS]{}", "[TOOL_CALLS]f[ARGS]not json",
    "</s>",
]  # fmt: skip
HARMONY_CONTROLS = [
    "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>",
]  # fmt: skip
HARMONY_PARTS = [
    "<|channel|>analysis<|message|>isopropyl <|im_st<|end|>",
    "<|start|>assistant<|channel|>final<|message|>Paris.",
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"c": "sop <|end"}',
    '<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{"x": [1',
    "<|return|>", "<|call|>", "<|end|>",
]  # fmt: skip
CHATML = (CHATML_CONTROLS, CHATML_PARTS)
THINK_CONTROLS = [*CHATML_CONTROLS, "<think>", "</think>"]
THINK_PARTS = [
    *CHATML_PARTS,
    "<think>", "</think>", "\n\n", "<think>\nhm, <tool_call> isopropyl\n\n", "\n</think>\n\n",
    "<thin", "</thi",
]  # fmt: skip
GLM4_FAMILY = (GLM4_CONTROLS, GLM4_PARTS)
GLM = (GLM_CONTROLS, GLM_PARTS)
CASES = [
    ("chatml", "cl100k", CHATML),
    ("chatml", "qwen", CHATML),
    ("qwen2.5", "qwen", CHATML),
    ("qwen2.5", "qwen_json", CHATML),
    ("chatglm3", "small_glm", GLM),
    ("chatglm3", "glm", GLM),
    ("glm4", "glm4_standin", GLM4_FAMILY),
    ("gemma3", "gemma", (GEMMA_CONTROLS, GEMMA_PARTS)),
    ("llama3", "llama3_tok", (LLAMA3_CONTROLS, LLAMA3_PARTS)),
    ("mistral-v3", "mistral_v3_tok", (MISTRAL_CONTROLS, MISTRAL_PARTS)),
    ("mistral-v11", "mistral_v11_tok", (MISTRAL11_CONTROLS, MISTRAL11_PARTS)),
    ("harmony", "harmony_tok", (HARMONY_CONTROLS, HARMONY_PARTS)),
    ("qwen3", "qwen3_tok", (THINK_CONTROLS, THINK_PARTS)),
    ("qwq", "qwen3_tok", (THINK_CONTROLS, THINK_PARTS)),
    ("qwq-thinking", "qwen3_tok", (THINK_CONTROLS, THINK_PARTS)),
]


@pytest.fixture(scope="module", params=CASES, ids=[f"{d}-{t}" for d, t, _ in CASES])
def case(request: pytest.FixtureRequest) -> tuple[Dialect, Tokenizer, tuple[list[str], list[str]]]:
    name, tok_fixture, family = request.param
    if tok_fixture == "qwen_json":
        from chatfmt.tokenizers import load_tokenizer

        tok = load_tokenizer(str(request.getfixturevalue("qwen_tokenizer_json")))
    else:
        tok = request.getfixturevalue(tok_fixture)
    if name == "qwq-thinking":  # the prompt opened the thought: the reply starts inside it
        return get_dialect("qwq").with_reasoning(enabled=True), tok, family
    return get_dialect(name), tok, family


def assert_whole_chunks_ids_agree(
    dialect: Dialect, tok: Tokenizer, pieces: list[Any], cuts: list[int]
) -> tuple[list[Event], ParseResult]:
    """The output of ``pieces`` parses the same whole, in the chunks ``cuts`` makes, and as
    ids of ``tok`` one at a time; the whole parse is returned."""
    text = as_text(pieces)
    whole = run_text(dialect, [text])
    assert outcome(*run_text(dialect, chunks(text, cuts))) == outcome(*whole)
    assert outcome(*run_ids(dialect, tok, as_ids(tok, pieces))) == outcome(*whole)
    return whole


@given(data=st.data())
def test_whole_text_chunks_and_ids_agree(
    case: tuple[Dialect, Tokenizer, tuple[list[str], list[str]]], data: st.DataObject
) -> None:
    dialect, tok, (controls, parts) = case
    pieces = data.draw(outputs(controls, parts), label="pieces")
    cuts = data.draw(CUTS, label="cuts")
    text = as_text(pieces)
    whole = assert_whole_chunks_ids_agree(dialect, tok, pieces, cuts)
    parsed = dialect.parse(text)
    assert outcome([], parsed)[1:] == outcome(*whole)[1:]


@pytest.mark.parametrize("name", ["chatml", "qwen2.5", "chatglm3"])
def test_control_names_inside_words_are_kept(name: str) -> None:
    text = "The isopropyl alcohol: gMASKed sop eop <|use im_start <tool_ [MASK]"
    dialect = get_dialect(name)
    for parts in ([text], list(text)):
        _, result = run_text(dialect, parts)
        assert result.content == text.strip()


# ==== Stops ====


def test_stop_string_cuts_an_open_call_and_finishes_with_stop() -> None:
    qwen = get_dialect("qwen2.5")
    text = 'Sure.\n<tool_call>\n{"name": "f", "arguments": {"q": "a STOP b"}}\n</tool_call>'
    for parts in ([text], list(text)):
        turn = TurnDecoder(qwen, stop_strings=["STOP"])
        events = [e for p in parts for e in turn.feed_text(p)]
        events += turn.finish()
        result = turn.result()
        assert turn.stopped_by == "string"
        assert result.content == "Sure."
        assert result.tool_calls == []
        assert result.finish_reason == "stop"
        assert events[-1].reason == "stop"  # type: ignore[union-attr]
        # The call the stop string cut is incomplete, with what the model wrote before it.
        assert [(c.name, c.arguments) for c in result.incomplete_calls] == [("f", '{"q": "a ')]
        assert ToolCallEnd(0, complete=False) in events
        assert "not runnable" in result.warnings[-1]


def test_stop_string_after_a_complete_call_keeps_it() -> None:
    qwen = get_dialect("qwen2.5")
    text = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\nSTOP and more'
    turn = TurnDecoder(qwen, stop_strings=["STOP"])
    turn.feed_text(text)
    events = turn.finish()
    assert [c.name for c in turn.result().tool_calls] == ["f"]
    assert turn.result().finish_reason == "tool_calls"
    assert turn.stopped_by == "string" and events == []  # the stop already finished the turn


def test_stop_id_ends_the_turn_and_later_input_is_ignored(qwen: Tokenizer) -> None:
    dialect = get_dialect("qwen2.5")
    ids = [*qwen.encode_text("Hi"), qwen.control_id("<|im_end|>"), *qwen.encode_text("more")]
    turn = TurnDecoder(dialect, qwen)
    turn.feed_ids(ids)
    assert turn.done and turn.stopped_by == "control"
    assert turn.feed_ids(qwen.encode_text("x")) == [] and turn.finish() == []
    assert turn.result().content == "Hi"


def test_a_stop_token_releases_text_held_for_stop_strings(qwen: Tokenizer) -> None:
    chatml = get_dialect("chatml")
    turn = TurnDecoder(chatml, stop_strings=["STOP"])
    turn.feed_text("abS<|im_end|>")
    turn.finish()
    assert turn.result().content == "abS" and turn.stopped_by == "control"
    turn = TurnDecoder(chatml, qwen, stop_strings=["STOP"])
    turn.feed_ids([*qwen.encode_text("4. S"), qwen.control_id("<|im_end|>")])
    assert turn.result().content == "4. S"


def test_lone_surrogates_in_text_output_degrade() -> None:
    for name in ("chatml", "chatglm3"):
        assert get_dialect(name).parse("hi \ud800 there").content == "hi \ufffd there"


def test_ids_need_a_tokenizer() -> None:
    with pytest.raises(TypeError, match="tokenizer"):
        TurnDecoder(get_dialect("chatml")).feed_ids([1])


# ==== ControlSplitter ====


@given(
    text=st.text("xaby<>|", max_size=24),
    controls=st.lists(st.text("xaby<>|", min_size=1, max_size=5), min_size=1, max_size=4),
    cuts=CUTS,
)
def test_splitter_chunked_equals_whole(text: str, controls: list[str], cuts: list[int]) -> None:
    whole = merge_text(split_controls(text, controls))
    splitter = ControlSplitter(controls)
    parts = [p for c in chunks(text, cuts) for p in splitter.feed(c)] + splitter.flush()
    assert merge_text(parts) == whole
    # Whole-text reference: leftmost, and at each position the longest control.
    expected: list[Piece] = []
    i = 0
    while i < len(text):
        match = max((c for c in controls if text.startswith(c, i)), key=len, default=None)
        if match is None:
            expected.append(text[i])
            i += 1
        else:
            expected.append(Control(match))
            i += len(match)
    assert whole == merge_text(expected)


def test_splitter_holds_a_control_inside_a_longer_one() -> None:
    splitter = ControlSplitter(["xaby", "ab"])
    assert splitter.feed("xab") == []
    assert splitter.feed("y") == [Control("xaby")]
    splitter = ControlSplitter(["ab", "abc"])
    assert splitter.feed("ab") == [] and splitter.flush() == [Control("ab")]


def test_dialect_text_controls_default_to_all_controls() -> None:
    assert get_dialect("chatml").text_controls == get_dialect("chatml").controls
    assert "sop" not in get_dialect("chatglm3").text_controls


# ==== held_suffix ====


@given(st.text("ab<|>", max_size=12), st.lists(st.text("ab<|>", max_size=5), max_size=3))
def test_held_suffix_is_the_longest_proper_prefix_suffix(text: str, markers: list[str]) -> None:
    expected = max(
        (k for m in markers for k in range(1, len(m)) if text.endswith(m[:k])), default=0
    )
    assert held_suffix(text, markers) == expected


def test_a_cut_interpreter_segment_is_not_runnable() -> None:
    glm3 = get_dialect("chatglm3")
    text = "\n Let me compute.<|assistant|>interpreter\n```python\nprint(1)\nSTOP more"
    turn = TurnDecoder(glm3, stop_strings=["STOP"])
    events = turn.feed_text(text) + turn.finish()
    result = turn.result()
    assert result.content == "Let me compute." and result.tool_calls == []
    assert result.finish_reason == "stop"
    assert [c.name for c in result.incomplete_calls] == ["interpreter"]
    # The stop string cut the output: the call reads as cut off, the turn finishes "stop".
    assert result.warnings == ["tool call 0 was cut off; it is incomplete and not runnable"]
    assert ToolCallEnd(0, complete=False) in events
    assert events[-1] == Finish("stop")
