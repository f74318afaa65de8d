"""Which grammar a request gets (tool calls, ``tool_choice``, ``parallel_tool_calls``,
``strict``, ``response_format``) for engines that constrain lazily, fully or not at all.

The fake engine records the sampling parameters; that the grammars themselves accept and
refuse the right replies is tested against llama.cpp's grammar engine in tests/grammar."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from server_helpers import TIME_TOOL, USER_HI, WEATHER_TOOL

from chatfmt.server import create_app

CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
)


def post(app: Any, body: dict[str, Any]) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/v1/chat/completions", json=body)

    return asyncio.run(go())


@pytest.fixture
def serve(make_fake: Any, qwen_dialect: Any) -> Any:
    def run(support: str, body: dict[str, Any], script: str = CALL) -> tuple[Any, Any]:
        fake = make_fake((script,), grammar_support=support)
        reply = post(create_app(fake, qwen_dialect, model_name="m"), body)
        return fake, reply

    return run


def test_offered_tools_get_a_lazy_grammar(serve: Any) -> None:
    fake, r = serve("lazy", {"messages": USER_HI, "tools": [WEATHER_TOOL, TIME_TOOL]})
    assert r.status_code == 200, r.text
    g = fake.params[0].grammar
    assert g.lazy and any(t.value == "<tool_call>" for t in g.triggers)
    assert '"\\"get_weather\\""' in g.gbnf and '"\\"get_time\\""' in g.gbnf
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_an_engine_without_lazy_grammars_leaves_auto_calls_free(serve: Any) -> None:
    for support in ("full", "none"):
        fake, r = serve(support, {"messages": USER_HI, "tools": [WEATHER_TOOL]})
        assert r.status_code == 200 and fake.params[0].grammar is None


def test_required_and_named_choices_are_whole_grammars_without_prefill(
    serve: Any, qwen_dialect: Any, qwen: Any
) -> None:
    plain = qwen_dialect.render(USER_HI, qwen, tools=[WEATHER_TOOL]).ids
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        body = {"messages": USER_HI, "tools": [WEATHER_TOOL], "tool_choice": choice}
        fake, r = serve("full", body)
        assert r.status_code == 200, r.text
        g = fake.params[0].grammar
        assert g is not None and not g.lazy
        # The grammar starts the call; the prompt is the plain render, no call opening.
        assert fake.prompts[0] == plain


def test_without_grammars_a_forced_call_is_prefilled(
    serve: Any, qwen_dialect: Any, qwen: Any
) -> None:
    body = {"messages": USER_HI, "tools": [WEATHER_TOOL], "tool_choice": "required"}
    fake, r = serve("none", body, script='{"name": "get_weather", "arguments": {}}\n</tool_call>')
    assert r.status_code == 200 and fake.params[0].grammar is None
    plain = qwen_dialect.render(USER_HI, qwen, tools=[WEATHER_TOOL]).ids
    assert len(fake.prompts[0]) > len(plain) and fake.prompts[0][: len(plain)] == plain


def test_parallel_tool_calls_false_allows_one_call(serve: Any) -> None:
    body = {"messages": USER_HI, "tools": [WEATHER_TOOL], "parallel_tool_calls": False}
    many, _ = serve("lazy", {**body, "parallel_tool_calls": True})
    one, _ = serve("lazy", body)
    assert "tagged-call (ws tagged-call)*" in many.params[0].grammar.gbnf
    assert "tagged-call (ws tagged-call)*" not in one.params[0].grammar.gbnf


def test_strict_tools_need_an_engine_that_constrains(serve: Any) -> None:
    strict = {**WEATHER_TOOL, "function": {**WEATHER_TOOL["function"], "strict": True}}
    _, r = serve("full", {"messages": USER_HI, "tools": [strict]})
    err = r.json()["error"]
    assert r.status_code == 400 and err["code"] == "unsupported_strict_tools"
    assert "get_weather" in err["message"] and "--engine llama-server" in err["message"]
    fake, r = serve("lazy", {"messages": USER_HI, "tools": [strict]})
    assert r.status_code == 200 and fake.params[0].grammar is not None


def test_strict_schemas_with_unenforceable_keywords_are_refused(serve: Any) -> None:
    params = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
        "required": ["code"],
    }
    tool = {"type": "function", "function": {"name": "f", "parameters": params, "strict": True}}
    _, r = serve("lazy", {"messages": USER_HI, "tools": [tool]})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "tools[0].function.parameters"
    assert err["code"] == "invalid_function_parameters"
    assert err["type"] == "invalid_request_error"
    assert err["message"].startswith("Invalid schema for function 'f': In context=(")
    assert "'pattern' is not supported" in err["message"]
    # Without strict the keyword is not enforced, and the call still is.
    loose = {"type": "function", "function": {"name": "f", "parameters": params}}
    fake, r = serve("lazy", {"messages": USER_HI, "tools": [loose]})
    assert r.status_code == 200 and fake.params[0].grammar is not None


def test_response_format_is_a_whole_grammar(serve: Any) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "num", "schema": schema}}
    fake, r = serve(
        "full", {"messages": USER_HI, "response_format": fmt}, script='{"n": 1}<|im_end|>'
    )
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == '{"n": 1}'
    g = fake.params[0].grammar
    assert not g.lazy and '"\\"n\\""' in g.gbnf
    strict = {**fmt, "json_schema": {**fmt["json_schema"], "strict": True}}
    strict["json_schema"]["schema"] = {**schema, "not": {"required": ["x"]}}
    _, r = serve("full", {"messages": USER_HI, "response_format": strict})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == "response_format"
    assert err["message"].startswith("Invalid schema for response_format 'num': At the root")


def test_call_grammar_off_leaves_only_auto_calls_free(make_fake: Any, qwen_dialect: Any) -> None:
    strict = {**WEATHER_TOOL, "function": {**WEATHER_TOOL["function"], "strict": True}}
    cases = [
        ({"tools": [WEATHER_TOOL]}, False),
        ({"tools": [WEATHER_TOOL], "tool_choice": "required"}, True),
        ({"tools": [strict]}, True),
    ]
    for extra, constrained in cases:
        fake = make_fake((CALL,), grammar_support="lazy")
        app = create_app(fake, qwen_dialect, model_name="m", call_grammar=False)
        assert post(app, {"messages": USER_HI, **extra}).status_code == 200
        assert (fake.params[0].grammar is not None) is constrained, extra


def test_a_schema_no_grammar_can_read_leaves_calls_free_unless_strict(serve: Any) -> None:
    params = {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}
    tool = {"type": "function", "function": {"name": "f", "parameters": params}}
    for choice in ("auto", "required"):
        body = {"messages": USER_HI, "tools": [tool], "tool_choice": choice}
        fake, r = serve("lazy", body, script="ok<|im_end|>")
        assert r.status_code == 200 and fake.params[0].grammar is None
    strict = {"type": "function", "function": {**tool["function"], "strict": True}}
    _, r = serve("lazy", {"messages": USER_HI, "tools": [WEATHER_TOOL, strict]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools[1].function.parameters"
