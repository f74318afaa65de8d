"""IBM Granite 4.0 and 4.1: role tokens around each turn, Hermes-style JSON calls in tags.

Each turn is ``<|start_of_role|>{role}<|end_of_role|>{content}<|end_of_text|>\\n``. Tools are
described in the system turn as one JSON line per tool, after the system text; calls follow the
assistant's text as ``<tool_call>\\n{"name": …, "arguments": …}\\n</tool_call>``; consecutive
results share one ``user`` turn of ``<tool_response>`` blocks. The models do not reason: an
assistant's reasoning is dropped, as the templates drop it.

:class:`Granite4` reproduces the published Granite 4.0 chat template byte for byte (a default
system prompt when the conversation has neither a system text nor tools); :class:`Granite41`
the Granite 4.1 one, which writes no system turn then. No Granite vocabulary is available
offline: the tags ``<tool_call>``, ``</tool_call>``, ``<tool_response>`` and
``</tool_response>`` are optional controls (ids where a vocabulary has them, text otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..grammar import Grammar, ToolLike
from ..messages import Conversation, Message
from ..segments import BlockBuilder, Segment
from ..validation import JSON_CALL_NAMES, MessageRule, NoMetadata
from .base import RESULT_ROLES, Dialect, StreamParser
from .chatml import (
    TOOL_CALL,
    TOOL_CALL_END,
    hermes_call_grammar,
    hermes_call_prefix,
    render_hermes_call,
    render_tool_responses,
)
from .fingerprint import Fingerprint
from .parsers.hermes import HermesParser

START_OF_ROLE = "<|start_of_role|>"
END_OF_ROLE = "<|end_of_role|>"
END_OF_TEXT = "<|end_of_text|>"
TOOL_RESPONSE = "<tool_response>"
TOOL_RESPONSE_END = "</tool_response>"
_TAGS = (TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE, TOOL_RESPONSE_END)

GRANITE4_DEFAULT_SYSTEM = (
    "You are a helpful assistant. Please ensure responses are professional, accurate, and safe."
)
_TOOLS_HEAD = (
    "You are a helpful assistant with access to the following tools. You may call one or more "
    "tools to assist with the user query.\n\nYou are provided with function signatures within "
    "<tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each tool call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>. If a tool does '
    "not exist in the provided list of tools, notify the user that you do not have the ability "
    "to fulfill the request."
)


_GRANITE4 = Fingerprint(
    "Granite 4.0 (<|start_of_role|>role<|end_of_role|> … <|end_of_text|>, Hermes "
    "<tool_call> calls, a default system prompt when there is none)",
    requires=("<|start_of_role|>", "<|end_of_role|>", "tools_system_message_prefix"),
    any_of=("g4_default_system_message",),
    excludes=("<|tool_call|>",),
    precedence=250,
)


class Granite4(Dialect):
    """Granite 4.0: byte-exact with its published chat template (text; no vocabulary offline)."""

    name = "granite4"
    fingerprint = _GRANITE4
    rules: tuple[MessageRule, ...] = (NoMetadata(), JSON_CALL_NAMES)
    controls = (START_OF_ROLE, END_OF_ROLE, END_OF_TEXT, *_TAGS)
    stop_controls = (END_OF_TEXT,)
    inline_controls: tuple[str, ...] = _TAGS
    reply_in_words = True
    turns_render_independently = True
    reasoning = "never"
    #: The system text written when the conversation has neither a system text nor tools
    #: (``None``: no system turn then).
    default_system: str | None = GRANITE4_DEFAULT_SYSTEM

    # ==== Rendering ====

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs = conversation.messages
        for i, j in self._turns(msgs, self._render_system(b, conversation)):
            m = msgs[i]
            if m.role in RESULT_ROLES:
                self._render_results(b, msgs[i:j])
            else:
                self._head(b, m.role)
                b.text(m.text)
                for k, call in enumerate(m.tool_calls or ()):
                    b.text("\n" if k or m.text else "")
                    self._render_call(b, call.name, call.arguments, call.raw)
                self._end(b)
            b.block(range(i, j))
        if add_generation_prompt:
            self._head(b, "assistant")
            b.block()

    def _head(self, b: BlockBuilder, role: str) -> None:
        b.control(START_OF_ROLE)
        b.text(role)
        b.control(END_OF_ROLE)

    def _end(self, b: BlockBuilder) -> None:
        b.control(END_OF_TEXT)
        b.text("\n")

    def _render_system(self, b: BlockBuilder, conversation: Conversation) -> int:
        """The system turn: the first message's text when it is a system message, then the
        tools; returns the index of the first message left to render."""
        msgs = conversation.messages
        first_system = bool(msgs) and msgs[0].role == "system"
        system = msgs[0].text if first_system else ""
        tools = conversation.tools
        if tools:
            listing = "".join("\n" + t.json_text for t in tools)
            head = system + "\n\n" if first_system else ""
            parts: list[tuple[str, bool]] = [(head + _TOOLS_HEAD, False), (listing, False)]
            parts.append((_TOOLS_TAIL, True))
        elif system:
            parts = [(system, False)]
        elif self.default_system is not None:
            parts = [(self.default_system, False)]
        else:
            return 1 if first_system else 0
        self._head(b, "system")
        for text, template in parts:
            # Tool definitions and system text are caller text: only the template's own tags
            # become controls.
            if template:
                b.tagged(text)
            else:
                b.text(text)
        self._end(b)
        b.block((0,) if first_system else ())
        return 1 if first_system else 0

    def _render_call(self, b: BlockBuilder, name: str, arguments: str, raw: str | None) -> None:
        render_hermes_call(b, name, arguments, raw)

    def _render_results(self, b: BlockBuilder, results: Sequence[Message]) -> None:
        # Consecutive results share one user turn, one <tool_response> block each.
        self._head(b, "user")
        render_tool_responses(b, (m.text for m in results))
        self._end(b)

    # ==== Parsing and grammars ====

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """Text and Hermes JSON calls (tagged, bare or fenced, as ChatML's parser reads them)."""
        return HermesParser(id_factory=id_factory, stop_controls=self.stop_controls)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """The opening of a tagged call, up to the arguments when the tool is named."""
        return hermes_call_prefix(name)

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """Tagged JSON calls (lazy: from ``<tool_call>``, or a bare or fenced call object)."""
        return hermes_call_grammar(
            tools, TOOL_CALL, TOOL_CALL_END, required=required, single=single
        )


class Granite41(Granite4):
    """Granite 4.1: as 4.0, without the default system prompt (byte-exact with its template)."""

    name = "granite4.1"
    # 4.0's markup without its default system prompt.
    fingerprint = replace(
        _GRANITE4,
        why="Granite 4.1 (<|start_of_role|>role<|end_of_role|> … <|end_of_text|>, Hermes "
        "<tool_call> calls, no default system prompt)",
        any_of=(),
        excludes=("<|tool_call|>", "g4_default_system_message"),
        precedence=240,
    )
    default_system = None


__all__ = ["GRANITE4_DEFAULT_SYSTEM", "Granite4", "Granite41"]
