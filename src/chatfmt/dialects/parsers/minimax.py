"""MiniMax-M2's tool calls: XML ``<invoke>`` elements in a ``<minimax:tool_call>`` block.

The model writes its calls after its text as one block::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    <invoke name="get_time">
    </invoke>
    </minimax:tool_call>

A parameter's value is raw text: the template writes a string as it is and any other value as
JSON, so a value gets its type from the tool's schema when the parser has it
(:func:`~.values.typed_value`, shared with Qwen3-Coder's XML calls). Arguments stream as
JSON, one :class:`~chatfmt.events.ToolCallDelta` per parameter as it closes, and
``</invoke>`` closes the object. A call is complete at ``</invoke>``; one the output ended
inside, or that a block end or another ``<invoke`` interrupted, is incomplete (``calls.py``'s
cut-off rule), with the parameters that closed before the cut.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ...events import Event, Finish, ParseResult, TextDelta
from ...jsonscan import WS
from ...markup import held_suffix
from ..base import StreamParser, finish_reason_for, single_message_result
from .calls import CallStream, cut_problem
from .values import Schemas, parameter_schema, typed_value
from .xmlcalls import MAX_NAME

BLOCK = "<minimax:tool_call>"
BLOCK_END = "</minimax:tool_call>"
INVOKE = '<invoke name="'
INVOKE_END = "</invoke>"
PARAMETER = '<parameter name="'
PARAMETER_END = "</parameter>"
#: What closes a name attribute.
NAME_END = '">'

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

# Parser modes: text; in a block between calls; a call's name; in a call between parameters;
# a parameter's name; its value; the rest of a broken call.
_TEXT, _BLOCK, _NAME, _BODY, _PNAME, _VALUE, _SKIP = range(7)


def json_value_text(value: Any) -> str:
    """``value`` as JSON (as the template's ``tojson`` writes it), lone surrogates escaped."""
    text = json.dumps(value, ensure_ascii=False)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def render_invoke(name: str, arguments: Mapping[str, Any]) -> str:
    """One call as the template writes it: strings as they are, other values as JSON."""
    params = "".join(
        f"{PARAMETER}{key}{NAME_END}{value if isinstance(value, str) else json_value_text(value)}"
        f"{PARAMETER_END}\n"
        for key, value in arguments.items()
    )
    text = f"{INVOKE}{name}{NAME_END}\n{params}{INVOKE_END}\n"
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class MiniMaxCallParser(StreamParser):
    """Incremental parser of one MiniMax-M2 answer: text, then a block of ``<invoke>`` calls.

    ``schemas`` (tool name → its parameters' ``properties``) types the values. The block tags
    parse the same as control tokens or as text. Whitespace before the block is layout, not
    content; so is whitespace after it unless text follows. A block whose first thing is not
    a named ``<invoke>`` stays text, with a warning; once a call is named, what goes wrong
    ends it incomplete, never as text. Decisions depend only on the characters seen, never
    on their chunking.
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
        self._hold = ""  # undecided text: a possible tag start, a name not yet closed
        # Trailing whitespace of the text so far, content only if text follows: pieces joined
        # once, so a model stuck on spaces costs linear time, not quadratic.
        self._ws: list[str] = []
        self._after_call = False  # the last thing written was a block of calls
        self._prefix: list[str] = []  # the whitespace before a candidate block, if not one
        self._pending: list[str] = []  # the block's text before its first call (for degrading)
        self._in_block = 0  # calls announced in the open block
        self._raw: list[str] = []  # exact text of the current call
        self._junk = False  # this call already has a warning for stray text
        self._params: dict[str, None] = {}
        self._pname = ""
        self._value: list[str] = []
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls = CallStream(self._new_id, self._emit, self._warnings, raw_in_calls=False)

    def _emit(self, event: Event) -> None:
        self._events.append(event)

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
        elif mode in (_BLOCK, _NAME) and not self._in_block:
            self._raw.append(hold)
            self._degrade("an unterminated tool call block was kept as text")
        elif mode == _NAME:
            self._warnings.append("an <invoke> without a tool name at the end was ignored")
        elif mode in (_BODY, _PNAME, _VALUE):
            self._raw.append(hold)
            self._calls.cut(cut_problem(reason))
            self._record()
        elif mode == _SKIP and self._calls.open is not None:
            self._raw.append(hold)
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
        """Visible text; its trailing whitespace is held until text follows."""
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
        """The block is not calls: its text (and the whitespace before it) is content; the
        caller goes on scanning what follows as text."""
        self._warnings.append(reason)
        self._ws = self._prefix + self._ws
        self._prefix = []
        raw = "".join(self._pending) + "".join(self._raw)
        self._pending, self._raw = [], []
        self._mode = _TEXT
        self._text(raw)

    # ==== Modes ====

    def _step(self, text: str) -> str:
        buf = self._hold + text
        self._hold = ""
        mode = self._mode
        if mode == _TEXT:
            return self._on_text(buf)
        if mode == _BLOCK:
            return self._on_block(buf)
        if mode in (_NAME, _PNAME):
            return self._on_name(buf)
        if mode == _VALUE:
            return self._on_value(buf)
        return self._on_body(buf)  # _BODY, _SKIP

    def _on_text(self, buf: str) -> str:
        i = buf.find(BLOCK)
        if i < 0:
            keep = held_suffix(buf, (BLOCK,))
            self._text(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        self._text(buf[:i])
        self._prefix, self._ws = self._ws, []  # the layout before the block
        self._pending, self._raw, self._in_block = [BLOCK], [], 0
        self._mode = _BLOCK
        return buf[i + len(BLOCK) :]

    def _on_block(self, buf: str) -> str:
        """Between calls: the next ``<invoke name="``, or the block's end."""
        rest = buf.lstrip(WS)
        lead = buf[: len(buf) - len(rest)]
        if not self._in_block:
            self._pending.append(lead)
        if not rest:
            return ""
        if rest.startswith(INVOKE):
            self._raw = [INVOKE]
            self._mode = _NAME
            return rest[len(INVOKE) :]
        if rest.startswith(BLOCK_END):
            if not self._in_block:
                self._pending.append(BLOCK_END)
                self._degrade(f"{BLOCK} holds no call; kept as text")
            else:
                self._end_block()
            return rest[len(BLOCK_END) :]
        if rest.startswith(BLOCK) and self._in_block:
            self._warnings.append(f"a tool call block has no {BLOCK_END}")
            self._end_block()
            return rest
        if any(tag.startswith(rest) for tag in (INVOKE, BLOCK_END, BLOCK)):
            self._hold = rest
            return ""
        if not self._in_block:
            self._degrade(f'{BLOCK} is not followed by {INVOKE}name">; kept as text')
            return rest
        # Stray text between calls: ignored up to the next tag, with a warning.
        markers = (INVOKE, BLOCK_END, BLOCK)
        found = [i for m in markers if (i := rest.find(m)) >= 0]
        end = min(found) if found else len(rest) - held_suffix(rest, markers)
        if rest[:end].strip(WS) and not self._junk:
            self._junk = True
            self._warnings.append("text between tool calls was ignored")
        self._hold = "" if found else rest[end:]
        return rest[end:] if found else ""

    def _end_block(self) -> None:
        self._mode = _TEXT
        self._after_call = True
        self._pending = []

    def _on_name(self, buf: str) -> str:
        """A tool's name after ``<invoke name="``, or a parameter's after ``<parameter name="``."""
        j = buf.find('"')
        name = buf[:j] if j >= 0 else buf
        bad = any(c in name for c in "<>\n") or len(name) > MAX_NAME
        if not bad and (j < 0 or j + 1 == len(buf)):
            self._hold = buf  # the name, or its closing '>', is still coming
            return ""
        bad = bad or buf[j + 1] != ">" or not name.strip(WS)
        if self._mode == _NAME:
            if bad:
                if not self._in_block:
                    self._degrade(f"{BLOCK}{INVOKE} has no valid tool name; kept as text")
                    return buf
                self._warnings.append("an <invoke> without a valid tool name was ignored")
                self._raw = []
                self._mode = _SKIP
                return buf
            self._raw.append(buf[: j + 2])
            self._calls.start(name.strip(WS))
            self._in_block += 1
            self._pending, self._prefix = [], []
            self._params = {}
            self._junk = False
            self._mode = _BODY
            return buf[j + 2 :]
        if bad:
            self._calls.cut("has a malformed parameter name")
            self._mode = _SKIP
            return buf
        self._raw.append(buf[: j + 2])
        self._pname = name.strip(WS)
        self._value = []
        self._mode = _VALUE
        return buf[j + 2 :]

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
        """Inside a call (or the rest of a broken one): the next parameter, ``</invoke>``, or
        a tag that means the call was never closed."""
        skipping = self._mode == _SKIP
        markers = (INVOKE_END, BLOCK_END, INVOKE, BLOCK) + (() if skipping else (PARAMETER,))
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
            return rest
        if marker == INVOKE_END:
            self._raw.append(marker)
            if not skipping:
                self._calls.stream("}" if self._params else "{}")
                self._calls.end()
            self._record()
            self._mode = _BLOCK
            return rest
        # The block ended, or another call or block began, before this call closed.
        if not skipping:
            self._calls.cut(f"has no {INVOKE_END}")
        self._record()
        self._mode = _BLOCK
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
        typed = json_value_text(typed_value(value, schema))
        self._calls.stream(f"{lead}{json_value_text(name)}: {typed}")

    def _record(self) -> None:
        """The current call's text is over: keep it (an open call), or drop it (a skipped
        ``<invoke>`` that was never announced)."""
        if self._calls.open is not None:
            self._calls.record("".join(self._raw))
        self._raw = []


__all__ = [
    "BLOCK",
    "BLOCK_END",
    "INVOKE",
    "INVOKE_END",
    "NAME_END",
    "PARAMETER",
    "PARAMETER_END",
    "MiniMaxCallParser",
    "json_value_text",
    "render_invoke",
]
