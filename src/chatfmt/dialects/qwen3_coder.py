"""Qwen3-Coder and Qwen3.5: ChatML with calls written as XML (``<function=…>``, ``<parameter=…>``).

:class:`Qwen3Coder` reproduces the published Qwen3-Coder chat template byte for byte (ids: the
Qwen3 vocabulary). It does not reason. Its tools are described in the system turn as XML, one
``<function>`` element per tool, every schema keyword it does not name written as its own
element.

:class:`Qwen35` reproduces the Qwen3.5 template (ids: the Qwen3.5 vocabulary): tools as JSON in
``<tools>``, the system text after the tool instructions, every message's text trimmed, and
Qwen3's history rule (reasoning kept only after the last real user query), where every turn
after that query shows its thought, empty or not. The generation prompt opens the thought, or
closes an empty one when thinking is off.

Both write a call's values as the templates do (``parsers/values.render_value``) and read them
back typed by the tools' schemas: :meth:`~XMLCallsMixin.with_tools` gives a dialect whose parser
knows a request's tools; without it values that look like JSON are read as JSON.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ValidationError
from ..grammar import Grammar, ToolLike
from ..markup import THINK, THINK_END, TOOL_RESPONSE, TOOL_RESPONSE_END
from ..messages import Conversation, Message
from ..segments import BlockBuilder, Segment
from ..validation import (
    JSON_CALL_NAMES,
    CallNames,
    MessageRule,
    NoMetadata,
    SystemOnlyFirst,
    check_messages,
)
from .base import StreamParser
from .chatml import (
    ENDOFTEXT,
    IM_END,
    IM_START,
    TOOL_CALL,
    TOOL_CALL_END,
    render_tool_responses,
)
from .fingerprint import CHATML_MARKUP, HERMES_MARKUP, THINK_MARKUP, Fingerprint
from .parsers.values import Schemas, json_text, tool_schemas
from .qwen3 import Qwen3, split_thought
from .xmlsyntax import XMLSyntax, XMLSyntaxParser, call_grammar

#: The calls, each a block of its own (also Qwen3.5's and Nemotron 3's)::
#:
#:     <tool_call>
#:     <function=get_weather>
#:     <parameter=city>
#:     Paris
#:     </parameter>
#:     </function>
#:     </tool_call>
#:
#: A value is raw text: strings as they are, mappings and lists as JSON, other scalars as Python
#: writes them (``True``, ``None``); read back, typed by the tool's schema. A call is complete at
#: ``</function>``; what stands between it and ``</tool_call>`` is ignored, with a warning.
QWEN_XML = XMLSyntax(
    block="<tool_call>\n{call}</tool_call>",
    call="<function={name}>\n{arguments}</function>\n",
    argument="<parameter={key}>\n{value}\n</parameter>\n",
    controls=("<tool_call>", "</tool_call>"),
    scalars="python",
)

#: The calls (``<function=name>``, ``<parameter=name>``) and tool descriptions they write.
_XML_MARKUP = frozenset(
    f"<{slash}{tag}>"
    for tag in ("function", "parameter", "parameters", "name", "description", "type")
    for slash in ("", "/")
)
_VISION_MARKUP = frozenset({"<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"})
#: ChatML with calls as ``<tool_call><function=name><parameter=name>``.
_XML_CALL_MARKERS = ("<|im_start|>", "<tool_call>", "<function=", "<parameter=")
_CALL_TAGS = (TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE, TOOL_RESPONSE_END)
_REMINDER = (
    "\n- Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is "
    "no function call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n</IMPORTANT>"
)
CODER_DEFAULT_SYSTEM = (
    "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks."
)
_CODER_TOOLS_HEAD = "\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>"
_CODER_TOOLS_TAIL = (
    "\n</tools>\n\nIf you choose to call a tool ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>"
    "\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nvalue_2\n</parameter>\n"
    "</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the "
    "specified format: the tool calling block MUST begin with an opening <tool_call> tag and "
    "end with a closing </tool_call> tag." + _REMINDER
)
_QWEN35_TOOLS_HEAD = "# Tools\n\nYou have access to the following functions:\n\n<tools>"
_QWEN35_TOOLS_TAIL = (
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>"
    "\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags"
    + _REMINDER
)


def _bad_xml_name(name: str) -> bool:
    """Whether a tool or parameter name would break the call's tags when written back."""
    return not name or any(c in name for c in "<>\n")


_XML_CALL_NAMES = CallNames(
    _bad_xml_name, "'<', '>' or a newline", "the call's XML tags", bad_key=_bad_xml_name
)


def render_result_lines(b: BlockBuilder, results: Sequence[Message]) -> None:
    """A run of tool results as the XML-call templates write it (Qwen3-Coder, Nemotron 3):
    one user turn, each ``<tool_response>`` block on lines of its own."""
    b.control(IM_START)
    b.text("user\n")
    render_tool_responses(b, (m.text for m in results), trailing_newline=True)
    b.control(IM_END)
    b.text("\n")


class XMLCallsMixin(Qwen3):
    """What the two XML dialects share: the call layout, the parser and its tools, the
    grammar, and the rule on names."""

    #: The request's tools (name → parameters' ``properties``), set by :meth:`with_tools`.
    tool_schemas: Schemas | None = None
    rules: tuple[MessageRule, ...] = (*Qwen3.rules, _XML_CALL_NAMES)

    def with_tools(self, tools: Sequence[ToolLike]) -> XMLCallsMixin:
        """This dialect with a request's ``tools``: its parser types each call's values by the
        tool's schema (a string stays a string; an integer, a number, a boolean, an object or
        an array is read as such when it parses, as a string when not)."""
        configured = copy.copy(self)
        configured.tool_schemas = tool_schemas(tools)
        return configured

    def _render_call(self, b: BlockBuilder, name: str, arguments: str, raw: str | None) -> None:
        if raw is not None:
            b.tagged(raw)  # history re-renders to the tokens the model produced
            return
        QWEN_XML.write(b, [(name, json.loads(arguments))])

    def _answer_parser(self, id_factory: Callable[[], str] | None) -> StreamParser:
        """Text and XML calls, values typed by :attr:`tool_schemas`."""
        return XMLSyntaxParser(
            QWEN_XML,
            id_factory=id_factory,
            stop_controls=self.stop_controls,
            schemas=self.tool_schemas,
        )

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """The opening of a call, up to its first parameter when the tool is named; nothing
        when the prompt opened a thought (the call comes after it, which the grammar says)."""
        if self.thinking and self.prompt_opens_thought:
            return ()
        return QWEN_XML.opening(name)

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """XML calls of ``tools`` (lazy: from ``<tool_call>`` on), after the thought when the
        model thinks first."""
        return self._after_thought(xml_call_grammar(tools, required=required, single=single))


class Qwen3Coder(XMLCallsMixin):
    """Qwen3-Coder: byte-exact with its published chat template; it does not reason."""

    name = "qwen3-coder"
    fingerprint = Fingerprint(
        "Qwen3-Coder (ChatML, <function=…> calls with <parameter=…>, no reasoning)",
        requires=_XML_CALL_MARKERS,
        tokens=CHATML_MARKUP | HERMES_MARKUP | _XML_MARKUP,
        excludes=("<think>", "enable_thinking", "bos_token"),
        precedence=160,
    )
    controls = (IM_START, IM_END, ENDOFTEXT, *_CALL_TAGS)
    inline_controls: tuple[str, ...] = _CALL_TAGS
    turns_render_independently = True
    reasoning = "never"
    thinking = False

    def _render_system(self, b: BlockBuilder, conversation: Conversation) -> int:
        msgs = conversation.messages
        first_system = bool(msgs) and msgs[0].role == "system"
        tools = conversation.tools
        if not (first_system or tools):
            return 0
        b.control(IM_START)
        b.text("system\n" + (msgs[0].text if first_system else CODER_DEFAULT_SYSTEM))
        if tools:
            b.text(_CODER_TOOLS_HEAD + "".join(coder_tool(t.definition) for t in tools))
            b.tagged(_CODER_TOOLS_TAIL)
        b.control(IM_END)
        b.text("\n")
        b.block((0,) if first_system else ())
        return 1 if first_system else 0

    def _render_assistant(self, b: BlockBuilder, m: Message, *, keep: bool, last: bool) -> None:
        # No reasoning here: the template drops it, and writes a message without calls as is.
        if not m.tool_calls:
            b.text("assistant\n" + m.text)
            return
        content = m.text.strip()
        b.text("assistant" + (f"\n{content}\n" if content else ""))
        for call in m.tool_calls:
            b.text("\n")
            self._render_call(b, call.name, call.arguments, call.raw)

    def _render_results(self, b: BlockBuilder, results: Sequence[Message]) -> None:
        render_result_lines(b, results)

    def _generation_prompt(self, b: BlockBuilder) -> None:
        pass  # no thought to open or close

    def close_thought(self) -> tuple[Segment, ...] | None:
        """None: Qwen3-Coder does not reason (Qwen3's closing is not inherited)."""
        return None

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """Text and XML calls (no reasoning: a ``<think>`` in the reply is text)."""
        return self._answer_parser(id_factory)


class Qwen35(XMLCallsMixin):
    """Qwen3.5: byte-exact with its published chat template; thinking on unless turned off."""

    name = "qwen3.5"
    fingerprint = Fingerprint(
        "Qwen3.5 (ChatML, <function=…> calls, <think> reasoning, vision tokens)",
        requires=(*_XML_CALL_MARKERS, "<think>", "<|vision_start|>"),
        tokens=CHATML_MARKUP | HERMES_MARKUP | THINK_MARKUP | _XML_MARKUP | _VISION_MARKUP,
        excludes=("bos_token",),
        precedence=170,
    )
    rules: tuple[MessageRule, ...] = (JSON_CALL_NAMES, NoMetadata(), _XML_CALL_NAMES)
    prompt_opens_thought = True

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        super().validate(conversation, strict=strict)
        msgs = conversation.messages
        check_messages(self.name, conversation, (SystemOnlyFirst(),))
        if not any(m.role == "user" and not _wrapped_results(m.text.strip()) for m in msgs):
            raise ValidationError(
                f"the {self.name} template needs a user query (a user message that is not "
                "tool results in <tool_response> tags); add one",
                rule="no-query",
            )

    def _last_query(self, msgs: Sequence[Message]) -> int:
        # As Qwen3's rule, on trimmed text; validation made sure there is a query.
        for i in range(len(msgs) - 1, -1, -1):
            if msgs[i].role == "user" and not _wrapped_results(msgs[i].text.strip()):
                return i
        return len(msgs) - 1

    def _text(self, m: Message) -> str:
        return m.text.strip()

    def _render_system(self, b: BlockBuilder, conversation: Conversation) -> int:
        msgs = conversation.messages
        first_system = bool(msgs) and msgs[0].role == "system"
        system = msgs[0].text.strip() if first_system else ""
        tools = conversation.tools
        if not (first_system or tools):
            return 0
        b.control(IM_START)
        b.text("system\n")
        if tools:
            b.text(_QWEN35_TOOLS_HEAD)
            # Tool definitions are caller text: only the template's own tags are controls.
            b.text("".join("\n" + t.json_text for t in tools))
            b.tagged(_QWEN35_TOOLS_TAIL)
            b.text("\n\n" + system if system else "")
        else:
            b.text(system)
        b.control(IM_END)
        b.text("\n")
        b.block((0,) if first_system else ())
        return 1 if first_system else 0

    def _render_assistant(self, b: BlockBuilder, m: Message, *, keep: bool, last: bool) -> None:
        reasoning, content = split_thought(m.model_copy(update={"content": m.text.strip()}))
        b.text("assistant\n")
        if keep:  # after the last query every turn shows its thought, empty or not
            b.tagged(THINK)
            b.text("\n" + reasoning.strip() + "\n")
            b.tagged(THINK_END)
            b.text("\n\n" + content)
        else:
            b.text(content)
        for k, call in enumerate(m.tool_calls or ()):
            b.text("\n" if k else "\n\n" if content.strip() else "")
            self._render_call(b, call.name, call.arguments, call.raw)

    def _generation_prompt(self, b: BlockBuilder) -> None:
        b.tagged(THINK + "\n" if self.thinking else THINK + "\n\n" + THINK_END + "\n\n")


def _wrapped_results(text: str) -> bool:
    """Whether a user message's (trimmed) text is tool results a client wrote into it."""
    return text.startswith(TOOL_RESPONSE) and text.endswith(TOOL_RESPONSE_END)


# ==== Qwen3-Coder's tool descriptions ====


def _extra_keys(value: Any, handled: tuple[str, ...]) -> str:
    """The keys of a schema or definition the template does not name, one element each:
    mappings and sequences as JSON, anything else as Python's ``str``."""
    if not isinstance(value, Mapping):
        return ""
    out = []
    for key, v in value.items():
        if key not in handled:
            text = json_text(v) if isinstance(v, (Mapping, list, tuple)) else str(v)
            out.append(f"\n<{key}>{text}</{key}>")
    return "".join(out)


def coder_tool(definition: Mapping[str, Any], *, listed: bool = False) -> str:
    """One tool as Qwen3-Coder's template describes it (``<function>`` … ``</function>``);
    ``listed``: as Nemotron 3's does, which adds a parameter's ``<enum>`` and the
    ``<required>`` list, as JSON."""
    fn = definition["function"] if "function" in definition else definition
    out = [f"\n<function>\n<name>{fn.get('name')}</name>"]
    if "description" in fn:
        out.append(f"\n<description>{str(fn['description']).strip()}</description>")
    out.append("\n<parameters>")
    params = fn.get("parameters")
    props = params.get("properties") if isinstance(params, Mapping) else None
    for name, field in props.items() if isinstance(props, Mapping) else ():
        out.append(f"\n<parameter>\n<name>{name}</name>")
        if isinstance(field, Mapping):
            if "type" in field:
                out.append(f"\n<type>{field['type']}</type>")
            if "description" in field:
                out.append(f"\n<description>{str(field['description']).strip()}</description>")
            if listed and "enum" in field:
                out.append(f"\n<enum>{json_text(field['enum'])}</enum>")
        out.append(_extra_keys(field, _LISTED_FIELD if listed else _FIELD))
        out.append("\n</parameter>")
    out.append(_extra_keys(params, _LISTED_PARAMS if listed else _PARAMS))
    if listed and isinstance(params, Mapping) and "required" in params:
        out.append(f"\n<required>{json_text(params['required'])}</required>")
    out.append("\n</parameters>")
    out.append(_extra_keys(fn, ("type", "name", "description", "parameters")))
    out.append("\n</function>")
    return "".join(out)


#: The keys of a parameter and of the parameters the templates write themselves.
_FIELD = ("name", "type", "description")
_LISTED_FIELD = (*_FIELD, "enum")
_PARAMS = ("type", "properties")
_LISTED_PARAMS = (*_PARAMS, "required")


# ==== The call grammar ====


def xml_call_grammar(
    tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
) -> Grammar:
    """Calls ``<tool_call>\\n<function=NAME>\\n`` … ``</function>\\n</tool_call>`` of ``tools``
    (:func:`~.xmlsyntax.call_grammar`: a boolean is ``true``/``false`` in either spelling, as
    the templates write Python's ``True``). Lazy unless ``required``: from ``<tool_call>``."""
    return call_grammar(QWEN_XML, tools, required=required, single=single)


__all__ = ["CODER_DEFAULT_SYSTEM", "Qwen3Coder", "Qwen35", "coder_tool", "xml_call_grammar"]
