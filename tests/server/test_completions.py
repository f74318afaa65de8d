"""/v1/completions, /detokenize and /v1/chat/render over ASGI with a scripted engine: the
official openai client's models and ``client.completions.create``, errors, streaming."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from server_helpers import USER_HI, parse_sse

from chatfmt.engines.fake import fake_logprob
from chatfmt.server import create_app
from chatfmt.server.completions.schemas import Completion

openai = pytest.importorskip("openai")


def post(app: Any, url: str, body: Any, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(url, json=body, **kwargs)

    return asyncio.run(go())


@pytest.fixture
def app_of(make_fake, qwen_dialect):  # type: ignore[no-untyped-def]
    def make(script: Any = ("Hello there!<|im_end|>",), **kwargs: Any) -> tuple[Any, Any]:
        fake = make_fake(script, **kwargs)
        return create_app(fake, qwen_dialect, model_name="m"), fake

    return make


def test_text_prompt_through_the_openai_client(app_of, qwen) -> None:  # type: ignore[no-untyped-def]
    app, fake = app_of(("Paris.<|im_end|>",))

    async def go() -> Any:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t/v1")
        client = openai.AsyncOpenAI(api_key="x", base_url="http://t/v1", http_client=http)
        async with http:
            return await client.completions.create(
                model="m", prompt="The capital of France is", max_tokens=8, temperature=0
            )

    out = asyncio.run(go())
    assert out.object == "text_completion"
    assert out.choices[0].text == "Paris."
    assert out.choices[0].finish_reason == "stop"
    # The text is encoded as text, no template: the engine saw exactly its ids.
    assert fake.prompts == [qwen.encode_text("The capital of France is")]
    assert out.usage is not None and out.usage.prompt_tokens == len(fake.prompts[0])
    assert out.usage.completion_tokens == len(qwen.encode_text("Paris.")) + 1  # and <|im_end|>
    assert fake.params[0].max_tokens == 8 and fake.params[0].temperature == 0


def test_control_text_in_a_prompt_stays_text(app_of, qwen) -> None:  # type: ignore[no-untyped-def]
    app, fake = app_of()
    r = post(app, "/v1/completions", {"prompt": "<|im_start|>user"})
    assert r.status_code == 200, r.text
    assert qwen.control_id("<|im_start|>") not in fake.prompts[0]


def test_token_ids_are_passed_as_given(app_of, qwen) -> None:  # type: ignore[no-untyped-def]
    app, fake = app_of()
    ids = [qwen.control_id("<|im_start|>"), *qwen.encode_text("user\nHi")]
    for prompt in (ids, [ids]):  # a list holding one prompt is that prompt
        r = post(app, "/v1/completions", {"prompt": prompt, "max_tokens": 30})
        assert r.status_code == 200, r.text
        openai.types.Completion.model_validate(r.json())
        assert r.json()["choices"][0]["text"] == "Hello there!"
    assert fake.prompts == [ids, ids]


def test_default_max_tokens_is_openais(app_of) -> None:  # type: ignore[no-untyped-def]
    app, fake = app_of(("word " * 40,))
    r = post(app, "/v1/completions", {"prompt": "Say"})
    assert r.json()["choices"][0]["finish_reason"] == "length"
    assert fake.params[0].max_tokens == 16
    assert r.json()["usage"]["completion_tokens"] == 16


def test_stop_strings_and_sampling_fields(app_of) -> None:  # type: ignore[no-untyped-def]
    app, fake = app_of(("one, two. three<|im_end|>",), sampling=("top_k",))
    body = {"prompt": "Count", "stop": ["."], "seed": 7, "top_k": 5, "top_p": 0.5}
    r = post(app, "/v1/completions", body)
    assert r.json()["choices"][0]["text"] == "one, two"
    p = fake.params[0]
    assert (p.seed, p.top_k, p.top_p) == (7, 5, 0.5)


def test_logprobs_in_the_legacy_shape(app_of, qwen) -> None:  # type: ignore[no-untyped-def]
    app, _ = app_of(("Hello there!<|im_end|>",), sampling=("logprobs",))
    r = post(app, "/v1/completions", {"prompt": "Hi", "logprobs": 2})
    assert r.status_code == 200, r.text
    choice = openai.types.Completion.model_validate(r.json()).choices[0]
    lp = choice.logprobs
    assert lp is not None and lp.tokens is not None and lp.text_offset is not None
    reply = qwen.encode_text("Hello there!")
    assert lp.tokens == [qwen.decode([t]) for t in reply]  # the stop token left out
    assert lp.token_logprobs == [fake_logprob(n) for n in range(len(reply))]
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(len(reply))]
    assert lp.top_logprobs is not None
    for token, top in zip(reply, lp.top_logprobs, strict=True):
        assert list(top) == [qwen.decode([token]), qwen.decode([token + 1])]


def test_stream(app_of, qwen) -> None:  # type: ignore[no-untyped-def]
    app, _ = app_of(("Hello there!<|im_end|>",), sampling=("logprobs",))
    usage = {"include_usage": True}
    body = {"prompt": "Hi", "stream": True, "logprobs": 0, "stream_options": usage}
    r = post(app, "/v1/completions", body)
    assert r.headers["content-type"].startswith("text/event-stream")
    events, done = parse_sse(r.text)
    assert done
    # The SDK reads stream chunks without validating them (OpenAI's carry "finish_reason":
    # null, which its model does not allow): chatfmt's own wire model checks them here.
    chunks = [Completion.model_validate(e) for e in events]
    assert len({c.id for c in chunks}) == 1
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == "Hello there!"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    logprobs = [c.choices[0].logprobs for c in chunks if c.choices]
    tokens = [t for lp in logprobs if lp is not None for t in lp.tokens]
    assert "".join(tokens) == "Hello there!"
    offsets = [o for lp in logprobs if lp is not None for o in lp.text_offset]
    assert offsets == [len("".join(tokens[:i])) for i in range(len(tokens))]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(qwen.encode_text("Hello there!")) + 1


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"prompt": "x", "echo": True}, "echo", "echo is not supported"),
        ({"prompt": "x", "suffix": "y"}, "suffix", "suffix"),
        ({"prompt": "x", "n": 2}, "n", "one choice per request"),
        ({"prompt": "x", "best_of": 3}, "best_of", "one choice per request"),
        ({"prompt": ["a", "b"]}, "prompt", "one prompt per request"),
        ({"prompt": ""}, "prompt", "is empty"),
        ({"prompt": []}, "prompt", "is empty"),
        ({"prompt": [1, "a"]}, "prompt", "token ids"),
        ({"prompt": [1, 10**9]}, "prompt", "not in this model's vocabulary"),
        ({"prompt": "x", "max_tokens": 10**6}, "max_tokens", "context length"),
        ({"prompt": "x", "logprobs": 21}, "logprobs", ""),
        ({"prompt": "x", "logprobs": 1}, "logprobs", "cannot be honoured"),
        ({"prompt": "x", "logit_bias": {"999999999": 1}}, "logit_bias", "vocabulary"),
        ({}, "prompt", ""),
    ],
)
def test_errors_name_the_field(app_of, body, param, words) -> None:  # type: ignore[no-untyped-def]
    app, fake = app_of()
    r = post(app, "/v1/completions", body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"]
    assert fake.prompts == []


def test_auth(make_fake, qwen_dialect) -> None:  # type: ignore[no-untyped-def]
    app = create_app(make_fake(), qwen_dialect, model_name="m", api_key="k")
    for url, body in (
        ("/v1/completions", {"prompt": "x"}),
        ("/detokenize", {"tokens": [1]}),
        ("/v1/chat/render", {"messages": USER_HI}),
    ):
        assert post(app, url, body).status_code == 401
        ok = post(app, url, body, headers={"Authorization": "Bearer k"})
        assert ok.status_code == 200, ok.text


def test_detokenize_inverts_tokenize(app_of, qwen) -> None:  # type: ignore[no-untyped-def]
    app, _ = app_of()
    tokenized = post(app, "/tokenize", {"messages": USER_HI}).json()
    r = post(app, "/detokenize", {"tokens": tokenized["tokens"]})
    assert r.status_code == 200
    assert r.json() == {"prompt": tokenized["text"]}
    bad = post(app, "/detokenize", {"tokens": [0, -1]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    assert "tokens[1]" in bad.json()["error"]["message"]


def test_render_is_what_chat_sends(app_of, qwen) -> None:  # type: ignore[no-untyped-def]
    app, fake = app_of()
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    body = {"messages": USER_HI, "tools": [tool], "stop": ["END"], "max_tokens": 9}
    r = post(app, "/v1/chat/render", body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert post(app, "/v1/chat/completions", body).status_code == 200
    assert out["prompt_token_ids"] == fake.prompts[0]
    assert out["prompt"] == qwen.decode(fake.prompts[0]) and out["count"] == len(fake.prompts[0])
    assert out["dialect"] == "qwen2.5" and out["max_tokens"] == 9
    assert out["stop_token_ids"] == list(fake.params[0].stop_ids) and "END" in out["stop"]
    assert post(app, "/v1/chat/render", {"messages": []}).status_code == 400


def test_completion_of_chat_ids_continues_as_chat(app_of) -> None:  # type: ignore[no-untyped-def]
    app, fake = app_of(("Hello there!<|im_end|>",))
    ids = post(app, "/v1/chat/render", {"messages": USER_HI}).json()["prompt_token_ids"]
    chat = post(app, "/v1/chat/completions", {"messages": USER_HI}).json()
    completion = post(app, "/v1/completions", {"prompt": ids, "max_tokens": 50}).json()
    assert fake.prompts[0] == fake.prompts[1] == ids
    assert completion["choices"][0]["text"] == chat["choices"][0]["message"]["content"]


def test_openapi_publishes_the_routes(app_of) -> None:  # type: ignore[no-untyped-def]
    app, _ = app_of()
    doc = app.openapi()
    for path in ("/v1/completions", "/detokenize", "/v1/chat/render"):
        assert "post" in doc["paths"][path]
    assert "CompletionRequest" in doc["components"]["schemas"]
