"""The conversation model and OpenAI conversion."""

from __future__ import annotations

import json

import pytest

from chatfmt.errors import ValidationError
from chatfmt.messages import Message, Tool, ToolCall, from_openai, load_conversation


def test_openai_roundtrip_with_tool_calls() -> None:
    raw = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"x": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "function", "name": "f", "content": "43"},
        {"role": "developer", "content": "dev"},
    ]
    msgs = from_openai(raw)
    assert msgs[1].content == "ab"
    assert msgs[2].tool_calls is not None
    assert msgs[2].tool_calls[0].arguments_dict() == {"x": 1}
    assert msgs[4].role == "tool" and msgs[4].name == "f"
    assert msgs[5].role == "system"
    assert msgs[2].to_openai()["tool_calls"][0]["function"]["name"] == "f"
    assert Message(role="observation", content="r").to_openai()["role"] == "tool"


def test_unknown_role_names_index_and_choices() -> None:
    with pytest.raises(ValidationError, match=r"message 1: unknown role 'bot'; use one of"):
        from_openai([{"role": "user", "content": "x"}, {"role": "bot", "content": "y"}])


def test_bad_arguments_and_parts() -> None:
    with pytest.raises(ValidationError, match=r"message 0: .*JSON object"):
        from_openai(
            [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]
        )
    with pytest.raises(ValidationError, match="image_url"):
        from_openai([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
    with pytest.raises(ValidationError, match="single line"):
        from_openai([{"role": "assistant", "metadata": "a\nb", "content": "x"}])


def test_tool_shapes() -> None:
    fn = {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}
    assert Tool.of({"type": "function", "function": fn}).function == fn
    assert Tool.of(fn).name == "f"
    with pytest.raises(ValueError, match="non-empty 'name'"):
        Tool.of({"description": "no name"})


def test_load_conversation_shapes() -> None:
    conv = load_conversation([{"role": "user", "content": "hi"}])
    assert conv.messages[0].content == "hi"
    with pytest.raises(ValidationError, match="'messages' list"):
        load_conversation({"msgs": []})
    with pytest.raises(ValidationError, match="tool 0"):
        load_conversation({"messages": [], "tools": [{"type": "function"}]})


def test_tool_call_accepts_dict_arguments() -> None:
    call = ToolCall(name="f", arguments={"city": "北京"})  # type: ignore[arg-type]
    assert json.loads(call.arguments) == {"city": "北京"}
    assert call.id.startswith("call_")
