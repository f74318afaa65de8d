"""The XML tool-call parser: text plus calls written as ``<function=…>`` and ``<parameter=…>``.

Qwen3-Coder and Qwen3.5 write each call as::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A parameter's value is raw text (the templates write strings as they are, mappings and lists
as JSON and other scalars as Python writes them: ``True``, ``None``), so a value gets its type
from the tool's JSON schema when the parser has it (:func:`~.values.typed_value`). Arguments
stream as JSON: each parameter, once its ``</parameter>`` arrives, is one :class:`~chatfmt.events.
ToolCallDelta` (``{"city": "Paris"`` then ``, "n": 3``), and ``</function>`` closes the object,
so the deltas of a call concatenate to its arguments. A call is complete at ``</function>``;
one the output ended inside is incomplete (``calls.py``'s cut-off rule), with the parameters
that closed before the cut.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ...events import Event, Finish, ParseResult, TextDelta
from ...grammar import CallRules
from ...grammar.gbnf import literal
from ...grammar.schema import SchemaConverter
from ...jsonscan import WS
from ...markup import held_suffix
from ..base import StreamParser, finish_reason_for, single_message_result
from .calls import CallStream, cut_problem
from .values import Schemas, json_text, parameter_schema, schema_types, typed_value

FUNCTION = "<function="
FUNCTION_END = "</function>"
PARAMETER = "<parameter="
PARAMETER_END = "</parameter>"
#: A tool or parameter name longer than this, or one holding a newline or ``<``, is not one.
MAX_NAME = 256


# Parser modes.
_TEXT, _OPEN, _NAME, _BODY, _PNAME, _VALUE, _TAIL, _SKIP = range(8)


# ==== Grammars ====


def value_rule(c: CallRules, schema: Any, text: str, strict: bool, hint: str) -> str:
    """The GBNF of a parameter value that the templates write as raw text: ``text`` (the
    string rule) for a string, one of a string ``enum``, ``true``/``false`` in either spelling
    for a boolean, JSON of its schema for an integer, number, object or array."""
    enum = schema.get("enum") if isinstance(schema, Mapping) else None
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        # A string enum is written bare, as the template writes a string value.
        return c.rules.add(f"{hint}-enum", " | ".join(literal(v) for v in enum))
    if not isinstance(schema, Mapping) or "allOf" in schema or "$ref" in schema:
        # Combined or referenced schemas are left to the parser's typing: the converter
        # here sees only this property, not the tool's definitions its parts may name.
        return text
    types = schema_types(schema)
    if types is None or "string" in types or len(types) != 1:
        return text
    kind = types[0]
    if kind == "boolean":
        return c.rules.add("xml-boolean", '"true" | "false" | "True" | "False"')
    if kind in ("integer", "number", "object", "array"):
        return SchemaConverter(c.rules, schema, strict=strict).value(schema, hint)
    return text


# ==== The parser ====


class XMLCallParser(StreamParser):
    """Incremental parser of one assistant turn: text, then calls in ``open_tag`` … ``close_tag``
    holding one ``<function=name>`` with ``<parameter=key>`` values.

    ``schemas`` (tool name → its parameters' ``properties``) types the values; without it, or
    for a tool or parameter it lacks, :func:`typed_value`'s default applies. The tags parse
    the same as control tokens or as text. Whitespace before a call is the template's layout,
    not content; so is whitespace after a call unless text follows it. Anything that is not a
    call's opening (``<tool_call>`` not followed by ``<function=name>``) stays text, with a
    warning; once a call is named, what goes wrong ends it incomplete, never as text.

    Decisions depend only on the characters seen, never on their chunking; only a suffix
    shorter than a tag is held back, except a parameter's value, which is typed when it closes.
    """

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (),
        open_tag: str = "<tool_call>",
        close_tag: str = "</tool_call>",
        schemas: Schemas | None = None,
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._open = open_tag
        self._close = close_tag
        self._schemas = schemas
        self._mode = _TEXT
        self._hold = ""  # undecided text: a possible tag start, a name not yet closed
        # Trailing whitespace of the text so far, content only if text follows: kept as pieces
        # joined once, so a model stuck on spaces costs linear time, not quadratic.
        self._ws: list[str] = []
        self._after_call = False  # the last thing written was a call
        self._prefix: list[str] = []  # the whitespace before a candidate call, if it is not one
        self._raw: list[str] = []  # exact text of the current call
        self._junk = False  # this call already has a warning for stray text
        self._params: dict[str, None] = {}  # the open call's parameters so far
        self._pname = ""
        self._value: list[str] = []
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls = CallStream(self._new_id, self._emit, self._warnings)

    def _emit(self, event: Event) -> None:
        self._events.append(event)  # a method: the list is swapped after every feed

    # ==== Public interface ====

    def on_text(self, text: str) -> list[Event]:
        while text:
            text = self._step(text)
        out, self._events = self._events, []
        return out

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        mode, hold = self._mode, self._hold
        self._hold = ""
        if mode == _TEXT:
            self._text(hold)
        elif mode in (_OPEN, _NAME):
            self._raw.append(hold)
            self._degrade("an unterminated tool call was kept as text")
        else:
            self._raw.append(hold)
            if mode in (_BODY, _PNAME, _VALUE):
                self._calls.cut(cut_problem(reason))
            self._record()
        if not self._after_call:
            self._out("".join(self._ws))
        self._ws = []
        self._events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        out, self._events = self._events, []
        return out

    def result(self) -> ParseResult:
        calls = self._calls
        return single_message_result(
            self._content, calls.complete, self._finish, self._warnings, calls.incomplete
        )

    # ==== Text ====

    def _out(self, text: str) -> None:
        if text:
            self._content.append(text)
            self._events.append(TextDelta(text))

    def _text(self, text: str) -> None:
        """Visible text; its trailing whitespace is held until text follows (before a call,
        and after the last one, it is layout)."""
        if not text:
            return
        body = text.rstrip(WS)
        if not body:
            self._ws.append(text)
            return
        self._after_call = False
        self._out("".join(self._ws) + body)
        self._ws = [text[len(body) :]]

    def _degrade(self, reason: str) -> None:
        """The candidate is not a call: its text (and the whitespace before it) is content;
        the caller goes on scanning what follows it as text."""
        self._warnings.append(reason)
        self._ws = self._prefix + self._ws
        self._prefix = []
        raw, self._raw = "".join(self._raw), []
        self._mode = _TEXT
        self._text(raw)

    # ==== Modes ====

    def _step(self, text: str) -> str:
        """Consume some of ``text``; return what is left for the next mode."""
        buf = self._hold + text
        self._hold = ""
        mode = self._mode
        if mode == _TEXT:
            return self._on_text(buf)
        if mode == _OPEN:
            return self._on_open(buf)
        if mode == _NAME or mode == _PNAME:
            return self._on_name(buf)
        if mode == _VALUE:
            return self._on_value(buf)
        if mode == _BODY:
            return self._on_body(buf)
        return self._on_tail(buf)  # _TAIL, _SKIP

    def _on_text(self, buf: str) -> str:
        i = buf.find(self._open)
        if i < 0:
            keep = held_suffix(buf, (self._open,))
            self._text(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        self._text(buf[:i])
        self._prefix, self._ws = self._ws, []  # the layout before a call
        self._raw = [self._open]
        self._mode = _OPEN
        return buf[i + len(self._open) :]

    def _on_open(self, buf: str) -> str:
        rest = buf.lstrip(WS)
        # Whitespace is taken as it comes, never held: only a partial tag is (bounded).
        self._raw.append(buf[: len(buf) - len(rest)])
        if rest.startswith(FUNCTION):
            self._raw.append(FUNCTION)
            self._mode = _NAME
            return rest[len(FUNCTION) :]
        if FUNCTION.startswith(rest):
            self._hold = rest
            return ""
        self._degrade(f"{self._open} is not followed by {FUNCTION}name>; kept as text")
        return rest

    def _on_name(self, buf: str) -> str:
        """A tool's name after ``<function=``, or a parameter's after ``<parameter=``."""
        j = buf.find(">")
        name = buf[:j] if j >= 0 else buf
        bad = "\n" in name or "<" in name or len(name) > MAX_NAME
        if j < 0 and not bad:
            self._hold = buf
            return ""
        if self._mode == _NAME:
            if bad or not name.strip(WS):
                self._degrade(f"{self._open}{FUNCTION} has no valid tool name; kept as text")
                return buf
            self._raw.append(buf[: j + 1])
            self._calls.start(name.strip(WS))
            self._params = {}
            self._junk = False
            self._prefix = []
            self._mode = _BODY
            return buf[j + 1 :]
        if bad or not name.strip(WS):
            self._calls.cut("has a malformed parameter name")
            self._mode = _SKIP
            return buf
        self._raw.append(buf[: j + 1])
        self._pname = name.strip(WS)
        self._value = []
        self._mode = _VALUE
        return buf[j + 1 :]

    def _on_value(self, buf: str) -> str:
        k = buf.find(PARAMETER_END)
        if k < 0:
            keep = held_suffix(buf, (PARAMETER_END,))
            self._value.append(buf[: len(buf) - keep])
            self._raw.append(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        self._value.append(buf[:k])
        self._raw.append(buf[: k + len(PARAMETER_END)])
        self._mode = _BODY
        self._parameter_closed()
        return buf[k + len(PARAMETER_END) :]

    def _on_body(self, buf: str) -> str:
        """Between a call's parameters: the next ``<parameter=``, or ``</function>``."""
        markers = (PARAMETER, FUNCTION_END, self._close, self._open)
        found = [(i, m) for m in markers if (i := buf.find(m)) >= 0]
        if not found:
            keep = held_suffix(buf, markers)
            self._stray(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        i, marker = min(found)
        self._stray(buf[:i])
        rest = buf[i + len(marker) :]
        if marker == PARAMETER:
            self._raw.append(marker)
            self._mode = _PNAME
        elif marker == FUNCTION_END:
            self._raw.append(marker)
            self._calls.stream("}" if self._params else "{}")
            self._calls.end()
            self._mode = _TAIL
        else:
            self._calls.cut(f"has no {FUNCTION_END}")
            if marker == self._close:
                self._raw.append(marker)
                self._record()
            else:
                self._record()
                rest = buf[i:]
        return rest

    def _on_tail(self, buf: str) -> str:
        """After ``</function>`` (or a broken call): up to ``</tool_call>``."""
        markers = (self._close, self._open)
        found = [(i, m) for m in markers if (i := buf.find(m)) >= 0]
        if not found:
            keep = held_suffix(buf, markers)
            self._stray(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        i, marker = min(found)
        self._stray(buf[:i])
        if marker == self._close:
            self._raw.append(marker)
            self._record()
            return buf[i + len(marker) :]
        if self._mode == _TAIL:
            self._warnings.append(f"tool call {self._calls.count - 1} has no {self._close}")
        self._record()
        return buf[i:]

    def _stray(self, text: str) -> None:
        """Text inside a call where none belongs: kept in its raw text, otherwise ignored."""
        if not text:
            return
        self._raw.append(text)
        if not self._junk and text.strip(WS) and self._mode != _SKIP:
            self._junk = True
            self._warnings.append(f"text in tool call {self._calls.count - 1} was ignored")

    # ==== Calls ====

    def _parameter_closed(self) -> None:
        value = "".join(self._value)
        self._value = []
        # The template writes a newline after the opening tag and before the closing one.
        if value.startswith("\n"):
            value = value[1:]
        if value.endswith("\n"):
            value = value[:-1]
        call = self._calls.open
        assert call is not None
        name = self._pname
        schema = parameter_schema(self._schemas, call.name, name)
        if name in self._params:
            # Its arguments would hold the key twice ({"a": 1, "a": 2}), which strict JSON
            # readers reject and lenient ones read either way: not a call a client may run.
            self._calls.cut(f"repeats parameter {name!r}")
            self._mode = _SKIP
            return
        lead = ", " if self._params else "{"
        self._params[name] = None
        typed = json_text(typed_value(value, schema))
        self._calls.stream(f"{lead}{json_text(name)}: {typed}")

    def _record(self) -> None:
        self._calls.record("".join(self._raw))
        self._raw = []
        self._mode = _TEXT
        self._after_call = True


__all__ = [
    "FUNCTION",
    "FUNCTION_END",
    "PARAMETER",
    "PARAMETER_END",
    "XMLCallParser",
    "value_rule",
]
