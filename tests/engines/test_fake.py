"""FakeEngine behaves like a real engine: stop ids, max_tokens, failure, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from chatfmt.engines import SamplingParams
from chatfmt.engines.fake import FakeEngine
from chatfmt.errors import EngineError

IM_END = 151645


def test_text_script_encodes_controls(qwen) -> None:
    fake = FakeEngine(qwen, ["Hi<|im_end|>"])
    assert fake.reply_ids("Hi<|im_end|>") == [*qwen.encode_text("Hi"), IM_END]
    gen = asyncio.run(fake.generate([1, 2, 3], SamplingParams(stop_ids=(IM_END,))))
    assert gen.token_ids == [*qwen.encode_text("Hi"), IM_END]
    assert gen.finish_reason == "stop"
    assert fake.prompts == [[1, 2, 3]]


def test_max_tokens_and_end_of_script(qwen) -> None:
    fake = FakeEngine(qwen, [[5, 6, 7, 8]])
    gen = asyncio.run(fake.generate([1], SamplingParams(max_tokens=2)))
    assert (gen.token_ids, gen.finish_reason) == ([5, 6], "length")
    gen = asyncio.run(fake.generate([1], SamplingParams(max_tokens=4)))
    assert (gen.token_ids, gen.finish_reason) == ([5, 6, 7, 8], "length")
    gen = asyncio.run(fake.generate([1], SamplingParams(max_tokens=10)))
    assert (gen.token_ids, gen.finish_reason) == ([5, 6, 7, 8], "stop")


def test_callable_script_and_failure(qwen) -> None:
    fake = FakeEngine(qwen, lambda prompt: [len(prompt)], fail_after=None)
    assert asyncio.run(fake.generate([1, 1, 1], SamplingParams())).token_ids == [3]
    fake = FakeEngine(qwen, [[5, 6, 7]], fail_after=1)
    with pytest.raises(EngineError):
        asyncio.run(fake.generate([1], SamplingParams()))


def test_closing_counts_as_cancelled(qwen) -> None:
    fake = FakeEngine(qwen, [[5, 6, 7]])

    async def take_one() -> None:
        stream = fake.stream([1], SamplingParams())
        async for _ in stream:
            break
        await stream.aclose()

    asyncio.run(take_one())
    assert (fake.cancelled, fake.finished) == (1, 0)


def test_sampling_params_validate() -> None:
    with pytest.raises(ValueError):
        SamplingParams(max_tokens=0)
    with pytest.raises(ValueError):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError):
        SamplingParams(temperature=-1)


def test_sampling_fields_are_refused_unless_claimed(qwen) -> None:
    fake = FakeEngine(qwen, ["Hi<|im_end|>"])
    with pytest.raises(EngineError, match="cannot honour top_k"):
        asyncio.run(fake.generate([1], SamplingParams(top_k=3)))
    assert fake.prompts == []  # refused before anything ran
    claims = FakeEngine(qwen, ["Hi<|im_end|>"], sampling=["top_k"])
    asyncio.run(claims.generate([1], SamplingParams(top_k=3)))
    assert claims.params[-1].top_k == 3


def test_scripted_logprobs(qwen) -> None:
    from chatfmt.engines.fake import fake_logprob

    fake = FakeEngine(qwen, ["Hello there<|im_end|>"], sampling=["logprobs"])
    params = SamplingParams(logprobs=2, stop_ids=(IM_END,))
    gen = asyncio.run(fake.generate([1], params))
    assert gen.logprobs is not None
    assert [e.token_id for e in gen.logprobs] == gen.token_ids
    for n, e in enumerate(gen.logprobs):
        assert e.logprob == fake_logprob(n) <= 0
        assert e.top == ((e.token_id, e.logprob), (e.token_id + 1, e.logprob - 1))
    assert asyncio.run(fake.generate([1], SamplingParams())).logprobs is None
