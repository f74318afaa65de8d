"""Each dialect's call grammar, judged by llama.cpp's grammar engine: the calls the dialect
itself writes (its history rendering) are accepted, lazily from the trigger on or whole;
invented tools, missing or mistyped arguments, and a second call when one is allowed are
refused; and what the grammar accepts parses back to the call."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from oracle import GrammarOracle

from chatfmt.dialects import get_dialect
from chatfmt.grammar import Grammar, SchemaError
from chatfmt.messages import Tool
from chatfmt.segments import Control

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
TOOLS = [Tool(definition=WEATHER), Tool(definition=CLOCK)]
ARGS = {"city": 'Paris, Île-de-France "FR"', "unit": "celsius", "days": 3}
CALLING = [
    "qwen2.5", "chatml", "llama3", "mistral-v3", "mistral-v7", "mistral-v11", "chatglm3", "glm4",
    "harmony", "qwen3", "deepseek-r1", "deepseek-v3.1", "deepseek-v3.2", "deepseek-v4",
    "granite4", "granite4.1", "minimax-m2",
    "nemotron3", "nemotron-nano2",
    "magistral", "glm4.6", "glm4.7", "kimi-k2", "kimi-k2-thinking", "gemma4", "llama4",
]  # fmt: skip


def output_of(dialect: Any, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """The assistant output the dialect writes for ``calls`` (what follows the generation
    prompt, up to its stop token)."""
    user = [{"role": "user", "content": "Weather in Paris?"}]
    reply = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call{i}abcd",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ],
    }
    prompt = dialect.render_text(user, tools=TOOLS)
    full = dialect.render_text([*user, reply], tools=TOOLS, add_generation_prompt=False)
    lone = prompt.removesuffix("<think>\n") + "<think></think>"
    if prompt.endswith("<think>\n") and full.startswith(lone):
        # The prompt opened the thought and history shows an empty one in its place (Nemotron
        # 3): the reply closes the thought, then calls.
        full = prompt + "</think>" + full[len(lone) :]
    opened = ("<think>\n", "<think>")
    # An empty thought the prompt closed: DeepSeek V3.2's, Gemma 4's thought channel.
    closed = next(
        (c for c in ("<|channel>thought\n<channel|>",) if prompt.endswith(c)), "<think></think>"
    )
    if prompt.endswith(closed) and not full.startswith(prompt):
        # The prompt closed an empty thought (DeepSeek V3.2, thinking off) that history shows
        # as a lone "</think>": the reply is what follows.
        assert full.startswith(prompt[: -len(closed)])
        out = full[len(prompt) - len(closed) :].removeprefix("</think>")
    elif prompt.endswith(opened) and not full.startswith(prompt):
        # The prompt opened the thought (DeepSeek R1, GLM-4.7) and history shows none (or a
        # lone "</think>"): the reply closes it, then calls.
        k = len(next(tag for tag in opened if prompt.endswith(tag)))
        assert full.startswith(prompt[:-k])
        out = "</think>\n\n" + full[len(prompt) - k :].removeprefix("</think>")
    else:
        assert full.startswith(prompt)
        out = full[len(prompt) :]
    ends = [out.index(s) for s in dialect.stop_controls if s in out]
    return out[: min(ends)] if ends else out


def from_trigger(g: Grammar, text: str) -> str | None:
    """Where a lazy grammar starts in ``text`` (as llama.cpp finds it), or ``None``."""
    starts = []
    for t in g.triggers:
        if t.kind == "word" and t.value in text:
            starts.append(text.index(t.value))
        elif t.kind == "pattern_full" and (m := re.fullmatch(t.value, text)):
            starts.append(m.start(1))
        elif t.kind == "pattern" and (m := re.search(t.value, text)):
            starts.append(m.start(1))
    return text[min(starts) :] if starts else None


@pytest.mark.parametrize("name", CALLING)
def test_the_dialects_own_calls_are_accepted(judge: GrammarOracle, name: str) -> None:
    dialect = get_dialect(name)
    out = output_of(dialect, [("get_weather", ARGS)])
    lazy = dialect.call_grammar(TOOLS)
    assert lazy is not None and lazy.lazy
    started = from_trigger(lazy, out)
    assert started is not None, f"no trigger in {out!r}"
    assert judge.accepts(lazy.gbnf, started), started
    parsed = dialect.parse(out).message.tool_calls
    assert parsed and parsed[0].name == "get_weather" and parsed[0].arguments_dict() == ARGS


@pytest.mark.parametrize("name", CALLING)
def test_required_calls(judge: GrammarOracle, name: str) -> None:
    dialect = get_dialect(name)
    g = dialect.call_grammar(TOOLS, required=True)
    assert g is not None and not g.lazy
    if name == "harmony":  # written as the forced call opens it (recipient in the channel)
        opening = dialect.forced_call_prefix("get_weather")
        out = "".join(s.token if isinstance(s, Control) else s.text for s in opening)
        out += json.dumps(ARGS)
    else:
        out = output_of(dialect, [("get_weather", ARGS)])
    assert judge.accepts(g.gbnf, out), out
    # Free text, an invented tool, a missing required argument, a mistyped one: refused.
    assert not judge.accepts(g.gbnf, "It is sunny in Paris.")
    for wrong in (
        out.replace("get_weather", "get_weather_now"),
        out.replace("get_weather", "weather"),
        out.replace("Paris", "Lyon").replace("3", '"3"'),
    ):
        assert not judge.accepts(g.gbnf, wrong), wrong
    no_city = {k: v for k, v in ARGS.items() if k != "city"}
    if name == "harmony":
        missing = out.replace(json.dumps(ARGS), json.dumps(no_city))
    else:
        missing = output_of(dialect, [("get_weather", no_city)])
    assert not judge.accepts(g.gbnf, missing), missing
    out_of_range = (
        out.replace('"days": 3', '"days": 9')
        .replace("days=3", "days=9")
        .replace('"days" string="false">3<', '"days" string="false">9<')  # DSML
        .replace('"days">3<', '"days">9<')  # MiniMax
        .replace("<parameter=days>\n3\n", "<parameter=days>\n9\n")  # Nemotron 3
        .replace("<arg_value>3<", "<arg_value>9<")  # GLM-4.5+
        .replace("days:3", "days:9")  # Gemma 4
    )
    assert out_of_range != out and not judge.accepts(g.gbnf, out_of_range)


@pytest.mark.parametrize("name", ["qwen2.5", "mistral-v3", "mistral-v11", "chatglm3", "glm4"])
def test_one_call_or_several(judge: GrammarOracle, name: str) -> None:
    dialect = get_dialect(name)
    two = output_of(dialect, [("get_weather", ARGS), ("get_time", {})])
    assert judge.accepts(dialect.call_grammar(TOOLS, required=True).gbnf, two), two
    single = dialect.call_grammar(TOOLS, required=True, single=True).gbnf
    assert not judge.accepts(single, two)
    assert judge.accepts(single, output_of(dialect, [("get_time", {})]))


def test_lazy_grammars_leave_plain_text_alone() -> None:
    for name in CALLING:
        g = get_dialect(name).call_grammar(TOOLS)
        assert g is not None
        for text in ("It is sunny.", "Use get_weather later.", 'JSON: {"a": 1}'):
            assert from_trigger(g, text) is None, (name, text)
    assert get_dialect("gemma3").call_grammar(TOOLS) is None  # no call syntax


def test_small_qwen_models_bare_and_fenced_calls(judge: GrammarOracle) -> None:
    g = get_dialect("qwen2.5").call_grammar(TOOLS)
    assert g is not None
    for text in (
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        'Sure.\n```json\n{"name": "get_time", "arguments": {}}\n```',
    ):
        started = from_trigger(g, text)
        assert started is not None and judge.accepts(g.gbnf, started), text
    # A name the user did not declare stays possible (the server returns it as text, as
    # without a grammar: forcing declared names turned plain questions into calls), but a
    # declared name must come with its own arguments.
    assert judge.accepts(g.gbnf, '{"name": "tell_joke", "arguments": {"x": [1]}}')
    assert judge.accepts(g.gbnf, '{"name": "get_weathe", "arguments": {}}')
    # ...but one that begins with a declared name is that tool (the issue's `add_args`).
    assert not judge.accepts(g.gbnf, '{"name": "get_weather_info", "arguments": {}}')
    assert not judge.accepts(g.gbnf, '{"name": "get_time2", "arguments": {}}')
    assert not judge.accepts(g.gbnf, '{"name": "get_weather", "arguments": {}}')
    assert not judge.accepts(g.gbnf, '{"name": "get_weather", "arguments": {"city": 5}}')
    forced = get_dialect("qwen2.5").call_grammar(TOOLS, required=True)
    assert forced is not None
    invented = '<tool_call>\n{"name": "add_args", "arguments": {}}\n</tool_call>'
    assert not judge.accepts(forced.gbnf, invented)


@pytest.mark.parametrize("name", ["qwen2.5", "llama3", "glm4", "chatglm3"])
@pytest.mark.parametrize("ws", ["", " ", "\n", "  ", "\n    ", "\t", "\r\n", "\n\n"])
def test_a_trigger_never_starts_what_the_grammar_refuses(
    judge: GrammarOracle, name: str, ws: str
) -> None:
    """When a trigger fires, llama.cpp feeds the grammar the text it matched (written before
    any constraint): a match the grammar refuses would fail the request, so triggers must be
    no looser than the grammar's whitespace. What follows is written under the grammar."""
    dialect = get_dialect(name)
    g = dialect.call_grammar(TOOLS)
    assert g is not None
    out = output_of(dialect, [("get_time", {})])
    variants = {
        out.replace('{"', "{" + ws + '"', 1),
        out.replace('"name":', '"name"' + ws + ":", 1),
        out.replace("get_time\n", "get_time\n" + ws, 1),
    }
    for text in variants:
        # The shortest prefix that fires a trigger: what the grammar is handed.
        fired = next(
            (s for end in range(len(text)) if (s := from_trigger(g, text[: end + 1]))), None
        )
        if fired is not None:
            assert judge.accepts(g.gbnf, fired, whole=False), repr(fired)


def test_strict_tool_schemas_are_checked() -> None:
    strict = {
        "type": "function",
        "function": {
            "name": "f",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"x": {"type": "string", "pattern": "a+"}},
            },
        },
    }
    with pytest.raises(SchemaError, match=r"^Invalid schema for function 'f': In context="):
        get_dialect("qwen2.5").call_grammar([Tool(definition=strict)])


def test_a_reply_in_words(judge: GrammarOracle) -> None:
    from chatfmt.grammar import WORDS

    assert judge.accepts(WORDS.gbnf, "It is 19 °C in Berlin, with snow.")
    for text in ('{"name": "get_weather"}', "<tool_call>", "```json\n{}```", " hi", "(x)"):
        assert not judge.accepts(WORDS.gbnf, text), text


def test_names_that_are_hard_for_grammars_and_patterns(judge: GrammarOracle) -> None:
    """Tool names with regex and GBNF syntax, quotes and non-ASCII stay literal."""
    odd = [
        Tool(
            definition={"name": n, "parameters": {"type": "object", "additionalProperties": False}}
        )
        for n in ("a.b(c)*", 'say "hi"\\', "wetter-ö", "x]^-[")
    ]
    g = get_dialect("qwen2.5").call_grammar(odd)
    assert g is not None
    for t in odd:
        text = json.dumps({"name": t.name, "arguments": {}}, ensure_ascii=False)
        assert judge.accepts(g.gbnf, text), text
    assert judge.accepts(g.gbnf, '{"name": "a.b(c)", "arguments": {"z": 1}}')  # undeclared
    assert not judge.accepts(g.gbnf, '{"name": "wetter-ö", "arguments": {"z": 1}}')


def test_a_thinking_model_may_think_before_a_required_call_or_an_answer(
    judge: GrammarOracle,
) -> None:
    qwen3 = get_dialect("qwen3")
    # The history's last turn shows an empty thought (the template's rule): the call is after.
    call = output_of(qwen3, [("get_weather", ARGS)]).split("</think>\n\n")[-1]
    thought = "<think>\nThe user wants Paris; a < b, </b> is no close tag.\n</think>\n\n"
    required = qwen3.call_grammar(TOOLS, required=True)
    assert judge.accepts(required.gbnf, thought + call)
    assert judge.accepts(required.gbnf, call)  # thinking is optional
    assert not judge.accepts(required.gbnf, thought + "It is sunny.")
    assert {"<think>", "</think>"} <= set(required.preserved)
    words = qwen3.answer_grammar()
    assert judge.accepts(words.gbnf, thought + "It is sunny.")
    assert not judge.accepts(words.gbnf, thought + call)
    # Thinking off: the grammars are the plain ones (the prompt closed an empty thought).
    off = qwen3.with_reasoning(enabled=False)
    assert not judge.accepts(off.call_grammar(TOOLS, required=True).gbnf, thought + call)
    # The prompt opened the thought (QwQ thinking): the reply starts inside it.
    qwq = get_dialect("qwq").with_reasoning(enabled=True)
    opened = qwq.call_grammar(TOOLS, required=True)
    inside = "Paris, then.\n</think>\n\n" + call
    assert judge.accepts(opened.gbnf, inside)


def test_a_thought_never_holds_its_close_tag(judge: GrammarOracle) -> None:
    from chatfmt.grammar import WORDS, thought_first

    g = thought_first(WORDS, "<think>", "</think>")
    assert judge.accepts(g.gbnf, "<think>a << b, </b> and <<x</think>\n\nHi")
    assert not judge.accepts(g.gbnf, "<think>a <</think>more</think>\n\nHi")
    bracket = thought_first(WORDS, "[THINK]", "[/THINK]")
    assert not judge.accepts(bracket.gbnf, "[THINK]a [[/THINK]more[/THINK]Hi")
