"""Literal-only parsing of ``tool_call(k=v, ...)``: accepted forms, rejected code, round trips."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatfmt.errors import ParseError, PyCallError
from chatfmt.pycall import (
    MAX_DEPTH,
    MAX_SOURCE_CHARS,
    format_tool_call,
    format_value,
    is_argument_name,
    parse_tool_call,
)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            'tool_call(location="beijing", unit="celsius")',
            {"location": "beijing", "unit": "celsius"},
        ),
        ("tool_call(a='single', b=\"double\")", {"a": "single", "b": "double"}),
        ("tool_call(a=\"\"\"tri\nple\"\"\", b='''x''')", {"a": "tri\nple", "b": "x"}),
        ("tool_call(a='con' 'cat')", {"a": "concat"}),
        ("tool_call(n=1, f=-2.5, e=1e3, m=-7, p=+3, big=10**0 if False else 1)", None),
        (
            "tool_call(n=1, f=-2.5, e=1e3, m=-7, p=+3)",
            {"n": 1, "f": -2.5, "e": 1000.0, "m": -7, "p": 3},
        ),
        ("tool_call(t=True, f=False, n=None)", {"t": True, "f": False, "n": None}),
        (
            "tool_call(l=[1, [2, (3, 4)]], d={'k': {'n': [None]}})",
            {"l": [1, [2, [3, 4]]], "d": {"k": {"n": [None]}}},
        ),
        ("tool_call()", {}),
        ("tool_call(x=-(1))", {"x": -1}),  # parentheses leave no trace in the AST
        ("  tool_call(x='北京')  \n", {"x": "北京"}),
        ("tool_call(x='\\n\\t\\u4e2d')", {"x": "\n\t中"}),
        ("tool_call(\n    a=1,\n    b=2,\n)", {"a": 1, "b": 2}),
    ],
)
def test_accepts_literals(source: str, expected: dict[str, Any] | None) -> None:
    if expected is None:
        with pytest.raises(PyCallError):
            parse_tool_call(source)
    else:
        assert parse_tool_call(source) == expected


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("tool_call(__import__('os').system('touch /tmp/x'))", "positional"),
        ("tool_call(x=__import__('os').system('touch /tmp/x'))", "function call"),
        ("__import__('os').system('touch /tmp/x')", "call of"),
        ("tool_call(x=os.environ)", "attribute access"),
        ("tool_call(x=open)", "a name"),
        ("tool_call(x=lambda: 1)", "lambda"),
        ("tool_call(x=[i for i in range(3)])", "comprehension"),
        ("tool_call(x={k: 1 for k in 'ab'})", "comprehension"),
        ("tool_call(x=(i for i in ()))", "generator"),
        ("tool_call(x=f'{1+1}')", "f-string"),
        ("tool_call(x=1+1)", "operator"),
        ("tool_call(x=--1)", "sign"),
        ("tool_call(x={1, 2})", "set"),
        ("tool_call(x=b'bytes')", "bytes"),
        ("tool_call(x=1j)", "complex"),
        ("tool_call(x=...)", "ellipsis"),
        ("tool_call(x=1e999)", "finite"),
        ("tool_call(x={1: 'a'})", "keys"),
        ("tool_call(x={**{}})", "unpacking"),
        ("tool_call(*[1])", "starred"),
        ("tool_call(**{'a': 1})", "**kwargs"),
        ("tool_call(1)", "positional"),
        ("tool_call(a=1, a=2)", "twice"),
        ("other(a=1)", "call of"),
        ("tool_call.x(a=1)", "call of"),
        ("tool_call", "expected a call"),
        ("tool_call(a=1); import os", "not valid Python"),
        ("tool_call(a=1)\nimport os", "not valid Python"),
        ("tool_call(a=(yield))", None),
        ("tool_call(a=x[0])", "subscript"),
        ("tool_call(a=(x := 1))", "assignment"),
        ("tool_call(a=1 if x else 2)", "conditional"),
        ("tool_call(a='\x00')", None),
        ("tool_call(a=" + "[" * 500 + "]" * 500 + ")", None),
        ("tool_call(a=" + "-" * 200_000 + "1)", None),
        ("tool_call(a=" + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + ")", "nested"),
        ("tool_call(a='" + "x" * MAX_SOURCE_CHARS + "')", "longer"),
    ],
)
def test_rejects_with_reason(source: str, reason: str | None) -> None:
    with pytest.raises(PyCallError) as info:
        parse_tool_call(source)
    assert isinstance(info.value, ParseError)
    assert info.value.reason
    if reason is not None:
        assert reason in info.value.reason


def test_payloads_never_execute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "x"
    monkeypatch.chdir(tmp_path)
    payloads = [
        f"tool_call(__import__('os').system('touch {marker}'))",
        f"tool_call(a=__import__('os').system('touch {marker}'))",
        f"tool_call(a=(lambda: __import__('os').system('touch {marker}'))())",
        f"tool_call(a=[__import__('os').system('touch {marker}') for _ in [0]])",
        f"tool_call(a=f\"{{__import__('os').system('touch {marker}')}}\")",
        "tool_call(a=open('x', 'w').write('1'))",
        "tool_call(a=().__class__.__base__.__subclasses__())",
    ]
    for p in payloads:
        with pytest.raises(PyCallError):
            parse_tool_call(p)
    assert not marker.exists()
    assert list(tmp_path.iterdir()) == []


def test_error_message_is_the_reason() -> None:
    with pytest.raises(PyCallError, match="only literal values are allowed, got a name"):
        parse_tool_call("tool_call(a=b)")


# ==== Formatting and round trips ====


def test_format() -> None:
    assert format_tool_call({"location": "beijing", "unit": "celsius"}) == (
        'tool_call(location="beijing", unit="celsius")'
    )
    assert format_value({"a": [1, -2.5, None, True, False], "b": '北"京'}) == (
        '{"a": [1, -2.5, None, True, False], "b": "北\\"京"}'
    )
    assert format_tool_call({}) == "tool_call()"
    assert format_value("a\ud800") == '"a\\ud800"'
    # Written, but not read back: a lone surrogate is not text a tokenizer or JSON reader takes.
    with pytest.raises(PyCallError, match="lone surrogate"):
        parse_tool_call(format_tool_call({"s": "\udfff"}))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, {1: 2}, b"x", object()])
def test_format_rejects_values_without_literals(bad: Any) -> None:
    with pytest.raises(ValueError):
        format_value(bad)


@pytest.mark.parametrize("name", ["a-b", "class", "None", "1x", "", "ﬁ", "a b"])
def test_format_rejects_bad_names(name: str) -> None:
    assert not is_argument_name(name)
    with pytest.raises(ValueError, match="cannot be written"):
        format_tool_call({name: 1})


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",))),  # surrogates: see test_format
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True).filter(is_argument_name)


@given(st.dictionaries(NAMES, JSON, max_size=5))
def test_format_parse_round_trip(args: dict[str, Any]) -> None:
    assert parse_tool_call(format_tool_call(args)) == args


@given(st.text(max_size=200))
def test_arbitrary_text_never_raises_other_errors(text: str) -> None:
    try:
        parse_tool_call(text)
    except PyCallError:
        pass


@given(st.text(alphabet="tool_call()[]{}=,'\"-+.0123456789abx :\n\\", max_size=80))
def test_call_like_text_never_raises_other_errors(text: str) -> None:
    try:
        result = parse_tool_call("tool_call(" + text)
    except PyCallError:
        return
    assert isinstance(result, dict)


def test_huge_integers_are_rejected_not_crashing() -> None:
    with pytest.raises(PyCallError, match="too large"):
        parse_tool_call("tool_call(a=0x" + "f" * 4000 + ")")
