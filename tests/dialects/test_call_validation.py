"""A call whose syntax closed is runnable only with arguments a client can read: one JSON
object of finite numbers. Parsers that assemble the JSON themselves (XML and DSML values) are
held to it like the JSON scanner: anything else is an incomplete call, never ``{}``."""

from __future__ import annotations

import pytest

from chatfmt import get_dialect

DSML = (
    '<｜DSML｜function_calls>\n<｜DSML｜invoke name="f">\n'
    '<｜DSML｜parameter name="k" string="false">{value}</｜DSML｜parameter>\n'
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>"
)


@pytest.mark.parametrize("dialect", ["deepseek-v3.2", "deepseek-v4"])
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999", "[1, NaN]"])
def test_non_finite_dsml_values_make_an_incomplete_call(dialect: str, value: str) -> None:
    out = DSML.format(value=value)
    if dialect == "deepseek-v4":
        out = out.replace("function_calls", "tool_calls")
    result = get_dialect(dialect).parse(out)
    assert result.tool_calls == []
    assert [c.name for c in result.incomplete_calls] == ["f"]
    assert result.finish_reason == "stop"
    assert any("not runnable" in w for w in result.warnings)


def test_a_finite_value_stays_a_runnable_call() -> None:
    result = get_dialect("deepseek-v3.2").parse(DSML.format(value="1.5"))
    assert [c.arguments_dict() for c in result.tool_calls] == [{"k": 1.5}]
    assert result.finish_reason == "tool_calls"
