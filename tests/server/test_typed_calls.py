"""Calls whose format carries untyped text (Qwen3-Coder's XML parameters) come back typed by
the request's tool schemas, over chat completions and through the agent loop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from server_helpers import USER_HI
from test_chat_fake import chat

from chatfmt.agent import Agent
from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.tokenizers import load_tokenizer

XML_CALL = (
    "<tool_call>\n<function=count>\n<parameter=n>\n5\n</parameter>\n"
    "<parameter=label>\n5\n</parameter>\n</function>\n</tool_call><|im_end|>"
)
COUNT = {
    "type": "function",
    "function": {
        "name": "count",
        "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "label": {"type": "string"}},
        },
    },
}


def test_chat_completions_type_xml_values_by_the_request_tools() -> None:
    fake = FakeEngine(load_tokenizer("qwen3"), [XML_CALL])
    app = create_app(fake, get_dialect("qwen3-coder"), model_name="m")
    r = chat(app, {"messages": USER_HI, "tools": [COUNT]})
    assert r.status_code == 200, r.text
    call = r.json()["choices"][0]["message"]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"n": 5, "label": "5"}


def test_the_agent_loop_types_them_too() -> None:
    seen: list[dict[str, Any]] = []

    def count(n: int, label: str) -> str:
        seen.append({"n": n, "label": label})
        return "counted"

    from chatfmt.tools import ToolRegistry

    registry = ToolRegistry()
    registry.register(count, description="Count.")
    fake = FakeEngine(load_tokenizer("qwen3"), [XML_CALL, "Done.<|im_end|>"])
    agent = Agent(fake, get_dialect("qwen3-coder"), tools=registry)
    result = asyncio.run(agent.run([{"role": "user", "content": "count"}]))
    assert seen == [{"n": 5, "label": "5"}]
    assert result.conversation.messages[-1].content == "Done."
