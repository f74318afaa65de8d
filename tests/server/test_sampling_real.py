"""Every sampling field's effect on the real default model, on both embedded engines (the
model in this process and llama-server), through the official openai client: top_k and min_p
make a hot sample greedy, logit_bias bans and forces tokens, the penalties change a
repetitive reply, and log-probabilities come back as greedy decoding chose. The warm servers
are the real-model modules' shared ones (tests/server/conftest.py); replies are kept short."""

from __future__ import annotations

from typing import Any

import pytest
from server_helpers import ServerThread

from chatfmt.tokenizers import Tokenizer

openai = pytest.importorskip("openai")

POEM = [{"role": "user", "content": "Write a short poem about the sea."}]
HELLO = [{"role": "user", "content": "Say hello."}]
COUNT = [{"role": "user", "content": "Count from 1 to 20, one number per line."}]


@pytest.fixture(scope="module")
def client(real_server: ServerThread) -> Any:
    return openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)


#: Fields the openai client does not know by name (vLLM's and llama.cpp's): sent in its body.
EXTRA = ("top_k", "min_p", "repetition_penalty")


def reply(client: Any, messages: list[dict[str, Any]], **fields: Any) -> str:
    extra = {name: fields.pop(name) for name in EXTRA if name in fields}
    out = client.chat.completions.create(
        model="default", messages=messages, extra_body=extra, **fields
    )
    return str(out.choices[0].message.content)


def replies_over_seeds(client: Any, **fields: Any) -> set[str]:
    hot = {"temperature": 1.5, "max_tokens": 8, **fields}
    return {reply(client, POEM, seed=seed, **hot) for seed in (1, 2, 3)}


def test_top_k_1_and_min_p_1_sample_the_likeliest_token(client: Any) -> None:
    greedy = reply(client, POEM, temperature=0, max_tokens=8)
    # At this temperature three seeds give three replies...
    assert len(replies_over_seeds(client)) > 1
    # ...unless only the likeliest token may be drawn: then every seed gives the greedy one.
    assert replies_over_seeds(client, top_k=1) == {greedy}
    assert replies_over_seeds(client, min_p=1.0) == {greedy}


def test_logit_bias_bans_and_forces_tokens(client: Any, qwen: Tokenizer) -> None:
    out = client.chat.completions.create(
        model="default", messages=HELLO, temperature=0, max_tokens=3, logprobs=True
    )
    first = out.choices[0].logprobs.content[0]
    (first_id,) = qwen.encode_text(first.token)  # the same vocabulary as the model's
    banned = client.chat.completions.create(
        model="default", messages=HELLO, temperature=0, max_tokens=3, logprobs=True,
        logit_bias={str(first_id): -100},
    )  # fmt: skip
    assert banned.choices[0].logprobs.content[0].token != first.token
    (forced_id,) = qwen.encode_text(" banana")
    forced = client.chat.completions.create(
        model="default", messages=HELLO, temperature=0, max_tokens=2, logprobs=True,
        logit_bias={str(forced_id): 100},
    )  # fmt: skip
    assert [t.token for t in forced.choices[0].logprobs.content] == [" banana", " banana"]


@pytest.mark.parametrize(
    "penalty", [{"frequency_penalty": 2.0}, {"presence_penalty": 2.0}, {"repetition_penalty": 1.5}]
)
def test_penalties_change_a_repetitive_reply(client: Any, penalty: dict[str, float]) -> None:
    plain = reply(client, COUNT, temperature=0, max_tokens=12)
    assert plain.startswith("1\n2\n3\n")  # one number and a newline after another
    assert reply(client, COUNT, temperature=0, max_tokens=12, **penalty) != plain


def test_logprobs_follow_greedy_decoding(client: Any) -> None:
    fields: dict[str, Any] = {"temperature": 0, "max_tokens": 6, "logprobs": True,
                              "top_logprobs": 3}  # fmt: skip
    out = client.chat.completions.create(model="default", messages=POEM, **fields)
    choice = out.choices[0]
    content = choice.logprobs.content
    assert choice.finish_reason == "length" and len(content) == out.usage.completion_tokens == 6
    assert b"".join(bytes(t.bytes) for t in content).decode() == choice.message.content
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        alternatives = [a.logprob for a in t.top_logprobs]
        assert alternatives == sorted(alternatives, reverse=True) and alternatives[0] <= 0
        # Greedy decoding took the likeliest token, whose log-probability is its own.
        assert t.top_logprobs[0].token == t.token
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob, abs=1e-4)
    # Streamed: the same tokens, chunk by chunk. (Not quite the same numbers: the prompt now
    # comes from the engine's cache, and its last token evaluated alone rounds otherwise.)
    stream = client.chat.completions.create(model="default", messages=POEM, stream=True, **fields)
    streamed = [t for ch in stream for c in ch.choices if c.logprobs for t in c.logprobs.content]
    assert [t.token for t in streamed] == [t.token for t in content]
    assert all(t.top_logprobs[0].token == t.token for t in streamed)


def test_responses_output_text_logprobs(client: Any) -> None:
    r = client.responses.create(
        model="default", input="Say hello.", temperature=0, max_output_tokens=4,
        include=["message.output_text.logprobs"], top_logprobs=2,
    )  # fmt: skip
    (part,) = r.output[0].content
    assert 1 <= len(part.logprobs) <= r.usage.output_tokens
    assert b"".join(bytes(t.bytes) for t in part.logprobs).decode() == part.text
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in part.logprobs)
    assert all(t.top_logprobs[0].token == t.token for t in part.logprobs)
