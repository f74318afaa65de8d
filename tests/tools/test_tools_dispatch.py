"""Dispatch: validation, errors as observations, async tools, timeouts, truncation."""

import asyncio
import enum
import json
import sys
import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pytest

from chatfmt.messages import Message
from chatfmt.tools import ToolRegistry, ToolResult, tool, truncate


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


@dataclass
class Reading:
    city: str
    temperature: float


@tool
def get_weather(
    city: Annotated[str, "City name"], unit: Unit = Unit.CELSIUS, days: int = 1
) -> dict[str, Any]:
    """Get the weather."""
    return {"city": city, "unit": unit.value, "days": days, "temperature": 22}


@tool
async def aweather(city: str) -> Reading:
    """Async weather."""
    await asyncio.sleep(0)
    return Reading(city=city, temperature=21.5)


@tool
def boom(message: str = "bad city") -> str:
    raise ValueError(message)


@tool
def slow(seconds: float) -> str:
    time.sleep(seconds)
    return "done"


@tool
async def aslow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


@tool
def exits() -> None:
    sys.exit(3)


@tool
def echo(text: str) -> str:
    return text


@tool
def nothing() -> None:
    return None


@tool
def positional_only(a: int, /, b: int = 2, **extra: Any) -> dict[str, Any]:
    return {"a": a, "b": b, "extra": extra}


@pytest.fixture
def reg() -> ToolRegistry:
    return ToolRegistry(
        [get_weather, aweather, boom, slow, aslow, exits, echo, nothing, positional_only],
        timeout=5,
        max_result_chars=200,
    )


def test_success_json_string_and_dict_arguments(reg: ToolRegistry) -> None:
    res = reg.call("get_weather", '{"city": "北京", "unit": "fahrenheit"}')
    assert res == ToolResult(
        name="get_weather",
        ok=True,
        content='{"city": "北京", "unit": "fahrenheit", "days": 1, "temperature": 22}',
    )
    assert reg.call("get_weather", {"city": "Paris", "days": "3"}).ok  # lax: "3" → 3
    assert json.loads(reg.call("get_weather", {"city": "Paris", "days": "3"}).content)["days"] == 3


def test_async_tool_and_dataclass_result(reg: ToolRegistry) -> None:
    res = asyncio.run(reg.acall("aweather", {"city": "Oslo"}))
    assert res.ok and res.content == '{"city": "Oslo", "temperature": 21.5}'
    assert reg.call("aweather", '{"city": "Oslo"}').content == res.content


def test_call_inside_running_loop_works(reg: ToolRegistry) -> None:
    async def main() -> ToolResult:
        return reg.call("echo", {"text": "hi"})

    assert asyncio.run(main()).content == "hi"


def test_none_result_and_empty_arguments(reg: ToolRegistry) -> None:
    assert reg.call("nothing", "").content == "null"
    assert reg.call("nothing", None).ok
    assert reg.call("nothing").ok


def test_positional_only_and_var_keyword(reg: ToolRegistry) -> None:
    res = reg.call("positional_only", {"a": 1, "z": "extra"})
    assert json.loads(res.content) == {"a": 1, "b": 2, "extra": {"z": "extra"}}


def test_unknown_tool(reg: ToolRegistry) -> None:
    res = reg.call("get_wether", "{}")
    assert not res.ok
    assert res.content.startswith("Error: unknown tool 'get_wether'; available tools: get_weather")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("{city: 1}", "arguments are not valid JSON (Expecting property name enclosed"),
        ("[1, 2]", "arguments must be a JSON object, got list"),
        ('"x"', "arguments must be a JSON object, got str"),
    ],
)
def test_bad_json(reg: ToolRegistry, arguments: str, expected: str) -> None:
    res = reg.call("get_weather", arguments)
    assert not res.ok and res.error is not None
    assert expected in res.error
    assert res.content == "Error: " + res.error


def test_validation_errors_name_the_field(reg: ToolRegistry) -> None:
    res = reg.call("get_weather", {"unit": "kelvin", "days": "many", "country": "NO"})
    assert not res.ok and res.error is not None
    assert "missing required argument 'city'" in res.error
    assert (
        "argument 'unit': input should be 'celsius' or 'fahrenheit' (got \"kelvin\")" in res.error
    )
    assert "argument 'days': input should be a valid integer" in res.error
    assert "unexpected argument 'country'" in res.error
    assert "Traceback" not in res.content


def test_exception_inside_tool_is_type_and_message(reg: ToolRegistry) -> None:
    res = reg.call("boom", {})
    assert res == ToolResult(
        name="boom",
        ok=False,
        content="Error: tool 'boom' raised ValueError: bad city",
        error="tool 'boom' raised ValueError: bad city",
    )


def test_long_exception_message_is_clipped(reg: ToolRegistry) -> None:
    res = reg.call("boom", {"message": "x" * 5000})
    assert res.error is not None and len(res.error) <= 500


def test_sys_exit_in_tool_does_not_exit(reg: ToolRegistry) -> None:
    res = reg.call("exits", {})
    assert not res.ok and res.error == "tool 'exits' raised SystemExit: 3"


def test_sync_timeout_returns_promptly(reg: ToolRegistry) -> None:
    start = time.perf_counter()
    res = reg.call("slow", {"seconds": 3}, timeout=0.2)
    assert time.perf_counter() - start < 1.5
    assert not res.ok and res.error == "tool 'slow' timed out after 0.2 s"


def test_async_timeout(reg: ToolRegistry) -> None:
    res = asyncio.run(reg.acall("aslow", {"seconds": 3}, timeout=0.1))
    assert res.error == "tool 'aslow' timed out after 0.1 s"
    assert reg.call("aslow", {"seconds": 0}).content == "done"


def test_parallel_async_calls_overlap(reg: ToolRegistry) -> None:
    async def main() -> list[ToolResult]:
        return list(await asyncio.gather(*(reg.acall("slow", {"seconds": 0.3}) for _ in range(5))))

    start = time.perf_counter()
    results = asyncio.run(main())
    assert all(r.ok for r in results)
    assert time.perf_counter() - start < 1.2  # five 0.3 s sync tools ran in parallel threads


def test_schema_only_tool_cannot_be_called() -> None:
    reg = ToolRegistry([{"name": "remote", "parameters": {"type": "object", "properties": {}}}])
    res = reg.call("remote", "{}")
    assert not res.ok and res.error == "tool 'remote' has no implementation here"


def test_truncation_by_characters(reg: ToolRegistry) -> None:
    res = reg.call("echo", {"text": "a" * 1000})
    assert res.ok and res.truncated
    assert len(res.content) <= 200
    kept = res.content.split("…")[0]
    assert (
        set(kept) == {"a"} and res.content == kept + f"…[truncated {1000 - len(kept)} characters]"
    )


def test_truncation_by_tokens() -> None:
    def count_words(text: str) -> int:
        return len(text.split())

    reg = ToolRegistry(
        [echo], max_result_chars=None, max_result_tokens=10, count_tokens=count_words
    )
    text = " ".join(f"w{i}" for i in range(100))
    res = reg.call("echo", {"text": text})
    assert res.truncated and count_words(res.content) <= 10
    assert "…[truncated" in res.content and res.content.startswith("w0 w1 w2")
    short = reg.call("echo", {"text": "just three words"})
    assert not short.truncated and short.content == "just three words"


def test_truncate_function_edges() -> None:
    assert truncate("short", max_chars=100) == "short"
    cut = truncate("x" * 100, max_chars=40)
    assert cut == "x" * 14 + "…[truncated 86 characters]"
    both = truncate("H" * 50 + "T" * 50, max_chars=60, keep="head_tail")
    assert both.startswith("H") and both.endswith("T") and len(both) <= 60
    assert truncate("x" * 100, max_chars=3) == "…[truncated 100 characters]"
    with pytest.raises(ValueError, match="count_tokens"):
        truncate("x", max_tokens=3)


def test_truncate_lives_in_the_core_and_tools_re_export_it() -> None:
    import importlib

    import chatfmt.truncation as core

    # The package's `truncate` (the function) hides its submodule of that name as an attribute.
    tools_truncate = importlib.import_module("chatfmt.tools.truncate")

    assert truncate is core.truncate is tools_truncate.truncate
    assert tools_truncate.marker is core.marker


def test_result_to_message(reg: ToolRegistry) -> None:
    msg = reg.call("echo", {"text": "<|observation|> stays text"}).to_message("call_1")
    assert msg == Message(
        role="tool", content="<|observation|> stays text", name="echo", tool_call_id="call_1"
    )


def test_literal_validation_message() -> None:
    def pick(color: Literal["red", "green"]) -> str:
        return color

    reg = ToolRegistry([pick])
    assert reg.call("pick", {"color": "red"}).content == "red"
    err = reg.call("pick", {"color": "blue"}).error
    assert err == (
        "invalid arguments for tool 'pick': argument 'color': "
        "input should be 'red' or 'green' (got \"blue\")"
    )
