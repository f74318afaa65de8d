"""Request rules of the wire models: tool names, tool_choice, and the errors they answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from server_helpers import USER_HI, WEATHER_TOOL
from test_chat_fake import chat
from test_errors import assert_openai_error

from chatfmt.server import create_app


def _tool(name: Any) -> dict[str, Any]:
    return {**WEATHER_TOOL, "function": {**WEATHER_TOOL["function"], "name": name}}


@pytest.mark.parametrize(
    "name", ["get weather", "get.weather", "wetter/heute", "天气", "x" * 65, "", "a\n"]
)
def test_tool_names_follow_openai_rule(make_fake, qwen_dialect, name: str) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    tools = [WEATHER_TOOL, _tool(name)]
    err = assert_openai_error(chat(app, {"messages": USER_HI, "tools": tools}), 400)
    assert err["param"] == "tools"
    message = err["message"]
    assert message.startswith("tools: tool 1: function.name: ")
    assert repr(name) in message  # names the bad tool
    assert "^[a-zA-Z0-9_-]{1,64}$" in message  # and the rule
    assert fake.prompts == []


@pytest.mark.parametrize("name", ["get_weather", "get-weather-2", "A" * 64, "_"])
def test_valid_tool_names_are_served(make_fake, qwen_dialect, name: str) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    r = chat(app, {"messages": USER_HI, "tools": [_tool(name)]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "choice",
    [
        "sometimes",
        "AUTO",
        5,
        ["auto"],
        {"type": "function"},
        {"type": "function", "function": {}},
        {"type": "function", "function": {"name": 3}},
        {"type": "tool", "function": {"name": "get_weather"}},
        {"function": "get_weather"},
    ],
)
def test_bad_tool_choice_says_what_is_accepted(make_fake, qwen_dialect, choice: Any) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    body = {"messages": USER_HI, "tools": [WEATHER_TOOL], "tool_choice": choice}
    err = assert_openai_error(chat(app, body), 400)
    assert err["param"] == "tool_choice"
    message = err["message"]
    assert message.startswith('tool_choice: must be "auto", "none", "required", or ')
    assert '{"type": "function", "function": {"name": "<a tool in tools>"}}' in message
    assert message.endswith("got " + json.dumps(choice, ensure_ascii=False))
    assert "literal[" not in message  # pydantic's union internals stay out of it


@pytest.mark.parametrize(
    "choice",
    ["auto", "none", "required", {"function": {"name": "get_weather"}}, None],
)
def test_good_tool_choices_pass(make_fake, qwen_dialect, choice: Any) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    body = {"messages": USER_HI, "tools": [WEATHER_TOOL], "tool_choice": choice}
    assert chat(app, body).status_code == 200
