"""A reasoning model's thinking through ``/api/agent``: streamed as ``reasoning`` events before
the answer, kept on the turn's messages (``reasoning_content``), and sent back in the history
the page keeps. gpt-oss (harmony) is the reasoning model: its analysis channel is the
reasoning, read by the real harmony parser."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")
pytestmark = pytest.mark.anyio

from chatfmt.agent import Agent, ModelEvent  # noqa: E402
from chatfmt.dialects import get_dialect  # noqa: E402
from chatfmt.engines.base import SamplingParams  # noqa: E402
from chatfmt.engines.fake import FakeEngine  # noqa: E402
from chatfmt.events import ReasoningDelta, TextDelta  # noqa: E402
from chatfmt.messages import Conversation, Message  # noqa: E402
from chatfmt.store import ResponseStore  # noqa: E402
from chatfmt.tokenizers.base import Tokenizer  # noqa: E402
from chatfmt.web.page_events import agent_events  # noqa: E402

from .helpers import HARMONY_REPLY, REASONING, build_app  # noqa: E402

USER = [{"role": "user", "content": "hello"}]
THINK_AND_CALL = (
    "<|channel|>analysis<|message|>I should look up the weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}<|call|>'
)
THINK_AND_ANSWER = (
    "<|channel|>analysis<|message|>The tool says demo weather.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is demo weather in Paris.<|return|>"
)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    from chatfmt.tokenizers import load_tokenizer

    return load_tokenizer("o200k_harmony")


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


async def agent_stream(app: Any, **body: Any) -> list[dict[str, Any]]:
    async with client(app) as c:
        r = await c.post("/api/agent", json=body)
    assert r.status_code == 200, r.text
    blocks = [b for b in r.text.split("\n\n") if b.strip()]
    return [json.loads(b.removeprefix("data: ")) for b in blocks]


def joined(events: list[dict[str, Any]], kind: str) -> str:
    return "".join(e["text"] for e in events if e["type"] == kind)


async def test_reasoning_streams_before_the_answer_and_stays_on_the_message(
    tok: Tokenizer,
) -> None:
    app, _ = build_app(tok, dialect="harmony", script=[HARMONY_REPLY])
    events = await agent_stream(app, messages=USER)
    kinds = [e["type"] for e in events]
    assert kinds.count("reasoning") > 1  # streamed, not sent whole at the end
    assert kinds.index("text") > max(i for i, k in enumerate(kinds) if k == "reasoning")
    assert joined(events, "reasoning") == REASONING
    assert joined(events, "text") == "Hello! **Glad** to help."
    turn = next(e for e in events if e["type"] == "turn")
    done = events[-1]
    assert done["type"] == "done"
    for messages in (turn["messages"], done["messages"]):
        assert messages == [
            {
                "role": "assistant",
                "content": "Hello! **Glad** to help.",
                "reasoning_content": REASONING,
            }
        ]


async def test_a_tool_loop_keeps_each_turns_reasoning(tok: Tokenizer) -> None:
    app, engine = build_app(tok, dialect="harmony", script=[THINK_AND_CALL, THINK_AND_ANSWER])
    events = await agent_stream(
        app, messages=[{"role": "user", "content": "Weather in Paris?"}], mode="tools"
    )
    kinds = [e["type"] for e in events]
    # Each turn's reasoning comes before what that turn does.
    assert kinds.index("reasoning") < kinds.index("tool_call_start")
    assert kinds.index("tool_result") < len(kinds) - 1 - kinds[::-1].index("reasoning")
    assert joined(events, "reasoning") == "I should look up the weather.The tool says demo weather."
    call, result, answer = events[-1]["messages"]
    assert call["reasoning_content"] == "I should look up the weather."
    assert call["tool_calls"][0]["function"]["name"] == "get_weather"
    assert result["role"] == "tool"
    assert answer["reasoning_content"] == "The tool says demo weather."
    assert answer["content"] == "It is demo weather in Paris."
    # The second turn was rendered with the first one's reasoning, as gpt-oss expects in a
    # tool loop (harmony's rule; the loop only must not lose it).
    second = tok.decode(engine.prompts[1])
    assert "<|channel|>analysis<|message|>I should look up the weather.<|end|>" in second


async def test_history_with_reasoning_is_accepted_and_rendered_by_the_dialect(
    tok: Tokenizer,
) -> None:
    app, engine = build_app(tok, dialect="harmony", script=[HARMONY_REPLY])
    first = await agent_stream(app, messages=USER)
    history = [*USER, *first[-1]["messages"], {"role": "user", "content": "and again"}]
    async with client(app) as c:
        count = await c.post("/api/count", json={"messages": history})
    assert count.status_code == 200, count.text
    await agent_stream(app, messages=history)
    # An answered turn's reasoning is left out of the next prompt: harmony's own rule.
    prompt = tok.decode(engine.prompts[-1])
    assert "<|channel|>final<|message|>Hello! **Glad** to help.<|end|>" in prompt
    assert "The user says hello." not in prompt


async def test_a_turn_cut_off_while_thinking_keeps_its_reasoning(tok: Tokenizer) -> None:
    cut = "<|channel|>analysis<|message|>Let me think about " + "this " * 50
    app, _ = build_app(
        tok, dialect="harmony", script=[cut], params=SamplingParams(max_tokens=8), max_steps=1
    )
    events = await agent_stream(app, messages=USER)
    assert joined(events, "reasoning").startswith("Let me think about")
    assert joined(events, "text") == ""
    done = events[-1]
    assert done["type"] == "done" and done["stopped"] == "length"
    (message,) = done["messages"]
    assert message["content"] is None and message["reasoning_content"].startswith("Let me")


async def test_empty_reasoning_deltas_are_not_sent(tok: Tokenizer) -> None:
    class Scripted(Agent):
        async def stream(self, conversation: Any) -> Any:  # type: ignore[override]
            for ev in (ReasoningDelta(""), ReasoningDelta("hm"), TextDelta("ok")):
                yield ModelEvent(ev)

    agent = Scripted(FakeEngine(tok), get_dialect("harmony"))
    conv = Conversation(messages=(Message(role="user", content="hi"),))
    out = [e async for e in agent_events(agent, conv)]
    assert out == [{"type": "reasoning", "text": "hm"}, {"type": "text", "text": "ok"}]


async def test_a_kept_conversation_keeps_its_reasoning(tok: Tokenizer) -> None:
    app, _ = build_app(
        tok, dialect="harmony", script=[HARMONY_REPLY], store=ResponseStore(":memory:")
    )
    first = await agent_stream(app, messages=USER)
    state = {"messages": [*USER, *first[-1]["messages"]], "images": {}, "ok": {}}
    async with client(app) as c:
        assert (await c.put("/api/conversations/conv-think-001", json=state)).status_code == 200
        kept = (await c.get("/api/conversations/conv-think-001")).json()
    assert kept["messages"][1]["reasoning_content"] == REASONING
