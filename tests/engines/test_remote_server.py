"""The remote engine against a server someone else runs: ``CHATFMT_REMOTE_URL`` (vLLM or
llama.cpp's ``llama-server``, serving Qwen2.5-Coder-0.5B-Instruct). ``scripts/gpu-check`` starts
vLLM on a CUDA machine and runs this module; without the variable it is skipped (the same
checks run against a real llama-server child in ``test_llama_server.py`` and, through the HTTP
API, in ``tests/server/test_real_model.py``)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from chatfmt.dialects import get_dialect
from chatfmt.engines import SamplingParams
from chatfmt.tools import ToolRegistry

URL = os.environ.get("CHATFMT_REMOTE_URL")
pytestmark = pytest.mark.skipif(not URL, reason="set CHATFMT_REMOTE_URL to a running server")
IM_END = 151645
QWEN = get_dialect("qwen2.5")


def run(body: Any) -> Any:
    from chatfmt.engines.remote import RemoteEngine
    from chatfmt.tokenizers import load_tokenizer

    async def main() -> Any:
        engine = RemoteEngine(str(URL), tokenizer=load_tokenizer("qwen2.5"))
        try:
            await engine.connect()
            return await body(engine)
        finally:
            await engine.aclose()

    return asyncio.run(main())


def prompt(engine: Any, text: str, **kw: Any) -> list[int]:
    return QWEN.render([{"role": "user", "content": text}], engine.tokenizer, **kw).ids


def test_detects_the_server_and_its_context() -> None:
    async def body(engine: Any) -> None:
        assert engine.flavor in ("vllm", "llama.cpp")
        assert engine.context_length > 1000

    run(body)


def test_ids_in_ids_out_with_the_stop_token() -> None:
    async def body(engine: Any) -> None:
        params = SamplingParams(max_tokens=32, temperature=0, stop_ids=(IM_END,))
        gen = await engine.generate(prompt(engine, "Say hi"), params)
        assert gen.token_ids[-1] == IM_END and gen.finish_reason == "stop"
        assert engine.tokenizer.decode(gen.token_ids[:-1]).strip()

    run(body)


def test_stop_strings_and_length() -> None:
    async def body(engine: Any) -> None:
        ids = prompt(engine, "Count from 1 to 20, separated by commas.")
        cut = await engine.generate(
            ids, SamplingParams(max_tokens=60, temperature=0, stop_strings=("7",))
        )
        assert "7" not in engine.tokenizer.decode(list(cut.token_ids)).replace("<|im_end|>", "")
        short = await engine.generate(ids, SamplingParams(max_tokens=3, temperature=0))
        assert short.finish_reason == "length" and len(short.token_ids) == 3

    run(body)


def test_tool_call_parses() -> None:
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

    run(body)


def test_closing_the_stream_stops_it() -> None:
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

    run(body)
