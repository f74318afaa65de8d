"""LocalEngine: the default model in-process through llama-cpp-python."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatfmt.dialects import get_dialect
from chatfmt.engines import SamplingParams
from chatfmt.engines.local import LocalEngine
from chatfmt.errors import EngineError
from chatfmt.tokenizers.gguf import GGUFTokenizer

IM_END = 151645


@pytest.fixture(scope="module")
def engine(default_model_path: Path) -> Iterator[LocalEngine]:
    # One thread by default: llama.cpp threads spin at barriers, which on a small or busy
    # machine makes a second thread slower than one.
    eng = LocalEngine(
        default_model_path, n_threads=int(os.environ.get("CHATFMT_TEST_THREADS", "1"))
    )
    yield eng
    asyncio.run(eng.aclose())


@pytest.fixture(scope="module")
def prompt(engine: LocalEngine) -> list[int]:
    conv = [{"role": "user", "content": "Count from 1 to 5, separated by spaces."}]
    return get_dialect("qwen2.5").render(conv, engine.tokenizer).ids


def test_shape(engine: LocalEngine) -> None:
    assert engine.context_length == 4096
    assert isinstance(engine.tokenizer, GGUFTokenizer)
    assert engine.tokenizer.controls["<|im_end|>"] == IM_END


def test_greedy_is_deterministic_and_stops(engine: LocalEngine, prompt: list[int]) -> None:
    params = SamplingParams(max_tokens=40, temperature=0, stop_ids=(IM_END,))
    a = asyncio.run(engine.generate(prompt, params))
    b = asyncio.run(engine.generate(prompt, params))
    assert a.token_ids == b.token_ids
    assert a.finish_reason == "stop"
    assert a.token_ids[-1] == IM_END
    text = engine.tokenizer.decode(a.token_ids[:-1])
    assert "1" in text and "5" in text


def test_max_tokens_is_length(engine: LocalEngine, prompt: list[int]) -> None:
    gen = asyncio.run(engine.generate(prompt, SamplingParams(max_tokens=3, temperature=0)))
    assert len(gen.token_ids) == 3
    assert gen.finish_reason == "length"


def test_seed_reproduces_sampling(engine: LocalEngine, prompt: list[int]) -> None:
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=1234)
    a = asyncio.run(engine.generate(prompt, params))
    b = asyncio.run(engine.generate(prompt, params))
    assert a.token_ids == b.token_ids


def test_cancel_frees_the_model_promptly(engine: LocalEngine, prompt: list[int]) -> None:
    async def scenario() -> None:
        stream = engine.stream(prompt, SamplingParams(max_tokens=2000, temperature=0))
        n = 0
        async for _ in stream:
            n += 1
            if n == 2:
                break
        await stream.aclose()
        await engine.generate(prompt, SamplingParams(max_tokens=1, temperature=0))

    before = engine.tokens_generated
    asyncio.run(scenario())
    # Had the cancelled request kept generating, the next one would have waited for ~2000
    # tokens. The worker notices the cancel before its next token.
    assert engine.tokens_generated - before <= 5


def test_concurrent_requests_are_served_one_at_a_time(
    engine: LocalEngine, prompt: list[int]
) -> None:
    params = SamplingParams(max_tokens=8, temperature=0)
    alone = asyncio.run(engine.generate(prompt, params)).token_ids

    async def many() -> list[list[int]]:
        gens = await asyncio.gather(*(engine.generate(prompt, params) for _ in range(3)))
        return [g.token_ids for g in gens]

    assert asyncio.run(many()) == [alone] * 3


def test_prompt_too_long(engine: LocalEngine) -> None:
    with pytest.raises(EngineError, match="context length 4096"):
        asyncio.run(engine.generate([1] * 5000, SamplingParams(max_tokens=1)))
    with pytest.raises(EngineError, match="empty"):
        asyncio.run(engine.generate([], SamplingParams(max_tokens=1)))


def test_missing_model_file(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="not found"):
        LocalEngine(tmp_path / "nope.gguf")
