"""The Responses API over a real llama.cpp server (the default model), across a chatfmt
restart: a stored chain continues with exact usage, and the engine, which outlives chatfmt,
reports the stored conversation's prefix as taken from its prompt cache."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from server_helpers import ServerThread

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow


def serve(base: str, store_path: Path) -> ServerThread:
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.remote import RemoteEngine
    from chatfmt.server import create_app
    from chatfmt.store import ResponseStore
    from chatfmt.tokenizers import load_tokenizer

    engine = RemoteEngine(base, tokenizer=load_tokenizer("qwen2.5"))
    app = create_app(
        engine, get_dialect("qwen2.5"), model_name="default", store=ResponseStore(store_path)
    )
    return ServerThread(app, startup=engine.connect)


def test_a_chain_continues_after_a_restart_from_the_engines_cache(
    default_model_path: Path,
    raw_llama_server: Callable[..., AbstractContextManager[str]],
    tmp_path: Path,
) -> None:
    from chatfmt.dialects import get_dialect
    from chatfmt.tokenizers import load_tokenizer

    store = tmp_path / "responses.sqlite3"
    settings = {"model": "default", "temperature": 0, "max_output_tokens": 48}
    with raw_llama_server(default_model_path, "--parallel", "1", "--threads", "1") as base:
        with serve(base, store) as srv:
            client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
            first = client.responses.create(input="Name one colour.", **settings)
        # A restart: a new chatfmt with nothing in memory, the same database and engine.
        with serve(base, store) as srv:
            client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
            second = client.responses.create(
                input="Name another.", previous_response_id=first.id, **settings
            )
    assert first.usage is not None and second.usage is not None
    # The second prompt is the first one, the reply as the engine produced it (without the
    # stop token it ended on), then the rendered rest: the reply's <|im_end|> and the new turn.
    qwen, dialect = load_tokenizer("qwen2.5"), get_dialect("qwen2.5")
    ask = [{"role": "user", "content": "Name one colour."}]
    whole = dialect.render(
        [*ask, {"role": "assistant", "content": first.output_text}, ask[0] | {
            "content": "Name another."}], qwen
    ).ids  # fmt: skip
    start = len(dialect.render(ask, qwen).ids)
    im_end = qwen.controls["<|im_end|>"]
    n_tail = len(whole) - whole.index(im_end, start)
    assert first.usage.input_tokens == start
    assert first.status == "completed"  # ended at its stop token (the exact ids are kept)
    replied = first.usage.output_tokens - 1
    assert second.usage.input_tokens == first.usage.input_tokens + replied + n_tail
    # The engine, which outlived chatfmt, had all of the first exchange in its cache: the
    # whole first prompt and every reply token it generated (llama.cpp evaluates at least the
    # last prompt token again).
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= first.usage.input_tokens + replied - 1


def test_chat_usage_reports_the_engines_cache(
    default_model_path: Path,
    raw_llama_server: Callable[..., AbstractContextManager[str]],
    tmp_path: Path,
) -> None:
    messages = [{"role": "user", "content": "Name one colour."}]
    with raw_llama_server(default_model_path, "--parallel", "1", "--threads", "1") as base:
        with serve(base, tmp_path / "r.sqlite3") as srv:
            client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
            runs = [
                client.chat.completions.create(
                    model="default",
                    messages=messages,
                    temperature=0,
                    max_tokens=8,  # type: ignore[arg-type]
                )
                for _ in range(2)
            ]
    first, second = (r.usage for r in runs)
    assert first is not None and second is not None
    assert second.prompt_tokens_details is not None
    assert second.prompt_tokens_details.cached_tokens >= second.prompt_tokens - 1
