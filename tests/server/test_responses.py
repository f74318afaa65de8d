"""``/v1/responses`` over ASGI with a scripted engine, through the official ``openai`` SDK:
shapes (checked by the SDK's own models), the typed event stream, function calls continued
with ``previous_response_id``, structured output, the store (keys, restart, concurrency) and
errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

openai = pytest.importorskip("openai", reason="the openai SDK (a dev dependency) is missing")

from chatfmt.dialects import get_dialect  # noqa: E402
from chatfmt.engines.fake import FakeEngine  # noqa: E402
from chatfmt.server import create_app  # noqa: E402
from chatfmt.store import ResponseStore  # noqa: E402
from chatfmt.tokenizers import Tokenizer  # noqa: E402

pytestmark = pytest.mark.anyio

CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def scripted(tok: Tokenizer) -> Any:
    """Reply by what the prompt ends with: a call for weather, an answer after its result."""

    def reply(prompt: list[int]) -> str:
        text = tok.decode(prompt)
        tail = text.rsplit("<|im_start|>user\n", 1)[-1]
        if tail.startswith("<tool_response>"):
            return "It is sunny in Paris.<|im_end|>"
        if "weather" in tail.lower():
            return CALL
        if "json" in tail.lower():
            return '{"name": "Ada", "age": 36}<|im_end|>'
        if "count" in tail.lower():
            return f"You said {text.count('<|im_start|>user')} things.<|im_end|>"
        return "Hello there!<|im_end|>"

    return reply


def make_app(tok: Tokenizer, store: ResponseStore | None, **kwargs: Any) -> tuple[Any, FakeEngine]:
    engine = FakeEngine(tok, scripted(tok), grammar_support="full")
    app = create_app(engine, get_dialect("qwen2.5"), model_name="m", store=store, **kwargs)
    return app, engine


def client(app: Any, key: str = "unused") -> Any:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test/v1")
    return openai.AsyncOpenAI(base_url="http://test/v1", api_key=key, http_client=http)


async def test_create_text_and_usage(qwen: Tokenizer) -> None:
    app, engine = make_app(qwen, ResponseStore(":memory:"))
    c = client(app)
    r = await c.responses.create(model="m", input="hi", instructions="Be brief.")
    assert r.output_text == "Hello there!" and r.status == "completed"
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    prompt = engine.prompts[-1]
    expected = get_dialect("qwen2.5").render(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], qwen
    )
    assert prompt == expected.ids
    assert r.usage is not None and r.usage.input_tokens == len(prompt)
    assert r.usage.output_tokens == len(qwen.encode_text("Hello there!")) + 1  # + <|im_end|>
    again = await c.responses.retrieve(r.id)
    assert again.model_dump() == r.model_dump()


async def test_stream_events_follow_the_documented_order(qwen: Tokenizer) -> None:
    app, _ = make_app(qwen, ResponseStore(":memory:"))
    c = client(app)
    events = [e async for e in await c.responses.create(model="m", input="hi", stream=True)]
    kinds = [e.type for e in events]
    assert kinds[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == final.output_text == "Hello there!"
    whole = await c.responses.create(model="m", input="hi")
    assert [i.model_dump(exclude={"id"}) for i in whole.output] == [
        i.model_dump(exclude={"id"}) for i in final.output
    ]


async def test_function_call_round_trip_with_previous_response_id(qwen: Tokenizer) -> None:
    app, engine = make_app(qwen, ResponseStore(":memory:"))
    c = client(app)
    first = await c.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER])
    [call] = [i for i in first.output if i.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    second = await c.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[WEATHER],
    )
    assert second.output_text == "It is sunny in Paris."
    prompt = qwen.decode(engine.prompts[-1])
    assert "Weather in Paris?" in prompt and "<tool_response>\nsunny\n</tool_response>" in prompt
    items = await c.responses.input_items.list(second.id)
    assert [i.type for i in items.data] == ["function_call_output"]


async def test_streamed_function_call(qwen: Tokenizer) -> None:
    app, _ = make_app(qwen, ResponseStore(":memory:"))
    c = client(app)
    stream = await c.responses.create(model="m", input="weather?", tools=[WEATHER], stream=True)
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert deltas == done.arguments and json.loads(done.arguments) == {"city": "Paris"}
    assert kinds[-1] == "response.completed"


async def test_parse_with_a_pydantic_model(qwen: Tokenizer) -> None:
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int

    app, engine = make_app(qwen, None)
    c = client(app)
    r = await c.responses.parse(model="m", input="Give json for Ada", text_format=Person)
    assert r.output_parsed == Person(name="Ada", age=36)
    assert engine.params[-1].grammar is not None  # constrained by the schema's grammar


async def test_keys_own_their_responses_and_delete(qwen: Tokenizer) -> None:
    app, _ = make_app(qwen, ResponseStore(":memory:"), api_key=["key-alice", "key-bob"])
    alice, bob = client(app, "key-alice"), client(app, "key-bob")
    r = await alice.responses.create(model="m", input="hi")
    with pytest.raises(openai.NotFoundError):
        await bob.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        await bob.responses.create(model="m", input="count", previous_response_id=r.id)
    with pytest.raises(openai.AuthenticationError):
        await client(app, "key-eve").responses.create(model="m", input="hi")
    await alice.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        await alice.responses.retrieve(r.id)


async def test_bad_input_gets_openai_shaped_errors(qwen: Tokenizer) -> None:
    app, _ = make_app(qwen, ResponseStore(":memory:"))
    cases = [
        ({"input": [{"type": "web_search_call"}]}, 400, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            400,
            "input[0].content[0]",
        ),
        ({"input": "hi", "previous_response_id": "resp_nope"}, 404, "previous_response_id"),
        ({"input": "hi", "tools": [{"type": "teleport"}]}, 400, "tools[0].type"),
    ]
    for body, status, param in cases:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://t"
        ) as h:
            r = await h.post("/v1/responses", json={"model": "m", **body})
        assert r.status_code == status, (body, r.text)
        error = r.json()["error"]
        assert error["param"] == param and error["message"]


async def test_a_chain_survives_a_restart(qwen: Tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "responses.sqlite3"
    app, _ = make_app(qwen, ResponseStore(path))
    first = await client(app).responses.create(model="m", input="hi")
    app.state.store.close()
    app2, engine2 = make_app(qwen, ResponseStore(path))  # a new server on the same database
    again = await client(app2).responses.create(
        model="m", input="count", previous_response_id=first.id
    )
    assert again.output_text == "You said 2 things."
    expected = get_dialect("qwen2.5").render(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello there!"},
            {"role": "user", "content": "count"},
        ],
        qwen,
    )
    assert engine2.prompts[-1] == expected.ids
    assert again.usage is not None and again.usage.input_tokens == len(expected.ids)


async def test_32_conversations_of_5_chained_responses_at_once(
    qwen: Tokenizer, tmp_path: Path
) -> None:
    store = ResponseStore(tmp_path / "responses.sqlite3")
    app, _ = make_app(qwen, store)
    c = client(app)

    async def conversation(n: int) -> list[str]:
        previous = None
        ids = []
        for turn in range(5):
            r = await c.responses.create(
                model="m", input=f"count {n}-{turn}", previous_response_id=previous
            )
            assert r.output_text == f"You said {turn + 1} things."
            previous = r.id
            ids.append(r.id)
        return ids

    chains = await asyncio.gather(*(conversation(n) for n in range(32)))
    assert store.count() == 160 and store.integrity() == "ok"
    # Nothing crossed: each last response's conversation holds only its own messages.
    for n, ids in enumerate(chains):
        last = store.conversation("", ids[-1])
        assert last is not None
        users = [m["content"] for m in last if m["role"] == "user"]
        assert users == [f"count {n}-{t}" for t in range(5)]


async def test_every_body_and_event_validates_against_the_sdks_models(qwen: Tokenizer) -> None:
    """The SDK builds its objects without validating them; validate ours strictly here."""
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    app, _ = make_app(qwen, ResponseStore(":memory:"))
    events = TypeAdapter(ResponseStreamEvent)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as h:
        for body in (
            {"input": "hi"},
            {"input": "weather?", "tools": [WEATHER]},
            {
                "input": "weather?",
                "tools": [WEATHER],
                "tool_choice": {"type": "function", "name": "get_weather"},
            },
            {"input": "hi", "max_output_tokens": 2},
        ):
            r = await h.post("/v1/responses", json={"model": "m", **body})
            assert r.status_code == 200, r.text
            whole = Response.model_validate(r.json())
            r = await h.post("/v1/responses", json={"model": "m", "stream": True, **body})
            frames = [b for b in r.text.split("\n\n") if b.strip()]
            parsed = []
            for frame in frames:
                name, data = frame.split("\n", 1)
                event = events.validate_python(json.loads(data.removeprefix("data: ")))
                assert name == f"event: {event.type}"
                parsed.append(event)
            final = parsed[-1].response  # type: ignore[union-attr]
            assert final.status == whole.status
            assert [i.type for i in final.output] == [i.type for i in whole.output]
        r = await h.post(
            "/v1/responses", json={"model": "m", "input": "hi", "max_output_tokens": 2}
        )
        assert r.json()["status"] == "incomplete"
        assert r.json()["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_review_cases(qwen: Tokenizer) -> None:
    """Odd bodies get 400s naming the field; a failing store loses no answer."""
    app, _ = make_app(qwen, ResponseStore(":memory:"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as h:
        for body, param in (
            ({"input": "hi", "text": {"format": "json"}}, "text.format"),
            ({"input": "hi", "tool_choice": "bogus"}, "tool_choice"),
            ({"input": []}, "input"),
            ({"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
             "input[0].content[0].text"),
        ):  # fmt: skip
            r = await h.post("/v1/responses", json={"model": "m", **body})
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        raw = '{"model": "m", "input": "hi", "metadata": {"k": "\\ud800"}}'
        r = await h.post("/v1/responses", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "lone surrogate" in r.json()["error"]["message"]
        chat = (
            '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", '
            '"function": {"name": "f", "description": "\\ud800"}}]}'
        )
        r = await h.post(
            "/v1/chat/completions", content=chat, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 400 and "lone surrogate" in r.json()["error"]["message"]

        def broken(*_args: Any) -> None:
            raise OSError("disk full")

        app.state.store.put = broken
        r = await h.post("/v1/responses", json={"model": "m", "input": "hi"})
        assert (
            r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "Hello there!"
        )
        assert r.json()["store"] is False


async def test_a_call_cut_by_max_output_tokens_is_incomplete(qwen: Tokenizer) -> None:
    app, _ = make_app(qwen, None)
    c = client(app)
    r = await c.responses.create(model="m", input="weather?", tools=[WEATHER], max_output_tokens=12)
    assert r.status == "incomplete"
    assert [i.status for i in r.output if i.type == "function_call"] == ["incomplete"]


async def test_demoted_calls_stay_in_the_stored_conversation(qwen: Tokenizer) -> None:
    app, engine = make_app(qwen, ResponseStore(":memory:"))
    c = client(app)
    # Only get_time is declared: the model's get_weather call is demoted to text.
    clock = {**WEATHER, "name": "get_time"}
    first = await c.responses.create(model="m", input="weather?", tools=[clock])
    assert [i.type for i in first.output] == ["message"] and "get_weather" in first.output_text
    await c.responses.create(model="m", input="count", previous_response_id=first.id)
    assert first.output_text in qwen.decode(engine.prompts[-1])


async def test_input_items_validate_and_page(qwen: Tokenizer) -> None:
    from openai.types.responses import ResponseItem
    from pydantic import TypeAdapter

    app, _ = make_app(qwen, ResponseStore(":memory:"))
    c = client(app)
    items = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "two"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "three"}]},
    ]
    r = await c.responses.create(model="m", input=items)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as h:
        page = (await h.get(f"/v1/responses/{r.id}/input_items?order=asc&limit=2")).json()
        adapter = TypeAdapter(ResponseItem)
        shown = [adapter.validate_python(i) for i in page["data"]]
        assert [i.content[0].text for i in shown] == ["one", "two"] and page["has_more"]  # type: ignore[union-attr]
        rest = (
            await h.get(f"/v1/responses/{r.id}/input_items?order=asc&after={page['last_id']}")
        ).json()
        assert [i["content"][0]["text"] for i in rest["data"]] == ["three"] and not rest["has_more"]
        assert (await h.get(f"/v1/responses/{r.id}/input_items?order=up")).status_code == 400


async def test_each_row_keeps_only_what_it_added(qwen: Tokenizer, tmp_path: Path) -> None:
    import sqlite3

    store = ResponseStore(tmp_path / "r.sqlite3")
    app, _ = make_app(qwen, store)
    c = client(app)
    previous = None
    for turn in range(6):
        r = await c.responses.create(
            model="m", input=f"count {turn}", previous_response_id=previous
        )
        previous = r.id
    with sqlite3.connect(tmp_path / "r.sqlite3") as db:
        sizes = [len(json.loads(m)) for (m,) in db.execute("SELECT messages FROM responses")]
    assert sizes == [2] * 6  # the input and the reply, not the conversation again
    assert len(store.conversation("", previous)) == 12  # type: ignore[arg-type]
