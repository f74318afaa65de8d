"""Bad input never reaches the engine and never causes a 5xx: 4xx in OpenAI's error shape."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_helpers import USER_HI, WEATHER_TOOL

from chatfmt.server import create_app
from profiles import examples


def post_raw(app: Any, content: bytes, *, path: str = "/v1/chat/completions") -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(
                path, content=content, headers={"content-type": "application/json"}
            )

    return asyncio.run(go())


def assert_openai_error(r: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    return dict(err)


def msg(**kw: Any) -> dict[str, Any]:
    return {"messages": USER_HI, **kw}


BAD_BODIES: list[tuple[str, Any, str | None]] = [
    ("not-json", b"{bad json", None),
    ("empty-body", b"", None),
    ("array", [], None),
    ("string", "hello", None),
    ("no-messages", {"model": "m"}, "messages"),
    ("messages-string", {"messages": "hi"}, "messages"),
    ("messages-empty", {"messages": []}, "messages"),
    ("message-not-object", {"messages": ["hi"]}, "messages"),
    ("unknown-role", {"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
    ("missing-role", {"messages": [{"content": "x"}]}, "messages"),
    ("content-int", {"messages": [{"role": "user", "content": 5}]}, "messages"),
    (
        "image-part",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        "messages",
    ),
    ("max-tokens-string", msg(max_tokens="ten"), "max_tokens"),
    ("max-tokens-zero", msg(max_tokens=0), "max_tokens"),
    ("max-tokens-negative", msg(max_tokens=-5), "max_tokens"),
    ("max-tokens-float", msg(max_tokens=1.5), "max_tokens"),
    ("max-tokens-bool", msg(max_tokens=True), "max_tokens"),
    # (A huge max_tokens is bounded by the room left, not refused: test_room_left.py.)
    ("temperature-string", msg(temperature="hot"), "temperature"),
    ("temperature-range", msg(temperature=7), "temperature"),
    ("top-p-zero", msg(top_p=0), "top_p"),
    ("stream-string", msg(stream="yes"), "stream"),
    ("n-two", msg(n=2), "n"),
    ("seed-string", msg(seed="x"), "seed"),
    ("stop-int", msg(stop=5), None),
    ("tools-not-list", msg(tools={"a": 1}), "tools"),
    ("tool-no-function", msg(tools=[{"type": "function"}]), None),
    ("tool-empty-name", msg(tools=[{"type": "function", "function": {"name": ""}}]), None),
    ("tool-choice-bogus", msg(tools=[WEATHER_TOOL], tool_choice="sometimes"), None),
    ("stream-options-bad", msg(stream=True, stream_options={"include_usage": "yes"}), None),
    (
        "tool-result-unknown-call",
        {"messages": [*USER_HI, {"role": "tool", "tool_call_id": "nope", "content": "1"}]},
        "messages",
    ),
    (
        "bad-tool-call-arguments",
        {
            "messages": [
                *USER_HI,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{"}}
                    ],
                },
            ]
        },
        "messages",
    ),
]


@pytest.mark.parametrize(
    ("body", "param"), [(b, p) for _, b, p in BAD_BODIES], ids=[i for i, _, _ in BAD_BODIES]
)
def test_bad_request_is_400(make_fake, qwen_dialect, body: Any, param: str | None) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    err = assert_openai_error(post_raw(app, raw))
    assert err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] is not None and err["param"].startswith(param)
    assert fake.prompts == [], "a bad request must not reach the engine"


def test_not_found_and_method_shapes(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    assert_openai_error(post_raw(app, b"{}", path="/v1/nope"), 404)

    async def call(method: str, path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.request(method, path)

    # A 405 says which methods the route takes (RFC 9110 requires Allow).
    for method, path, allowed in [
        ("GET", "/v1/chat/completions", "POST"),
        ("DELETE", "/tokenize", "POST"),
        ("POST", "/v1/models", "GET"),
        ("PUT", "/health", "GET"),
    ]:
        r = asyncio.run(call(method, path))
        assert_openai_error(r, 405)
        assert r.headers["allow"] == allowed, (method, path, r.headers)


def test_unknown_model_name_is_ignored(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    r = post_raw(app, json.dumps(msg(model="gpt-4o")).encode())
    assert r.status_code == 200
    assert r.json()["model"] == "m"


def test_unused_openai_fields_are_accepted(make_fake, qwen_dialect) -> None:
    # Fields that change nothing here (sampling fields at their "off" values among them);
    # a sampling field the engine cannot honour is refused (tests/server/test_chat_sampling.py).
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    body = msg(user="u1", presence_penalty=0, logprobs=False, parallel_tool_calls=True, n=1)
    assert post_raw(app, json.dumps(body).encode()).status_code == 200


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
FIELDS = [
    "messages",
    "tools",
    "tool_choice",
    "stop",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "n",
    "stream",
    "stream_options",
    "model",
    "max_completion_tokens",
]


@settings(max_examples=examples(0.75), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    fields=st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=5),
    role=st.sampled_from(["user", "system", "assistant", "tool", "developer", "function", "x", 3]),
    content=json_values,
)
def test_fuzzed_requests_never_5xx(
    make_fake, qwen_dialect, fields: dict[str, Any], role: Any, content: Any
) -> None:
    body = {"messages": [{"role": role, "content": content}], **fields}
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    r = post_raw(app, json.dumps(body).encode())
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        assert_openai_error(r, r.status_code)


def test_deeply_nested_json_is_a_400(make_fake, qwen_dialect) -> None:  # type: ignore[no-untyped-def]
    from test_chat_fake import request

    from chatfmt.server import create_app

    app = create_app(make_fake(), qwen_dialect, model_name="m")
    deep = '{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}"
    r = request(
        app,
        "POST",
        "/v1/chat/completions",
        content=deep,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
