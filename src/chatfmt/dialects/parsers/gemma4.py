"""Gemma 4's tool calls: ``<|tool_call>call:NAME{…}<tool_call|>`` in its own value notation.

The model writes each call as::

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

The arguments are not JSON: keys are bare, in sorted order; a string is quoted by the
``<|"|>`` token on both sides and holds anything but that token; ``true`` and ``false`` are
booleans; numbers are written as Python prints them; a null is ``None``; objects and lists
nest with ``{k:v,…}`` and ``[v,…]``. :func:`format_value` writes a value as the template does
and :func:`read_value` reads one back (never evaluated). A bare word that is not a number,
boolean or null is a string; with a tool's schema (:meth:`~chatfmt.dialects.gemma4.Gemma4.
with_tools`) a bare value where the schema wants a string stays the string written.

Arguments stream as JSON, one :class:`~chatfmt.events.ToolCallDelta` per top-level
``key:value`` as it closes (``{"city": "Paris"`` then ``, "days": 3``), and the closing ``}``
ends the object, so a call is complete when its argument object closes (``calls.py``'s
cut-off rule). A call the output ended inside, whose notation broke, or that ``<tool_call|>``
or another call interrupted, is incomplete, with the members that closed before.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ...events import Event, Finish
from ...jsonscan import WS
from ...markup import held_suffix
from ..base import StreamParser, finish_reason_for
from .calls import MAX_NAME, CallStream, cut_problem
from .turn import StepOutput
from .values import Schemas, json_text, schema_types

QUOTE = '<|"|>'
CALL = "<|tool_call>"
CALL_END = "<tool_call|>"
#: What follows ``<|tool_call>`` before the tool's name.
CALL_HEAD = "call:"
#: Characters a tool name or a bare key cannot hold: they are the notation's own.
NAME_BREAKERS = frozenset("{}[],:<>\n")

_INTEGER = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"-?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?")
_BARE = re.compile(r"[^,{}\[\]<:]*")
_MARKERS = (QUOTE, CALL_END, CALL)
_LONGEST = max(map(len, _MARKERS))

# Parser modes: text; a call's head (``call:NAME{``); its arguments; after its closing
# ``}`` (``<tool_call|>`` next); the rest of a broken call.
_TEXT, _HEAD, _ARGS, _AFTER, _SKIP = range(5)


# ==== The notation ====


def sorted_items(mapping: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A mapping's items in the template's order (``dictsort``: keys without case)."""
    return sorted(mapping.items(), key=lambda kv: kv[0].lower())


#: A piece of rendered notation: text, or ``None`` for the ``<|"|>`` token (a renderer writes it
#: as a control token, and any ``<|"|>`` inside caller text stays text).
Part = str | None


def format_parts(value: Any, *, quote_keys: bool = False) -> list[Part]:
    """``value`` as the template writes it, as :data:`Part` s (``quote_keys``: keys in
    ``<|"|>`` too, as in tool declarations)."""
    if isinstance(value, str):
        return [None, value, None]
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, Mapping):
        out: list[Part] = ["{"]
        for n, (k, v) in enumerate(sorted_items(value)):
            out += ([","] if n else []) + ([None, k, None] if quote_keys else [k]) + [":"]
            out += format_parts(v, quote_keys=quote_keys)
        return [*out, "}"]
    if isinstance(value, (list, tuple)):
        out = ["["]
        for n, v in enumerate(value):
            out += ([","] if n else []) + format_parts(v, quote_keys=quote_keys)
        return [*out, "]"]
    return [str(value)]  # numbers as Python prints them, None as "None" (the template's str)


def join_parts(parts: Sequence[Part]) -> str:
    """Rendered parts as text, the quote token written out."""
    return "".join(QUOTE if p is None else p for p in parts)


def format_value(value: Any, *, quote_keys: bool = False) -> str:
    """``value`` as the template writes it, as text."""
    return join_parts(format_parts(value, quote_keys=quote_keys))


def call_parts(name: str, arguments: Mapping[str, Any]) -> list[Part]:
    """A call's ``call:NAME{…}`` (between ``<|tool_call>`` and ``<tool_call|>``): keys sorted
    and bare, values in the notation."""
    out: list[Part] = [f"{CALL_HEAD}{name}{{"]
    for n, (k, v) in enumerate(sorted_items(arguments)):
        out += [("," if n else "") + k + ":", *format_parts(v)]
    return [*out, "}"]


def render_call(name: str, arguments: Mapping[str, Any]) -> str:
    """One call as the template writes it, as text."""
    return CALL + join_parts(call_parts(name, arguments)) + CALL_END


class NotationError(ValueError):
    """Text that is not a value of the notation."""


def read_value(text: str, schema: Any = None) -> Any:
    """One value of the notation as the JSON value it stands for (typed by ``schema`` where a
    bare value is ambiguous); :class:`NotationError` when ``text`` is not one."""
    reader = _Reader(text)
    value = reader.value(schema)
    reader.end()
    return value


def read_member(text: str, properties: Any = None) -> tuple[str, Any]:
    """One ``key:value`` member (the key bare or quoted), the value typed by
    ``properties[key]``."""
    reader = _Reader(text)
    member = reader.member(properties)
    reader.end()
    return member


def _bare(token: str, schema: Any) -> Any:
    """A bare word: a boolean, null, number, or else the string it spells; a schema that
    wants a string (and not the type the word reads as) keeps it as written."""
    value: Any
    if token in ("true", "false"):
        value, kind = token == "true", "boolean"
    elif token in ("None", "null"):
        value, kind = None, "null"
    elif _INTEGER.fullmatch(token):
        value, kind = int(token), "integer"
    elif _FLOAT.fullmatch(token) and math.isfinite(float(token)):
        value, kind = float(token), "number"
    else:
        return token
    types = schema_types(schema)
    if types is not None and "string" in types and kind not in types:
        if not (kind == "integer" and "number" in types):
            return token
    return value


class _Reader:
    """A recursive reader of the notation over one complete text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in WS:
            self.pos += 1

    def _peek(self, s: str) -> bool:
        self._ws()
        return self.text.startswith(s, self.pos)

    def _expect(self, s: str) -> None:
        if not self._peek(s):
            raise NotationError(f"expected {s!r} at {self.pos}")
        self.pos += len(s)

    def end(self) -> None:
        self._ws()
        if self.pos != len(self.text):
            raise NotationError(f"unexpected text at {self.pos}")

    def _quoted(self) -> str:
        start = self.pos + len(QUOTE)
        end = self.text.find(QUOTE, start)
        if end < 0:
            raise NotationError("unterminated string")
        self.pos = end + len(QUOTE)
        return self.text[start:end]

    def value(self, schema: Any) -> Any:
        if self._peek(QUOTE):
            return self._quoted()
        if self._peek("{"):
            self.pos += 1
            props = schema.get("properties") if isinstance(schema, Mapping) else None
            out: dict[str, Any] = {}
            if self._peek("}"):
                self.pos += 1
                return out
            while True:
                key, item = self.member(props)
                out[key] = item
                if self._peek(","):
                    self.pos += 1
                    continue
                self._expect("}")
                return out
        if self._peek("["):
            self.pos += 1
            items = schema.get("items") if isinstance(schema, Mapping) else None
            values: list[Any] = []
            if self._peek("]"):
                self.pos += 1
                return values
            while True:
                values.append(self.value(items))
                if self._peek(","):
                    self.pos += 1
                    continue
                self._expect("]")
                return values
        m = _BARE.match(self.text, self.pos)
        token = m.group().strip(WS) if m else ""
        if not token:
            raise NotationError(f"expected a value at {self.pos}")
        self.pos = m.end() if m else self.pos
        return _bare(token, schema)

    def member(self, properties: Any) -> tuple[str, Any]:
        if self._peek(QUOTE):
            key = self._quoted()
        else:
            m = _BARE.match(self.text, self.pos)
            key = m.group().strip(WS) if m else ""
            if not key:
                raise NotationError(f"expected a key at {self.pos}")
            self.pos = m.end() if m else self.pos
        self._expect(":")
        schema = properties.get(key) if isinstance(properties, Mapping) else None
        return key, self.value(schema)


# ==== The parser ====


class Gemma4CallParser(StepOutput, StreamParser):
    """Incremental parser of one Gemma 4 answer: text and ``<|tool_call>`` calls.

    ``schemas`` (tool name → its parameters' ``properties``) types bare values. The call tags
    and the string quote parse the same as control tokens or as text. A ``<|tool_call>`` not
    followed by ``call:NAME{`` stays text, with a warning; once a call is named, what goes
    wrong ends it incomplete, never as text. Decisions depend only on the characters seen,
    never on their chunking.
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
        self._hold = ""  # undecided text: a possible marker start, a head not yet closed
        self._raw: list[str] = []  # exact text of the current call
        self._pair: list[str] = []  # the top-level member being read
        self._depth = 0  # nesting inside the argument object
        self._in_string = False
        self._keys: dict[str, None] = {}
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls = CallStream(self._new_id, self._emit, self._warnings, raw_in_calls=False)

    # ==== Public interface ====

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        hold, self._hold = self._hold, ""
        mode = self._mode
        if mode == _TEXT:
            self._out(hold)
        elif mode == _HEAD:
            self._warnings.append(f"an unterminated {CALL} was kept as text")
            self._out(CALL + hold)
        else:
            self._raw.append(hold)
            if mode == _ARGS:
                self._calls.cut(cut_problem(reason))
            self._record()
        self._events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        return self._drain()

    # ==== Modes ====

    def _step(self, text: str) -> str:
        buf = self._hold + text
        self._hold = ""
        if self._mode == _TEXT:
            return self._on_text(buf)
        if self._mode == _HEAD:
            return self._on_head(buf)
        if self._mode == _ARGS:
            return self._on_args(buf)
        if self._mode == _AFTER:
            return self._on_after(buf)
        return self._on_skip(buf)

    def _on_text(self, buf: str) -> str:
        i = buf.find(CALL)
        if i < 0:
            keep = held_suffix(buf, (CALL,))
            self._out(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        self._out(buf[:i])
        self._mode = _HEAD
        return buf[i + len(CALL) :]

    def _on_head(self, buf: str) -> str:
        """``call:NAME{`` after ``<|tool_call>``: the call is announced at its ``{``."""
        j = buf.find("{")
        head = buf[:j] if j >= 0 else buf
        name = head[len(CALL_HEAD) :] if head.startswith(CALL_HEAD) else ""
        fits = head.startswith(CALL_HEAD) or CALL_HEAD.startswith(head)
        bad = not fits or any(c in NAME_BREAKERS for c in name) or len(name) > MAX_NAME
        if not bad and j < 0:
            self._hold = buf
            return ""
        if bad or not name.strip(WS):
            self._warnings.append(f"{CALL} is not followed by {CALL_HEAD}NAME{{; kept as text")
            self._out(CALL)
            self._mode = _TEXT
            return buf
        self._calls.start(name.strip(WS))
        self._raw = [CALL, buf[: j + 1]]
        self._pair, self._depth, self._in_string, self._keys = [], 0, False, {}
        self._mode = _ARGS
        return buf[j + 1 :]

    def _on_args(self, buf: str) -> str:
        """Inside the argument object: members close at a top-level ``,`` or ``}``."""
        i = 0
        n = len(buf)
        while i < n:
            if self._in_string:
                k = buf.find(QUOTE, i)
                if k < 0:
                    keep = held_suffix(buf[i:], (QUOTE,))
                    self._take(buf[i : n - keep])
                    self._hold = buf[n - keep :]
                    return ""
                self._take(buf[i : k + len(QUOTE)])
                self._in_string = False
                i = k + len(QUOTE)
                continue
            c = buf[i]
            if c == "<":
                # Matched in place: slicing the rest of the buffer at every "<" is quadratic.
                if buf.startswith(QUOTE, i):
                    self._take(QUOTE)
                    self._in_string = True
                    i += len(QUOTE)
                    continue
                if buf.startswith(CALL_END, i) or buf.startswith(CALL, i):
                    # The call ended, or another began, before its arguments closed.
                    self._calls.cut("has no closing '}'")
                    if buf.startswith(CALL_END, i):
                        self._raw.append(CALL_END)
                        i += len(CALL_END)
                    self._record()
                    self._mode = _TEXT
                    return buf[i:]
                if n - i < _LONGEST and any(m.startswith(buf[i:]) for m in _MARKERS):
                    self._hold = buf[i:]  # a marker split across chunks
                    return ""
            elif c in "{[":
                self._depth += 1
            elif c in "}]":
                if self._depth == 0:
                    self._raw.append(c)
                    if c == "]":
                        self._broken("has malformed arguments (an unmatched ']')")
                        return buf[i + 1 :]
                    if not self._member(closing=True):
                        return buf[i + 1 :]
                    self._calls.stream("}" if self._keys else "{}")
                    self._calls.end()
                    self._mode = _AFTER
                    return buf[i + 1 :]
                self._depth -= 1
            elif c == "," and self._depth == 0:
                self._raw.append(c)
                if not self._member(closing=False):
                    return buf[i + 1 :]
                i += 1
                continue
            self._take(c)
            i += 1
        return ""

    def _take(self, text: str) -> None:
        self._pair.append(text)
        self._raw.append(text)

    def _member(self, *, closing: bool) -> bool:
        """The top-level member read so far is over: stream it as JSON. False (and the call
        broken) when it is not a member."""
        text = "".join(self._pair)
        self._pair = []
        if closing and not self._keys and not text.strip(WS):
            return True  # no arguments: {}
        call = self._calls.open
        assert call is not None
        props = self._schemas.get(call.name) if self._schemas is not None else None
        try:
            key, value = read_member(text, props)
        except (NotationError, RecursionError) as exc:
            self._broken(f"has malformed arguments ({exc})")
            return False
        if key in self._keys:
            # Its arguments would hold the key twice ({"a": 1, "a": 2}), which strict JSON
            # readers reject and lenient ones read either way: not a call a client may run.
            self._broken(f"repeats argument {key!r}")
            return False
        lead = ", " if self._keys else "{"
        self._keys[key] = None
        self._calls.stream(f"{lead}{json_text(key)}: {json_text(value)}")
        return True

    def _broken(self, problem: str) -> None:
        self._calls.cut(problem)
        self._mode = _SKIP

    def _on_after(self, buf: str) -> str:
        """After the argument object: ``<tool_call|>`` closes the call's text."""
        if buf.startswith(CALL_END):
            self._raw.append(CALL_END)
            self._record()
            self._mode = _TEXT
            return buf[len(CALL_END) :]
        if CALL_END.startswith(buf):
            self._hold = buf
            return ""
        call = self._calls.open
        assert call is not None
        self._warnings.append(f"tool call {call.index} has no {CALL_END}")
        self._record()
        self._mode = _TEXT
        return buf

    def _on_skip(self, buf: str) -> str:
        """The rest of a broken call, up to its ``<tool_call|>`` (or the next call)."""
        found = [(k, m) for m in (CALL_END, CALL) if (k := buf.find(m)) >= 0]
        if not found:
            keep = held_suffix(buf, (CALL_END, CALL))
            self._raw.append(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        k, marker = min(found)
        end = k + len(marker) if marker == CALL_END else k
        self._raw.append(buf[:end])
        self._record()
        self._mode = _TEXT
        return buf[end:]

    def _record(self) -> None:
        if self._calls.open is not None:
            self._calls.record("".join(self._raw))
        self._raw = []


__all__ = [
    "CALL",
    "CALL_END",
    "CALL_HEAD",
    "NAME_BREAKERS",
    "QUOTE",
    "Gemma4CallParser",
    "NotationError",
    "Part",
    "call_parts",
    "format_parts",
    "format_value",
    "join_parts",
    "read_member",
    "read_value",
    "render_call",
    "sorted_items",
]
