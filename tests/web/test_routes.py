"""The web chat's routes over a scripted FakeEngine, through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")
pytestmark = pytest.mark.anyio

from chatfmt.context import Budget  # noqa: E402
from chatfmt.dialects import get_dialect  # noqa: E402
from chatfmt.prompts import default_system_prompt  # noqa: E402
from chatfmt.tokenizers.base import Tokenizer  # noqa: E402
from chatfmt.web import demo_tools  # noqa: E402

from .helpers import PLOT_CODE, build_app, live_server  # noqa: E402

USER = [{"role": "user", "content": "hello"}]
PNG = b"\x89PNG\r\n\x1a\nfake image bytes"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("qwen2.5")


class FakeResult:
    def __init__(self, code: str) -> None:
        self.text = f"ran {len(code)} chars\nplotted"
        self.images = [PNG]
        self.error: str | None = None
        self.timed_out = False

    def observation(self) -> str:
        return self.text + "\n[Image]"


class FakeInterpreter:
    """Records the code it is given; returns text and one PNG."""

    made = 0

    def __init__(self) -> None:
        FakeInterpreter.made += 1
        self.codes: list[str] = []
        self.closed = False

    def execute(self, code: str, timeout: float | None = None) -> FakeResult:
        self.codes.append(code)
        return FakeResult(code)

    def close(self) -> None:
        self.closed = True


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


def events_of(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    out = []
    for block in response.text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: ")
            out.append(json.loads(block[len("data: ") :]))
    return out


async def post_agent(app: Any, **body: Any) -> httpx.Response:
    async with client(app) as c:
        return await c.post("/api/agent", json=body)


# ==== Page and info ====


async def test_page_and_static_files(tok: Tokenizer) -> None:
    app, _ = build_app(tok)
    async with client(app) as c:
        page = await c.get("/")
        js = await c.get("/static/dom.js")  # the only HTML sink
        css = await c.get("/static/app.css")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/static/app.js"' in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "img-src 'self' data:" in csp
    assert js.status_code == 200 and "setHtml" in js.text
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    # Self-contained: nothing is loaded from another origin.
    for text in (page.text, js.text, css.text):
        assert "http://" not in text.replace("http://127.0.0.1", "")
        assert "cdn" not in text.lower()
    # No dynamic code anywhere in the page's script.
    assert not re.search(r"(?<![\w.])eval\s*\(|new\s+Function\s*\(|document\.write", js.text)
    # HTML is only ever assigned from what the server rendered and sanitized (setHtml's html).
    assignments = re.findall(r"(?:inner|outer)HTML\s*=\s*([^;]*)", js.text)
    assert assignments == ["html"]
    # The page is also reachable as a static file: it keeps its protections there.
    async with client(app) as c:
        static_page = await c.get("/static/index.html")
    for r in (page, static_page, js):
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"


async def test_info(tok: Tokenizer) -> None:
    app, engine = build_app(tok, interpreter_factory=FakeInterpreter)
    async with client(app) as c:
        info = (await c.get("/api/info")).json()
    assert info["model"] == "fake-qwen"
    assert info["dialect"] == "qwen2.5"
    assert info["context"] == engine.context_length
    assert [t["function"]["name"] for t in info["tools"]] == ["get_weather", "calculator"]
    assert info["tools"] == demo_tools().openai_tools()
    assert info["interpreter"] is True
    assert info["modes"] == ["chat", "tools", "interpreter"]
    # Each mode's default system prompt, which the page shows and sends.
    assert info["system_prompts"] == {
        "chat": None,
        "tools": default_system_prompt("tools"),
        "interpreter": default_system_prompt("interpreter"),
    }
    assert info["system_prompts"]["tools"]


async def test_info_without_tools_or_interpreter(tok: Tokenizer) -> None:
    from fastapi import FastAPI

    from chatfmt.engines.fake import FakeEngine
    from chatfmt.web import mount_web

    app = FastAPI()
    mount_web(app, engine=FakeEngine(tok), dialect=get_dialect("qwen2.5"), model_name="m")
    async with client(app) as c:
        info = (await c.get("/api/info")).json()
        r = await c.post("/api/agent", json={"messages": USER, "mode": "tools"})
    assert info["tools"] == [] and info["interpreter"] is False and info["modes"] == ["chat"]
    assert r.status_code == 400 and "no tools" in r.json()["error"]["message"]


# ==== Counting ====


async def test_count_is_exact(tok: Tokenizer) -> None:
    app, engine = build_app(tok)
    budget = Budget(get_dialect("qwen2.5"), tok)
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "Let me check. <|im_start|> is just text here."},
        {"role": "user", "content": "Thanks 你好"},
    ]
    system = [{"role": "system", "content": "Be brief."}]
    tools = demo_tools().openai_tools()
    async with client(app) as c:
        plain = (await c.post("/api/count", json={"messages": messages})).json()
        with_tools = (
            await c.post("/api/count", json={"messages": messages, "tools": tools})
        ).json()
        by_mode = (await c.post("/api/count", json={"messages": messages, "mode": "tools"})).json()
        with_system = (
            await c.post("/api/count", json={"messages": messages, "system": "Be brief."})
        ).json()
        interp = await c.post("/api/count", json={"messages": messages, "mode": "interpreter"})
        empty = (await c.post("/api/count", json={"messages": []})).json()
    assert plain == {"tokens": budget.count(messages), "context": engine.context_length}
    assert with_tools["tokens"] == budget.count(messages, tools=tools) > plain["tokens"]
    assert by_mode == with_tools
    assert with_system["tokens"] == budget.count(system + messages)
    # Qwen2.5 asks for runs with fenced blocks: interpreter mode shows it no tool definition.
    assert interp.json()["tokens"] == budget.count(messages) == plain["tokens"]
    assert empty["tokens"] > 0  # the default system prompt and the generation prompt


async def test_count_rejects_bad_input(tok: Tokenizer) -> None:
    app, _ = build_app(tok)
    async with client(app) as c:
        bad_role = await c.post("/api/count", json={"messages": [{"role": "x", "content": "a"}]})
        bad_body = await c.post("/api/count", json={"nope": 1})
        not_json = await c.post("/api/count", content="{}", headers={"content-type": "text/plain"})
        nan = await c.post(
            "/api/count",
            content='{"messages": [], "tools": [{"x": NaN}]}',
            headers={"content-type": "application/json"},
        )
    assert bad_role.status_code == 400 and "role" in bad_role.json()["error"]["message"]
    assert bad_body.status_code == 400
    assert bad_body.json()["error"]["message"] == "messages: Field required"
    assert not_json.status_code == 415
    assert nan.status_code == 400 and "contains NaN" in nan.json()["error"]["message"]
    # Errors have OpenAI's shape, as the API's do.
    for r in (bad_role, bad_body, not_json, nan):
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


# ==== The agent stream ====


async def test_agent_chat_streams_text(tok: Tokenizer) -> None:
    app, engine = build_app(tok)
    events = events_of(await post_agent(app, messages=USER, mode="chat"))
    kinds = [e["type"] for e in events]
    assert kinds[-2:] == ["turn", "done"]
    assert set(kinds[:-2]) == {"text"} and len(kinds) > 10  # streamed token by token
    text = "".join(e["text"] for e in events if e["type"] == "text")
    assert text.startswith("Hello! Here is **bold**")
    assert "<script>" in text  # text is passed through; the page escapes it
    done = events[-1]
    assert done["stopped"] == "answer"
    assert done["messages"] == [{"role": "assistant", "content": text}]
    assert events[-2]["messages"] == done["messages"]
    # Chat mode offers no tools to the model.
    assert "<tools>" not in tok.decode(engine.prompts[0])


async def test_agent_system_prompt_replaces_default(tok: Tokenizer) -> None:
    app, engine = build_app(tok)
    events_of(await post_agent(app, messages=USER, system="You are a pirate."))
    prompt = tok.decode(engine.prompts[0])
    assert prompt.startswith("<|im_start|>system\nYou are a pirate.<|im_end|>")


async def test_agent_tool_call_and_result(tok: Tokenizer) -> None:
    app, engine = build_app(tok)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    events = events_of(await post_agent(app, messages=messages, mode="tools"))
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["tool_call_start", "turn", "tool_call", "tool_result"]
    assert kinds[-2:] == ["turn", "done"]
    start, turn, call, result = events[:4]
    assert start["name"] == call["name"] == "get_weather"
    assert start["id"] == call["id"] == result["id"]
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    assert "stream_id" not in call
    assert result["ok"] is True and result["images"] == []
    assert json.loads(result["content"])["source"].startswith("demo data")
    assert turn["finish_reason"] == "tool_calls"
    done = events[-1]
    assert [m["role"] for m in done["messages"]] == ["assistant", "tool", "assistant"]
    assert done["messages"][0]["tool_calls"][0]["id"] == call["id"]
    assert done["messages"][1] == result["message"]
    assert done["messages"][1]["tool_call_id"] == call["id"]
    assert done["messages"][2]["content"] == "It is demo weather in Paris."
    # Tool mode offers the registry's tools; the second prompt carries the result.
    assert '"name": "get_weather"' in tok.decode(engine.prompts[0])
    assert "<tool_response>" in tok.decode(engine.prompts[1])
    # The browser sends the conversation back: it validates and continues.
    history = messages + done["messages"] + [{"role": "user", "content": "hello again"}]
    again = events_of(await post_agent(app, messages=history, mode="tools"))
    assert again[-1]["type"] == "done"


async def test_agent_interpreter_streams_code_and_images(tok: Tokenizer) -> None:
    FakeInterpreter.made = 0
    app, _ = build_app(tok, interpreter_factory=FakeInterpreter)
    sessions = app.state.chatfmt_web_sessions
    try:
        body = {"messages": [{"role": "user", "content": "plot it"}], "mode": "interpreter"}
        events = events_of(await post_agent(app, conversation_id="conv-aaaaaaaa", **body))
        code = json.loads('"' + PLOT_CODE + '"')
        deltas = [e for e in events if e["type"] == "code_delta"]
        assert len(deltas) > 5
        assert "".join(e["text"] for e in deltas) == code
        start = next(e for e in events if e["type"] == "tool_call_start")
        assert start["name"] == "interpreter" and {e["id"] for e in deltas} == {start["id"]}
        result = next(e for e in events if e["type"] == "tool_result")
        assert result["ok"] is True
        assert [base64.b64decode(i) for i in result["images"]] == [PNG]
        assert "plotted" in result["content"]
        assert events[-1]["type"] == "done"
        # Same conversation: same kernel; another conversation: its own.
        events_of(await post_agent(app, conversation_id="conv-aaaaaaaa", **body))
        assert FakeInterpreter.made == 1 and len(sessions) == 1
        events_of(await post_agent(app, conversation_id="conv-bbbbbbbb", **body))
        assert FakeInterpreter.made == 2 and len(sessions) == 2
    finally:
        await sessions.close_all()
    assert len(sessions) == 0


async def test_interpreter_needs_a_conversation_id(tok: Tokenizer) -> None:
    app, _ = build_app(tok, interpreter_factory=FakeInterpreter)
    for cid in (None, "short", "bad id with spaces!", "conv-aaaaaaaa\n"):
        r = await post_agent(app, messages=USER, mode="interpreter", conversation_id=cid)
        assert r.status_code == 400
        assert "conversation_id" in r.json()["error"]["message"]


async def test_agent_errors(tok: Tokenizer) -> None:
    app, _ = build_app(tok)
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"messages": [], "mode": "chat"}, 400, "messages"),
        ({"messages": USER, "mode": "nonsense"}, 400, "mode"),
        ({"messages": USER, "mode": "interpreter"}, 400, "interpreter"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
        (
            {"messages": [*USER, {"role": "tool", "content": "x", "tool_call_id": "nope"}]},
            400,
            "unknown call id",
        ),
        ({"messages": USER, "surprise": True}, 400, "surprise"),
    ]
    for body, status, word in cases:
        r = await post_agent(app, **body)
        assert r.status_code == status, (body, r.text)
        assert word in r.json()["error"]["message"], (body, r.text)
    deep = '{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}"
    async with client(app) as c:
        for path in ("/api/agent", "/api/count"):
            r = await c.post(path, content=deep, headers={"content-type": "application/json"})
            assert r.status_code == 400, r.text


async def test_agent_rejects_cross_site_posts(tok: Tokenizer) -> None:
    app, _ = build_app(tok)
    body = json.dumps({"messages": USER})
    async with client(app) as c:
        plain = await c.post("/api/agent", content=body, headers={"content-type": "text/plain"})
        other = await c.post(
            "/api/agent",
            content=body,
            headers={"content-type": "application/json", "origin": "http://evil.example"},
        )
        same = await c.post(
            "/api/agent",
            content=body,
            headers={"content-type": "application/json", "origin": "http://127.0.0.1"},
        )
    assert plain.status_code == 415
    assert other.status_code == 403
    assert other.json()["error"]["type"] == "permission_error"
    assert same.status_code == 200


@pytest.mark.parametrize("allowed", [None, ["chat.example.org"]])
async def test_dns_rebinding_pages_are_refused(tok: Tokenizer, allowed: list[str] | None) -> None:
    """A page that rebinds its own name to 127.0.0.1 is same-origin with itself; its Host is
    what gives it away. Loopback names only by default; mount_web(allowed_hosts=...) adds."""
    kwargs = {} if allowed is None else {"allowed_hosts": allowed}
    app, _ = build_app(tok, interpreter_factory=FakeInterpreter, **kwargs)
    body = json.dumps({"messages": USER, "mode": "interpreter", "conversation_id": "conv-abcdefgh"})
    results = {}
    for host in ("attacker.example:8000", "chat.example.org", "127.0.0.1:8000", "[::1]:8000"):
        async with client(app) as c:
            r = await c.post(
                "/api/agent",
                content=body,
                headers={
                    "host": host,
                    "origin": f"http://{host}",
                    "content-type": "application/json",
                },
            )
        results[host] = r.status_code
    if allowed is None:  # the default: loopback names
        assert results == {
            "attacker.example:8000": 403,
            "chat.example.org": 403,
            "127.0.0.1:8000": 200,
            "[::1]:8000": 200,
        }
    else:
        assert results["chat.example.org"] == 200 and results["attacker.example:8000"] == 403
        assert results["127.0.0.1:8000"] == 403  # only the names given


async def test_count_checks_tools_as_the_api_does(tok: Tokenizer) -> None:
    app, _ = build_app(tok)
    bad = [{"type": "function", "function": {"name": "f", "parameters": 5}}]
    async with client(app) as c:
        r = await c.post("/api/count", json={"messages": USER, "tools": bad})
    assert r.status_code == 400 and "tool 0" in r.json()["error"]["message"]


async def test_posts_need_the_json_content_type(tok: Tokenizer) -> None:
    """No content type, or a form, is refused before anything runs; a charset is fine."""
    app, engine = build_app(tok)
    body = json.dumps({"messages": USER})
    async with client(app) as c:
        for path in ("/api/agent", "/api/count"):
            bare = await c.post(path, content=body)
            form = await c.post(
                path, content=body, headers={"content-type": "application/x-www-form-urlencoded"}
            )
            for r in (bare, form):
                assert r.status_code == 415, r.text
                assert r.json()["error"]["code"] == "unsupported_media_type"
        assert engine.prompts == []
        utf8 = await c.post(
            "/api/agent", content=body, headers={"content-type": "application/json; charset=utf-8"}
        )
    assert events_of(utf8)[-1]["type"] == "done"


async def test_openapi_declares_the_api_bodies(tok: Tokenizer) -> None:
    app, _ = build_app(tok)
    async with client(app) as c:
        doc = (await c.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    for path, model in (("/api/count", "CountRequest"), ("/api/agent", "AgentRequest")):
        post = doc["paths"][path]["post"]
        body = post["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{model}"}
        assert "messages" in schemas[model]["properties"]
        assert {"400", "401", "403", "415"} <= set(post["responses"])
    count_ok = doc["paths"]["/api/count"]["post"]["responses"]["200"]["content"]
    assert count_ok["application/json"]["schema"]["$ref"].endswith("/CountResponse")
    assert "text/event-stream" in doc["paths"]["/api/agent"]["post"]["responses"]["200"]["content"]
    info_ok = doc["paths"]["/api/info"]["get"]["responses"]["200"]["content"]
    assert info_ok["application/json"]["schema"]["$ref"].endswith("/InfoResponse")
    assert "/" not in doc["paths"]  # the page is not part of the API


async def test_web_on_the_api_app_publishes_both(tok: Tokenizer) -> None:
    """As `chatfmt serve` mounts it: one document with the API's and the page's bodies."""
    from chatfmt.engines.fake import FakeEngine
    from chatfmt.server import create_app
    from chatfmt.web import mount_web

    engine = FakeEngine(tok)
    app = create_app(engine, get_dialect("qwen2.5"), model_name="m")
    mount_web(app, engine=engine, dialect=get_dialect("qwen2.5"), model_name="m")
    async with client(app) as c:
        doc = (await c.get("/openapi.json")).json()
        wrong_method = await c.get("/api/agent")
    schemas = doc["components"]["schemas"]
    assert {"ChatCompletionRequest", "CountRequest", "AgentRequest"} <= set(schemas)
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"


async def test_engine_failure_is_an_error_event(tok: Tokenizer) -> None:
    app, engine = build_app(tok)
    engine.fail_after = 3
    events = events_of(await post_agent(app, messages=USER))
    assert [e["type"] for e in events] == ["text", "text", "text", "error"]
    assert "failed as scripted" in events[-1]["message"]


async def test_context_overflow_is_an_error_event(tok: Tokenizer) -> None:
    app, _ = build_app(tok, context_length=1100)  # max_tokens 1024 leaves almost no room
    events = events_of(await post_agent(app, messages=[{"role": "user", "content": "x " * 200}]))
    assert [e["type"] for e in events] == ["error"]
    assert "context" in events[0]["message"]


def test_client_disconnect_cancels_generation(tok: Tokenizer) -> None:
    """A real server: closing the connection mid-stream stops the engine."""
    app, engine = build_app(tok, delay=0.02)
    with live_server(app) as url, httpx.Client(base_url=url, timeout=10) as c:
        body = {"messages": [{"role": "user", "content": "slow please"}]}
        with c.stream("POST", "/api/agent", json=body) as r:
            assert r.status_code == 200
            got = 0
            for line in r.iter_lines():
                if line.startswith("data: "):
                    got += 1
                if got >= 3:
                    break
        for _ in range(100):
            if engine.cancelled:
                break
            time.sleep(0.05)
        assert engine.cancelled == 1 and engine.finished == 0


async def test_agent_events_closes_the_loop(tok: Tokenizer) -> None:
    """Abandoning the event stream closes the agent loop and so the engine stream."""
    from chatfmt.agent import Agent
    from chatfmt.web.page_events import agent_events

    _, engine = build_app(tok, delay=0.01)
    agent = Agent(engine, get_dialect("qwen2.5"))
    stream: AsyncIterator[dict[str, Any]] = agent_events(
        agent, _conv([{"role": "user", "content": "slow"}])
    )
    first = await stream.__anext__()
    assert first["type"] == "text"
    await stream.aclose()  # type: ignore[attr-defined]
    await asyncio.sleep(0.05)
    assert engine.cancelled == 1


def _conv(messages: list[dict[str, Any]]) -> Any:
    from chatfmt.messages import as_conversation

    return as_conversation(messages)


async def test_api_key(tok: Tokenizer) -> None:
    app, _ = build_app(tok, api_key="s3cret")
    good = {"authorization": "Bearer s3cret"}
    async with client(app) as c:
        assert (await c.get("/")).status_code == 200  # the page itself is public
        assert (await c.get("/static/app.js")).status_code == 200
        assert (await c.get("/api/info")).status_code == 401
        assert (
            await c.get("/api/info", headers={"authorization": "Bearer nope"})
        ).status_code == 401
        assert (await c.get("/api/info", headers=good)).status_code == 200
        denied = await c.post("/api/agent", json={"messages": USER})
        # The same check, and so the same answer, as the OpenAI API's.
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"
        assert "Authorization: Bearer <key>" in denied.json()["error"]["message"]
        assert (await c.post("/api/count", json={"messages": USER})).status_code == 401
        assert (
            await c.post("/api/count", json={"messages": USER}, headers=good)
        ).status_code == 200
        ok = await c.post("/api/agent", json={"messages": USER}, headers=good)
    assert events_of(ok)[-1]["type"] == "done"


async def test_factory_failure_is_a_503_before_the_stream(tok: Tokenizer) -> None:
    from chatfmt.errors import InterpreterError

    def broken() -> FakeInterpreter:
        raise InterpreterError("no kernel today")

    app, _ = build_app(tok, interpreter_factory=broken)
    r = await post_agent(app, messages=USER, mode="interpreter", conversation_id="conv-broken")
    assert r.status_code == 503, r.text
    assert r.json()["error"]["message"] == "no kernel today"
    assert r.json()["error"]["code"] == "interpreter_unavailable"
    await app.state.chatfmt_web_sessions.close_all()
