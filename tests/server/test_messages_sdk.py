"""The official ``anthropic`` SDK against /v1/messages served by real uvicorn on loopback over
a scripted engine: create, its stream helper and raw events, a tool_result round trip, a
forced tool, count_tokens, and its error types (the checks of ``messages_sdk_checks.py``; the
slow tier runs them on the real default model)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("anthropic", reason="the anthropic SDK is a dev dependency")

import messages_sdk_checks as checks
from server_helpers import ServerThread

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.tokenizers import Tokenizer

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def scripted(tok: Tokenizer):  # type: ignore[no-untyped-def]
    """Replies by what the prompt asks, as a model would: a forced call's arguments, an answer
    to a tool result, a call when tools are offered, words otherwise."""

    def reply(prompt: list[int]) -> str:
        text = tok.decode(prompt)
        last_turn = text.rsplit("<|im_start|>", 2)[-2]
        if text.endswith('"arguments": '):
            return '{"city": "Paris"}}\n</tool_call><|im_end|>'
        if text.endswith("<tool_call>\n"):
            return CALL.removeprefix("<tool_call>\n") + "<|im_end|>"
        if "<tool_response>" in last_turn:
            return "It is 21 C and sunny in Paris.<|im_end|>"
        if "<tools>" in text:
            return CALL + "<|im_end|>"
        return "Paris is the capital of France.<|im_end|>"

    return reply


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    from chatfmt.tokenizers import load_tokenizer

    tok = load_tokenizer("qwen2.5")
    engine = FakeEngine(tok, scripted(tok))
    app = create_app(engine, get_dialect("qwen2.5"), model_name="served", api_key=checks.KEY)
    with ServerThread(app) as srv:
        yield srv.url


def test_create(url: str) -> None:
    message = checks.check_create(checks.client_of(url))
    assert message.content[0].text == "Paris is the capital of France."  # type: ignore[union-attr]


def test_stream_helper(url: str) -> None:
    checks.check_stream_helper(checks.client_of(url))


def test_raw_events(url: str) -> None:
    checks.check_raw_events(checks.client_of(url))


def test_tool_result_round_trip(url: str) -> None:
    _first, second = checks.check_tool_round_trip(checks.client_of(url))
    assert second.content[0].text == "It is 21 C and sunny in Paris."  # type: ignore[union-attr]


def test_forced_tool(url: str) -> None:
    checks.check_forced_tool(checks.client_of(url))


def test_count_tokens(url: str) -> None:
    checks.check_count_tokens(checks.client_of(url))


def test_error_types(url: str) -> None:
    checks.check_errors(checks.client_of(url), url)
