"""The exact bytes clients get: responses are built from the wire models, and serialise as the
hand-built dicts did before them (which fields are left out, which are written as null)."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st
from server_helpers import USER_HI, WEATHER_TOOL
from test_chat_fake import CALL, chat

from chatfmt.events import (
    Finish,
    IncompleteCall,
    ParseResult,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from chatfmt.messages import Message, ToolCall
from chatfmt.server import create_app
from chatfmt.server.chat.policy import CallPolicy
from chatfmt.server.chat.schemas import ChatCompletionChunk, ChunkChoice, Delta, Usage
from chatfmt.server.chat.wire import assistant_message, choice_frames, chunk_choices
from chatfmt.server.responses.output import OutputBuilder

HEAD = '"id":"ID","object":"chat.completion","created":0,"model":"m"'
CHUNK = '"id":"ID","object":"chat.completion.chunk","created":0,"model":"m"'


def normal(text: str) -> str:
    text = re.sub(r"chatcmpl-[0-9a-f]{24}", "ID", text)
    text = re.sub(r'"created":\d+', '"created":0', text)
    return re.sub(r"call_[0-9a-f]+", "CALL", text)


def sse(*chunks: str, usage: bool = False) -> str:
    tail = ',"usage":null' if usage else ""
    return "".join(f"data: {{{CHUNK},{c}{tail}}}\n\n" for c in chunks)


def test_text_reply_bytes(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(["Hi é😀\u2028\x01<|im_end|>"]), qwen_dialect, model_name="m")
    r = chat(app, {"messages": USER_HI})
    n = r.json()["usage"]["prompt_tokens"]
    assert normal(r.text) == (
        f'{{{HEAD},"choices":[{{"index":0,"message":{{"role":"assistant",'
        f'"content":"Hi é😀\u2028\\u0001"}},"finish_reason":"stop","logprobs":null}}],'
        f'"usage":{{"prompt_tokens":{n},"completion_tokens":7,"total_tokens":{n + 7}}}}}'
    )


def test_empty_reply_has_empty_content(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(["<|im_end|>"]), qwen_dialect, model_name="m")
    message = chat(app, {"messages": USER_HI}).text
    assert '"message":{"role":"assistant","content":""},"finish_reason":"stop"' in message


def test_tool_call_reply_bytes(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake([CALL]), qwen_dialect, model_name="m")
    r = chat(app, {"messages": USER_HI, "tools": [WEATHER_TOOL]})
    assert (
        '"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":'
        '[{"id":"CALL","type":"function","function":{"name":"get_weather",'
        '"arguments":"{\\"city\\": \\"Paris\\"}"}}]},"finish_reason":"tool_calls",'
        '"logprobs":null}]'
    ) in normal(r.text)


def test_tool_call_stream_bytes(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake([CALL]), qwen_dialect, model_name="m")
    body = {"messages": USER_HI, "tools": [WEATHER_TOOL], "stream": True}
    r = chat(app, body)

    def part(arguments: str) -> str:
        return (
            f'"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"function":'
            f'{{"arguments":"{arguments}"}}}}]}},"finish_reason":null,"logprobs":null}}]'
        )

    assert (
        normal(r.text)
        == sse(
            '"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            '"finish_reason":null,"logprobs":null}]',
            '"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"CALL","type":"function",'
            '"function":{"name":"get_weather","arguments":""}}]},"finish_reason":null,'
            '"logprobs":null}]',
            part("{"),
            part('\\"city\\": \\"'),
            part("Paris"),
            part('\\"}'),
            '"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls","logprobs":null}]',
        )
        + "data: [DONE]\n\n"
    )


def test_usage_null_only_when_asked(make_fake, qwen_dialect) -> None:
    app = create_app(make_fake(["<|im_end|>"]), qwen_dialect, model_name="m")
    opening = (
        '"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
        '"finish_reason":null,"logprobs":null}]'
    )
    end = '"choices":[{"index":0,"delta":{},"finish_reason":"stop","logprobs":null}]'
    plain = chat(app, {"messages": USER_HI, "stream": True})
    assert normal(plain.text) == sse(opening, end) + "data: [DONE]\n\n"
    asked = chat(
        app, {"messages": USER_HI, "stream": True, "stream_options": {"include_usage": True}}
    )
    n = len(app.state.service.engine.prompts[-1])
    usage = (
        f'"choices":[],"usage":{{"prompt_tokens":{n},"completion_tokens":1,"total_tokens":{n + 1}}}'
    )
    assert normal(asked.text) == (
        sse(opening, end, usage=True) + f"data: {{{CHUNK},{usage}}}\n\ndata: [DONE]\n\n"
    )


def test_chunk_choices_merge_text_and_skip_empty_parts() -> None:
    events = [
        TextDelta("a"),
        TextDelta(""),
        TextDelta("b"),
        ToolCallStart(0, "c1", "f"),
        ToolCallDelta(0, ""),
        ToolCallDelta(0, "{}"),
        Finish("tool_calls"),
    ]
    dumped = [c.model_dump() for c in chunk_choices(events)]  # None parts are left out
    assert [c["delta"] for c in dumped] == [
        {"content": "ab"},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
        {},
    ]
    assert [c["finish_reason"] for c in dumped] == [None, None, None, "tool_calls"]
    assert chunk_choices([TextDelta("")]) == []


def test_assistant_message_keeps_only_allowed_calls() -> None:
    calls = (ToolCall(id="a", name="f", arguments="{}"), ToolCall(id="b", name="g", arguments="{}"))
    result = ParseResult(messages=[Message(role="assistant", content="x", tool_calls=calls)])
    policy = CallPolicy()
    policy.kept_ids.add("b")
    policy.demoted_text.append('{"name": "f", "arguments": {}}')
    message = assistant_message(result, policy)
    assert message.content == 'x{"name": "f", "arguments": {}}'
    assert [c.id for c in message.tool_calls or ()] == ["b"]
    nothing = assistant_message(ParseResult(messages=[]), CallPolicy())
    assert nothing.model_dump_json() == '{"role":"assistant","content":""}'


def test_chunk_model_validates_what_it_writes() -> None:
    chunk = ChatCompletionChunk(
        id="x", created=1, model="m", choices=[ChunkChoice(delta=Delta(content="hi"))]
    )
    again = ChatCompletionChunk.model_validate_json(chunk.model_dump_json())
    assert again == chunk
    assert Usage.of(3, 4).total_tokens == 7


# ==== A call cut off: as OpenAI returns one, never completed ====

CUT = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "cels'


def test_a_cut_call_keeps_its_partial_arguments_whole_and_streamed(make_fake, qwen_dialect) -> None:
    tok = make_fake().tokenizer
    c = tok.control_id
    head = [c("<tool_call>"), *tok.encode_text("\n" + CUT)]  # max_tokens cuts the reply here
    reply = [*head, *tok.encode_text('ius"}}\n'), c("</tool_call>"), c("<|im_end|>")]
    app = create_app(make_fake([reply]), qwen_dialect, model_name="m")
    body = {"messages": USER_HI, "tools": [WEATHER_TOOL], "max_tokens": len(head)}
    whole = chat(app, body).json()["choices"][0]
    assert whole["finish_reason"] == "length"
    (call,) = whole["message"]["tool_calls"]
    partial = call["function"]["arguments"]
    assert call["function"]["name"] == "get_weather"
    assert partial == '{"city": "Paris", "unit": "cels'  # exactly what the model wrote
    streamed = chat(app, {**body, "stream": True}).text
    chunks = [line[6:] for line in streamed.splitlines() if line.startswith("data: {")]
    parts = [
        tc["function"].get("arguments") or ""
        for c in chunks
        for ch in json.loads(c)["choices"]
        for tc in ch["delta"].get("tool_calls") or ()
    ]
    assert "".join(parts) == partial  # the same partial text, never completed
    assert '"finish_reason":"length"' in streamed
    assert '"finish_reason":"tool_calls"' not in streamed


def test_assistant_message_orders_complete_and_incomplete_calls() -> None:
    done = ToolCall(id="a", name="f", arguments="{}")
    raw = '<tool_call>{"name": "g", "arguments": {"x": "ab'
    cut = IncompleteCall(1, "b", "g", '{"x": "ab', raw)
    result = ParseResult(
        messages=[Message(role="assistant", content=None, tool_calls=(done,))],
        finish_reason="length",
        incomplete_calls=[cut],
    )
    policy = CallPolicy()
    policy.kept_ids |= {"a", "b"}
    message = assistant_message(result, policy)
    assert [(c.id, c.function.arguments) for c in message.tool_calls or ()] == [
        ("a", "{}"),
        ("b", '{"x": "ab'),
    ]


def test_responses_output_marks_an_incomplete_call() -> None:
    builder = OutputBuilder()
    events = builder.feed(
        [
            ToolCallStart(0, "c1", "f"),
            ToolCallDelta(0, '{"x": "ab'),
            ToolCallEnd(0, complete=False),
            Finish("stop"),
        ]
    )
    events += builder.finish()
    (item,) = builder.items
    assert item.type == "function_call" and item.status == "incomplete"
    assert item.arguments == '{"x": "ab'
    done = [e for e in events if e.type == "response.output_item.done"]
    assert done[-1].item.status == "incomplete"


_events = st.lists(
    st.one_of(
        st.builds(TextDelta, st.text()),
        st.builds(ReasoningDelta, st.text()),
        st.builds(ToolCallDelta, st.just(0), st.text()),
        st.builds(Finish, st.sampled_from(["stop", "length", "tool_calls"])),
    ),
    max_size=6,
)


@given(_events)
def test_choice_frames_are_the_models_bytes(events: list[object]) -> None:
    """The direct framing of text and reasoning deltas is byte for byte pydantic's, for any
    text (escapes, control characters, non-ASCII, line separators)."""
    to_json = ChunkChoice.__pydantic_serializer__.to_json
    assert choice_frames(events) == [to_json(c) for c in chunk_choices(events)]  # type: ignore[arg-type]
