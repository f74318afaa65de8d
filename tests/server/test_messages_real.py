"""The official ``anthropic`` SDK against /v1/messages on the real default model: the embedded
llama-server engine behind a real uvicorn server on loopback (as ``test_clients.py`` runs the
``openai`` client), with the checks the unit tier runs on a scripted engine."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("anthropic", reason="the anthropic SDK is a dev dependency")

import messages_sdk_checks as checks
from server_helpers import ServerThread


@pytest.fixture(scope="module")
def url(default_model_path: Path, llama_server_binary: Path) -> Iterator[str]:
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.llama_server import LlamaServerEngine
    from chatfmt.server import create_app

    threads = int(os.environ.get("CHATFMT_TEST_THREADS", "1"))
    engine = LlamaServerEngine(default_model_path, parallel=2, n_threads=threads, n_ctx=4096)
    app = create_app(engine, get_dialect("qwen2.5"), model_name="default", api_key=checks.KEY)
    with ServerThread(app, startup=engine.connect) as srv:
        yield srv.url
        srv.call(engine.aclose())


def test_create(url: str) -> None:
    message = checks.check_create(checks.client_of(url))
    assert "Paris" in message.content[0].text  # type: ignore[union-attr]


def test_stream_helper(url: str) -> None:
    checks.check_stream_helper(checks.client_of(url))


def test_raw_events(url: str) -> None:
    checks.check_raw_events(checks.client_of(url))


def test_tool_result_round_trip(url: str) -> None:
    # The 0.5B model calls the tool again after its result when it may (measured, as in
    # test_clients.py): the answer is asked for without tools.
    checks.check_tool_round_trip(checks.client_of(url), answer_choice={"type": "none"})


def test_forced_tool(url: str) -> None:
    checks.check_forced_tool(checks.client_of(url))


def test_count_tokens(url: str) -> None:
    checks.check_count_tokens(checks.client_of(url))


def test_error_types(url: str) -> None:
    checks.check_errors(checks.client_of(url), url)


def test_a_returning_conversation_reads_its_prompt_from_the_cache(url: str) -> None:
    """The engine's prompt cache, reported as Anthropic reports its own: the same prompt sent
    twice is read from the cache the second time (llama.cpp evaluates its last token again)."""
    client = checks.client_of(url)
    request = {
        "model": "claude-opus-4-8",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "Repeat after me: the cache works. " * 8}],
        **checks.GREEDY,
    }
    first = checks.validated(client.messages.create(**request)).usage  # type: ignore[arg-type]
    second = checks.validated(client.messages.create(**request)).usage  # type: ignore[arg-type]
    total = first.input_tokens + (first.cache_read_input_tokens or 0)
    assert second.input_tokens + (second.cache_read_input_tokens or 0) == total
    assert (second.cache_read_input_tokens or 0) >= total - 1
