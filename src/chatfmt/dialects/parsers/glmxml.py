"""GLM-4.5+ tool calls: ``<tool_call>name`` with ``<arg_key>`` / ``<arg_value>`` pairs.

GLM-4.5 and 4.6 write each call on lines of its own, GLM-4.7 writes it compact::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

    <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>

One parser reads both: whitespace between the elements of a call is layout. A value is raw
text (the templates write a string as it is and anything else as JSON), typed by the tool's
schema when the parser has it (:func:`~.values.typed_value`, shared with Qwen3-Coder's XML
calls). Arguments stream as JSON, one :class:`~chatfmt.events.ToolCallDelta` per value once its
``</arg_value>`` arrives, and ``</tool_call>`` closes the object: a call is complete there, and
one the output ended inside is incomplete (``calls.py``'s cut-off rule).

The text around calls is the message's content, which the templates write stripped
(``content.strip()``): whitespace at its start and end is layout, not content.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ...errors import SchemaError
from ...events import Event, Finish, ParseResult, TextDelta
from ...grammar import CallRules, Grammar, ToolLike, Trigger
from ...grammar.gbnf import literal
from ...markup import held_suffix
from ..base import StreamParser, finish_reason_for, single_message_result
from .calls import CallStream, cut_problem
from .deepseek import valid_name
from .values import Schemas, json_text, parameter_schema, render_value, typed_value
from .xmlcalls import MAX_NAME, value_rule

TOOL_CALL = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
ARG_KEY = "<arg_key>"
ARG_KEY_END = "</arg_key>"
ARG_VALUE = "<arg_value>"
ARG_VALUE_END = "</arg_value>"
#: The tags of a call: control tokens of the GLM-4.5+ vocabulary.
CALL_TAGS = (TOOL_CALL, TOOL_CALL_END, ARG_KEY, ARG_KEY_END, ARG_VALUE, ARG_VALUE_END)

# Parser modes: text; a call's name; between its arguments; a key; after a key (its value
# next); a value; a broken call, skipped to its end.
_TEXT, _NAME, _BODY, _KEY, _AFTER_KEY, _VALUE, _SKIP = range(7)


class GLMCallParser(StreamParser):
    """Incremental parser of one GLM-4.5+ answer: text, then calls.

    ``schemas`` (tool name → its parameters' ``properties``) types the values. The tags parse
    the same as control tokens or as text. ``<tool_call>`` not followed by a name and then
    ``<arg_key>`` or ``</tool_call>`` stays text, with a warning; once a call is named, what
    goes wrong ends it incomplete, never as text. Decisions depend only on the characters
    seen, never on their chunking; only a suffix shorter than a tag is held back, except a
    name (up to :data:`~.xmlcalls.MAX_NAME` characters) and a value, typed when it closes.
    """

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (),
        schemas: Schemas | None = None,
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._schemas = schemas
        self._mode = _TEXT
        self._hold = ""  # undecided text: a possible tag start, a name not yet ended
        self._started = False  # the content has had a character that is not whitespace
        # Trailing whitespace of the content so far, kept only if text follows: pieces joined
        # once, so a model stuck on spaces costs linear time, not quadratic.
        self._ws: list[str] = []
        self._raw: list[str] = []  # exact text of the current call
        self._junk = False  # this call already has a warning for stray text
        self._keys: set[str] = set()  # the open call's keys so far
        self._key = ""
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
        elif mode == _NAME:
            self._raw.append(hold)
            self._degrade("an unterminated tool call was kept as text")
        else:
            self._raw.append(hold)
            if mode != _SKIP:
                self._calls.cut(cut_problem(reason))
            self._record()
        self._ws = []  # trailing whitespace: the template strips it
        self._events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        out, self._events = self._events, []
        return out

    def result(self) -> ParseResult:
        calls = self._calls
        return single_message_result(
            self._content, calls.complete, self._finish, self._warnings, calls.incomplete
        )

    # ==== Text ====

    def _text(self, text: str) -> None:
        """Content: leading whitespace dropped, trailing whitespace held until text follows."""
        if not self._started:
            text = text.lstrip()
            if not text:
                return
            self._started = True
        body = text.rstrip()
        if not body:
            self._ws.append(text)
            return
        out = "".join(self._ws) + body
        self._ws = [text[len(body) :]]
        self._content.append(out)
        self._events.append(TextDelta(out))

    def _degrade(self, reason: str) -> None:
        """The candidate is not a call: its text is content; scanning goes on after it."""
        self._warnings.append(reason)
        raw, self._raw = "".join(self._raw), []
        self._mode = _TEXT
        self._text(raw)

    def _stray(self, text: str) -> None:
        """Text inside a call where none belongs: kept in its raw text, otherwise ignored
        (whitespace is the layout between a call's elements)."""
        if not text:
            return
        self._raw.append(text)
        if not self._junk and text.strip() and self._mode != _SKIP:
            self._junk = True
            self._warnings.append(f"text in tool call {self._calls.count - 1} was ignored")

    # ==== Modes ====

    def _step(self, text: str) -> str:
        """Consume some of ``text``; return what is left for the next mode."""
        buf = self._hold + text
        self._hold = ""
        mode = self._mode
        if mode == _TEXT:
            return self._on_text(buf)
        if mode == _NAME:
            return self._on_name(buf)
        if mode == _KEY:
            return self._on_key(buf)
        if mode == _VALUE:
            return self._on_value(buf)
        return self._on_tags(buf)  # _BODY, _AFTER_KEY, _SKIP

    def _on_text(self, buf: str) -> str:
        i = buf.find(TOOL_CALL)
        if i < 0:
            keep = held_suffix(buf, (TOOL_CALL,))
            self._text(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        self._text(buf[:i])
        self._raw = [TOOL_CALL]
        self._mode = _NAME
        return buf[i + len(TOOL_CALL) :]

    def _on_name(self, buf: str) -> str:
        """The tool's name: up to the first ``<``, which must open ``<arg_key>`` or
        ``</tool_call>`` (GLM-4.5/4.6 end the name with a newline first); a name with
        whitespace, quotes, angle brackets or backslashes is none (JSON in the tags is text)."""
        j = buf.find("<")
        name = buf if j < 0 else buf[:j]
        stripped = name.strip()
        # No character can make an invalid name valid: decided as soon as it is seen.
        bad = len(name) > MAX_NAME or (bool(stripped) and not valid_name(stripped))
        if not bad and j >= 0:
            rest = buf[j:]
            if not rest.startswith((ARG_KEY, TOOL_CALL_END)):
                if ARG_KEY.startswith(rest) or TOOL_CALL_END.startswith(rest):
                    self._hold = buf  # a tag split across chunks
                    return ""
                bad = True
        if bad or (j >= 0 and not stripped):
            self._degrade(f"{TOOL_CALL} is not followed by a tool name; kept as text")
            return buf
        if j < 0:
            self._hold = buf
            return ""
        self._raw.append(name)
        self._calls.start(stripped)
        self._ws = []  # the whitespace before a call is layout
        self._keys = set()
        self._junk = False
        self._mode = _BODY
        return buf[j:]

    def _on_tags(self, buf: str) -> str:
        """Between a call's elements: ``<arg_key>`` or ``</tool_call>`` (after a key:
        ``<arg_value>``); in a broken call, its end."""
        mode = self._mode
        if mode == _SKIP:
            markers: tuple[str, ...] = (TOOL_CALL_END, TOOL_CALL)
        elif mode == _BODY:
            markers = (ARG_KEY, TOOL_CALL_END, TOOL_CALL)
        else:
            markers = (ARG_VALUE, ARG_KEY, TOOL_CALL_END, TOOL_CALL)
        found = [(i, m) for m in markers if (i := buf.find(m)) >= 0]
        if not found:
            keep = held_suffix(buf, markers)
            self._stray(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        i, marker = min(found)
        self._stray(buf[:i])
        rest = buf[i + len(marker) :]
        if marker == ARG_KEY and mode == _BODY:
            self._raw.append(marker)
            self._mode = _KEY
            return rest
        if marker == ARG_VALUE:
            self._raw.append(marker)
            self._value = []
            self._mode = _VALUE
            return rest
        if mode == _AFTER_KEY:
            self._calls.cut(f"has argument key {self._key!r} without a value")
            self._mode = _SKIP
            return buf[i:]
        if marker == TOOL_CALL_END:
            self._raw.append(marker)
            if mode == _BODY:
                self._calls.stream("}" if self._keys else "{}")
                self._calls.end()
            self._record()
            return rest
        # A new call before this one's end.
        if mode == _BODY:
            self._calls.cut(f"has no {TOOL_CALL_END}")
        self._record()
        return buf[i:]

    def _on_key(self, buf: str) -> str:
        k = buf.find(ARG_KEY_END)
        key = buf if k < 0 else buf[:k]
        if "\n" in key or "<" in key or len(key) > MAX_NAME or (k >= 0 and not key):
            self._calls.cut("has a malformed argument key")
            self._mode = _SKIP
            return buf
        if k < 0:
            self._hold = buf
            return ""
        self._raw.append(buf[: k + len(ARG_KEY_END)])
        self._key = key
        self._mode = _AFTER_KEY
        return buf[k + len(ARG_KEY_END) :]

    def _on_value(self, buf: str) -> str:
        k = buf.find(ARG_VALUE_END)
        if k < 0:
            keep = held_suffix(buf, (ARG_VALUE_END,))
            self._value.append(buf[: len(buf) - keep])
            self._raw.append(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        self._value.append(buf[:k])
        self._raw.append(buf[: k + len(ARG_VALUE_END)])
        self._mode = _BODY
        self._value_closed()
        return buf[k + len(ARG_VALUE_END) :]

    # ==== Calls ====

    def _value_closed(self) -> None:
        value = "".join(self._value)
        self._value = []
        call = self._calls.open
        assert call is not None
        key = self._key
        schema = parameter_schema(self._schemas, call.name, key)
        if key in self._keys:
            # Its arguments would hold the key twice ({"a": 1, "a": 2}), which strict JSON
            # readers reject and lenient ones read either way: not a call a client may run.
            self._calls.cut(f"repeats argument {key!r}")
            self._mode = _SKIP
            return
        lead = ", " if self._keys else "{"
        self._keys.add(key)
        self._calls.stream(f"{lead}{json_text(key)}: {json_text(typed_value(value, schema))}")

    def _record(self) -> None:
        self._calls.record("".join(self._raw))
        self._raw = []
        self._mode = _TEXT


# ==== The call grammar ====

# A string value: any text without "</a" (so it cannot run past its closing tag).
_TEXT_VALUE = '([^<] | "<" [^/] | "</" [^a])*'
_ANY_KEY = "[^<\\n]+"


def glm_call_grammar(
    tools: Sequence[ToolLike], *, newlines: bool, required: bool = False, single: bool = False
) -> Grammar:
    """Calls of ``tools``: ``<tool_call>NAME`` and ``<arg_key>KEY</arg_key><arg_value>VALUE
    </arg_value>`` per argument, then ``</tool_call>``; ``newlines``: on lines of their own
    (GLM-4.5/4.6), else compact (GLM-4.7).

    Each declared argument comes in the schema's order, the required ones always; a string
    value is free text (one of its ``enum`` when it has one); an integer, number, object or
    array value follows its schema as JSON; a boolean is ``true``/``false``. A tool without
    declared parameters takes any. Lazy unless ``required``: the grammar starts at
    ``<tool_call>``."""
    c = CallRules(tools)
    nl = literal("\n") if newlines else ""
    text = c.rules.add("glm-text", _TEXT_VALUE)
    alts = []
    for tool in c.tools:
        params = tool.function.get("parameters")
        props = params.get("properties") if isinstance(params, Mapping) else None
        needed = params.get("required") if isinstance(params, Mapping) else None
        strict = tool.function.get("strict") is True
        parts = []
        for key, schema in props.items() if isinstance(props, Mapping) else ():
            try:
                value = value_rule(c, schema, text, strict, f"{tool.name}-{key}")
            except SchemaError as exc:
                raise exc.of(f"function {tool.name!r}") from None
            one = _argument(literal(key), value, nl)
            parts.append(one if isinstance(needed, list) and key in needed else f"({one})?")
        if not isinstance(props, Mapping) or not props:
            parts.append(f"({_argument(_ANY_KEY, text, nl)})*")
        head = f"{literal(TOOL_CALL + tool.name)} {nl}"
        body = " ".join([head, *parts, literal(TOOL_CALL_END)])
        alts.append(c.rules.add(f"glm-call-{tool.name}", body))
    call = c.rules.add("glm-call", " | ".join(alts))
    calls = c.many(call, single=single)
    if required and newlines:  # the template writes a newline before each call
        calls = f"{nl} {calls}"
    if required:
        return c.grammar(calls, preserved=CALL_TAGS)
    return c.grammar(calls, triggers=(Trigger("word", TOOL_CALL),), preserved=CALL_TAGS)


def _argument(key: str, value: str, nl: str) -> str:
    """One ``<arg_key>…</arg_key><arg_value>…</arg_value>`` pair (``nl`` after each tag)."""
    return (
        f"{literal(ARG_KEY)} {key} {literal(ARG_KEY_END)} {nl} "
        f"{literal(ARG_VALUE)} {value} {literal(ARG_VALUE_END)} {nl}"
    )


def glm_argument_text(value: Any) -> str:
    """A value as the GLM-4.5+ templates write it: a string as it is, anything else as JSON."""
    return render_value(value) if isinstance(value, str) else json_text(value)


__all__ = [
    "ARG_KEY",
    "ARG_KEY_END",
    "ARG_VALUE",
    "ARG_VALUE_END",
    "CALL_TAGS",
    "TOOL_CALL",
    "TOOL_CALL_END",
    "GLMCallParser",
    "glm_argument_text",
    "glm_call_grammar",
]
