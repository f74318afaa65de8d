"""gpt-oss (harmony) reasoning through the Responses API: reasoning items out, their
``encrypted_content`` when asked (``include``), and reasoning items sent back by a client that
keeps no state, which render as gpt-oss expects during a tool loop; ``include`` values
chatfmt cannot honour are refused by name."""

from __future__ import annotations

from typing import Any

import pytest
from test_responses import client

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.store import ResponseStore
from chatfmt.tokenizers import load_tokenizer

openai = pytest.importorskip("openai", reason="the openai SDK (a dev dependency) is missing")

pytestmark = pytest.mark.anyio

THINK_AND_CALL = (
    "<|channel|>analysis<|message|>I should call f.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>"
)
ANSWER = (
    "<|channel|>analysis<|message|>It said 42.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>42.<|return|>"
)
F = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
KEPT = "<|channel|>analysis<|message|>I should call f.<|end|>"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_app(store: ResponseStore | None = None) -> tuple[Any, FakeEngine, Any]:
    tok = load_tokenizer("o200k_harmony")
    fake = FakeEngine(tok, [THINK_AND_CALL, ANSWER])
    return create_app(fake, get_dialect("harmony"), model_name="m", store=store), fake, tok


async def test_a_stateless_client_sends_the_reasoning_back() -> None:
    app, fake, tok = make_app()
    c = client(app)
    first = await c.responses.create(
        model="m", input="What is f?", tools=[F], store=False,
        include=["reasoning.encrypted_content"],
    )  # fmt: skip
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and call.type == "function_call"
    assert reasoning.content[0].text == "I should call f."  # type: ignore[index]
    blob = reasoning.encrypted_content
    assert blob is not None and "I should call f." not in blob
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "42"}
    back = [i.model_dump(exclude_none=True) for i in first.output]
    second = await c.responses.create(
        model="m", input=[{"role": "user", "content": "What is f?"}, *back, result],
        tools=[F], store=False,
    )  # fmt: skip
    assert second.output_text == "42."
    assert KEPT in tok.decode(fake.prompts[-1])
    # The opaque string alone (a client that drops the content parts) says the same.
    only_blob = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": blob}
    await c.responses.create(
        model="m", input=[{"role": "user", "content": "What is f?"}, only_blob, back[1], result],
        tools=[F], store=False,
    )  # fmt: skip
    assert fake.prompts[-1] == fake.prompts[-2]


async def test_a_stored_tool_loop_keeps_its_reasoning() -> None:
    app, fake, tok = make_app(ResponseStore(":memory:"))
    c = client(app)
    first = await c.responses.create(model="m", input="What is f?", tools=[F])
    [call] = [i for i in first.output if i.type == "function_call"]
    assert first.output[0].type == "reasoning"
    assert first.output[0].encrypted_content is None  # not asked for
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "42"}
    await c.responses.create(model="m", previous_response_id=first.id, input=[result], tools=[F])
    assert KEPT in tok.decode(fake.prompts[-1])


async def test_include_values_chatfmt_cannot_honour_are_refused() -> None:
    app, _, _ = make_app()
    c = client(app)
    for value, needle in (
        # (on an engine that reports none: tests/server/test_sampling_responses.py)
        ("message.output_text.logprobs", "cannot be returned by this server's engine"),
        ("reasoning.everything", "is not one of"),
    ):
        with pytest.raises(openai.BadRequestError) as err:
            await c.responses.create(model="m", input="hi", include=[value])  # type: ignore[list-item]
        body = err.value.body
        assert isinstance(body, dict) and needle in body["message"]
        assert body["param"] == "include[0]"
    foreign = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB..."}
    with pytest.raises(openai.BadRequestError) as err:
        await c.responses.create(
            model="m", input=[{"role": "user", "content": "hi"}, foreign], store=False
        )
    assert "not written by chatfmt" in str(err.value)
    # Reasoning goes with the turn it led to: one before a user message, or at the end, is
    # a mistake (it would be rendered as the thinking of another reply).
    thought = {"type": "reasoning", "id": "rs_2", "summary": [], "content": [
        {"type": "reasoning_text", "text": "R1"}]}  # fmt: skip
    user = {"role": "user", "content": "b"}
    for items in (
        [user, thought, user, {"role": "assistant", "content": "B"}, user],
        [user, thought],
    ):
        with pytest.raises(openai.BadRequestError) as err:
            await c.responses.create(model="m", input=items, store=False)
        body = err.value.body
        assert isinstance(body, dict) and body["param"] == "input[1]"
        assert "must come right before the assistant message" in body["message"]
    # Values about tools chatfmt does not serve have nothing to add, and are accepted.
    fine = await c.responses.create(model="m", input="hi", include=["file_search_call.results"])
    assert fine.status == "completed"
