"""Llama 4 (Scout, Maverick): ``<|header_start|>{role}<|header_end|>\\n\\n{content}<|eot|>``.

Ids match Meta's reference encoder (``llama_models.llama4.chat_format.ChatFormat``) with its
``python_list`` call format, the one Meta documents for Llama 4: the header's role, its
``\\n\\n``, the content and each call are separate encoder calls; tool results are ``ipython``
turns ending ``<|eom|>``, as does an assistant turn with calls; each call is its own list,
``[name(k="v", n=1)]``. The encoder pastes strings between double quotes unescaped and writes
dicts as ``{k=v}``, which no Python reader takes back: those values are written as Python
literals that read back instead (the one difference; see ``docs/formats/llama3.md``). Tools,
when given, are described by Meta's documented zero-shot system prompt.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ValidationError
from ..grammar import CallRules, Grammar, ToolLike, Trigger
from ..grammar.gbnf import literal
from ..messages import Conversation, Message, Tool, ToolCall
from ..pycall import format_value, is_argument_name
from ..segments import Block, BlockBuilder, Control, Segment, Text
from ..validation import MessageRule, NoMetadata
from .fingerprint import Fingerprint
from .llama3 import CODE_INTERPRETER, QUERY_TOOLS, LlamaLayout, builtin_call_text, builtin_problem
from .parsers.pythonic import PythonicCallsParser

BEGIN_OF_TEXT = "<|begin_of_text|>"
END_OF_TEXT = "<|end_of_text|>"
HEADER_START = "<|header_start|>"
HEADER_END = "<|header_end|>"
EOM = "<|eom|>"
EOT = "<|eot|>"
PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"
_ROLES = {"system": "system", "user": "user", "assistant": "assistant"}
_ROLES.update(tool="ipython", observation="ipython")
#: Characters a string between double quotes cannot hold as they are and read back.
_UNSAFE = frozenset('"\\\n\r\x00')

#: Meta's zero-shot function-calling system prompt for Llama 4 (its prompt-format document),
#: around the JSON list of the functions.
TOOLS_HEAD = """\
You are a helpful assistant and an expert in function composition. You can answer general \
questions using your internal knowledge OR invoke functions when necessary. Follow these \
strict guidelines:

1. FUNCTION CALLS:
- ONLY use functions that are EXPLICITLY listed in the function list below
- If NO functions are listed (empty function list []), respond ONLY with internal knowledge \
or "I don't have access to [Unavailable service] information"
- If a function is not in the list, respond ONLY with internal knowledge or "I don't have \
access to [Unavailable service] information"
- If ALL required parameters are present AND the query EXACTLY matches a listed function's \
purpose: output ONLY the function call(s)
- Use exact format: [func_name1(param1=value1, param2=value2), func_name2(...)]
Examples:
CORRECT: [get_weather(location="Vancouver"), calculate_route(start="Boston", end="New York")] \
<- Only if get_weather and calculate_route are in function list
INCORRECT: get_weather(location="New York")
INCORRECT: Let me check the weather: [get_weather(location="New York")]
INCORRECT: [get_events(location="Singapore")] <- If function not in list

2. RESPONSE RULES:
- For pure function requests matching a listed function: ONLY output the function call(s)
- For knowledge questions: ONLY output text
- For missing parameters: ONLY request the specific missing parameters
- For unavailable services (not in function list): output ONLY with internal knowledge or \
"I don't have access to [Unavailable service] information". Do NOT execute a function call.
- If the query asks for information beyond what a listed function provides: output ONLY with \
internal knowledge about your limitations
- NEVER combine text and function calls in the same response
- NEVER suggest alternative functions when the requested service is unavailable
- NEVER create or invent new functions not listed below

3. STRICT BOUNDARIES:
- ONLY use functions from the list below - no exceptions
- NEVER use a function as an alternative to unavailable information
- NEVER call functions not present in the function list
- NEVER add explanatory text to function calls
- NEVER respond with empty brackets
- Use proper Python/JSON syntax for function calls
- Check the function list carefully before responding

4. TOOL RESPONSE HANDLING:
- When receiving tool responses: provide concise, natural language responses
- Don't repeat tool response verbatim
- Don't add supplementary information


Here is a list of functions in JSON format that you can invoke.

"""
TOOLS_TAIL = """

You can answer general questions or invoke tools when necessary.
In addition to tool calls, you should also augment your responses by using the tool outputs."""
#: A reply that starts as a call list: ``[`` and a name followed by ``(``.
_CALL_START = r"\s*(\[\s*[A-Za-z_][A-Za-z0-9_]*\()[\s\S]*"


def python_value(value: Any) -> str:
    """``value`` as Meta's encoder writes it where that reads back (strings between double
    quotes as they are, ``True``, ``None``, ``str()`` of numbers), else as a Python literal
    that does: a string holding a quote, a backslash or a line break escaped, a dict as
    ``{"k": v}`` (the encoder's ``{k=v}`` is not Python)."""
    if isinstance(value, str):
        return format_value(value) if _UNSAFE.intersection(value) else f'"{value}"'
    if value is None or isinstance(value, bool | int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no Python literal form; use a finite number")
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(python_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"{format_value(str(k))}: {python_value(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise ValueError(f"{type(value).__name__} values have no literal form in a tool call")


def encoder_domain(value: Any) -> bool:
    """Whether Meta's encoder writes ``value`` so that it reads back (where chatfmt writes it
    exactly as the encoder does)."""
    if isinstance(value, str):
        return not _UNSAFE.intersection(value)
    if isinstance(value, list):
        return all(encoder_domain(v) for v in value)
    return not isinstance(value, dict)


def call_text(call: ToolCall) -> str:
    """One call as history renders it: the model's own text where a parse kept it, else as
    Meta's encoder writes it (built-in tools as Llama 3's)."""
    if call.raw is not None:
        return f"[{call.raw}]"
    args = call.arguments_dict()
    builtin = builtin_call_text(call.name, args)
    if builtin is not None:
        return builtin
    kwargs = ", ".join(f"{k}={python_value(v)}" for k, v in args.items())
    return f"[{call.name}({kwargs})]"


def _header(role: str) -> tuple[Segment, ...]:
    return (Control(HEADER_START), Text(role), Control(HEADER_END), Text("\n\n"))


class Llama4(LlamaLayout):
    """Llama 4 instruct: Meta's encoder with ``python_list`` calls."""

    name = "llama4"
    fingerprint = Fingerprint(
        "Llama 4 (<|header_start|>role<|header_end|> … <|eot|> or <|eom|>)",
        requires=("<|header_start|>", "<|header_end|>", "<|eot|>"),
        architectures=("llama4",),
        precedence=220,
    )
    rules: tuple[MessageRule, ...] = (NoMetadata(),)
    controls = (
        BEGIN_OF_TEXT, END_OF_TEXT, HEADER_START, HEADER_END, EOM, EOT, PYTHON_START, PYTHON_END,
    )  # fmt: skip
    stop_controls = (EOT, EOM, END_OF_TEXT)
    reply_in_words = True
    turns_render_independently = True

    # ==== Validation ====

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        super().validate(conversation, strict=strict)
        for i, m in enumerate(conversation.messages):
            for call in m.tool_calls or ():
                self._check_call(i, call, strict=strict)

    def _check_call(self, index: int, call: ToolCall, *, strict: bool) -> None:
        if call.raw is not None:
            return  # the model's own text, which parsed: it reads back
        args = call.arguments_dict()
        if call.name in QUERY_TOOLS or call.name == CODE_INTERPRETER:
            problem = builtin_problem(call.name, args, 1, strict=strict)
            if problem is not None:
                raise ValidationError(
                    f"built-in tool {call.name!r} {problem}", index=index, rule="builtin-tool-call"
                )
            return
        if not strict:
            return
        if not call.name.isidentifier():
            raise ValidationError(
                f"Llama 4 writes a call as name(...); {call.name!r} is not a Python name, so "
                "the call would not read back; rename the function",
                index=index,
                rule="tool-call-name",
            )
        for key, value in args.items():
            if not is_argument_name(key):
                raise ValidationError(
                    f"Llama 4 writes arguments as name=value; {key!r} of {call.name!r} is not "
                    "a Python name, so the call would not read back; rename the parameter",
                    index=index,
                    rule="tool-call-arguments",
                )
            try:
                python_value(value)
            except ValueError as exc:
                raise ValidationError(
                    f"argument {key!r} of {call.name!r}: {exc}",
                    index=index,
                    rule="tool-call-arguments",
                ) from None

    # ==== Rendering ====

    assistant_header = _header("assistant")

    def _write_tools(
        self, b: BlockBuilder, tools: Sequence[Tool], system: str | None, start: int
    ) -> None:
        listing = json.dumps([t.function for t in tools], indent=4, ensure_ascii=False)
        text = TOOLS_HEAD + listing + TOOLS_TAIL
        if system is not None:
            text = system + "\n\n" + text
        b.add(Block((*_header("system"), Text(text), Control(EOT)), tuple(range(start))))

    def _message(self, m: Message) -> tuple[Segment, ...]:
        segments = list(_header(_ROLES[m.role]))
        calls = m.tool_calls or ()
        # The reference encodes the content and each call apart: one Text each.
        segments += [Text(t) for t in (m.text, *map(call_text, calls)) if t]
        end = EOM if calls or _ROLES[m.role] == "ipython" else EOT
        segments.append(Control(end))
        return tuple(segments)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """The opening of a call list, up to the arguments if named."""
        return (Text("[" if name is None else f"[{name}("),)

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """A list of calls of declared tools with literal keyword arguments (or one call);
        when lazy, switched on by a reply that starts as a call list."""
        c = CallRules(tools)
        call = c.any_call(lambda t: f'{literal(t.name + "(")} {c.keyword_arguments(t)} ")"')
        items = c.many(call, single=single, sep='","')
        listed = f'"[" {c.ws} {items} {c.ws} "]"'
        root = c.rules.add("calls", listed if single else f"{listed} ({c.ws} {listed})*")
        if required:
            return c.grammar(root)
        return c.grammar(root, triggers=(Trigger("pattern_full", _CALL_START),))

    # ==== Parsing ====

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> PythonicCallsParser:
        """A fresh parser; ``id_factory`` makes tool call ids (deterministic ones in tests)."""
        return PythonicCallsParser(id_factory=id_factory, stop_controls=self.stop_controls)
