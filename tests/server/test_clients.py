"""Client libraries against ``chatfmt serve`` on the default model (embedded llama-server
engine): each gets a valid, typed result through constrained decoding — the openai SDK's
``chat.completions.parse``, LangChain's ``with_structured_output`` (both methods), and the
OpenAI Agents SDK with a chat-completions model and a tool."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, Field
from server_helpers import ServerThread

openai = pytest.importorskip("openai")


class City(BaseModel):
    name: str
    country: str
    population_millions: float = Field(description="Population in millions")
    continent: Literal["Africa", "America", "Asia", "Europe", "Oceania"]


class Weather(BaseModel):
    city: str
    unit: Literal["celsius", "fahrenheit"]


@pytest.fixture(scope="module")
def url(default_model_path: Path, llama_server_binary: Path) -> Iterator[str]:
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.llama_server import LlamaServerEngine
    from chatfmt.server import create_app

    threads = int(os.environ.get("CHATFMT_TEST_THREADS", "1"))
    engine = LlamaServerEngine(default_model_path, parallel=2, n_threads=threads)
    app = create_app(engine, get_dialect("qwen2.5"), model_name="default")
    with ServerThread(app, startup=engine.connect) as srv:
        yield srv.url + "/v1"
        srv.call(engine.aclose())


def test_openai_parse_with_a_pydantic_model(url: str) -> None:
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    out = client.chat.completions.parse(
        model="default",
        messages=[{"role": "user", "content": "Tell me about Tokyo."}],
        response_format=City,
        temperature=0,
        max_tokens=200,
    )
    city = out.choices[0].message.parsed
    assert isinstance(city, City), out.choices[0].message.content
    assert city.continent == "Asia" and "Tokyo" in city.name


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_structured_output(url: str, method: str) -> None:
    lc = pytest.importorskip("langchain_openai")
    model = lc.ChatOpenAI(
        model="default",
        base_url=url,
        api_key="unused",
        temperature=0,
        max_tokens=200,
        max_retries=0,
    )
    structured = model.with_structured_output(Weather, method=method)
    got = structured.invoke("What's the weather in Paris, in celsius?")
    assert isinstance(got, Weather), got
    assert "Paris" in got.city and got.unit == "celsius"


def test_openai_agents_sdk_with_a_tool(url: str) -> None:
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)  # traces would go to OpenAI's servers
    calls: list[tuple[int, int]] = []

    @agents.function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    model = agents.OpenAIChatCompletionsModel(
        model="default",
        openai_client=openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0),
    )
    agent = agents.Agent(
        name="calculator",
        instructions="Use the add tool for arithmetic, then state the result.",
        tools=[add],
        model=model,
        model_settings=agents.ModelSettings(temperature=0, max_tokens=200),
        # The 0.5B model calls the tool again after its result, with or without grammars
        # (measured): the agent's answer is the tool's result.
        tool_use_behavior="stop_on_first_tool",
    )
    result = asyncio.run(agents.Runner.run(agent, "What is 1234 + 4321?", max_turns=2))
    assert calls == [(1234, 4321)]
    assert str(result.final_output) == "5555"  # the SDK hands tool output on as text
