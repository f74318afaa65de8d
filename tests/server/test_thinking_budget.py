"""The thinking budget (``thinking_token_budget``, Messages' ``thinking.budget_tokens``) over
the fake engine, for every reasoning family: at the cap the thought is closed as the family
writes it, a second engine request continues after the closing, and the client sees the thought
end and the answer."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from server_helpers import parse_sse

from chatfmt.dialects import get_dialect, list_dialects
from chatfmt.engines.fake import FakeEngine
from chatfmt.messages import as_conversation
from chatfmt.segments import Block, BlockEncoder
from chatfmt.server import create_app
from dialects.standins import standin

REASONING = [n for n in list_dialects() if get_dialect(n).reasoning != "never"]
#: How a reply opens its thought where the generation prompt has not (the tag, then layout).
OPENERS = {
    "gemma4": ("<|channel>thought", "\n"),
    "magistral": ("[THINK]", ""),
    "harmony": ("<|channel|>analysis<|message|>", ""),
}
THOUGHT = " ".join(f"step{i}" for i in range(80))
ANSWER = "The answer."
USER = [{"role": "user", "content": "Think, then answer."}]


def post(app: Any, url: str, body: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(url, json=body)

    return asyncio.run(go())


class Family:
    """One reasoning family served over the fake engine, on a stand-in vocabulary."""

    def __init__(self, name: str, *, grammar_support: str = "none") -> None:
        self.dialect = get_dialect(name)
        self.tok = standin(name, self.dialect.controls)
        thinking = self.dialect.with_reasoning(effort="high")
        conv = as_conversation(USER)
        opened = thinking.for_reply_to(conv).stream_parser().in_thought is True
        tag, layout = ("", "") if opened else OPENERS.get(name, ("<think>", "\n"))
        stop = self.dialect.stop_controls[0]
        self.opener = tag
        self.thought_reply = tag + layout + THOUGHT + "\n"  # never closes by itself
        self.answer_reply = ANSWER + stop
        close = self.dialect.close_thought()
        assert close is not None
        self.close_ids = list(BlockEncoder(self.tok).encode_block(Block(close)))
        self.fake = FakeEngine(
            self.tok, self.script, grammar_support=grammar_support  # type: ignore[arg-type]
        )
        self.app = create_app(self.fake, self.dialect, model_name="m")

    def script(self, prompt: list[int]) -> str:
        closed = prompt[-len(self.close_ids) :] == self.close_ids
        return self.answer_reply if closed else self.thought_reply

    def ids(self, text: str) -> list[int]:
        return self.fake.reply_ids(text)


@pytest.mark.parametrize("name", REASONING)
def test_budget_closes_the_thought_and_the_model_answers(name: str) -> None:
    f = Family(name)
    budget = 12
    body = {"messages": USER, "reasoning_effort": "high", "thinking_token_budget": budget}
    r = post(f.app, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    out = r.json()
    message = out["choices"][0]["message"]
    assert message["content"] == ANSWER
    assert out["choices"][0]["finish_reason"] == "stop"
    # Two engine requests: the second continues the first's prompt, the reply up to the
    # budget, and the family's closing.
    assert len(f.fake.prompts) == 2
    first, second = f.fake.prompts
    reply = f.ids(f.thought_reply)
    opened = len(f.ids(f.opener)) if f.opener else 0
    assert second == first + reply[: opened + budget] + f.close_ids
    reasoning = message["reasoning_content"]
    assert reasoning and "step0" in reasoning and THOUGHT.startswith(reasoning.strip())
    assert len(reasoning.strip()) < len(THOUGHT)
    usage = out["usage"]
    answer = f.ids(f.answer_reply)
    assert usage["completion_tokens"] == opened + budget + len(f.close_ids) + len(answer)
    # The continuation may use what is left of max_tokens, no more.
    limit = f.fake.params[0].max_tokens
    assert f.fake.params[1].max_tokens == limit - opened - budget - len(f.close_ids)


@pytest.mark.parametrize("name", ["qwen3", "harmony", "deepseek-r1"])
def test_stream_shows_the_thought_end_then_the_answer(name: str) -> None:
    f = Family(name)
    body = {"messages": USER, "reasoning_effort": "high", "thinking_token_budget": 5}
    r = post(f.app, "/v1/chat/completions", {**body, "stream": True})
    events, done = parse_sse(r.text)
    assert done
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    kinds = [k for d in deltas for k in ("reasoning_content", "content") if d.get(k)]
    assert kinds[0] == "reasoning_content" and kinds[-1] == "content"
    assert kinds == sorted(kinds, key=lambda k: k == "content")  # every thought before the answer
    assert "".join(d.get("content") or "" for d in deltas) == ANSWER


def test_a_thought_that_ends_within_the_budget_is_left_alone() -> None:
    f = Family("qwen3")
    f.thought_reply = "<think>\nshort\n</think>\n\n" + ANSWER + "<|im_end|>"
    body = {"messages": USER, "thinking_token_budget": 50}
    out = post(f.app, "/v1/chat/completions", body).json()
    assert out["choices"][0]["message"] == {
        "role": "assistant",
        "content": ANSWER,
        "reasoning_content": "short",
    }
    assert len(f.fake.prompts) == 1


def test_budget_zero_closes_an_opened_thought_before_generating() -> None:
    f = Family("qwen3.5")  # its generation prompt opens the thought
    out = post(f.app, "/v1/chat/completions", {"messages": USER, "thinking_token_budget": 0})
    assert out.status_code == 200, out.text
    assert out.json()["choices"][0]["message"]["content"] == ANSWER
    assert len(f.fake.prompts) == 1 and f.fake.prompts[0][-len(f.close_ids) :] == f.close_ids


def test_max_tokens_spent_on_thinking_finishes_with_length() -> None:
    f = Family("qwen3")
    body = {"messages": USER, "thinking_token_budget": 8, "max_tokens": 10}
    out = post(f.app, "/v1/chat/completions", body).json()
    assert out["choices"][0]["finish_reason"] == "length"
    assert len(f.fake.prompts) == 1  # no room left to answer: no second request


@pytest.mark.parametrize("alias", ["thinking_budget_tokens", "reasoning_budget"])
def test_llama_cpp_names_are_taken(alias: str) -> None:
    f = Family("qwen3")
    out = post(f.app, "/v1/chat/completions", {"messages": USER, alias: 4}).json()
    assert out["choices"][0]["message"]["content"] == ANSWER and len(f.fake.prompts) == 2


def test_minus_one_is_no_budget() -> None:
    f = Family("qwen3")
    f.thought_reply = "<think>\n" + THOUGHT + "\n</think>\n\n" + ANSWER + "<|im_end|>"
    out = post(f.app, "/v1/chat/completions", {"messages": USER, "reasoning_budget": -1}).json()
    assert out["choices"][0]["message"]["reasoning_content"] == THOUGHT
    assert len(f.fake.prompts) == 1


def test_refusals(make_fake, qwen_dialect) -> None:  # type: ignore[no-untyped-def]
    f = Family("qwen3", grammar_support="lazy")
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    forced = {"messages": USER, "tools": [tool], "tool_choice": "required"}
    r = post(f.app, "/v1/chat/completions", {**forced, "thinking_token_budget": 5})
    assert r.status_code == 400 and r.json()["error"]["param"] == "thinking_token_budget"
    r = post(f.app, "/v1/chat/completions", {"messages": USER, "thinking_token_budget": -2})
    assert r.status_code == 400 and "thinking_token_budget" in r.json()["error"]["param"]
    assert f.fake.prompts == []
    # A model that does not reason meets any budget: accepted, one request as ever.
    fake = make_fake()
    app = create_app(fake, qwen_dialect, model_name="m")
    r = post(app, "/v1/chat/completions", {"messages": USER, "thinking_token_budget": 3})
    assert r.status_code == 200 and len(fake.prompts) == 1


def test_messages_budget_tokens_is_enforced() -> None:
    f = Family("qwen3")
    body = {
        "model": "m",
        "max_tokens": 400,
        "messages": USER,
        "thinking": {"type": "enabled", "budget_tokens": 6},
    }
    r = post(f.app, "/v1/messages", body)
    assert r.status_code == 200, r.text
    blocks = r.json()["content"]
    assert [b["type"] for b in blocks] == ["thinking", "text"]
    assert blocks[1]["text"] == ANSWER
    first, second = f.fake.prompts
    # <think>, six reasoning tokens, the closing.
    assert second == first + f.ids(f.thought_reply)[: 1 + 6] + f.close_ids


def test_responses_takes_the_budget() -> None:
    f = Family("qwen3")
    r = post(f.app, "/v1/responses", {"input": "Think, then answer.", "thinking_token_budget": 6})
    assert r.status_code == 200, r.text
    items = r.json()["output"]
    assert [i["type"] for i in items] == ["reasoning", "message"]
    assert items[1]["content"][0]["text"] == ANSWER
    assert len(f.fake.prompts) == 2
