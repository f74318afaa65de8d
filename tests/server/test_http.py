"""Request checks shared by the API and the web chat: JSON content type, JSON numbers, API key."""

from __future__ import annotations

import json

import pytest
from server_helpers import USER_HI
from test_chat_fake import request
from test_errors import assert_openai_error

from chatfmt.server import create_app
from chatfmt.server.chat.schemas import ChatCompletionRequest
from chatfmt.server.http.bodies import parse_json_body

BODY = json.dumps({"messages": USER_HI}).encode()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        "application/json; charset=latin-1",
    ],
)
def test_json_posts_need_the_json_content_type(
    make_fake, qwen_dialect, path: str, content_type: str | None
) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    headers = {} if content_type is None else {"content-type": content_type}
    r = request(app, "POST", path, content=BODY, headers=headers)
    err = assert_openai_error(r, 415)
    assert err["code"] == "unsupported_media_type"
    assert "Content-Type: application/json" in err["message"]
    assert (repr(content_type) if content_type else "no Content-Type") in err["message"]
    assert fake.prompts == []


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", 'Application/JSON;Charset="UTF-8"'],
)
def test_json_content_type_with_or_without_charset(
    make_fake, qwen_dialect, content_type: str
) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    r = request(
        app, "POST", "/v1/chat/completions", content=BODY, headers={"content-type": content_type}
    )
    assert r.status_code == 200, r.text


def test_api_key_is_checked_before_the_body(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m", api_key="k")
    r = request(
        app, "POST", "/v1/chat/completions", content=b"x", headers={"content-type": "text/plain"}
    )
    assert assert_openai_error(r, 401)["code"] == "invalid_api_key"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "-1e999"])
@pytest.mark.parametrize(
    "template",
    [
        '{"messages": [{"role": "user", "content": "hi"}], "temperature": %s}',
        '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": %s}',
        # Inside a tool's parameters this used to reach the renderer and answer 500.
        '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", '
        '"function": {"name": "f", "parameters": {"type": "object", "default": %s}}}]}',
    ],
    ids=["temperature", "max_tokens", "tool-parameters"],
)
def test_non_finite_numbers_are_named(
    make_fake, qwen_dialect, constant: str, template: str
) -> None:
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    body = (template % constant).encode()
    r = request(
        app,
        "POST",
        "/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
    )
    err = assert_openai_error(r, 400)
    assert err["code"] == "invalid_json"
    message = err["message"]
    reason = "is too large" if "e" in constant else "is not a JSON number"
    assert f"contains {constant}, which {reason}" in message
    assert "send a finite number" in message
    assert fake.prompts == []


def test_parse_json_body_rules() -> None:
    ok = parse_json_body(BODY, ChatCompletionRequest)
    assert ok.messages == USER_HI
    cases: list[tuple[bytes, str]] = [
        (b"{", "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b"[1]", "must be a JSON object, got list"),
        (b'{"messages": "hi"}', "messages: Input should be a valid list"),
        (b'{"messages": [], "temperature": 1e999}', "contains 1e999, which is too large"),
    ]
    from chatfmt.server.http.errors import ApiError

    for body, words in cases:
        with pytest.raises(ApiError) as info:
            parse_json_body(body, ChatCompletionRequest)
        assert info.value.status == 400 and words in info.value.message, (body, info.value.message)


def test_bodies_must_be_utf8(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    headers = {"content-type": "application/json"}
    text = json.dumps({"messages": USER_HI})
    utf16 = request(
        app, "POST", "/v1/chat/completions", content=text.encode("utf-16"), headers=headers
    )
    assert_openai_error(utf16, 400)
    bom = request(
        app,
        "POST",
        "/v1/chat/completions",
        content=b"\xef\xbb\xbf" + text.encode(),
        headers=headers,
    )
    assert bom.status_code == 200
