"""The one generation driver: prefill, engine stream, closing chunk, finish, shielded close,
counts — over the scripted engine and a hand-written one that reports cached tokens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import pytest

import chatfmt
from chatfmt.decoding import TurnDecoder
from chatfmt.driver import TurnDriver
from chatfmt.engines.base import Engine, GenerationChunk, SamplingParams
from chatfmt.engines.fake import FakeEngine
from chatfmt.errors import EngineError
from chatfmt.events import Event, Finish, TextDelta, ToolCallStart
from chatfmt.segments import Control

QWEN = chatfmt.get_dialect("qwen2.5")


def _driver(engine: Engine, *, max_tokens: int = 64, **kw: Any) -> TurnDriver:
    tok = engine.tokenizer
    params = SamplingParams(max_tokens=max_tokens, stop_ids=tuple(QWEN.stop_ids(tok)))
    return TurnDriver(engine, TurnDecoder(QWEN, tok), [1, 2, 3], params, **kw)


async def _events(driver: TurnDriver) -> list[Event]:
    out: list[Event] = []
    async for step in driver.steps():
        out.extend(step)
    return out


def test_text_reply_counts_and_closes(qwen) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(qwen, ["Hello there!<|im_end|>"])
    driver = _driver(engine)
    events = asyncio.run(_events(driver))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello there!"
    assert events[-1] == Finish("stop") and driver.finish_reason == "stop" and not driver.cut
    reply = engine.reply_ids("Hello there!<|im_end|>")
    assert driver.prompt_tokens == 3
    assert driver.completion_tokens == len(reply)  # the stop token is generated, so counted
    assert driver.produced == reply
    assert driver.result().content == "Hello there!"
    assert engine.finished == 1 and engine.cancelled == 0


def test_length_is_cut(qwen) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(qwen, ["one two three four five six seven eight<|im_end|>"])
    driver = _driver(engine, max_tokens=3)
    events = asyncio.run(_events(driver))
    assert events[-1] == Finish("length") and driver.cut
    assert driver.completion_tokens == 3


def test_prefill_first_and_filter_applied(qwen) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(qwen, ['{"name": "f", "arguments": {}}\n</tool_call><|im_end|>'])
    seen: list[list[Event]] = []

    def keep(events: list[Event]) -> list[Event]:
        seen.append(events)
        return [e for e in events if not isinstance(e, TextDelta)]

    driver = _driver(engine, prefill=(Control("<tool_call>"), "\n"), events=keep)

    async def go() -> list[list[Event]]:
        return [step async for step in driver.steps()]

    steps = asyncio.run(go())
    assert steps[0] == []  # the opening tag alone announces nothing yet
    flat = [e for s in steps for e in s]
    assert isinstance(flat[0], ToolCallStart) and flat[0].name == "f"
    assert driver.finish_reason == "tool_calls"
    assert len(seen) == len(steps)  # the filter saw every step
    assert driver.result().tool_calls[0].name == "f"


class _CachingEngine(FakeEngine):
    """Like llama.cpp's server: the stop token, then a closing chunk with the cache count."""

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        for token in self.reply_ids("Hi<|im_end|>"):
            yield GenerationChunk((token,))
        yield GenerationChunk((), finish_reason="stop", cached_tokens=7)


def test_closing_chunk_is_read_after_a_stop_token(qwen) -> None:  # type: ignore[no-untyped-def]
    driver = _driver(_CachingEngine(qwen))
    asyncio.run(_events(driver))
    assert driver.cached_tokens == 7
    assert driver.produced == _CachingEngine(qwen).reply_ids("Hi<|im_end|>")


class _BrokenAfterStopEngine(FakeEngine):
    """The reply and its stop token in one chunk, then the stream fails (the connection broke,
    or the engine ended without its closing chunk)."""

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        yield GenerationChunk(tuple(self.reply_ids("Hello there<|im_end|>")))
        raise EngineError("the connection to the engine broke mid-stream")


def test_a_failure_after_the_stop_token_keeps_the_whole_reply(qwen) -> None:  # type: ignore[no-untyped-def]
    """The closing chunk only reports the cached tokens: losing it ends the turn normally."""
    driver = _driver(_BrokenAfterStopEngine(qwen))
    events = asyncio.run(_events(driver))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello there"
    assert events[-1] == Finish("stop") and driver.cached_tokens is None
    assert driver.produced == _BrokenAfterStopEngine(qwen).reply_ids("Hello there<|im_end|>")


def test_engine_down_fails_in_open(qwen) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(qwen, ["Hello<|im_end|>"], fail_after=0)
    driver = _driver(engine)
    with pytest.raises(EngineError):
        asyncio.run(driver.open())


def test_engine_failure_mid_stream_propagates_and_closes(qwen) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(qwen, ["Hello there, how are you<|im_end|>"], fail_after=3)
    driver = _driver(engine)
    with pytest.raises(EngineError):
        asyncio.run(_events(driver))


def test_abandoned_steps_stop_the_engine(qwen) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(qwen, ["word " * 50 + "<|im_end|>"])
    driver = _driver(engine, max_tokens=200)

    async def go() -> None:
        steps = driver.steps()
        async for _ in steps:
            break
        async for _ in steps:  # one chunk of the model's output
            break
        await steps.aclose()

    asyncio.run(go())
    assert engine.cancelled == 1 and engine.finished == 0


def test_cancelled_consumer_still_stops_the_engine(qwen) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(qwen, ["word " * 50 + "<|im_end|>"], delay=0.01)
    driver = _driver(engine, max_tokens=200)

    async def go() -> None:
        task = asyncio.ensure_future(_events(driver))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert engine.cancelled == 1
    assert 0 < driver.completion_tokens < 50


def test_a_consumer_that_stops_reading_the_agent_stops_the_engine(qwen) -> None:  # type: ignore[no-untyped-def]
    from chatfmt.agent import Agent

    engine = FakeEngine(qwen, ["word " * 50 + "<|im_end|>"], delay=0.01)
    agent = Agent(engine, QWEN)

    async def go() -> None:
        stream = agent.stream([{"role": "user", "content": "hi"}])
        async for _ in stream:
            break
        await stream.aclose()
        # Closed at once, not when the garbage collector finalizes the driver's generator.
        assert engine.cancelled == 1

    asyncio.run(go())


def test_logprobs_of_the_reply_without_its_stop_token(qwen) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(qwen, ["Hello there!<|im_end|>"], sampling=["logprobs"])
    tok = engine.tokenizer
    params = SamplingParams(max_tokens=64, stop_ids=tuple(QWEN.stop_ids(tok)), logprobs=1)
    driver = TurnDriver(engine, TurnDecoder(QWEN, tok), [1, 2, 3], params)

    async def run() -> list[list[int]]:
        per_step = []
        async for _ in driver.steps():
            per_step.append([e.token_id for e in driver.take_logprobs()])
        return per_step

    per_step = asyncio.run(run())
    reply = qwen.encode_text("Hello there!")
    assert driver.logprobs is not None and [e.token_id for e in driver.logprobs] == reply
    # Step by step: each token with the step that decoded it, the prefill's step empty, and
    # nothing left over.
    assert [t for step in per_step for t in step] == reply and per_step[0] == []
    assert driver.take_logprobs() == []
    # Not asked for: none kept.
    plain = _driver(FakeEngine(qwen, ["Hi<|im_end|>"]))
    asyncio.run(plain.run())
    assert plain.logprobs is None and plain.take_logprobs() == []
