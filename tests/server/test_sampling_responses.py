"""``/v1/responses``' log-probabilities (``top_logprobs``, ``include:
["message.output_text.logprobs"]``) and sampling fields over a scripted engine, read with the
official ``openai`` SDK: the ``output_text`` part lists its text's tokens, the text deltas
carry theirs, and an engine that reports none refuses them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from chatfmt.dialects import get_dialect
from chatfmt.engines.base import OPTIONAL_SAMPLING
from chatfmt.engines.fake import FakeEngine, fake_logprob
from chatfmt.server import create_app
from chatfmt.tokenizers import Tokenizer

openai = pytest.importorskip("openai", reason="the openai SDK (a dev dependency) is missing")

pytestmark = pytest.mark.anyio

LOGPROBS = "message.output_text.logprobs"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def sdk(fake: FakeEngine) -> Any:
    app = create_app(fake, get_dialect("qwen2.5"), model_name="m")
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test/v1")
    return openai.AsyncOpenAI(base_url="http://test/v1", api_key="unused", http_client=http)


async def test_output_text_lists_its_tokens(qwen: Tokenizer) -> None:
    fake = FakeEngine(qwen, ["Hello there!<|im_end|>"], sampling=["logprobs"])
    c = sdk(fake)
    r = await c.responses.create(model="m", input="hi", include=[LOGPROBS], top_logprobs=2)
    (part,) = r.output[0].content
    ids = qwen.encode_text("Hello there!")
    assert [t.token for t in part.logprobs] == [qwen.decode([i]) for i in ids]
    assert b"".join(bytes(t.bytes) for t in part.logprobs).decode() == part.text
    for n, t in enumerate(part.logprobs):
        assert t.logprob == fake_logprob(n)
        assert [a.logprob for a in t.top_logprobs] == [t.logprob, t.logprob - 1]
    # Either switch turns them on; top_logprobs says how many alternatives.
    only_top = await c.responses.create(model="m", input="hi", top_logprobs=1)
    assert [len(t.top_logprobs) for t in only_top.output[0].content[0].logprobs] == [1] * 3
    only_include = await c.responses.create(model="m", input="hi", include=[LOGPROBS])
    assert [t.top_logprobs for t in only_include.output[0].content[0].logprobs] == [[]] * 3
    assert fake.params[-1].logprobs == 0
    plain = await c.responses.create(model="m", input="hi")
    assert plain.output[0].content[0].logprobs == [] and fake.params[-1].logprobs is None


async def test_streamed_deltas_carry_their_tokens(qwen: Tokenizer) -> None:
    fake = FakeEngine(qwen, ["Sure. Let me check." + CALL + "<|im_end|>"], sampling=["logprobs"])
    c = sdk(fake)
    stream = await c.responses.create(
        model="m", input="hi", tools=[WEATHER], include=[LOGPROBS], top_logprobs=1, stream=True
    )
    events = [e async for e in stream]  # each checked by the SDK's own event models
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    (done,) = [e for e in events if e.type == "response.output_text.done"]
    final = events[-1].response
    text = final.output[0].content[0]
    # The message's tokens only: those of the call are the call's (no logprobs in this API).
    assert [t.token for t in text.logprobs] == [
        qwen.decode([i]) for i in qwen.encode_text("Sure. Let me check.")
    ]
    streamed = [t for d in deltas for t in d.logprobs]
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in done.logprobs]
    assert [(t.token, t.logprob) for t in done.logprobs] == [
        (t.token, t.logprob) for t in text.logprobs
    ]
    assert all(len(t.top_logprobs) == 1 for t in streamed)
    assert "".join(d.delta for d in deltas) == text.text == done.text
    assert final.output[1].type == "function_call"


async def test_an_engine_without_logprobs_refuses_them(qwen: Tokenizer) -> None:
    c = sdk(FakeEngine(qwen, ["Hi<|im_end|>"]))
    for fields, param in (
        ({"include": ["reasoning.encrypted_content", LOGPROBS]}, "include[1]"),
        ({"top_logprobs": 3}, "top_logprobs"),
    ):
        with pytest.raises(openai.BadRequestError) as err:
            await c.responses.create(model="m", input="hi", **fields)
        body = err.value.body
        assert isinstance(body, dict) and body["param"] == param
        assert "log-probabilities cannot be returned" in body["message"]
    # top_logprobs 0 alone asks for nothing.
    r = await c.responses.create(model="m", input="hi", top_logprobs=0)
    assert r.output_text == "Hi"


async def test_sampling_fields_reach_the_engine_or_are_refused(qwen: Tokenizer) -> None:
    fake = FakeEngine(qwen, ["Hi<|im_end|>"], sampling=sorted(OPTIONAL_SAMPLING))
    c = sdk(fake)
    extra = {
        "seed": 3, "top_k": 5, "min_p": 0.1, "presence_penalty": 0.2, "frequency_penalty": 0.3,
        "repetition_penalty": 1.2, "logit_bias": {"9": -50},
    }  # fmt: skip
    await c.responses.create(model="m", input="hi", extra_body=extra)
    p = fake.params[-1]
    assert (p.seed, p.top_k, p.min_p, p.presence_penalty) == (3, 5, 0.1, 0.2)
    assert (p.frequency_penalty, p.repetition_penalty, p.logit_bias) == (0.3, 1.2, ((9, -50.0),))
    bare = sdk(FakeEngine(qwen, ["Hi<|im_end|>"]))
    with pytest.raises(openai.BadRequestError) as err:
        await bare.responses.create(model="m", input="hi", extra_body={"min_p": 0.5})
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "min_p"
    with pytest.raises(openai.BadRequestError) as err:
        await c.responses.create(model="m", input="hi", extra_body={"logit_bias": {"x": 1}})
    assert isinstance(err.value.body, dict) and err.value.body["param"] == "logit_bias"
