"""gpt-oss's harmony format: ``<|start|>{header}<|message|>{content}<|end|>`` per message.

Ids match OpenAI's reference (``openai_harmony``'s ``render_conversation_for_completion``):
a system message (identity, knowledge cutoff, date, reasoning effort, valid channels), a
developer message with the conversation's system prompt under ``# Instructions`` and its tools
as a TypeScript-like ``namespace functions { … }``, then the messages. Each piece of header
text is its own encoder call, as in the reference. See ``docs/formats/harmony.md``.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Sequence
from typing import Literal, NoReturn, cast

from ..errors import ValidationError
from ..grammar import CallRules, Grammar, ToolLike, Trigger
from ..grammar.gbnf import literal
from ..messages import Conversation, Message
from ..segments import Block, BlockBuilder, Control, Segment, Text
from ..validation import CallNames, MessageRule, NoMetadata, check_common, check_messages
from .base import Dialect, EndRule
from .fingerprint import Fingerprint
from .harmony_tools import tools_section
from .parsers.harmony import (
    CALL,
    CHANNEL,
    CONSTRAIN,
    END,
    MESSAGE,
    RETURN,
    START,
    HarmonyParser,
)

DEFAULT_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
Effort = Literal["low", "medium", "high"]
_CHANNELS = (
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
)
_FUNCTIONS_LINE = "\nCalls to these tools must go to the commentary channel: 'functions'."
# A name is header text split at whitespace and '<' by readers of the format.
_BAD_NAME = re.compile(r"[\s<>]")
_RECIPIENT = "to=functions."
_PARAMS = (dict, type(None))


def _fail(message: str, rule: str, index: int | None = None) -> NoReturn:
    raise ValidationError(message, index=index, rule=rule)


def _message(head: Sequence[Segment], body: str, end: str = END) -> tuple[Segment, ...]:
    return (Control(START), *head, Control(MESSAGE), Text(body), Control(end))


class Harmony(Dialect):
    """gpt-oss (harmony). The system message's fields are the dialect's parameters, with the
    reference's defaults: no date line unless ``current_date`` is given (a string or a date)."""

    name = "harmony"
    #: The history writes ``<|end|>`` where the model emitted ``<|return|>`` (its final answer's
    #: stop): the last trained reply keeps ``<|return|>``.
    end_rule = EndRule(history_end="<|end|>", served_end="<|return|>")
    rules: tuple[MessageRule, ...] = (
        NoMetadata(),
        CallNames(
            lambda name: not name or _BAD_NAME.search(name) is not None,
            "spaces or angle brackets",
            "the recipient it is written in",
        ),
    )
    fingerprint = Fingerprint(
        "gpt-oss's harmony format (<|start|>, <|channel|>, <|message|>)",
        requires=("<|start|>", "<|channel|>", "<|message|>"),
        architectures=("gpt-oss",),
        precedence=300,
    )
    controls = (START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL)
    stop_controls = (RETURN, CALL)
    turns_render_independently = True
    reasoning = "always"
    reasoning_efforts = ("low", "medium", "high")
    thinking = True

    def __init__(
        self,
        *,
        reasoning_effort: Effort | None = "medium",
        current_date: str | datetime.date | None = None,
        knowledge_cutoff: str | None = "2024-06",
        model_identity: str | None = DEFAULT_IDENTITY,
    ) -> None:
        if reasoning_effort not in ("low", "medium", "high", None):
            raise ValueError(f"reasoning_effort must be low, medium or high: {reasoning_effort!r}")
        self.reasoning_effort = reasoning_effort
        self.current_date = current_date
        self.knowledge_cutoff = knowledge_cutoff
        self.model_identity = model_identity

    def _set_effort(self, effort: str) -> None:
        self.reasoning_effort = cast(Effort, effort)

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        check_common(conversation, strict=strict)  # the message rules come last, as ever
        try:
            tools_section(conversation.tools)
        except RecursionError:
            raise ValidationError(
                "a tool's parameter schema is nested too deeply to describe to the model; "
                "flatten it",
                rule="tool-schema",
            ) from None
        for i, name in enumerate(_result_names(conversation.messages)):
            if name == "":
                _fail(
                    "a tool result is headed by the function it answers; set tool_call_id to "
                    "the id of an earlier call (or 'name' to the function's name)",
                    "tool-result-name",
                    i,
                )
        for t in conversation.tools if strict else ():
            fn = t.function
            desc, params = fn.get("description", ""), fn.get("parameters")
            if _BAD_NAME.search(t.name) or not isinstance(desc, str) or type(params) not in _PARAMS:
                _fail(
                    f"tool {t.name!r} needs a name without spaces or angle brackets, a string "
                    "'description' and 'parameters' that is a JSON schema object",
                    "tool-definition",
                )
        if strict:
            check_messages(self.name, conversation, self.rules)

    def system_text(self, *, function_tools: bool) -> str:
        """The system message's content."""
        day = self.current_date
        fields = [
            ("", self.model_identity),
            ("Knowledge cutoff: ", self.knowledge_cutoff),
            ("Current date: ", day if day is None or isinstance(day, str) else day.isoformat()),
        ]
        top = [label + value for label, value in fields if value is not None]
        sections = ["\n".join(top)] if top else []
        if self.reasoning_effort is not None:
            sections.append(f"Reasoning: {self.reasoning_effort}")
        sections.append(_CHANNELS + (_FUNCTIONS_LINE if function_tools else ""))
        return "\n\n".join(sections)

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs, tools = conversation.messages, conversation.tools
        system = _message((Text("system"),), self.system_text(function_tools=bool(tools)))
        b.add(Block(system))
        start = 1 if msgs and msgs[0].role == "system" else 0
        if start or tools:
            sections = ["# Instructions", msgs[0].text] if start else []
            sections += [tools_section(tools)] if tools else []
            dev = _message((Text("developer"),), "\n\n".join(sections))
            b.add(Block(dev, tuple(range(start))))
        names = _result_names(msgs)
        kept = _kept_reasoning(msgs)
        for i in range(start, len(msgs)):
            b.add(Block(self._render(msgs[i], names[i], i >= kept), (i,)))
        if add_generation_prompt:
            b.add(Block((Control(START), Text("assistant"))))

    def _render(self, m: Message, result_name: str | None, reasoning: bool) -> tuple[Segment, ...]:
        if m.role == "system":
            return _message((Text("developer"),), "# Instructions\n\n" + m.text)
        if m.role == "user":
            return _message((Text("user"),), m.text)
        if result_name is not None:
            tool = (Text("functions." + result_name), Text(" to=assistant"), Control(CHANNEL))
            return _message((*tool, Text("commentary")), m.text)
        out: tuple[Segment, ...] = ()
        if reasoning and m.reasoning is not None:
            analysis = (Text("assistant"), Control(CHANNEL), Text("analysis"))
            out = _message(analysis, m.reasoning)
        if _is_final(m):
            return (*out, *_message((Text("assistant"), Control(CHANNEL), Text("final")), m.text))
        if m.content:  # a preamble: text for the user, on the commentary channel
            out += _message((Text("assistant"), Control(CHANNEL), Text("commentary")), m.content)
        for call in m.tool_calls or ():
            head: tuple[Segment, ...] = (Text("assistant"), Text(" to=functions." + call.name))
            head += (Control(CHANNEL), Text("commentary"), Text(" "), Control(CONSTRAIN))
            out += _message((*head, Text("json")), call.arguments, CALL)
        return out

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """A message to ``functions.<a declared tool>`` and its JSON arguments (one call per
        message: ``<|call|>`` ends the turn). When lazy, switched on by ``to=functions.``,
        which may sit in the role header or in the channel header."""
        c = CallRules(tools)
        between = f"({literal(CHANNEL)} | {literal(CONSTRAIN)})"
        head = c.rules.add("call-head", f'(" " | {between}) ([^<] | {between}){{0,40}} | ""')
        call = c.any_call(
            lambda t: f"{literal(_RECIPIENT + t.name)} {head} {literal(MESSAGE)} {c.arguments(t)}"
        )
        preserved = (CHANNEL, CONSTRAIN, MESSAGE)
        if required:
            return c.grammar(f'{literal(CHANNEL)} "commentary " {call}', preserved=preserved)
        return c.grammar(call, triggers=(Trigger("word", _RECIPIENT),), preserved=preserved)

    def renders_turns_independently(self, conversation: Conversation) -> bool:
        """Not with reasoning in the history: a final answer appended later drops the analysis
        of earlier turns (see :func:`_kept_reasoning`)."""
        return all(m.reasoning is None for m in conversation.messages)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """A commentary message to ``functions.{name}`` up to its JSON (up to the name if
        ``None``), as gpt-oss writes a call."""
        if name is None:
            return (Control(CHANNEL), Text("commentary to=functions."))
        head = (Control(CHANNEL), Text(f"commentary to=functions.{name} "), Control(CONSTRAIN))
        return (*head, Text("json"), Control(MESSAGE))

    def close_thought(self) -> tuple[Segment, ...] | None:
        """The ``analysis`` message ended and a ``final`` one begun:
        ``<|end|><|start|>assistant<|channel|>final<|message|>``, as the history writes an
        answer after its analysis."""
        return (
            Control(END),
            Control(START),
            Text("assistant"),
            Control(CHANNEL),
            Text("final"),
            Control(MESSAGE),
        )

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> HarmonyParser:
        """A fresh parser; ``id_factory`` makes tool call ids (deterministic ones in tests)."""
        return HarmonyParser(id_factory=id_factory, stop_controls=self.stop_controls)


def _is_final(m: Message) -> bool:
    """Whether an assistant message ends in a ``final`` channel message (a reply without calls;
    reasoning alone, from a reply cut off while thinking, renders as only the analysis)."""
    return not m.tool_calls and not (m.content is None and m.reasoning is not None)


def _kept_reasoning(msgs: Sequence[Message]) -> int:
    """The index of the first message whose reasoning is rendered. As the reference does: when
    the last assistant message is a final answer, the analysis up to the conversation's first
    final answer is dropped; otherwise (a tool loop under way, or no answer yet) all of it is
    kept. A message's reasoning precedes its own answer, so the first answer's goes too."""
    last = next((m for m in reversed(msgs) if m.role == "assistant"), None)
    if last is None or not _is_final(last):
        return 0
    return 1 + next(i for i, m in enumerate(msgs) if m.role == "assistant" and _is_final(m))


def _result_names(msgs: Sequence[Message]) -> list[str | None]:
    """Per message: for a tool result, the function it answers ("" when unknown), else None.
    By ``tool_call_id``, else the message's ``name``, else the oldest unanswered call."""
    open_calls: dict[str, str] = {}
    out: list[str | None] = []
    for m in msgs:
        name: str | None = None
        if m.role in ("tool", "observation"):
            if m.tool_call_id is not None and m.tool_call_id in open_calls:
                name = open_calls.pop(m.tool_call_id)
            elif m.name:
                name = m.name
            elif open_calls:
                name = open_calls.pop(next(iter(open_calls)))
            else:
                name = ""
        for call in m.tool_calls or ():
            open_calls[call.id] = call.name
        out.append(name)
    return out
