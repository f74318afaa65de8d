"""The demo tools, and interpreter code deltas decoded from streamed JSON arguments."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatfmt.web import demo_tools
from chatfmt.web.demo import CalculatorError, evaluate

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")

from chatfmt.web.code_deltas import CodeDeltas


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("2 ** 10", 1024),
        ("-2 ** 2", -4),
        ("7 % 4", 3),
        ("7 / 2", 3.5),
        ("1.5e3 - 0.5", 1499.5),
        ("2 ** -1", 0.5),
    ],
)
def test_calculator_arithmetic(expression: str, value: float) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("__import__('os').system('true')", "unsupported"),
        ("x + 1", "unsupported"),
        ("(1).__class__", "unsupported"),
        ("[1, 2]", "unsupported"),
        ("True + 1", "only numbers"),
        ("'a' * 3", "only numbers"),
        ("1 // 2", "unsupported"),
        ("1 / 0", "division by zero"),
        ("9 ** 9 ** 9", "too large"),
        ("10.0 ** 400", "too large"),
        ("(-1) ** 0.5", "complex"),
        ("1 +", "not a valid expression"),
        ("1" * 600, "longer than"),
    ],
)
def test_calculator_refuses(expression: str, problem: str) -> None:
    with pytest.raises(CalculatorError, match=problem):
        evaluate(expression)


def test_demo_registry() -> None:
    registry = demo_tools()
    assert registry.names() == ["get_weather", "calculator"]
    weather = registry.call("get_weather", {"city": "Paris"})
    assert weather.ok
    data = json.loads(weather.content)
    assert data["city"] == "Paris" and "demo data" in data["source"]
    assert json.loads(registry.call("get_weather", '{"city": "Paris"}').content) == data
    fahrenheit = json.loads(
        registry.call("get_weather", {"city": "Paris", "unit": "fahrenheit"}).content
    )
    assert fahrenheit["temperature"] == round(data["temperature"] * 9 / 5 + 32)
    assert registry.call("calculator", {"expression": "6 * 7"}).content == "42"
    bad = registry.call("calculator", {"expression": "open('x')"})
    assert not bad.ok and "unsupported" in bad.content


def _deltas(arguments: str, cuts: list[int]) -> str:
    decoder = CodeDeltas()
    out, last = [], 0
    for cut in [*sorted(set(cuts)), len(arguments)]:
        out.append(decoder.feed(arguments[last:cut]))
        last = cut
    return "".join(out)


CODE_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)) | st.sampled_from('"\\\n\t😀é'),
    max_size=40,
)


@given(code=CODE_TEXT, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_code_deltas_equal_the_code_for_any_split(code: str, cuts: list[int]) -> None:
    for ensure_ascii in (True, False):
        arguments = json.dumps({"code": code}, ensure_ascii=ensure_ascii)
        bounded = [c for c in cuts if c <= len(arguments)]
        assert _deltas(arguments, bounded) == code


def test_code_deltas_edge_cases() -> None:
    # The key may arrive in pieces, with spaces; text after the string is ignored.
    assert _deltas('{ "code" :  "a\\"b", "other": "x"}', [3, 5, 9, 13, 14]) == 'a"b'
    # No code key: nothing.
    assert _deltas('{"cmd": "ls"}', [4]) == ""
    # A surrogate pair split between fragments comes out whole.
    decoder = CodeDeltas()
    assert decoder.feed('{"code": "x\\ud83d') == "x"
    assert decoder.feed("\\ude00") == "😀"
