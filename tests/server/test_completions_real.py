"""/v1/completions on the real default model, on both embedded engines (the model in this
process and llama-server), through the official openai client: a completion of a chat
prompt's ids continues it as chat completions does (greedy), a text prompt equals its ids,
streaming equals whole, and log-probabilities come back in the legacy shape as greedy
decoding chose. The warm servers are the real-model modules' shared ones."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server_helpers import ServerThread

from chatfmt.tokenizers import Tokenizer

openai = pytest.importorskip("openai")

HELLO = [{"role": "user", "content": "Name three colours."}]
CODE = "def fibonacci(n):\n    "


@pytest.fixture(scope="module")
def client(real_server: ServerThread) -> Any:
    return openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)


def test_chat_ids_continue_as_chat(client: Any, real_server: ServerThread) -> None:
    rendered = httpx.post(real_server.url + "/v1/chat/render", json={"messages": HELLO}).json()
    chat = client.chat.completions.create(
        model="default", messages=HELLO, temperature=0, max_tokens=24
    )
    out = client.completions.create(
        model="default", prompt=rendered["prompt_token_ids"], temperature=0, max_tokens=24
    )
    assert out.choices[0].text == chat.choices[0].message.content
    assert out.choices[0].finish_reason == chat.choices[0].finish_reason
    assert out.usage.prompt_tokens == chat.usage.prompt_tokens == rendered["count"]
    assert out.usage.completion_tokens == chat.usage.completion_tokens


def test_text_prompt_equals_its_ids(client: Any, qwen: Tokenizer) -> None:
    by_text = client.completions.create(
        model="default", prompt=CODE, temperature=0, max_tokens=20
    )
    by_ids = client.completions.create(
        model="default", prompt=qwen.encode_text(CODE), temperature=0, max_tokens=20
    )
    assert by_text.choices[0].text == by_ids.choices[0].text
    assert by_text.choices[0].text.strip()
    assert by_text.usage.prompt_tokens == len(qwen.encode_text(CODE))
    assert by_text.choices[0].finish_reason == "length"  # code goes on past 20 tokens


def test_stream_equals_whole(client: Any) -> None:
    whole = client.completions.create(model="default", prompt=CODE, temperature=0, max_tokens=16)
    parts = client.completions.create(
        model="default", prompt=CODE, temperature=0, max_tokens=16, stream=True
    )
    assert "".join(c.choices[0].text for c in parts if c.choices) == whole.choices[0].text


def test_logprobs_greedy(client: Any) -> None:
    out = client.completions.create(
        model="default", prompt=CODE, temperature=0, max_tokens=12, logprobs=3
    )
    choice = out.choices[0]
    lp = choice.logprobs
    assert lp is not None and lp.tokens and lp.top_logprobs is not None
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(len(lp.tokens))]
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert value is not None and value <= 0
        assert 1 <= len(top) <= 3
        # Greedy: the chosen token is the likeliest one.
        assert max(top.values()) == pytest.approx(value, abs=1e-4)
        assert top.get(token) == pytest.approx(value, abs=1e-4)
