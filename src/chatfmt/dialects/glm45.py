"""GLM-4.5, 4.6 and 4.7: the GLM role tokens, ``<think>`` reasoning and ``<arg_key>`` calls.

``[gMASK]<sop>``, then per message ``<|role|>`` and its text; tools are a ``<|system|>`` turn
of their own, one JSON definition per line; a call is ``<tool_call>name`` with one
``<arg_key>`` / ``<arg_value>`` pair per argument (a string value as it is, anything else as
JSON); results are ``<tool_response>`` blocks after one ``<|observation|>``. The model stops by
writing the next role token (``<|user|>``, ``<|observation|>``) or ``<|endoftext|>``.

- :class:`GLM46` (``glm4.6``) follows the GLM-4.5/4.6 template: a newline after each role token
  and around each call's elements; every reply opens with ``\\n<think>…</think>``; thinking
  off appends ``/nothink`` to every user turn and closes an empty thought in the generation
  prompt.
- :class:`GLM47` (``glm4.7``) follows GLM-4.7's compact layout: no newlines; the generation
  prompt opens the thought (or closes it, thinking off); earlier replies show ``</think>``.

Both keep an assistant turn's reasoning only after the last user message (a tool loop in
progress). Text-exact with the published templates; no GLM-4.5+ vocabulary is available
offline, so ids are not checked (``docs/formats/glm.md``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..grammar import Grammar, ToolLike, thought_first
from ..markup import THINK, THINK_END, TOOL_RESPONSE, TOOL_RESPONSE_END
from ..messages import Conversation, Message, Tool, ToolCall
from ..segments import BlockBuilder, Control, Segment, Text
from ..validation import CallNames, MessageRule, NoMetadata
from .base import Dialect, EndRule, ReasoningMode, StreamParser, last_of
from .fingerprint import Fingerprint
from .glm import ASSISTANT, GLM_MARKUP, NEXT_ROLES, OBSERVATION, SYSTEM, USER
from .parsers.deepseek import valid_name
from .parsers.think import ThinkParser
from .parsers.values import Schemas, tool_schemas
from .qwen3 import split_thought
from .xmlsyntax import NameRule, XMLSyntax, XMLSyntaxParser, call_grammar

#: The tags of a call: control tokens of the GLM-4.5+ vocabulary.
CALL_TAGS = (
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)
#: GLM-4.7's compact calls, ``<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris
#: </arg_value></tool_call>``. The name is a bare word (up to the next tag: whitespace, quotes,
#: angle brackets or backslashes make it none, so JSON in the tags is text); a value is raw text
#: (a string as it is, anything else as JSON), typed by the tool's schema when read back; the
#: text around calls is the message's content, which the templates write stripped.
GLM47_XML = XMLSyntax(
    block="<tool_call>{call}</tool_call>",
    call="{name}{arguments}",
    argument="<arg_key>{key}</arg_key><arg_value>{value}</arg_value>",
    controls=CALL_TAGS,
    scalars="json",
    # A name is a bare word; a key keeps its whitespace and may hold ">".
    name_rule=NameRule(forbidden="", valid=valid_name),
    key_rule=NameRule(forbidden="<\n", strip=False),
    space=None,  # the templates strip with Python's str.strip()
    trim=True,
    rule="glm",
    words=("argument", "argument key"),
)
#: GLM-4.5 and 4.6: the same calls with a newline after each element (one parser reads both:
#: whitespace between a call's elements is layout).
GLM46_XML = replace(
    GLM47_XML,
    call="{name}\n{arguments}",
    argument="<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n",
)

GMASK, SOP, ENDOFTEXT = "[gMASK]", "<sop>", "<|endoftext|>"
#: Appended to each user turn when thinking is off (GLM-4.5/4.6); a token of the vocabulary.
NOTHINK = "/nothink"
_ROLES = (SYSTEM, USER, ASSISTANT, OBSERVATION)
#: GLM-4.5+ calls (``<tool_call>name<arg_key>…</arg_key><arg_value>…</arg_value>``), results
#: and reasoning, besides the GLM role tokens.
_MARKUP = GLM_MARKUP | frozenset(
    f"<{slash}{tag}>"
    for tag in ("tool_call", "arg_key", "arg_value", "tool_response", "tools", "think")
    for slash in ("", "/")
)
_TAGS = (THINK, THINK_END, *CALL_TAGS, TOOL_RESPONSE, TOOL_RESPONSE_END)
_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
_TOOLS_TAIL = (
    "</tools>\n\nFor each function call, output the function name and arguments within the "
    "following XML format:\n"
)
_EXAMPLE_46 = (
    "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}"
    "</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n"
    "</tool_call>"
)
_EXAMPLE_47 = (
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}"
    "</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>..."
    "</tool_call>"
)


def _bad_key(name: str) -> bool:
    """Whether an argument name would break the call's tags when written back."""
    return not name.strip() or name != name.strip() or any(c in name for c in "<>\n")


def _is_result(m: Message) -> bool:
    return m.role in ("tool", "observation")


class _GLM45(Dialect):
    """What the GLM-4.5+ layouts share: tokens, validation, the history rule, calls, parsing.
    A subclass sets :attr:`sep` (what follows a role token and separates a call's elements)
    and its thinking switch."""

    #: The model ends a reply by writing the next role token, or end-of-text after the last
    #: one: no end is in the history, so the last trained reply is closed with it.
    end_rule = EndRule(closing="<|endoftext|>")
    rules: tuple[MessageRule, ...] = (
        NoMetadata(),
        CallNames(
            lambda name: not valid_name(name),
            "whitespace, quotes, '<', '>' or backslashes (an argument name: '<', '>', a "
            "newline or whitespace at an end)",
            "the call's tags",
            bad_key=_bad_key,
        ),
    )

    controls = (GMASK, SOP, *_ROLES, ENDOFTEXT, *_TAGS, NOTHINK)
    stop_controls = (*NEXT_ROLES, ENDOFTEXT)
    inline_controls: tuple[str, ...] = _TAGS
    #: ``[gMASK]``, ``<sop>`` and ``/nothink`` are never generated: as text they stay text.
    text_controls = (*_ROLES, ENDOFTEXT, *_TAGS)
    turns_render_independently = False  # a new user message drops the reasoning before it
    reasoning: ReasoningMode = "switch"
    thinking = True  # the templates' default: thinking unless enable_thinking is false
    #: ``"\n"`` (GLM-4.5/4.6) or ``""`` (GLM-4.7).
    sep = ""
    #: Whether the generation prompt opens the thought when thinking is on (GLM-4.7).
    prompt_opens_thought = False
    #: The request's tools (name → parameters' ``properties``), set by :meth:`with_tools`.
    tool_schemas: Schemas | None = None

    def with_tools(self, tools: Sequence[ToolLike]) -> _GLM45:
        """This dialect with a request's ``tools``: its parser types each call's values by the
        tool's schema (see :func:`~.parsers.values.typed_value`)."""
        configured = copy.copy(self)
        configured.tool_schemas = tool_schemas(tools)
        return configured

    @property
    def _syntax(self) -> XMLSyntax:
        """The call syntax of this layout (both parse alike: whitespace between a call's
        elements is layout)."""
        return GLM46_XML if self.sep else GLM47_XML

    # ==== Rendering ====

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs = conversation.messages
        b.control(GMASK)
        b.control(SOP)
        if conversation.tools:
            self._render_tools(b, conversation.tools)
        b.block()
        last_user = last_of(msgs, "user")
        n = len(msgs)
        i = 0
        while i < n:
            m = msgs[i]
            if _is_result(m):
                # Consecutive results: one <|observation|>, one <tool_response> each.
                j = i
                b.control(OBSERVATION)
                while j < n and _is_result(msgs[j]):
                    self._render_result(b, msgs[j].text)
                    j += 1
                b.block(range(i, j))
                i = j
                continue
            if m.role == "assistant":
                self._render_assistant(b, m, keep=i > last_user)
            elif m.role == "user":
                b.control(USER)
                b.text(self.sep + m.text)
                self._after_user(b, m.text)
            else:
                b.control(SYSTEM)
                b.text(self.sep + m.text)
            b.block((i,))
            i += 1
        if add_generation_prompt:
            b.control(ASSISTANT)
            self._generation_prompt(b)
            b.block()

    def _render_tools(self, b: BlockBuilder, tools: Sequence[Tool]) -> None:
        b.control(SYSTEM)
        # Tool definitions are caller text: only the template's own tags are controls.
        b.text("\n" + _TOOLS_HEAD + "".join(_tool_line(t) for t in tools))
        b.text(_TOOLS_TAIL)
        b.tagged(_EXAMPLE_46 if self.sep else _EXAMPLE_47)

    def _after_user(self, b: BlockBuilder, text: str) -> None:
        """What the template writes after a user message's text (GLM-4.6: ``/nothink``)."""

    def _render_assistant(self, b: BlockBuilder, m: Message, *, keep: bool) -> None:
        reasoning, content = split_thought(m)
        b.control(ASSISTANT)
        self._thought(b, reasoning.strip() if keep and reasoning else None)
        if content.strip():
            b.text(self.sep + content.strip())
        for call in m.tool_calls or ():
            self._render_call(b, call)

    def _thought(self, b: BlockBuilder, reasoning: str | None) -> None:
        """A reply's thought in history: ``reasoning`` (kept), or ``None`` where it is dropped."""
        raise NotImplementedError

    def _render_call(self, b: BlockBuilder, call: ToolCall) -> None:
        b.text(self.sep)
        if call.raw is not None:
            b.tagged(call.raw)  # history re-renders to the tokens the model produced
            return
        self._syntax.write(b, [(call.name, call.arguments_dict())])

    def _render_result(self, b: BlockBuilder, text: str) -> None:
        b.text(self.sep)
        b.control(TOOL_RESPONSE, required=False)
        b.text(self.sep + text + self.sep)
        b.control(TOOL_RESPONSE_END, required=False)

    def _generation_prompt(self, b: BlockBuilder) -> None:
        raise NotImplementedError

    # ==== Parsing and grammars ====

    def close_thought(self) -> tuple[Segment, ...] | None:
        """``</think>`` right after the reasoning, then the separator the history writes
        before the answer (GLM-4.6: a newline; GLM-4.7: none)."""
        close = Control(THINK_END, required=False)
        return (close, Text(self.sep)) if self.sep else (close,)

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """Reasoning in ``<think>`` (the reply starts inside it when the prompt opened it),
        then text and calls, values typed by :attr:`tool_schemas`."""
        answer = XMLSyntaxParser(
            self._syntax,
            id_factory=id_factory,
            stop_controls=self.stop_controls,
            schemas=self.tool_schemas,
        )
        return ThinkParser.after_prompt_of(
            self, answer, id_factory, started=self.thinking and self.prompt_opens_thought
        )

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """Calls of ``tools`` (lazy: from ``<tool_call>`` on); a required one may follow the
        thought when thinking is on."""
        syntax = self._syntax  # a required call starts on a line of its own (GLM-4.5/4.6)
        grammar = call_grammar(syntax, tools, required=required, single=single, lead=self.sep)
        if not self.thinking:
            return grammar
        return thought_first(grammar, THINK, THINK_END, opened=self.prompt_opens_thought)


def _tool_line(tool: Tool) -> str:
    """One tool as the templates list it: its definition as JSON on a line of its own."""
    return tool.json_text + "\n"


class GLM46(_GLM45):
    """GLM-4.5 and GLM-4.6: text-exact with the published GLM-4.6 chat template.

    Every reply opens with ``\\n<think>…</think>`` (empty unless its reasoning is kept), its
    content and calls on lines of their own. Thinking off appends ``/nothink`` to each user
    message (unless it already ends with it) and closes an empty thought in the generation
    prompt; on, the prompt is ``<|assistant|>`` alone and the model opens the thought.
    """

    name = "glm4.6"
    fingerprint = Fingerprint(
        "GLM-4.5/4.6 (role tokens, <tool_call> calls with <arg_key>/<arg_value> on lines of "
        "their own, <think> reasoning, /nothink when thinking is off)",
        requires=("[gMASK]<sop>", "<tool_call>", "<arg_key>", "<think>", "/nothink"),
        tokens=_MARKUP,
        precedence=60,
    )
    sep = "\n"

    def _after_user(self, b: BlockBuilder, text: str) -> None:
        if not self.thinking and not text.endswith(NOTHINK):
            b.control(NOTHINK, required=False)

    def _thought(self, b: BlockBuilder, reasoning: str | None) -> None:
        b.text("\n")
        b.control(THINK, required=False)
        b.text(reasoning or "")
        b.control(THINK_END, required=False)

    def _generation_prompt(self, b: BlockBuilder) -> None:
        if not self.thinking:
            self._thought(b, None)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """An empty thought when thinking is on (as history shows it), then ``<tool_call>``
        and the name when the tool is named."""
        thought: tuple[Segment, ...] = ()
        if self.thinking:
            thought = (Text("\n"), Control(THINK, False), Control(THINK_END, False))
        return (*thought, Text("\n"), *self._syntax.opening(name))

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """As :meth:`_GLM45.call_grammar`; a required call may start after the newline that
        opens the reply."""
        grammar = super().call_grammar(tools, required=required, single=single)
        if grammar.lazy:
            return grammar
        lines = grammar.gbnf.splitlines()
        lines[0] = "root ::= [\\n]* " + lines[0][len("root ::= ") :]
        return Grammar(
            "\n".join(lines) + "\n", lazy=False, triggers=(), preserved=grammar.preserved
        )


class GLM47(_GLM45):
    """GLM-4.7: text-exact with the published GLM-4.7-Flash chat template.

    Compact: nothing between a role token and its text, nor between a call's elements. The
    generation prompt opens the thought (``<think>``), or closes it when thinking is off
    (``</think>``); a reply in history shows ``<think>…</think>`` where its reasoning is kept,
    else ``</think>`` alone.
    """

    name = "glm4.7"
    fingerprint = Fingerprint(
        "GLM-4.7 (role tokens, compact <tool_call> calls with <arg_key>/<arg_value>, the "
        "generation prompt opening <think>)",
        requires=("[gMASK]<sop>", "<tool_call>", "<arg_key>", "<think>"),
        tokens=_MARKUP,
        excludes=("/nothink",),
        precedence=50,
    )
    prompt_opens_thought = True

    def _thought(self, b: BlockBuilder, reasoning: str | None) -> None:
        if reasoning is not None:
            b.control(THINK, required=False)
            b.text(reasoning)
        b.control(THINK_END, required=False)

    def _generation_prompt(self, b: BlockBuilder) -> None:
        b.control(THINK if self.thinking else THINK_END, required=False)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """``<tool_call>`` and the name when the tool is named; nothing when the prompt opened
        a thought (the call comes after it, which the grammar says)."""
        if self.thinking:
            return ()
        return self._syntax.opening(name)


__all__ = ["GLM46", "GLM47", "NOTHINK"]
