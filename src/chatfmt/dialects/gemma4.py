"""Gemma 4: ``<|turn>``/``<turn|>`` turns, a thought channel, calls in Gemma's own notation.

:class:`Gemma4` reproduces the published Gemma 4 chat template byte for byte (no Gemma 4
vocabulary is available offline, so text only). After ``<bos>``, a system turn
``<|turn>system\\n…<turn|>\\n`` comes first when thinking is on (``<|think|>`` at its top), when
there are tools (one ``<|tool>declaration:…<tool|>`` each, :mod:`.gemma4_tools`) or when the
conversation starts with a system message. Each message is ``<|turn>{role}\\n{text}<turn|>\\n``
with the assistant's role ``model``. A model turn writes its calls first
(``<|tool_call>call:NAME{…}<tool_call|>``, :mod:`.parsers.gemma4`), then the results of the
tool messages that follow it in the same turn (``<|tool_response>response:NAME{value:…}
<tool_response|>``, the name matched through ``tool_call_id``), then its text; a turn whose
results came and that has no text stays open, and the next assistant message continues it
(no new header). The model stops at ``<turn|>`` or, after calls, at ``<|tool_response>``.

Thinking is a switch, off by default as in the template: on, the system turn carries
``<|think|>`` and the model opens ``<|channel>thought\\n…<channel|>`` itself; off, the
generation prompt writes an empty thought channel. History keeps the thought of an assistant
turn with calls after the last user message (the tool loop in progress), and drops the rest.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ValidationError
from ..grammar import ToolLike
from ..messages import Conversation, Message, ToolCall
from ..segments import BlockBuilder, Control, Segment, Text
from ..validation import MessageRule, NoMetadata
from .base import Dialect, StreamParser, last_of, results_end
from .fingerprint import Fingerprint
from .gemma4_grammar import gemma4_call_grammar
from .gemma4_tools import declaration
from .parsers.gemma4 import (
    CALL,
    CALL_END,
    NAME_BREAKERS,
    QUOTE,
    Gemma4CallParser,
    Part,
    call_parts,
    format_parts,
)
from .parsers.think import ThinkParser
from .parsers.values import Schemas, tool_schemas

BOS, EOS = "<bos>", "<eos>"
TURN, TURN_END = "<|turn>", "<turn|>"
THINK = "<|think|>"
CHANNEL, CHANNEL_END = "<|channel>", "<channel|>"
TOOL, TOOL_END = "<|tool>", "<tool|>"
RESPONSE, RESPONSE_END = "<|tool_response>", "<tool_response|>"
#: The thought's opening as the model writes it: the channel token and the channel's name.
THOUGHT = CHANNEL + "thought"


def _bad_key(arguments: Any) -> str | None:
    """A key (at any depth) the notation cannot write bare and read back, if any."""
    if isinstance(arguments, Mapping):
        for k, v in arguments.items():
            if not k or k != k.strip() or QUOTE in k or any(c in NAME_BREAKERS for c in k):
                return str(k)
            if (bad := _bad_key(v)) is not None:
                return bad
    elif isinstance(arguments, list):
        for v in arguments:
            if (bad := _bad_key(v)) is not None:
                return bad
    return None


def _has_quote(value: Any) -> bool:
    """Whether a string (at any depth) holds the notation's quote token."""
    if isinstance(value, str):
        return QUOTE in value
    if isinstance(value, Mapping):
        return any(_has_quote(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_quote(v) for v in value)
    return False


def _write(b: BlockBuilder, parts: Sequence[Part]) -> None:
    """Notation parts: text as text (caller text never becomes a token), quotes as tokens."""
    for p in parts:
        if p is None:
            b.control(QUOTE)
        else:
            b.text(p)


def strip_thinking(text: str) -> str:
    """A model turn's text without the thought channels written into it, trimmed (what the
    template does to an assistant's content)."""
    kept = []
    for part in text.split(CHANNEL_END):
        kept.append(part.split(CHANNEL)[0] if CHANNEL in part else part)
    return "".join(kept).strip()


class Gemma4(Dialect):
    """Gemma 4: byte-exact with its published chat template (text); thinking switch, off by
    default."""

    name = "gemma4"
    fingerprint = Fingerprint(
        'Gemma 4 (<|turn>role … <turn|>, <|tool_call>call:NAME{…} calls with <|"|> strings, '
        "a <|channel>thought channel)",
        requires=("<|turn>", "<turn|>", '<|"|>'),
        precedence=280,
    )
    rules: tuple[MessageRule, ...] = (NoMetadata(),)
    controls = (
        BOS, EOS, TURN, TURN_END, THINK, CHANNEL, CHANNEL_END, TOOL, TOOL_END, CALL, CALL_END,
        RESPONSE, RESPONSE_END, QUOTE,
    )  # fmt: skip
    stop_controls = (TURN_END, RESPONSE, EOS)
    reasoning = "switch"
    thinking = False
    #: The request's tools (name → parameters' ``properties``), set by :meth:`with_tools`.
    tool_schemas: Schemas | None = None

    def with_tools(self, tools: Sequence[ToolLike]) -> Gemma4:
        """This dialect with a request's ``tools``: its parser reads a bare value where the
        tool's schema wants a string as that string (``days:3`` for a string ``days``)."""
        configured = copy.copy(self)
        configured.tool_schemas = tool_schemas(tools)
        return configured

    # ==== Validation ====

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        super().validate(conversation, strict=strict)
        for i, m in enumerate(conversation.messages):
            for call in m.tool_calls or ():
                self._check_call(call, i)

    def _check_call(self, call: ToolCall, index: int) -> None:
        name = call.name
        if not name or name != name.strip() or any(c in NAME_BREAKERS for c in name):
            raise ValidationError(
                f"tool call name {name!r} is empty, padded, or holds one of "
                "'{', '}', '[', ']', ',', ':', '<', '>' or a newline, which break Gemma 4's "
                "call:NAME{…} notation; use a plain identifier such as 'get_weather'",
                index=index,
                rule="tool-call-name",
            )
        args = call.arguments_dict()
        bad = _bad_key(args)
        if bad is not None:
            raise ValidationError(
                f"tool call {name!r} has argument key {bad!r}, which Gemma 4's notation writes "
                "bare and cannot read back (empty, padded, or holding '{', '}', '[', ']', ',', "
                "':', '<', '>', a newline or <|\"|>); rename the key",
                index=index,
                rule="tool-call-arguments",
            )
        if _has_quote(args):
            raise ValidationError(
                f'tool call {name!r} has a string holding <|"|>, the token that quotes '
                "strings in Gemma 4's notation; remove it from the value",
                index=index,
                rule="tool-call-arguments",
            )

    # ==== Rendering ====

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs = conversation.messages
        b.control(BOS)
        first_system = bool(msgs) and msgs[0].role == "system"
        if self.thinking or conversation.tools or first_system:
            b.control(TURN)
            b.text("system\n")
            if self.thinking:
                b.control(THINK)
                b.text("\n")
            if first_system:
                b.text(msgs[0].text.strip())
            for tool in conversation.tools:
                b.control(TOOL)
                _write(b, declaration(tool.function))
                b.control(TOOL_END)
            b.control(TURN_END)
            b.text("\n")
        b.block((0,) if first_system else ())
        start = 1 if first_system else 0
        last_user = last_of(msgs, "user")
        last_kind: str | None = None  # what the last rendered message ended with
        previous: str | None = None  # the role of the last message that was not a result
        i = start
        while i < len(msgs):
            m = msgs[i]
            if m.role in ("tool", "observation"):
                i += 1  # rendered with the call they answer (or, unanswered, dropped)
                continue
            j = results_end(msgs, i + 1)
            last_kind = self._render_message(b, m, msgs[i + 1 : j], i, last_user, previous)
            previous = m.role
            b.block(range(i, j))
            i = j
        if add_generation_prompt and last_kind not in ("results", "calls"):
            b.control(TURN)
            b.text("model\n")
            if not self.thinking:
                b.control(CHANNEL)
                b.text("thought\n")
                b.control(CHANNEL_END)
            b.block()

    def _render_message(
        self,
        b: BlockBuilder,
        m: Message,
        results: Sequence[Message],
        i: int,
        last_user: int,
        previous: str | None,
    ) -> str | None:
        """One message (and, for a model turn with calls, the results after it); returns
        ``"calls"`` or ``"results"`` when the turn ends waiting for results or after them."""
        model = m.role == "assistant"
        if not (model and previous == "assistant"):  # a model turn after results continues
            b.control(TURN)
            b.text(("model" if model else m.role) + "\n")
        calls = m.tool_calls or ()
        if m.reasoning and i > last_user and calls:
            b.control(CHANNEL)
            b.text("thought\n" + m.reasoning + "\n")
            b.control(CHANNEL_END)
        for call in calls:
            b.control(CALL)
            _write(b, call_parts(call.name, call.arguments_dict()))
            b.control(CALL_END)
        shown = bool(calls and results)
        if shown:
            names = {c.id: c.name for c in calls}
            for r in results:
                name = names.get(r.tool_call_id or "") or r.name or "unknown"
                b.control(RESPONSE)
                _write(b, [f"response:{name}{{value:", *format_parts(r.text), "}"])
                b.control(RESPONSE_END)
        text = m.text
        b.text(strip_thinking(text) if model else text.strip())
        if calls and not shown:
            b.control(RESPONSE)  # the model's own stop after calls: the results come next
            return "calls"
        if not (shown and not text):
            b.control(TURN_END)
            b.text("\n")
        return "results" if shown else None

    # ==== Parsing and grammars ====

    def close_thought(self) -> tuple[Segment, ...] | None:
        """``\\n<channel|>``: the thought channel's end, as the history writes it."""
        return (Text("\n"), Control(CHANNEL_END))

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """An optional ``<|channel>thought`` … ``<channel|>`` thought, then text and calls
        typed by :attr:`tool_schemas`."""
        answer = Gemma4CallParser(
            id_factory=id_factory, stop_controls=self.stop_controls, schemas=self.tool_schemas
        )
        return ThinkParser(
            answer,
            id_factory=id_factory,
            stop_controls=self.stop_controls,
            open_tag=THOUGHT,
            close_tag=CHANNEL_END,
        )

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """Nothing: a thinking model thinks before its call (the grammar allows it)."""
        return ()

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Any:
        """Calls of ``tools`` in the notation (lazy: from ``<|tool_call>`` on); a required one
        may follow a thought when thinking is on."""
        return gemma4_call_grammar(tools, required=required, single=single, thought=self.thinking)


__all__ = ["Gemma4", "strip_thinking"]
