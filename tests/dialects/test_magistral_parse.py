"""Magistral parsing: whole, streamed in text chunks and streamed as ids agree (thoughts
included), and parse goldens from the family's documented output (a thought in ``[THINK]`` …
``[/THINK]``, then text and ``[TOOL_CALLS]name[ARGS]{…}`` calls; cut and malformed calls)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
from goldens import check_json, check_jsonl, parse_cases, read_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mistral_vocab import tekken_v13

from chatfmt import get_dialect
from chatfmt.decoding import TurnDecoder
from chatfmt.events import Event, ParseResult, event_json, merge_deltas
from chatfmt.tokenizers.base import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_decoding import CUTS, as_ids, as_text, chunks, outcome, outputs, run_ids, run_text

DIALECT = get_dialect("magistral")
CONTROLS = ["[THINK]", "[/THINK]", "[TOOL_CALLS]", "[CALL_ID]", "[ARGS]", "</s>", "[INST]"]
PARTS = [
    "[THINK]hm, [TOOL_CALLS isopropyl\n\n", "[/THINK]", "[/THI", "[THIN", "</s>",
    '[TOOL_CALLS]get_weather[ARGS]{"city": "isopropyl [/THINK"}',
    '[TOOL_CALLS]a[CALL_ID]abcdefghi[ARGS]{}[TOOL_CALLS]b[ARGS]{"x": [1]}',
    '[TOOL_CALLS]h[ARGS]{"cut": "x', "[TOOL_CALLS]bad name[ARGS]{}", "[TOOL_CALLS]f[ARGS]nope",
]  # fmt: skip


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer(str(tekken_v13(tmp_path_factory.mktemp("tekken"))))


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_whole_text_chunks_and_ids_agree(tok: Tokenizer, data: st.DataObject) -> None:
    """As ``tests/test_decoding.py`` checks every dialect, with the family's think controls."""
    pieces = data.draw(outputs(CONTROLS, PARTS), label="pieces")
    cuts = data.draw(CUTS, label="cuts")
    text = as_text(pieces)
    whole = run_text(DIALECT, [text])
    streamed = run_text(DIALECT, chunks(text, cuts))
    by_id = run_ids(DIALECT, tok, as_ids(tok, pieces))
    assert outcome(*streamed) == outcome(*whole)
    assert outcome(*by_id) == outcome(*whole)
    parsed = DIALECT.parse(text)
    assert outcome([], parsed)[1:] == outcome(*whole)[1:]


def test_a_parsed_reply_renders_back_as_written(tok: Tokenizer) -> None:
    out = '[THINK]Two calls.[/THINK]Sure.[TOOL_CALLS]f[ARGS]{"a": 1}[TOOL_CALLS]g[ARGS]{}</s>'
    message = DIALECT.parse(out).message
    assert message.reasoning == "Two calls." and message.content == "Sure."
    conv = [{"role": "user", "content": "go"}, message.to_openai()]
    text = DIALECT.render_text(conv, add_generation_prompt=False)
    assert text.endswith("[INST]go[/INST]" + out)


# ==== Goldens ====

CASES = parse_cases("magistral")


def _parse(output: str, chunk: int, *, length: bool) -> tuple[list[Event], ParseResult]:
    counter = itertools.count()
    parser = DIALECT.stream_parser(id_factory=lambda: f"call_{next(counter)}")
    turn = TurnDecoder(DIALECT, parser=parser)
    events = [
        e for k in range(0, len(output), chunk) for e in turn.feed_text(output[k : k + chunk])
    ]
    events += turn.finish("length" if length else "stop")
    return events, turn.result()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_parse_golden(case: Path) -> None:
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    events, streamed = _parse(output, 3, length=length)
    _, whole = _parse(output, max(len(output), 1), length=length)
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in merge_deltas(events)])
    message = streamed.to_openai()
    check_json(case / "expected_message.json", message)
    assert whole.to_openai() == message


def test_parse_cases_exist() -> None:
    assert len(CASES) >= 8
