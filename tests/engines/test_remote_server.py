"""The remote engine against a server chatfmt does not manage: ``$CHATFMT_REMOTE_URL`` (vLLM
or a llama.cpp server serving Qwen2.5-Coder-0.5B-Instruct; ``scripts/gpu-check`` starts vLLM on
a CUDA machine and runs this module), else llama.cpp's ``llama-server`` started here by hand
on the default model — the way people run it for scale."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatfmt.dialects import get_dialect
from chatfmt.engines import SamplingParams
from chatfmt.tools import ToolRegistry

IM_END = 151645
QWEN = get_dialect("qwen2.5")


@pytest.fixture(scope="module")
def url(default_model_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    given = os.environ.get("CHATFMT_REMOTE_URL")
    if given:
        yield given
        return
    raw = request.getfixturevalue("raw_llama_server")
    with raw(default_model_path, "--parallel", "2", "--threads", "1") as base:
        yield base


def run(url: str, body: Any) -> Any:
    from chatfmt.engines.remote import RemoteEngine
    from chatfmt.tokenizers import load_tokenizer

    async def main() -> Any:
        engine = RemoteEngine(url, tokenizer=load_tokenizer("qwen2.5"))
        try:
            await engine.connect()
            return await body(engine)
        finally:
            await engine.aclose()

    return asyncio.run(main())


def prompt(engine: Any, text: str, **kw: Any) -> list[int]:
    return QWEN.render([{"role": "user", "content": text}], engine.tokenizer, **kw).ids


def test_detects_the_server_and_its_context(url: str) -> None:
    async def body(engine: Any) -> None:
        assert engine.flavor in ("vllm", "llama.cpp")
        assert engine.context_length > 1000

    run(url, body)


def test_ids_in_ids_out_with_the_stop_token(url: str) -> None:
    async def body(engine: Any) -> None:
        params = SamplingParams(max_tokens=32, temperature=0, stop_ids=(IM_END,))
        gen = await engine.generate(prompt(engine, "Say hi"), params)
        assert gen.token_ids[-1] == IM_END and gen.finish_reason == "stop"
        assert engine.tokenizer.decode(gen.token_ids[:-1]).strip()

    run(url, body)


def test_stop_strings_and_length(url: str) -> None:
    """A stop string ends the reply where the decoder finds it (vLLM is also sent it and
    stops there; llama-server is not: see chatfmt.engines.remote)."""
    from chatfmt.decoding import TurnDecoder
    from chatfmt.driver import TurnDriver

    async def body(engine: Any) -> None:
        ids = prompt(engine, "Count from 1 to 20, separated by commas.")
        params = SamplingParams(max_tokens=60, temperature=0, stop_strings=("7",))
        decoder = TurnDecoder(get_dialect("qwen2.5"), engine.tokenizer, stop_strings=("7",))
        driver = TurnDriver(engine, decoder, ids, params)
        cut = (await driver.run()).content or ""
        assert driver.finish_reason == "stop" and "6" in cut and "7" not in cut
        short = await engine.generate(ids, SamplingParams(max_tokens=3, temperature=0))
        assert short.finish_reason == "length" and len(short.token_ids) == 3

    run(url, body)


def test_tool_call_parses(url: str) -> None:
    registry = ToolRegistry()

    @registry.tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return "sunny"

    async def body(engine: Any) -> None:
        ids = prompt(engine, "What is the weather in Paris?", tools=registry.openai_tools())
        params = SamplingParams(max_tokens=64, temperature=0, stop_ids=(IM_END,))
        gen = await engine.generate(ids, params)
        turn = QWEN.parse(gen.token_ids, engine.tokenizer)
        assert [c.name for c in turn.message.tool_calls] == ["get_weather"]

    run(url, body)


def test_closing_the_stream_stops_it(url: str) -> None:
    async def body(engine: Any) -> None:
        stream = engine.stream(
            prompt(engine, "Write a very long essay about rivers."),
            SamplingParams(max_tokens=2000, temperature=0),
        )
        got = 0
        async for _chunk in stream:
            got += 1
            if got == 3:
                break
        await stream.aclose()
        # The server is free again: a short request completes promptly.
        gen = await asyncio.wait_for(
            engine.generate(prompt(engine, "Say hi"), SamplingParams(max_tokens=8)), 60
        )
        assert gen.token_ids

    run(url, body)


def test_grammars_constrain_the_reply(url: str) -> None:
    """A whole-reply grammar (forced call, JSON) on every server kind that takes one; a lazy
    call grammar where the server supports triggers (llama.cpp)."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "parameters": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            },
        }
    ]

    async def body(engine: Any) -> None:
        ids = prompt(engine, "Say hello to Bob.", tools=tools)
        forced = QWEN.call_grammar(tools, required=True, single=True)
        params = SamplingParams(max_tokens=60, temperature=0, stop_ids=(IM_END,), grammar=forced)
        gen = await engine.generate(ids, params)
        calls = QWEN.parse(gen.token_ids, engine.tokenizer).message.tool_calls
        assert len(calls) == 1 and calls[0].name == "add", gen.text
        assert set(calls[0].arguments_dict()) == {"a", "b"}
        if engine.grammar_support != "lazy":
            return
        lazy = QWEN.call_grammar(tools)
        free = SamplingParams(max_tokens=40, temperature=0, stop_ids=(IM_END,), grammar=lazy)
        for question in ("Say hello to Bob.", "What is 2 + 40?"):
            gen = await engine.generate(prompt(engine, question, tools=tools), free)
            turn = QWEN.parse(gen.token_ids, engine.tokenizer)
            assert gen.finish_reason == "stop" and not turn.warnings, gen.text
            for call in turn.message.tool_calls or ():
                # A call of `add` has its integers; another name is the model's own (the
                # server returns undeclared calls as text).
                args = call.arguments_dict()
                assert call.name != "add" or all(type(args[k]) is int for k in "ab"), args
                assert not call.name.startswith("add") or call.name == "add", call.name

    run(url, body)
