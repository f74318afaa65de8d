"""The llama4 parser: parse goldens, whole output = text chunks = ids (Llama 4's own vocabulary
from ``llama-models``), and the cut-off call rule for call lists."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_jsonl, parse_cases, read_text
from hypothesis import given
from hypothesis import strategies as st
from streams import outcome

from chatfmt import get_dialect
from chatfmt.decoding import ControlSplitter, TurnDecoder
from chatfmt.events import Event, ParseResult, event_json, merge_deltas
from chatfmt.segments import Control
from chatfmt.tokenizers.base import Piece, Tokenizer

DIALECT = get_dialect("llama4")
CONTROLS = list(DIALECT.controls)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    pytest.importorskip("llama_models", reason="llama-models (Llama 4's vocabulary) is missing")
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("llama4")


# ==== Parse goldens ====


def parse_text(output: str, chunk: int, *, length: bool) -> tuple[list[Event], ParseResult]:
    counter = itertools.count()
    parser = DIALECT.stream_parser(id_factory=lambda: f"call_{next(counter)}")
    turn = TurnDecoder(DIALECT, parser=parser)
    events = [
        e for k in range(0, len(output), chunk) for e in turn.feed_text(output[k : k + chunk])
    ]
    events += turn.finish("length" if length else "stop")
    return events, turn.result()


@pytest.mark.parametrize("case", parse_cases("llama4"), ids=lambda p: p.name)
def test_parse_golden(case: Path) -> None:
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    events, streamed = parse_text(output, 3, length=length)
    _, whole = parse_text(output, max(len(output), 1), length=length)
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in merge_deltas(events)])
    check_json(case / "expected_message.json", streamed.to_openai())
    assert whole.to_openai() == streamed.to_openai()


def test_parse_golden_cases_exist() -> None:
    assert len(parse_cases("llama4")) >= 10


# ==== Whole = text chunks = ids ====

OUTPUT_PARTS = [
    '[get_weather(city="San Francisco"), get_weather(city="Seattle")]',
    "[get_user_info(user_id=7890, special='black')]",
    '[f(x={"a": [1, 2.5, None, True]}, s=")]")][g()]',
    '[h(cut="x',
    "[k(a=1), 2]",
    "[not a call]",
    '[f(t="""multi\nline""")]',
]
OUT_TRAPS = ["<|eo", "t|>", "[", "]", "(", ")", "=", '"', "'", "\\", ",", "\n", " ", "é", "🙂"]


def outputs() -> st.SearchStrategy[list[Piece]]:
    splitter = ControlSplitter(CONTROLS)

    def split(part: str) -> list[Piece]:
        return [*splitter.feed(part), *splitter.flush()]

    text = (st.sampled_from(OUT_TRAPS) | st.text('abf [](){}"=,\n<|>_é', max_size=6)).map(
        lambda t: [t]
    )
    control = st.sampled_from(["<|eot|>", "<|eom|>", "<|python_start|>", "<|end_of_text|>"])
    piece = text | st.sampled_from(OUTPUT_PARTS).map(split) | control.map(lambda c: [Control(c)])
    return st.lists(piece, max_size=10).map(
        lambda runs: [p for run in runs for p in run if p != ""]
    )


def as_text(pieces: list[Piece]) -> str:
    return "".join(p.token if isinstance(p, Control) else p for p in pieces)


def run(tokenizer: Tokenizer | None, feed: list[Any], reason: Any) -> Any:
    turn = TurnDecoder(DIALECT, tokenizer)
    events = [e for x in feed for e in (turn.feed_ids([x]) if tokenizer else turn.feed_text(x))]
    return outcome(events + turn.finish(reason), turn.result())


@given(
    pieces=outputs(),
    cuts=st.lists(st.integers(0, 10_000), max_size=10),
    reason=st.sampled_from(["stop", "length"]),
)
def test_whole_text_chunks_and_ids_agree(
    pieces: list[Piece], cuts: list[int], reason: Any, tok: Tokenizer
) -> None:
    text = as_text(pieces)
    # Text with a whole control string written in it cannot be told from the token: skip those.
    joined = "".join(p for p in pieces if isinstance(p, str))
    if any(c in joined for c in CONTROLS):
        return
    points = sorted({c % (len(text) + 1) for c in cuts})
    chunks = [text[a:b] for a, b in itertools.pairwise([0, *points, len(text)]) if b > a]
    whole = run(None, [text], reason)
    assert run(None, chunks, reason) == whole
    assert run(None, list(text), reason) == whole
    assert run(tok, tok.encode_pieces(pieces), reason) == whole


# ==== The rule, by example ====


def test_calls_are_complete_only_when_the_list_closes() -> None:
    for cut in ("[f(a=1)", '[f(a=1), g(b="x")', "[f(a=1), g("):
        result = DIALECT.parse(cut)
        assert not result.tool_calls and result.incomplete_calls
        assert result.finish_reason == "stop"
    closed = DIALECT.parse('[f(a=1), g(b="x")]<|eom|>')
    assert [c.name for c in closed.tool_calls] == ["f", "g"]
    assert closed.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    "text",
    ["[1, 2]", "[link](https://example.com)", "See [f(a=1)]", "[]", "[f (a=1)]", "f(a=1)"],
)
def test_what_is_not_a_call_list_stays_text(text: str) -> None:
    result = DIALECT.parse(text)
    assert result.content == text and not result.tool_calls and not result.incomplete_calls


@pytest.mark.parametrize(
    "text", ["[f(a=x)]", "[f(1)]", "[f(a=1) g()]", "[f(**k)]", "[f(a=open('x'))]", '[f(a="\n")]']
)
def test_malformed_lists_are_incomplete_never_runnable(text: str) -> None:
    result = DIALECT.parse(text)
    assert not result.tool_calls and len(result.incomplete_calls) >= 1
    assert result.finish_reason == "stop" and result.warnings


def test_parsed_calls_render_back_as_written() -> None:
    reply = DIALECT.parse("[get_user_info(user_id=7890, special='black')]<|eom|>")
    history: list[Any] = [{"role": "user", "content": "q"}, *reply.messages]
    text = DIALECT.render_text(history, add_generation_prompt=False)
    assert text.endswith("[get_user_info(user_id=7890, special='black')]<|eom|>")
    # Over the API (no raw text), the same call renders as the encoder writes it.
    history[1] = reply.messages[0].to_openai()
    text = DIALECT.render_text(history, add_generation_prompt=False)
    assert text.endswith('[get_user_info(user_id=7890, special="black")]<|eom|>')


def test_forced_call_prefix_parses_as_a_call() -> None:
    from chatfmt.segments import Text

    turn = TurnDecoder(DIALECT)
    prefix = DIALECT.forced_call_prefix("get_weather")
    turn.prefill([s.text for s in prefix if isinstance(s, Text)])
    turn.feed_text('city="Paris")]<|eom|>')
    turn.finish()
    calls = turn.result().tool_calls
    assert [(c.name, c.arguments_dict()) for c in calls] == [("get_weather", {"city": "Paris"})]
