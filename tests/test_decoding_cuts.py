"""Where output ends decides whether a call is whole: only at a stop token. Output cut at a
stop string (here or by the engine) or by max_tokens never gives a runnable call whose code
or arguments stop where the cut fell, and a turn with a cut call never finishes in calls."""

from __future__ import annotations

import pytest

import chatfmt
from chatfmt.decoding import TurnDecoder
from chatfmt.engines.base import GenerationChunk
from chatfmt.events import Finish


def _decode(dialect: str, text: str, stops: list[str], reason: str = "stop") -> TurnDecoder:
    decoder = TurnDecoder(chatfmt.get_dialect(dialect), stop_strings=stops)
    events = decoder.feed_text(text) + decoder.finish(reason)  # type: ignore[arg-type]
    finishes = [e for e in events if isinstance(e, Finish)]
    assert [f.reason for f in finishes] == [decoder.result().finish_reason]
    return decoder


@pytest.mark.parametrize(
    ("dialect", "text", "stops"),
    [
        # Llama 3's <|python_tag|> code ends with the turn: a stop string inside it cuts it.
        (
            "llama3",
            "<|python_tag|>x = 1\nif x:\n    print('a')\nelse:\n    import os; os.remove('f')",
            ["else"],
        ),
        ("llama3", '<|python_tag|>brave_search.call(query="rm -rf")', ["rf"]),
        # ChatGLM3's unfenced interpreter segment ends with the turn too.
        ("chatglm3", "interpreter\nprint(1)\nSTOP\nimport os", ["STOP"]),
    ],
    ids=["python-tag-code", "python-tag-builtin", "chatglm3-unfenced"],
)
def test_a_stop_string_inside_a_turn_ended_call_leaves_nothing_runnable(
    dialect: str, text: str, stops: list[str]
) -> None:
    result = _decode(dialect, text, stops).result()
    assert result.tool_calls == [] and result.finish_reason == "stop"


def test_an_engine_side_stop_string_counts_as_a_cut() -> None:
    # The engine stopped at the request's stop string and sent no stop token: the decoder saw
    # the output just end, with stop strings set.
    decoder = TurnDecoder(chatfmt.get_dialect("chatglm3"), stop_strings=["# STOP"])
    decoder.feed_chunk(
        GenerationChunk((), text="interpreter\nimport os\n", finish_reason="stop", exact_ids=False)
    )
    assert decoder.result().tool_calls == [] and decoder.result().incomplete_calls


def test_a_fence_closing_at_the_very_end_of_cut_output_is_not_whole() -> None:
    # The code holds a fence line of its own; cut right after it, it looks closed.
    text = "interpreter\n```python\nprint('''\n```"
    result = _decode("chatglm3", text, [], "length").result()
    assert result.tool_calls == [] and result.finish_reason == "length"
    assert result.incomplete_calls


def test_the_same_fence_ended_by_the_turn_is_whole() -> None:
    text = "interpreter\n```python\nprint(1)\n```<|observation|>"
    result = _decode("chatglm3", text, []).result()
    assert [c.name for c in result.tool_calls] == ["interpreter"]
    assert result.finish_reason == "tool_calls"


def test_a_turn_with_a_complete_and_a_cut_call_does_not_finish_in_calls() -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"q": "Paris"}}\n</tool_call>\n'
    cut = '<tool_call>\n{"name": "delete_file", "arguments": {"path": "/data/tmp"}}\n</tool_call>'
    for stops, reason in ((["/tmp"], "stop"), ([], "stop"), ([], "length")):
        text = call + (cut if stops else cut[:60])
        result = _decode("qwen2.5", text, stops, reason).result()
        assert [c.name for c in result.tool_calls] == ["get_weather"]
        assert [c.name for c in result.incomplete_calls] == ["delete_file"]
        assert result.finish_reason == reason  # never "tool_calls": a client runs all of them


def test_complete_calls_before_a_stop_string_still_finish_in_calls() -> None:
    text = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>STOP and more'
    result = _decode("qwen2.5", text, ["STOP"]).result()
    assert [c.name for c in result.tool_calls] == ["a"] and result.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("dialect", "text"),
    [
        ("qwen2.5", '<tool_call>\n{"name": "delete_all", "arguments": "everything"}\n</tool_call>'),
        ("mistral-v3", '[TOOL_CALLS] [{"name": "delete_all", "arguments": [1]}]'),
    ],
)
def test_arguments_that_are_not_an_object_are_never_replaced(dialect: str, text: str) -> None:
    # chatfmt used to run such a call with {} in their place: arguments of its own choosing.
    result = _decode(dialect, text, []).result()
    assert result.tool_calls == [] and result.finish_reason == "stop"
    assert [(c.name, c.arguments) for c in result.incomplete_calls] == [("delete_all", "")]


def test_a_call_that_writes_no_arguments_calls_with_none() -> None:
    result = _decode("qwen2.5", '<tool_call>\n{"name": "now"}\n</tool_call>', []).result()
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("now", "{}")]
