"""Is a dialect the model's format? Render probe conversations both ways and compare.

A fingerprint says a template *looks like* a family's; it cannot say that every byte agrees
(a newer version's default system prompt, a tool listing written another way, an empty
thought kept or dropped). So before a model is served by a dialect, :func:`check_dialect`
renders a fixed set of probe conversations — a system prompt, several turns, tools, calls with
arguments and their results, parallel calls, an earlier turn's reasoning, with and without a
generation prompt — through the model's own template (:class:`~.jinja.ChatTemplate`) and through
the dialect, and reports the first line where they differ.

A probe the dialect refuses (its validation: the format cannot hold it) or the template
refuses (its ``raise_exception``, or a failure on that input) is skipped, not compared: such a
request would be refused when served too. A check that compared nothing fails.

A template that writes no tools (it renders a conversation the same with tools as without)
says the model was never shown any. Where the dialect does describe them, its probes with tools
cannot agree; they are left out and the result says the model is for chat only
(:attr:`TemplateCheck.chat_only`), so that a server refuses tools rather than describe them in a
way the model never saw. (A dialect that writes no tools either, as DeepSeek R1's, agrees.)
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..dialects.base import Dialect
from ..errors import ValidationError
from ..messages import Conversation, as_conversation
from .jinja import ChatTemplate, TemplateError

_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city's name."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
_TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string"}},
            "required": ["zone"],
        },
    },
}


def _call(n: int, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _asked_and_called(content: str | None) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [_call(1, "get_weather", {"city": "Paris", "unit": "celsius"})],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
        {"role": "assistant", "content": "It is 21 °C in Paris."},
        {"role": "user", "content": "Thanks! And in Rome?"},
    ]


@dataclass(frozen=True)
class Probe:
    """One conversation rendered both ways (``generation_prompt``: with the assistant's
    prompt at the end)."""

    name: str
    body: Mapping[str, Any]
    generation_prompt: bool = True


def _chat(*turns: tuple[str, str], tools: Sequence[Any] = ()) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": [{"role": r, "content": c} for r, c in turns]}
    return {**body, "tools": list(tools)} if tools else body


_SYSTEM = ("system", "You are a terse assistant.")

PROBES: tuple[Probe, ...] = (
    Probe("one user message", _chat(("user", "Hello!"))),
    Probe("a system prompt", _chat(_SYSTEM, ("user", "Hi"))),
    Probe(
        "several turns",
        _chat(_SYSTEM, ("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "2+2?")),
    ),
    Probe(
        "a reply at the end, no generation prompt",
        _chat(("user", "Hi"), ("assistant", "Hello!")),
        generation_prompt=False,
    ),
    Probe("tools", _chat(("user", "Weather in Paris?"), tools=[_WEATHER])),
    Probe(
        "a system prompt and tools",
        _chat(("system", "Answer briefly."), ("user", "Weather?"), tools=[_WEATHER, _TIME]),
    ),
    Probe(
        "a call, its result and the answer",
        {"messages": _asked_and_called(None), "tools": [_WEATHER]},
    ),
    Probe(
        "a call after text, its result and the answer",
        {"messages": _asked_and_called("Let me check."), "tools": [_WEATHER]},
    ),
    Probe(
        "two calls at once",
        {
            "messages": [
                {"role": "user", "content": "Weather and time in Tokyo?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        _call(1, "get_weather", {"city": "Tokyo"}),
                        _call(2, "get_time", {"zone": "Asia/Tokyo"}),
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, clear"},
                {"role": "tool", "tool_call_id": "call_2", "content": "21:04"},
            ],
            "tools": [_WEATHER, _TIME],
        },
    ),
    Probe(
        "reasoning in an earlier turn",
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {
                    "role": "assistant",
                    "content": "Hello!",
                    "reasoning_content": "The user greets me; greet back.",
                },
                {"role": "user", "content": "Bye"},
            ]
        },
    ),
)


@dataclass(frozen=True)
class Difference:
    """Where a probe's two renders part: the 1-based line, and that line of each."""

    probe: str
    line: int
    template: str
    dialect: str


@dataclass(frozen=True)
class TemplateCheck:
    """The outcome of :func:`check_dialect`: the probes compared, those skipped and why, and
    the first difference (``None``: every compared probe rendered the same)."""

    dialect: str
    compared: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    difference: Difference | None
    #: The template writes no tools but the dialect would: serve the model for chat only.
    chat_only: bool = False

    @property
    def ok(self) -> bool:
        return self.difference is None and bool(self.compared)

    @property
    def message(self) -> str:
        """One paragraph for a person: agreed on how many probes, or where they differ."""
        if self.difference is not None:
            d = self.difference
            return (
                f"the {self.dialect} dialect does not render what the model's chat template "
                f"renders (probe: {d.probe}); first difference at line {d.line}:\n"
                f"  template: {d.template!r}\n  dialect:  {d.dialect!r}"
            )
        if not self.compared:
            reasons = "; ".join(f"{name}: {why}" for name, why in self.skipped[:3])
            return (
                f"no probe conversation could be rendered both by the model's chat template "
                f"and by the {self.dialect} dialect ({reasons})"
            )
        chat_only = "; the template writes no tools: for chat only" if self.chat_only else ""
        return (
            f"the {self.dialect} dialect renders what the model's chat template renders "
            f"({len(self.compared)} probe conversations{chat_only})"
        )


def template_messages(conv: Conversation) -> list[dict[str, Any]]:
    """``conv`` as the message dicts a serving stack passes to a chat template: OpenAI's
    (reasoning as ``reasoning_content``, ``observation`` as ``tool``) with call arguments as
    objects, and a missing content (a reply that only calls tools) as ``""``: some templates
    print a missing one as ``None``, which no model was trained on."""
    out = []
    for m in conv.messages:
        d = m.to_openai()
        if d["content"] is None:
            d["content"] = ""
        for call, c in zip(d.get("tool_calls", ()), m.tool_calls or (), strict=True):
            call["function"]["arguments"] = c.arguments_dict()
        out.append(d)
    return out


def first_difference(probe: str, template: str, dialect: str) -> Difference | None:
    """The first line where two renders differ (a missing line reads as ``""``)."""
    if template == dialect:
        return None
    ours, theirs = dialect.split("\n"), template.split("\n")
    for n in range(max(len(ours), len(theirs))):
        a = theirs[n] if n < len(theirs) else ""
        b = ours[n] if n < len(ours) else ""
        if a != b or n >= len(theirs) or n >= len(ours):
            return Difference(probe, n + 1, a, b)
    raise AssertionError("unreachable: the texts differ")  # pragma: no cover


def check_dialect(
    dialect: Dialect, template: ChatTemplate, probes: Sequence[Probe] = PROBES
) -> TemplateCheck:
    """Render each probe through ``template`` and ``dialect``; the first difference, if any.

    The template gets what serving stacks pass it: the special tokens, and today's date as
    ``date_string`` (the Llama templates' tool prompt names it)."""
    today = datetime.date.today().strftime("%d %b %Y")

    def render(conv: Conversation, probe: Probe, *, tools: bool = True) -> str:
        return template.render(
            template_messages(conv),
            tools=[t.definition for t in conv.tools] or None if tools else None,
            add_generation_prompt=probe.generation_prompt,
            date_string=today,
        )

    writes_tools = _writes_tools(render)
    chat_only = False
    compared: list[str] = []
    skipped: list[tuple[str, str]] = []
    for probe in probes:
        conv = as_conversation(probe.body["messages"], probe.body.get("tools"))
        try:
            ours = dialect.render_text(conv, add_generation_prompt=probe.generation_prompt)
        except ValidationError as exc:
            skipped.append((probe.name, f"the dialect refuses it: {exc}"))
            continue
        try:
            theirs = render(conv, probe)
        except TemplateError as exc:
            skipped.append((probe.name, f"the template refuses it: {exc}"))
            continue
        difference = first_difference(probe.name, theirs, ours)
        if difference is not None and conv.tools and not writes_tools:
            chat_only = True
            skipped.append((probe.name, "the template writes no tools; the dialect does"))
            continue
        if difference is not None:
            return TemplateCheck(dialect.name, tuple(compared), tuple(skipped), difference)
        compared.append(probe.name)
    return TemplateCheck(dialect.name, tuple(compared), tuple(skipped), None, chat_only)


def _writes_tools(render: Callable[..., str]) -> bool:
    """Whether the template shows the model its tools: a question rendered with tools differs
    from the same question without (a template that fails on it is taken to write them, and
    its probes tell)."""
    probe = next(p for p in PROBES if p.name == "tools")
    conv = as_conversation(probe.body["messages"], probe.body["tools"])
    try:
        return render(conv, probe) != render(conv, probe, tools=False)
    except TemplateError:
        return True
