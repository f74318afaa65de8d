"""The thinking budget on a real engine: llama-server running the default model.

No small reasoning model is available offline (the default model, Qwen2.5-Coder-0.5B, does
not reason), so the thought is forced: the model is served with the ``qwen3.5`` format,
whose generation prompt opens the thought (``<think>\\n``, as text in Qwen2.5's vocabulary).
The model writes on inside it; at the budget chatfmt closes it (``\\n</think>\\n\\n``) and
the model answers in a second request to llama-server, which reuses its prompt cache. What
is checked is the mechanism on the real engine — the ids llama-server is sent, the counts,
the reply the client sees — not the quality of the answer."""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import ServerThread

from chatfmt.dialects import get_dialect
from chatfmt.engines.base import Engine, GenerationChunk, SamplingParams
from chatfmt.segments import Block, BlockEncoder
from chatfmt.tokenizers import Tokenizer

USER = [{"role": "user", "content": "What is 17 times 3? Think step by step."}]


class Recorded(Engine):
    """The real engine, with each request's prompt and cached-token report kept."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.name = engine.name
        self.prompts: list[list[int]] = []
        self.cached: list[int | None] = []

    @property
    def context_length(self) -> int:
        return int(self.engine.context_length)

    @property
    def tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer  # type: ignore[no-any-return]

    @property
    def grammar_support(self) -> Any:
        return self.engine.grammar_support

    @property
    def sampling_support(self) -> frozenset[str]:
        return frozenset(self.engine.sampling_support)

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        self.prompts.append(list(prompt_ids))
        self.cached.append(None)
        stream = self.engine.stream(prompt_ids, params)
        try:
            async for chunk in stream:
                if chunk.cached_tokens is not None:
                    self.cached[-1] = chunk.cached_tokens
                yield chunk
        finally:
            await stream.aclose()


@pytest.fixture(scope="module")
def served(default_model_path: Path, llama_server_binary: Path) -> Iterator[tuple[str, Recorded]]:
    from chatfmt.engines.llama_server import LlamaServerEngine
    from chatfmt.server import create_app

    threads = int(os.environ.get("CHATFMT_TEST_THREADS", "1"))
    engine = LlamaServerEngine(default_model_path, parallel=1, n_threads=threads)
    recorded = Recorded(engine)
    app = create_app(recorded, get_dialect("qwen3.5"), model_name="m")
    with ServerThread(app, startup=engine.connect) as srv:
        yield srv.url, recorded
        srv.call(engine.aclose())


def test_budget_on_llama_server(served: tuple[str, Recorded]) -> None:
    url, engine = served
    budget = 10
    body = {"messages": USER, "temperature": 0, "max_tokens": 60, "thinking_token_budget": budget}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    tok = engine.tokenizer
    # Encoded as the format renders it (Qwen2.5's vocabulary has no <think> tokens: text).
    closing = get_dialect("qwen3.5").close_thought()
    assert closing is not None
    close = list(BlockEncoder(tok).encode_block(Block(closing)))
    assert tok.decode(close) == "\n</think>\n\n"
    assert len(engine.prompts) == 2, "the budget did not close the thought"
    first, second = engine.prompts
    assert second[: len(first)] == first
    assert second[-len(close) :] == close
    assert len(second) - len(first) - len(close) == budget  # reasoning tokens, at the cap
    message = out["choices"][0]["message"]
    assert message["reasoning_content"] == tok.decode(second[len(first) : -len(close)]).strip("\n")
    assert message["content"], "the model did not answer after its thought was closed"
    usage = out["usage"]
    assert usage["completion_tokens"] <= 60
    assert usage["completion_tokens"] > budget + len(close)
    # The continuation found the first request's tokens in llama-server's prompt cache.
    assert engine.cached[1] is not None and engine.cached[1] >= len(first)
