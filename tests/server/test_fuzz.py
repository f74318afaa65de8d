"""Fuzzing the server: every operation /openapi.json declares, with bodies generated from its
schemas (schemathesis), and Responses API input items generated with their real shapes
(hypothesis). Whatever arrives, the answer is never a 5xx. The example counts follow the
profile (``tests/profiles.py``): a quarter of it per operation."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles import examples

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a test dependency")

from server_helpers import USER_HI  # noqa: E402
from test_chat_fake import request  # noqa: E402

from chatfmt.dialects import get_dialect  # noqa: E402
from chatfmt.engines.fake import FakeEngine  # noqa: E402
from chatfmt.server import create_app  # noqa: E402
from chatfmt.store import ResponseStore  # noqa: E402
from chatfmt.tokenizers import load_tokenizer  # noqa: E402
from chatfmt.web import mount_web  # noqa: E402

KEY = "fuzz-key-a"
AUTH = {"Authorization": f"Bearer {KEY}"}
REPLIES = (
    "Hello there!<|im_end|>",
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa',
    '{"a": [1, 2, {"b": "c"}]}<|im_end|>',
)


def _app() -> Any:
    tok = load_tokenizer("qwen2.5")
    dialect = get_dialect("qwen2.5")
    # A store in a directory of its own (deleted with the process's temporary files).
    folder = Path(tempfile.mkdtemp(prefix="chatfmt-fuzz-"))
    store = ResponseStore(folder / "store.db", max_mb=4)
    engine = FakeEngine(tok, REPLIES, grammar_support="lazy", context_length=4096)
    app = create_app(engine, dialect, model_name="m", api_key=[KEY, "fuzz-key-b"], store=store)
    mount_web(
        app,
        engine=engine,
        dialect=dialect,
        model_name="m",
        api_key=[KEY, "fuzz-key-b"],
        store=store,
    )
    return app


APP = _app()
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
SENT: list[int] = []


@SCHEMA.parametrize()
@settings(
    max_examples=examples(0.25),
    suppress_health_check=list(HealthCheck),
)
def test_no_operation_answers_5xx(case: Any) -> None:
    response = case.call(headers=AUTH)
    SENT.append(response.status_code)
    assert response.status_code < 500, (case.method, case.path, response.text[:500])


# ==== Responses API input items, with their real shapes ====

_text = st.text(max_size=40)
_id = st.one_of(st.none(), st.text(alphabet="abcdefgh_0123", min_size=0, max_size=12))
_role = st.sampled_from(["user", "assistant", "system", "developer", "tool", "nobody"])
_content = st.one_of(
    _text,
    st.lists(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["input_text", "output_text", "input_image", "x"])},
            optional={"text": st.one_of(_text, st.integers(), st.none())},
        ),
        max_size=3,
    ),
    st.none(),
    st.integers(),
)
_arguments = st.one_of(
    st.just("{}"),
    st.just('{"city": "Paris"}'),
    st.just('{"city": "Pa'),
    _text,
    st.none(),
)


def _part(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"type": st.just(kind), "text": _text})


_item = st.one_of(
    st.fixed_dictionaries(
        {"role": _role, "content": _content}, optional={"type": st.just("message")}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "name": st.one_of(_text, st.none()),
            "arguments": _arguments,
        },
        optional={"call_id": _id, "id": _id},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "output": st.one_of(_text, st.integers())},
        optional={"call_id": _id},
    ),
    st.fixed_dictionaries(
        {"type": st.just("reasoning")},
        optional={
            "summary": st.lists(_part("summary_text"), max_size=2),
            "content": st.lists(_part("reasoning_text"), max_size=2),
            "encrypted_content": st.one_of(_text, st.just("e30")),
        },
    ),
    st.dictionaries(st.sampled_from(["type", "role", "id", "status"]), _text, max_size=3),
)


@given(
    items=st.lists(_item, max_size=6),
    stream=st.booleans(),
    extra=st.fixed_dictionaries(
        {},
        optional={
            "instructions": _text,
            "tool_choice": st.sampled_from(["auto", "none", "required"]),
            "max_output_tokens": st.integers(min_value=-1, max_value=64),
            "store": st.booleans(),
            "include": st.lists(st.sampled_from(["reasoning.encrypted_content", "x"]), max_size=2),
            "tools": st.just(
                [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
            ),
        },
    ),
)
@settings(suppress_health_check=list(HealthCheck))
def test_generated_responses_items_never_5xx(
    items: list[dict[str, Any]], stream: bool, extra: dict[str, Any]
) -> None:
    body = {"model": "m", "input": items, "stream": stream, **extra}
    r = request(APP, "POST", "/v1/responses", json=body, headers=AUTH)
    SENT.append(r.status_code)
    assert r.status_code < 500, (body, r.text[:500])
    if stream and r.status_code == 200:
        assert '"type":"error"' not in r.text.replace(" ", ""), r.text[-500:]


def test_a_plain_chat_still_answers() -> None:
    # The fuzz app is a real app: an ordinary request gets an ordinary answer.
    r = request(APP, "POST", "/v1/chat/completions", json={"messages": USER_HI}, headers=AUTH)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
