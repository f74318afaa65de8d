"""``/v1/responses`` with the tools coding agents send at their defaults (Codex CLI: function
tools, a ``namespace`` tool holding its MCP functions, the hosted ``web_search``): namespaced
functions flattened into the prompt and their calls named back as the client declared them,
hosted tools left out of the prompt and named in the response, over a scripted engine."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.server.responses.tools import flat_name, plan_tools
from chatfmt.store import ResponseStore
from chatfmt.tokenizers import Tokenizer

pytestmark = pytest.mark.anyio

READ = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
    "strict": False,
}
SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Run a command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
}
NAMESPACE = {
    "type": "namespace",
    "name": "mcp__fs__",
    "description": "Files",
    "tools": [READ],
}
#: What Codex CLI sends at its defaults, in shape.
CODEX_TOOLS = [SHELL, NAMESPACE, {"type": "web_search", "external_web_access": False}]
FLAT = "mcp__fs__read_file"
CALL = (
    f'<tool_call>\n{{"name": "{FLAT}", "arguments": {{"path": "a.txt"}}}}\n</tool_call>'
    "<|im_end|>"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _app(tok: Tokenizer, store: ResponseStore | None = None) -> tuple[Any, FakeEngine]:
    def reply(prompt: list[int]) -> str:
        tail = tok.decode(prompt).rsplit("<|im_start|>user\n", 1)[-1]
        return "It says hi.<|im_end|>" if tail.startswith("<tool_response>") else CALL

    engine = FakeEngine(tok, reply)
    app = create_app(engine, get_dialect("qwen2.5"), model_name="m", store=store)
    return app, engine


async def _post(app: Any, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as h:
        return await h.post("/v1/responses", json={"model": "m", **body})


async def test_codex_tools_are_served_and_the_call_names_its_namespace(qwen: Tokenizer) -> None:
    app, engine = _app(qwen)
    r = await _post(app, {"input": "read a.txt", "tools": CODEX_TOOLS, "tool_choice": "auto"})
    assert r.status_code == 200, r.text
    body = r.json()
    [call] = [i for i in body["output"] if i["type"] == "function_call"]
    assert (call["name"], call["namespace"]) == ("read_file", "mcp__fs__")
    assert json.loads(call["arguments"]) == {"path": "a.txt"}
    assert body["tools_left_out"] == [
        {"index": 2, "type": "web_search", "reason": body["tools_left_out"][0]["reason"]}
    ]
    assert "web search" in body["tools_left_out"][0]["reason"]
    prompt = qwen.decode(engine.prompts[-1])
    assert f'"name": "{FLAT}"' in prompt and '"name": "shell"' in prompt
    assert "web_search" not in prompt
    assert body["tools"] == CODEX_TOOLS  # echoed as sent


async def test_a_plain_function_call_has_no_namespace_field(qwen: Tokenizer) -> None:
    def reply(prompt: list[int]) -> str:
        call = '{"name": "shell", "arguments": {"command": "ls"}}'
        return f"<tool_call>\n{call}\n</tool_call><|im_end|>"

    engine = FakeEngine(qwen, reply)
    app = create_app(engine, get_dialect("qwen2.5"), model_name="m", store=None)
    body = (await _post(app, {"input": "ls", "tools": CODEX_TOOLS})).json()
    [call] = [i for i in body["output"] if i["type"] == "function_call"]
    assert call["name"] == "shell" and "namespace" not in call


async def test_streamed_call_names_its_namespace(qwen: Tokenizer) -> None:
    app, _ = _app(qwen)
    r = await _post(app, {"input": "read a.txt", "tools": CODEX_TOOLS, "stream": True})
    events = [
        json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")
    ]
    added = next(e for e in events if e["type"] == "response.output_item.added")
    done = next(e for e in events if e["type"] == "response.output_item.done")
    for item in (added["item"], done["item"]):
        assert (item["name"], item["namespace"]) == ("read_file", "mcp__fs__")
    assert events[0]["response"]["tools_left_out"][0]["type"] == "web_search"
    assert events[-1]["type"] == "response.completed"


async def test_a_namespaced_call_sent_back_renders_under_its_flat_name(qwen: Tokenizer) -> None:
    app, engine = _app(qwen)
    items = [
        {"type": "message", "role": "user", "content": "read a.txt"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "read_file",
            "namespace": "mcp__fs__",
            "arguments": '{"path": "a.txt"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "hi"},
    ]
    r = await _post(app, {"input": items, "tools": CODEX_TOOLS, "store": False})
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["text"] == "It says hi."
    expected = get_dialect("qwen2.5").render(
        [
                {"role": "user", "content": "read a.txt"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": FLAT, "arguments": '{"path": "a.txt"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "hi"},
        ],
        qwen,
        tools=[
                {"type": "function", "function": {k: v for k, v in SHELL.items() if k != "type"}},
                {
                    "type": "function",
                    "function": {**{k: v for k, v in READ.items() if k != "type"}, "name": FLAT},
                },
        ],
    )
    assert engine.prompts[-1] == expected.ids


async def test_a_stored_namespaced_call_continues_under_its_flat_name(qwen: Tokenizer) -> None:
    app, engine = _app(qwen, ResponseStore(":memory:"))
    first = (await _post(app, {"input": "read a.txt", "tools": CODEX_TOOLS})).json()
    [call] = [i for i in first["output"] if i["type"] == "function_call"]
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "hi"}
    second = await _post(
        app, {"input": [output], "tools": CODEX_TOOLS, "previous_response_id": first["id"]}
    )
    assert second.status_code == 200, second.text
    assert second.json()["output"][0]["content"][0]["text"] == "It says hi."
    prompt = qwen.decode(engine.prompts[-1])
    assert prompt.count(f'"name": "{FLAT}"') == 2  # the tool, and the call in the history


async def test_tool_choice_names_a_namespaced_function(qwen: Tokenizer) -> None:
    app, engine = _app(qwen)
    choice = {"type": "function", "name": "read_file", "namespace": "mcp__fs__"}
    r = await _post(app, {"input": "go", "tools": CODEX_TOOLS, "tool_choice": choice})
    assert r.status_code == 200, r.text
    # Without a grammar the forced call is started in the prompt, under the flat name.
    assert qwen.decode(engine.prompts[-1]).endswith(f'{{"name": "{FLAT}", "arguments": ')


async def test_tools_that_cannot_be_served_are_refused_by_name(qwen: Tokenizer) -> None:
    app, _ = _app(qwen)
    clash = {**READ, "name": FLAT}
    cases = [
        ([NAMESPACE, clash], "tools[1]", "two tools"),
        ([{"type": "teleport"}], "tools[0].type", "not supported"),
        ([{"type": "namespace", "name": "x", "tools": "no"}], "tools[0].tools", "list"),
        ([{"type": "namespace", "tools": []}], "tools[0].name", "name"),
    ]
    for tools, param, words in cases:
        r = await _post(app, {"input": "hi", "tools": tools})
        assert r.status_code == 400, (tools, r.text)
        error = r.json()["error"]
        assert error["param"] == param and words in error["message"], error


def test_only_hosted_tools_make_a_request_without_tools() -> None:
    plan = plan_tools([{"type": "web_search"}, {"type": "file_search", "vector_store_ids": []}])
    assert plan.chat_tools is None
    assert [t.type for t in plan.left_out] == ["web_search", "file_search"]


def test_flat_names_trim_underscores_at_the_join() -> None:
    assert flat_name("mcp__fs__", "read") == "mcp__fs__read"
    assert flat_name("crm", "_find") == "crm__find"
    plan = plan_tools([NAMESPACE])
    assert plan.namespaced == {FLAT: ("mcp__fs__", "read_file")}
    assert plan.call_name("read_file", "mcp__fs__") == FLAT
