"""``/v1/chat/completions``' sampling fields over a scripted engine: the request → the engine's
parameters, their checks (400s naming the field), the refusal of what an engine cannot honour,
and the ``logprobs`` of whole and streamed replies, read with the official ``openai`` SDK.
(Their effect on a real model: tests/server/test_sampling_real.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from server_helpers import USER_HI, WEATHER_TOOL

from chatfmt.engines.base import OPTIONAL_SAMPLING, SamplingParams
from chatfmt.engines.fake import FakeEngine, fake_logprob
from chatfmt.server import create_app
from chatfmt.tokenizers import Tokenizer

openai = pytest.importorskip("openai", reason="the openai SDK (a dev dependency) is missing")

EVERY_FIELD = sorted(OPTIONAL_SAMPLING)


def post(app: Any, body: dict[str, Any]) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/v1/chat/completions", json=body)

    return asyncio.run(go())


def sdk(app: Any) -> Any:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test/v1")
    return openai.AsyncOpenAI(base_url="http://test/v1", api_key="unused", http_client=http)


def app_of(fake: FakeEngine, qwen_dialect: Any) -> Any:
    return create_app(fake, qwen_dialect, model_name="m")


def sent(make_fake: Any, qwen_dialect: Any, **fields: Any) -> SamplingParams:
    """The parameters the engine got for a chat request with ``fields``."""
    fake = make_fake(sampling=EVERY_FIELD)
    r = post(app_of(fake, qwen_dialect), {"messages": USER_HI, **fields})
    assert r.status_code == 200, r.text
    params: SamplingParams = fake.params[-1]
    return params


# ==== Request → parameters ====


def test_absent_fields_keep_openais_defaults(make_fake, qwen_dialect) -> None:
    params = sent(make_fake, qwen_dialect)
    assert params.optional_fields() == ()
    assert (params.top_k, params.min_p, params.repetition_penalty) == (0, 0.0, 1.0)
    assert (params.presence_penalty, params.frequency_penalty) == (0.0, 0.0)
    assert (params.logit_bias, params.logprobs) == ((), None)
    assert (params.temperature, params.top_p, params.seed) == (1.0, 1.0, None)


def test_every_field_reaches_the_engine(make_fake, qwen_dialect) -> None:
    params = sent(
        make_fake, qwen_dialect, temperature=0.5, top_p=0.9, seed=7, top_k=40, min_p=0.05,
        presence_penalty=0.5, frequency_penalty=-0.5, repetition_penalty=1.1,
        logit_bias={"100": -100, "7": 2.5}, logprobs=True, top_logprobs=3,
    )  # fmt: skip
    assert (params.temperature, params.top_p, params.seed) == (0.5, 0.9, 7)
    assert (params.top_k, params.min_p, params.repetition_penalty) == (40, 0.05, 1.1)
    assert (params.presence_penalty, params.frequency_penalty) == (0.5, -0.5)
    assert params.logit_bias == ((7, 2.5), (100, -100.0))
    assert params.logprobs == 3


def test_field_forms(make_fake, qwen_dialect) -> None:
    # vLLM's "no limit" for top_k; logprobs without top_logprobs lists no alternatives.
    assert sent(make_fake, qwen_dialect, top_k=-1).top_k == 0
    assert sent(make_fake, qwen_dialect, logprobs=True).logprobs == 0
    assert sent(make_fake, qwen_dialect, logprobs=False).logprobs is None
    # Two spellings of one id: the last counts.
    assert sent(make_fake, qwen_dialect, logit_bias={"7": 1, "07": -1}).logit_bias == ((7, -1.0),)


@pytest.mark.parametrize(
    ("fields", "param", "needle"),
    [
        ({"logit_bias": {"hello": 5}}, "logit_bias", "not a token id"),
        ({"logit_bias": {"5": 101}}, "logit_bias", "from -100 to 100"),
        ({"logit_bias": {"999999": 1}}, "logit_bias", "not in this model's vocabulary"),
        ({"logit_bias": {"-3": 1}}, "logit_bias", "not in this model's vocabulary"),
        ({"logit_bias": ["5", 1]}, "logit_bias", "dictionary"),
        ({"top_logprobs": 2}, "top_logprobs", "needs logprobs: true"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "20"),
        ({"logprobs": "yes"}, "logprobs", "boolean"),
        ({"top_k": "5"}, "top_k", "integer"),
        ({"top_k": -2}, "top_k", "-1"),
        ({"min_p": 1.5}, "min_p", "1"),
        ({"presence_penalty": 2.5}, "presence_penalty", "2"),
        ({"frequency_penalty": -3}, "frequency_penalty", "-2"),
        ({"repetition_penalty": 0}, "repetition_penalty", "0"),
    ],
)
def test_bad_values_are_a_400_naming_the_field(
    make_fake, qwen_dialect, fields: dict[str, Any], param: str, needle: str
) -> None:
    fake = make_fake(sampling=EVERY_FIELD)
    r = post(app_of(fake, qwen_dialect), {"messages": USER_HI, **fields})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and needle in error["message"]
    assert fake.params == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("top_k", 1),
        ("min_p", 1.0),
        ("presence_penalty", 0.5),
        ("frequency_penalty", 0.5),
        ("repetition_penalty", 1.3),
        ("logit_bias", {"5": -100}),
        ("logprobs", True),
    ],
)
def test_a_field_the_engine_cannot_honour_is_refused(
    make_fake, qwen_dialect, field: str, value: Any
) -> None:
    fake = make_fake()  # claims none
    r = post(app_of(fake, qwen_dialect), {"messages": USER_HI, field: value})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == field and error["code"] == "unsupported_parameter"
    assert field in error["message"] and "engine (fake)" in error["message"]
    assert fake.prompts == []  # never generated as if it had been honoured


# ==== Log-probabilities, whole and streamed ====

REPLY = "Hello there! <b>bold</b><|im_end|>"  # "<" is held back while it may start a tag


def test_logprobs_of_a_whole_reply(make_fake, qwen_dialect, qwen: Tokenizer) -> None:
    fake = make_fake((REPLY,), sampling=["logprobs"])
    c = sdk(app_of(fake, qwen_dialect))
    out = asyncio.run(
        c.chat.completions.create(model="m", messages=USER_HI, logprobs=True, top_logprobs=2)
    )
    choice = out.choices[0]
    content = choice.logprobs.content  # the SDK's own models read it
    text = choice.message.content
    ids = qwen.encode_text(text)
    assert len(content) == len(ids) == out.usage.completion_tokens - 1  # the stop token is not
    assert b"".join(bytes(t.bytes) for t in content).decode() == text
    for n, (t, token) in enumerate(zip(content, ids, strict=True)):
        assert t.logprob == fake_logprob(n)
        assert [a.logprob for a in t.top_logprobs] == [t.logprob, t.logprob - 1]
        assert t.top_logprobs[0].token == t.token == qwen.decode([token])
    plain = asyncio.run(c.chat.completions.create(model="m", messages=USER_HI))
    assert plain.choices[0].logprobs is None


def test_streamed_logprobs_add_up_to_the_whole(make_fake, qwen_dialect) -> None:
    fake = make_fake((REPLY,), sampling=["logprobs"])
    c = sdk(app_of(fake, qwen_dialect))

    async def both() -> tuple[Any, list[Any]]:
        whole = await c.chat.completions.create(
            model="m", messages=USER_HI, logprobs=True, top_logprobs=1
        )
        stream = await c.chat.completions.create(
            model="m", messages=USER_HI, logprobs=True, top_logprobs=1, stream=True
        )
        return whole, [chunk async for chunk in stream]

    whole, chunks = asyncio.run(both())
    streamed = [t for ch in chunks for c in ch.choices if c.logprobs for t in c.logprobs.content]
    assert [t.model_dump() for t in streamed] == [
        t.model_dump() for t in whole.choices[0].logprobs.content
    ]
    # Each chunk carries the tokens its text came from: after every chunk, the text so far
    # begins the tokens' text so far, which begins the reply (text held back while it might
    # open a call's tag, " <" here, is sent later; its token is not).
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    shown, tokens, late = "", b"", 0
    for ch in chunks[1:]:
        choice = ch.choices[0]
        shown += choice.delta.content or ""
        if choice.logprobs is not None:
            tokens += b"".join(bytes(t.bytes) for t in choice.logprobs.content)
        assert tokens.decode().startswith(shown) and text.startswith(tokens.decode())
        late += len(tokens.decode()) > len(shown)
    assert late == 1  # the chunk of " <"
    assert tokens.decode() == text


def test_logprobs_cover_a_calls_tokens(make_fake, qwen_dialect, qwen: Tokenizer) -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    fake = make_fake((call + "<|im_end|>",), sampling=["logprobs"])
    c = sdk(app_of(fake, qwen_dialect))
    out = asyncio.run(c.chat.completions.create(
        model="m", messages=USER_HI, tools=[WEATHER_TOOL], logprobs=True))  # fmt: skip
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert len(choice.logprobs.content) == len(fake.reply_ids(call))
    assert all(t.top_logprobs == [] for t in choice.logprobs.content)
