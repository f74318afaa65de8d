"""Errors under /v1/messages are Anthropic's shape, with Anthropic's types and statuses, and
name what to fix: fields, blocks and tools chatfmt refuses, the API key (x-api-key or bearer),
paths and methods, the body limit, the engine; the OpenAI routes keep their own shape."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

pytest.importorskip("anthropic", reason="the anthropic SDK (a dev dependency) checks the shapes")

from messages_helpers import WEATHER, body, create, error_of, post

from chatfmt.dialects import get_dialect
from chatfmt.server import create_app
from chatfmt.server.http.limits import ServerLimits


def app_of(fake: Any, **kwargs: Any) -> Any:
    return create_app(fake, get_dialect("qwen2.5"), model_name="m", **kwargs)


USE = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}}


@pytest.mark.parametrize(
    ("request_body", "names"),
    [
        ({k: v for k, v in body("hi").items() if k != "max_tokens"}, "max_tokens"),
        ({k: v for k, v in body("hi").items() if k != "model"}, "model"),
        (body("hi", max_tokens=0), "max_tokens"),
        (body("hi", temperature=1.5), "temperature"),
        (body("hi", frequency_penalty=0.5), "frequency_penalty"),
        (body("hi", container="c-1"), "container"),
        (body("hi", stop_sequences=[""]), "stop_sequences.0"),
        ({**body("hi"), "messages": []}, "messages"),
        (body([{"role": "tool", "content": "x"}]), "messages.0.role"),
        (body([{"role": "user", "content": "x", "name": "me"}]), "'name'"),
        (body([{"role": "user"}]), "messages.0"),
        (
            body([{"type": "text", "text": "x"}, {"type": "image", "source": {}}]),
            "messages.0.content.1",
        ),
        (body([{"type": "document", "source": {}}]), "document blocks"),
        (body([{"type": "search_result", "content": []}]), "'search_result'"),
        (body([{"type": "text", "text": "x", "foo": 1}]), "messages.0.content.0.foo"),
        (body([{"type": "text"}]), "messages.0.content.0.text"),
        (body([USE]), "messages.0.content.0.type"),  # a call in a user message
        (
            body(
                [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": [USE]},
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "before"},
                            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"},
                        ],
                    },
                ]
            ),
            "messages.2.content.1",
        ),
        (
            body(
                [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": "The answer is"},
                ]
            ),
            "prefill",
        ),
        (
            body(
                [
                    {"role": "user", "content": "x"},
                    {"role": "assistant", "content": [USE]},
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_9", "content": "r"}
                        ],
                    },
                ],
                tools=[WEATHER],
            ),
            "messages.2.content.0",  # the result of no call: named where the client sent it
        ),
        (body("hi", tools=[{"type": "web_search_20250305", "name": "web_search"}]), "tools.0.type"),
        (body("hi", tools=[{"name": "f"}]), "tools.0.input_schema"),
        (body("hi", tools=[{"name": "bad name", "input_schema": {}}]), "tools.0.name"),
        (body("hi", tools=[{**WEATHER, "defer_loading": True}]), "tools.0.defer_loading"),
        (body("hi", tool_choice={"type": "any"}), "tool_choice"),  # no tools
        (body("hi", tools=[WEATHER], tool_choice={"type": "tool"}), "tool_choice.name"),
        (body("hi", tools=[WEATHER], tool_choice={"type": "tool", "name": "nope"}), "'nope'"),
        (body("hi", tools=[WEATHER], tool_choice={"type": "sometimes"}), "tool_choice.type"),
        (body("hi", thinking={"type": "enabled"}), "thinking.budget_tokens"),
        (body("hi", thinking={"type": "enabled", "budget_tokens": 2048}), "no reasoning"),
        (body("hi", thinking={"type": "adaptive", "display": "full"}), "thinking.display"),
        (body("hi", output_config={"format": {"type": "json_object"}}), "output_config.format"),
    ],
)
def test_a_request_chatfmt_cannot_serve_is_a_400_naming_it(
    make_fake, request_body: dict[str, Any], names: str
) -> None:
    error = error_of(post(app_of(make_fake()), "/v1/messages", request_body), 400)
    assert error["type"] == "invalid_request_error"
    assert names in error["message"], error["message"]


def test_the_key_may_come_as_x_api_key_or_bearer(make_fake) -> None:
    app = app_of(make_fake(), api_key=["key-a", "key-b"])
    create(app, body("hi"), headers={"x-api-key": "key-b"})
    create(app, body("hi"), headers={"Authorization": "Bearer key-a"})
    for headers in ({}, {"x-api-key": "nope"}, {"Authorization": "Bearer nope"}):
        error = error_of(post(app, "/v1/messages", body("hi"), headers=headers), 401)
        assert error["type"] == "authentication_error" and "x-api-key" in error["message"]
    counted = post(app, "/v1/messages/count_tokens", {"model": "m", "messages": []})
    assert error_of(counted, 401)["type"] == "authentication_error"
    # The OpenAI routes still take only the bearer token, and answer in OpenAI's shape.
    r = post(app, "/v1/chat/completions", {"messages": []}, headers={"x-api-key": "key-a"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def request(app: Any, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


def test_paths_methods_and_content_types_answer_in_anthropic_shape(make_fake) -> None:
    app = app_of(make_fake())
    assert error_of(request(app, "POST", "/v1/messages/batches", json={}), 404)["type"] == (
        "not_found_error"
    )
    r = request(app, "GET", "/v1/messages")
    assert error_of(r, 405)["type"] == "invalid_request_error" and r.headers["allow"] == "POST"
    r = request(app, "POST", "/v1/messages", content=b"{}", headers={"content-type": "text/plain"})
    assert "application/json" in error_of(r, 415)["message"]
    r = request(
        app,
        "POST",
        "/v1/messages",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert "not valid JSON" in error_of(r, 400)["message"]
    # Paths that only start alike are not the Messages API's.
    r = request(app, "POST", "/v1/messagesX", json={})
    assert r.status_code == 404 and set(r.json()) == {"error"}


def test_a_body_over_the_limit_is_request_too_large(make_fake) -> None:
    app = app_of(make_fake(), limits=ServerLimits(max_body_bytes=1000))
    error = error_of(post(app, "/v1/messages", body("x" * 2000)), 413)
    assert error["type"] == "request_too_large" and "max-body-mb" in error["message"]
    too_many = ServerLimits(max_messages=2)
    error = error_of(
        post(
            app_of(make_fake(), limits=too_many),
            "/v1/messages",
            body([{"role": "user", "content": "x"}] * 3),
        ),
        400,
    )
    assert "max-messages" in error["message"]


def test_an_engine_that_is_down_is_overloaded(qwen) -> None:
    from chatfmt.engines.fake import FakeEngine
    from chatfmt.errors import EngineUnavailableError

    class Down(FakeEngine):
        async def stream(self, prompt_ids, params):  # type: ignore[no-untyped-def,override]
            raise EngineUnavailableError("the engine is restarting")
            yield  # an async generator

    app = app_of(Down(qwen))
    for streamed in (False, True):
        # A stream fails before its headers: the status says it, as for a whole reply.
        error = error_of(post(app, "/v1/messages", body("hi", stream=streamed)), 503)
        assert error["type"] == "overloaded_error" and "restarting" in error["message"]


def test_the_published_schema_shows_the_messages_bodies_and_errors(make_fake) -> None:
    app = app_of(make_fake())
    doc = request(app, "GET", "/openapi.json").json()
    schemas = doc["components"]["schemas"]
    create_op = doc["paths"]["/v1/messages"]["post"]
    body_ref = create_op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body_ref.endswith("/MessagesRequest")
    assert set(schemas["MessagesRequest"]["required"]) == {"model", "messages", "max_tokens"}
    ok = create_op["responses"]["200"]["content"]
    assert (
        ok["application/json"]["schema"]["$ref"].endswith("/Message") and "text/event-stream" in ok
    )
    for status in ("400", "401", "404", "413", "503"):
        ref = create_op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/MessagesError"), status
    count = doc["paths"]["/v1/messages/count_tokens"]["post"]
    assert count["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/TokenCount"
    )
    # The OpenAI models keep their names (no two published models share one).
    assert not [name for name in schemas if "__" in name]
    assert {"ErrorResponse", "Usage", "MessageUsage"} <= set(schemas)


def test_a_lone_surrogate_anywhere_is_refused_naming_where(make_fake) -> None:
    raw = b'{"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "a\\ud800"}]}'
    r = request(
        app_of(make_fake()),
        "POST",
        "/v1/messages",
        content=raw,
        headers={"content-type": "application/json"},
    )
    error = error_of(r, 400)
    assert error["message"].startswith("messages[0].content contains a lone surrogate")
