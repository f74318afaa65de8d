"""Client libraries against ``chatfmt serve`` on the default model (embedded llama-server
engine): each gets a valid, typed result through constrained decoding — the openai SDK's
``chat.completions.parse`` and ``responses.parse``, a function call continued with
``previous_response_id``, LangChain's ``with_structured_output`` (both methods, with and without
the Responses API), the OpenAI Agents SDK with a chat-completions model and with its default
Responses model, each with a tool, and LiteLLM's OpenAI-compatible provider."""

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
    engine = LlamaServerEngine(default_model_path, parallel=2, n_threads=threads, n_ctx=4096)
    from chatfmt.store import ResponseStore

    app = create_app(
        engine, get_dialect("qwen2.5"), model_name="default", store=ResponseStore(":memory:")
    )
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


def test_openai_responses_parse_and_a_call_continued(url: str) -> None:
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    out = client.responses.parse(
        model="default",
        input="Tell me about Tokyo.",
        text_format=City,
        temperature=0,
        max_output_tokens=200,
    )
    city = out.output_parsed
    assert isinstance(city, City), out.output_text
    assert city.continent == "Asia" and "Tokyo" in city.name
    weather = {
        "type": "function",
        "name": "get_weather",
        "description": "The current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
    first = client.responses.create(
        model="default",
        input="What is the weather in Paris?",
        tools=[weather],
        tool_choice="required",
        temperature=0,
        max_output_tokens=100,
    )
    [call] = [i for i in first.output if i.type == "function_call"]
    assert call.name == "get_weather" and "Paris" in call.arguments
    second = client.responses.create(
        model="default",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "21 C, sunny"}],
        tools=[weather],
        temperature=0,
        max_output_tokens=100,
    )
    # The stored conversation plus the result: a longer prompt than the first (same tools).
    assert second.status == "completed" and second.output
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens + 10


@pytest.mark.parametrize(
    ("method", "responses_api"),
    [("json_schema", False), ("function_calling", False), ("json_schema", True)],
)
def test_langchain_structured_output(url: str, method: str, responses_api: bool) -> None:
    lc = pytest.importorskip("langchain_openai")
    model = lc.ChatOpenAI(
        model="default",
        base_url=url,
        api_key="unused",
        temperature=0,
        max_tokens=200,
        max_retries=0,
        use_responses_api=responses_api,
    )
    structured = model.with_structured_output(Weather, method=method)
    got = structured.invoke("What's the weather in Paris, in celsius?")
    assert isinstance(got, Weather), got
    assert "Paris" in got.city and got.unit == "celsius"


@pytest.mark.parametrize("responses_api", [False, True])
def test_openai_agents_sdk_with_a_tool(url: str, responses_api: bool) -> None:
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)  # traces would go to OpenAI's servers
    calls: list[tuple[int, int]] = []

    @agents.function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append((a, b))
        return a + b

    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
    # The SDK's default model speaks the Responses API; the other chat completions.
    kind = agents.OpenAIResponsesModel if responses_api else agents.OpenAIChatCompletionsModel
    model = kind(model="default", openai_client=client)
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


def test_litellm_openai_compatible_provider(url: str) -> None:
    """LiteLLM's OpenAI-compatible provider (``openai/<model>`` with ``api_base``): chat,
    a tool call, and its Responses API bridge."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
    litellm = pytest.importorskip("litellm")
    common = {"model": "openai/default", "api_base": url, "api_key": "unused", "temperature": 0}
    chat = litellm.completion(
        messages=[{"role": "user", "content": "What is the capital of France? One word."}],
        max_tokens=20,
        **common,
    )
    assert "Paris" in chat.choices[0].message.content
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    called = litellm.completion(
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[tool],
        tool_choice="required",
        max_tokens=60,
        **common,
    )
    [call] = called.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and "Paris" in call.function.arguments
    answer = litellm.responses(
        input="Say hello in French, one word.", max_output_tokens=20, **common
    )
    text = "".join(
        part.text for item in answer.output if item.type == "message" for part in item.content
    )
    assert answer.status == "completed" and text
