"""/openapi.json shows the real request and response bodies, so client generators and fuzzers
can use it, and only status codes the server answers."""

from __future__ import annotations

from typing import Any

from server_helpers import USER_HI
from test_chat_fake import chat, request

from chatfmt.server import create_app
from chatfmt.server.chat.schemas import ChatCompletionRequest

JSON = "application/json"


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def component(doc: dict[str, Any], ref: str) -> dict[str, Any]:
    prefix = "#/components/schemas/"
    assert ref.startswith(prefix), ref
    schemas: dict[str, Any] = doc["components"]["schemas"]
    return dict(schemas[ref.removeprefix(prefix)])


def openapi(make_fake, qwen_dialect) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    r = request(app, "GET", "/openapi.json")
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


def test_chat_completions_declares_its_bodies(make_fake, qwen_dialect) -> None:
    doc = openapi(make_fake, qwen_dialect)
    post = doc["paths"]["/v1/chat/completions"]["post"]
    body = post["requestBody"]
    assert body["required"] is True
    assert body["content"][JSON]["schema"] == {"$ref": "#/components/schemas/ChatCompletionRequest"}
    request_schema = component(doc, body["content"][JSON]["schema"]["$ref"])
    assert request_schema["required"] == ["messages"]
    assert {"messages", "tools", "tool_choice", "stream", "max_tokens"} <= set(
        request_schema["properties"]
    )
    ok = post["responses"]["200"]["content"]
    completion = component(doc, ok[JSON]["schema"]["$ref"])
    assert completion["title"] == "ChatCompletion"
    assert {"id", "object", "created", "model", "choices", "usage"} == set(completion["properties"])
    assert "text/event-stream" in ok
    for status in ("400", "401", "415", "502", "503"):
        error = post["responses"][status]["content"][JSON]["schema"]
        assert component(doc, error["$ref"])["title"] == "ErrorResponse"


def test_every_route_has_bodies_and_refs_resolve(make_fake, qwen_dialect) -> None:
    doc = openapi(make_fake, qwen_dialect)
    for ref in refs(doc):
        component(doc, ref)  # raises if the reference dangles
    tokenize = doc["paths"]["/tokenize"]["post"]
    assert tokenize["requestBody"]["content"][JSON]["schema"]["$ref"].endswith(
        "/ChatCompletionRequest"
    )
    for path, method, title in [
        ("/tokenize", "post", "TokenizeResponse"),
        ("/v1/models", "get", "ModelList"),
        ("/v1/models/{model_id}", "get", "ModelCard"),
        ("/health", "get", "HealthResponse"),
    ]:
        schema = doc["paths"][path][method]["responses"]["200"]["content"][JSON]["schema"]
        assert component(doc, schema["$ref"])["title"] == title, path
    # The published chunk model, for clients that decode the stream.
    assert "ChatCompletionChunk" in doc["components"]["schemas"]
    # Validation errors are answered with 400, never FastAPI's 422.
    for path in doc["paths"].values():
        for operation in path.values():
            assert "422" not in operation["responses"]
    assert "HTTPValidationError" not in doc["components"]["schemas"]


def test_published_request_schema_is_the_model(make_fake, qwen_dialect) -> None:
    doc = openapi(make_fake, qwen_dialect)
    published = doc["components"]["schemas"]["ChatCompletionRequest"]
    expected = ChatCompletionRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    expected.pop("$defs")
    assert published == expected


def test_responses_only_use_published_fields(make_fake, qwen_dialect) -> None:
    doc = openapi(make_fake, qwen_dialect)
    app = create_app(make_fake(), qwen_dialect, model_name="m")
    body = chat(app, {"messages": USER_HI}).json()
    schemas = doc["components"]["schemas"]

    def check(value: Any, schema: dict[str, Any]) -> None:
        if "$ref" in schema:
            schema = component(doc, schema["$ref"])
        if "anyOf" in schema:
            options = [o for o in schema["anyOf"] if o.get("type") != "null" or value is None]
            schema = options[0]
        if isinstance(value, dict):
            assert set(value) <= set(schema["properties"]), (value, schema)
            assert set(schema.get("required", ())) <= set(value)
            for key, item in value.items():
                check(item, schema["properties"][key])
        elif isinstance(value, list):
            for item in value:
                check(item, schema["items"])

    check(body, schemas["ChatCompletion"])
