"""Llama 3.1 / 3.2 / 3.3: ``<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>``.

Ids match Meta's reference encoder (``llama_models.llama3.chat_format.ChatFormat``): the header
``\\n\\n``, the content and each call are separate encoder calls, tool results are ``ipython``
turns, an assistant turn with calls ends with ``<|eom_id|>``. Custom calls render as the
reference writes them, ``{"type": "function", "name": …, "parameters": …}`` (ASCII-escaped
JSON); ``brave_search``, ``wolfram_alpha`` and ``photogen`` as ``name.call(query="…")``;
``code_interpreter`` as ``<|python_tag|>`` and the code. Tools, when given, are described as in
Meta's JSON tool-calling prompt: ``Environment: ipython`` and the date lines in the system turn,
then a user turn listing the functions. See ``docs/formats/llama3.md``.
"""

from __future__ import annotations

import datetime
import json
import re
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Literal

from ..errors import PyCallError, ValidationError
from ..events import Event, Finish
from ..grammar import CallRules, Grammar, ToolLike, Trigger
from ..grammar.gbnf import WS_PATTERN
from ..jsonscan import WS
from ..messages import Conversation, Message, Tool, ToolCall
from ..pycall import parse_tool_call
from ..segments import Block, BlockBuilder, Control, Segment, Text
from ..validation import MessageRule, NoMetadata
from .base import Dialect, finish_reason_for
from .fingerprint import Fingerprint
from .parsers.hermes import HermesParser

BEGIN_OF_TEXT = "<|begin_of_text|>"
END_OF_TEXT = "<|end_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOM = "<|eom_id|>"
EOT = "<|eot_id|>"
PYTHON_TAG = "<|python_tag|>"
#: Built-in tools the reference writes as ``name.call(query="…")``.
QUERY_TOOLS = ("brave_search", "wolfram_alpha", "photogen")
CODE_INTERPRETER = "code_interpreter"
_ROLES = {"system": "system", "user": "user", "assistant": "assistant"}
_ROLES.update(tool="ipython", observation="ipython")
_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_ENVIRONMENT = "Environment: ipython\n\nCutting Knowledge Date: December 2023\nToday Date: {}\n"
_TOOLS_HEAD = (
    "Answer the user's question by making use of the following functions if needed.\n"
    "If none of the function can be used, please say so.\n"
    "Here is a list of functions in JSON format:\n"
)
_TOOLS_TAIL = "\nReturn function calls in JSON format."
_BUILTIN_CALL = re.compile(r"\s*([A-Za-z_]\w*)\.call(\(.*\))\s*\Z", re.DOTALL)


def _date(day: datetime.date) -> str:
    """``21 September 2024``, whatever the locale (the reference's ``%d %B %Y``)."""
    return f"{day.day:02d} {_MONTHS[day.month - 1]} {day.year}"


#: A reply that starts as a custom call object (``{"type": "function", "name": …``).
_JSON_CALL_START = rf'\s*(\{{{WS_PATTERN}"(?:type|name)"{WS_PATTERN}:)[\s\S]*'


def builtin_call_text(name: str, args: dict[str, Any]) -> str | None:
    """A call of a built-in tool as Meta's encoders write it (``None``: not a built-in)."""
    if name in QUERY_TOOLS:
        return f'{name}.call(query="{args["query"]}")'
    if name == CODE_INTERPRETER:
        code: str = args["code"]
        return code
    return None


def _call_text(call: ToolCall) -> str:
    """One call as the reference encoder writes it."""
    args = call.arguments_dict()
    builtin = builtin_call_text(call.name, args)
    if builtin is not None:
        return builtin
    return json.dumps({"type": "function", "name": call.name, "parameters": args})


def builtin_problem(name: str, args: dict[str, Any], ncalls: int, *, strict: bool) -> str | None:
    """Why a built-in tool call cannot be written as Llama 3 writes it (``None``: it can)."""
    key = "query" if name in QUERY_TOOLS else "code"
    if not isinstance(args.get(key), str):
        return f"needs arguments {{{key!r}: <string>}}"
    if strict and len(args) > 1:
        return f"takes only {key!r}; the reference drops other arguments"
    if strict and key == "query" and '"' in args[key]:
        return 'writes the query between quotes unescaped; remove the " characters'
    if strict and ncalls > 1:
        return "must be the only call of its turn, as Llama 3 makes one built-in call"
    return None


def _header(role: str) -> tuple[Segment, ...]:
    return (Control(START_HEADER), Text(role), Control(END_HEADER), Text("\n\n"))


#: The markup of Meta's Llama 3 templates.
_MARKUP = frozenset(
    {
        "<|begin_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|python_tag|>",
    }
)


class LlamaLayout(Dialect):
    """The frame of Llama 3's and Llama 4's prompts: ``<|begin_of_text|>``, with tools their
    turns (which take a leading system message in), one block per message, and the
    assistant's header as the generation prompt."""

    #: The generation prompt: the assistant's header.
    assistant_header: tuple[Segment, ...] = ()

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        msgs = conversation.messages
        b.add(Block((Control(BEGIN_OF_TEXT),)))
        start = 0
        if conversation.tools:
            system = msgs[0].text if msgs and msgs[0].role == "system" else None
            start = 0 if system is None else 1
            self._write_tools(b, conversation.tools, system, start)
        for i in range(start, len(msgs)):
            b.add(Block(self._message(msgs[i]), (i,)))
        if add_generation_prompt:
            b.add(Block(self.assistant_header))

    @abstractmethod
    def _write_tools(
        self, b: BlockBuilder, tools: Sequence[Tool], system: str | None, start: int
    ) -> None:
        """The turns that list ``tools``, holding the leading ``system`` text when there is
        one (it renders the messages before ``start``)."""

    @abstractmethod
    def _message(self, m: Message) -> tuple[Segment, ...]:
        """One message's turn."""


class Llama3(LlamaLayout):
    """Llama 3.1 to 3.3 instruct. ``today`` fills the ``Today Date`` line of the tool prompt
    (default: the date when rendering, as the reference does)."""

    name = "llama3"
    fingerprint = Fingerprint(
        "Llama 3 (<|start_header_id|>role<|end_header_id|> … <|eot_id|>) with Meta's JSON "
        "tool calls",
        requires=("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        tokens=_MARKUP,
        # Llama 3 fine-tunes with call syntaxes of their own (Functionary, FireFunction).
        excludes=("<function=", "functools", ">>>"),
        precedence=110,
    )
    rules: tuple[MessageRule, ...] = (NoMetadata(),)
    controls = (BEGIN_OF_TEXT, END_OF_TEXT, START_HEADER, END_HEADER, EOM, EOT, PYTHON_TAG)
    stop_controls = (EOT, EOM, END_OF_TEXT)
    reply_in_words = True
    turns_render_independently = True

    def __init__(self, *, today: str | datetime.date | None = None) -> None:
        self.today = today

    # ==== Validation ====

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        super().validate(conversation, strict=strict)
        for i, m in enumerate(conversation.messages):
            calls = m.tool_calls or ()
            for call in calls:
                self._check_call(i, call, len(calls), strict=strict)

    def _check_call(self, index: int, call: ToolCall, ncalls: int, *, strict: bool) -> None:
        if call.name not in QUERY_TOOLS and call.name != CODE_INTERPRETER:
            if strict and not call.name:
                raise ValidationError(
                    "a tool call needs a name; set it to the function's name",
                    index=index,
                    rule="tool-call-name",
                )
            return
        problem = builtin_problem(call.name, call.arguments_dict(), ncalls, strict=strict)
        if problem is not None:
            raise ValidationError(
                f"built-in tool {call.name!r} {problem}", index=index, rule="builtin-tool-call"
            )

    # ==== Rendering ====

    assistant_header = _header("assistant")

    def _write_tools(
        self, b: BlockBuilder, tools: Sequence[Tool], system: str | None, start: int
    ) -> None:
        text = _ENVIRONMENT.format(self._today())
        if system is not None:
            text += "\n" + system + "\n"
        listing = "".join(
            json.dumps({"type": "function", "function": t.function}, indent=4, ensure_ascii=False)
            + "\n"
            for t in tools
        )
        b.add(Block((*_header("system"), Text(text), Control(EOT)), tuple(range(start))))
        b.add(Block((*_header("user"), Text(_TOOLS_HEAD + listing + _TOOLS_TAIL), Control(EOT))))

    def _today(self) -> str:
        today = self.today if self.today is not None else datetime.date.today()
        return today if isinstance(today, str) else _date(today)

    def _message(self, m: Message) -> tuple[Segment, ...]:
        segments = list(_header(_ROLES[m.role]))
        calls = m.tool_calls or ()
        if calls and calls[0].name == CODE_INTERPRETER:
            segments.append(Control(PYTHON_TAG))
        # The reference encodes the content and each call apart: one Text each.
        segments += [Text(t) for t in (m.text, *map(_call_text, calls)) if t]
        segments.append(Control(EOM if calls else EOT))
        return tuple(segments)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """The opening of a custom call as history renders it, up to the arguments if named."""
        opening = '{"type": "function", "name": '
        if name is not None:
            opening += json.dumps(name) + ', "parameters": '
        return (Text(opening),)

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """One custom call, a JSON object with ``parameters`` (Llama 3 makes one call per
        message); when lazy, switched on by a reply that starts as such an object."""
        c = CallRules(tools)
        call = c.call_object(args_key="parameters", type_function=True, undeclared=not required)
        if required:
            return c.grammar(call)
        return c.grammar(call, triggers=(Trigger("pattern_full", _JSON_CALL_START),))

    # ==== Parsing ====

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> Llama3Parser:
        """A fresh parser; ``id_factory`` makes tool call ids (deterministic ones in tests)."""
        return Llama3Parser(id_factory=id_factory, stop_controls=self.stop_controls)


class Llama3Parser(HermesParser):
    """:class:`HermesParser` without tags (a reply that is a JSON object is a call; parallel
    calls are separated by ``;``, as Llama 3 models write them), plus what follows a leading
    ``<|python_tag|>``: a JSON call (streamed), ``name.call(k=v, …)`` (read
    with :mod:`ast`, literals only, never evaluated), or else code for ``code_interpreter``.
    The last two are decided when the turn ends."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(open_tag=None, close_tag=None, separator=";", **kwargs)
        self._tag: Literal["", "open", "body"] = ""
        self._body: list[str] = []

    def on_control(self, token: str) -> list[Event]:
        if token == PYTHON_TAG and not self._tag and self._first and not self._calls.count:
            self._tag = "open"
            return []
        return self.on_text(token)

    def on_text(self, text: str) -> list[Event]:
        if self._tag == "open":
            rest = text.lstrip(WS)
            if rest.startswith("{"):
                self._tag = ""
                text, self._body = "".join(self._body) + text, []
            elif rest:
                self._tag = "body"
        if self._tag:
            self._body.append(text)
            return []
        return super().on_text(text)

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        if not self._tag:
            return super().on_finish(reason)
        body, self._body, self._tag = "".join(self._body), [], ""
        if reason == "length" or not body.strip(WS):
            if body:
                self._warnings.append(f"the {PYTHON_TAG} call was cut off; kept as text")
            return super().on_text(body) + super().on_finish(reason)
        name, args = CODE_INTERPRETER, {"code": body}
        m = _BUILTIN_CALL.match(body)
        if m is not None:
            try:
                name, args = (
                    m.group(1),
                    parse_tool_call(m.group(1) + m.group(2), function=m.group(1)),
                )
            except PyCallError:
                pass  # not a call after all: code, as the reference reads it
        problem = builtin_problem(name, args, self._calls.count + 1, strict=True)
        try:
            arguments = ToolCall(name=name, arguments=args).arguments
        except ValueError as exc:  # a literal JSON cannot hold (such as 1e999)
            problem = problem or str(exc)
        if problem is not None:  # a call history could not render: what the model wrote is text
            self._warnings.append(f"built-in call {name!r} kept as text: it {problem}")
            return super().on_text(PYTHON_TAG + body) + super().on_finish(reason)
        calls = self._calls
        calls.start(name)
        calls.stream(arguments)
        calls.end()
        calls.record(PYTHON_TAG + body)
        self._events.append(Finish(finish_reason_for(True, reason)))
        out, self._events = self._events, []
        return out
