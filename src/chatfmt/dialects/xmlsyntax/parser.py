"""The streaming parser of an :class:`~.spec.XMLSyntax`: text, then calls, values typed by schema.

One state machine for every XML-ish family; the tags it looks for come from the syntax. A
block opens at its tag (parsed the same as a control token or as text); what follows must be
a named call (``<function=NAME>``, ``<invoke name="NAME">``, or a bare ``NAME`` up to the next
tag), else the block stays text, with a warning. Once a call is named, what goes wrong ends
it incomplete (``calls.py``'s cut-off rule), never as text: a call the output ended inside, a
malformed or repeated argument, a block or call that opened before this one closed.

Arguments stream as JSON: each value, once its closing tag arrives, is one
:class:`~chatfmt.events.ToolCallDelta` (``{"city": "Paris"`` then ``, "n": 3``), typed by the
tool's schema (:func:`~..parsers.values.typed_value`), and the call's end closes the object.
Whitespace before a block is layout, not content; so is whitespace after one unless text
follows (or, for a syntax that ``trim`` s, all whitespace at the content's ends).

Decisions depend only on the characters seen, never on their chunking; only a suffix shorter
than a tag is held back, except a name (up to :data:`~.spec.MAX_NAME` characters) and a value,
typed when it closes. Each chunk costs time linear in its length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from ...events import Event, Finish, TextDelta
from ...markup import held_suffix
from ..base import StreamParser, finish_reason_for
from ..parsers.calls import CallStream, cut_problem
from ..parsers.turn import StepOutput
from ..parsers.values import Schemas, json_text, parameter_schema, typed_value
from .spec import MAX_NAME, XMLSyntax
from .tags import tags_of

# Parser modes: text; a block opened, before its first call's name tag; a call's name; in a
# call between its arguments; an argument's key; after a key, before its value's tag; a
# value; after a call's end tag, up to the block's end (one call per block); between the
# calls of a block (several per block); the rest of a broken call.
_TEXT, _OPENING, _NAME, _BODY, _KEY, _AFTER_KEY, _VALUE, _TAIL, _BETWEEN, _SKIP = range(10)


class XMLSyntaxParser(StepOutput, StreamParser):
    """Incremental parser of one assistant turn in ``syntax``.

    ``schemas`` (tool name → its parameters' ``properties``) types the values; without it, or
    for a tool or argument it lacks, :func:`~..parsers.values.typed_value`'s default applies.
    """

    # Slots: reads of a parser's own state stay fast however many it has (a dict's shared
    # keys slow down past about 30 attributes); the base class's few keep its dict.
    __slots__ = (
        "_after_block",
        "_calls",
        "_content",
        "_events",
        "_hold",
        "_in_block",
        "_junk",
        "_key",
        "_keys",
        "_lead",
        "_mode",
        "_names",
        "_open",
        "_open_only",
        "_params",
        "_raw",
        "_schemas",
        "_space",
        "_started",
        "_syntax",
        "_tags",
        "_value",
        "_value_close",
        "_ws",
    )

    def __init__(
        self,
        syntax: XMLSyntax,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (),
        schemas: Schemas | None = None,
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        s = self._syntax = syntax
        self._space = syntax.space
        self._schemas = schemas
        self._mode = _TEXT
        self._hold = ""  # undecided text: a possible tag start, a name not yet closed
        # Trailing whitespace of the text so far, content only if text follows: kept as pieces
        # joined once, so a model stuck on spaces costs linear time, not quadratic.
        self._ws: list[str] = []
        # Whether the content has begun: with ``trim``, at its first character that is not
        # whitespace; else at once (the one test the hot path makes).
        self._started = not syntax.trim
        # How much content there was when the last block of calls ended: none since means
        # the whitespace after it is layout (kept as a count, so text costs no bookkeeping).
        self._after_block = -1
        self._lead: list[str] = []  # a block's text before its first call (several per block)
        self._in_block = 0  # calls named in the open block
        self._raw: list[str] = []  # exact text of the current call (of its block, if one)
        self._junk = False  # this call already has a warning for stray text
        self._params: dict[str, None] = {}  # the open call's arguments so far
        self._key = ""
        self._value: list[str] = []
        self._events: list[Event] = []
        self._content: list[str] = []
        # A block of several calls cannot be re-rendered call by call from its text.
        self._calls = CallStream(self._new_id, self._emit, self._warnings, raw_in_calls=not s.many)
        # The tags each mode looks for. Few attributes of its own keep a parser's attribute
        # reads fast (CPython shares the keys of at most 30 per class); the hot paths read
        # only these, no spec attributes.
        self._tags = tags_of(syntax)
        self._open, self._open_only, self._value_close = (
            s.block_open,
            (s.block_open,),
            s.value_close,
        )
        self._names, self._keys = self._tags.name, self._tags.key

    # ==== Public interface ====

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        mode, hold = self._mode, self._hold
        self._hold = ""
        if mode == _TEXT:
            self._text(hold)
        elif mode == _OPENING or (mode == _NAME and not self._in_block):
            self._raw.append(hold)
            what = "tool call block" if self._syntax.many else "tool call"
            self._degrade(f"an unterminated {what} was kept as text")
        elif mode == _NAME:
            self._warnings.append(
                f"an {self._tags.element} without a tool name at the end was ignored"
            )
        elif mode != _BETWEEN:
            self._raw.append(hold)
            if mode in (_BODY, _KEY, _AFTER_KEY, _VALUE):
                self._calls.cut(cut_problem(reason))
            self._record()
        if not (self._syntax.trim or self._after_block == len(self._content)):
            self._out("".join(self._ws))
        self._ws = []
        self._events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        return self._drain()

    # ==== Text ====

    def _text(self, text: str) -> None:
        """Visible text; its trailing whitespace is held until text follows (before a block,
        and after the last one, it is layout); with ``trim``, leading whitespace too. (Empty
        text needs no test of its own: it joins the held whitespace.)"""
        if not self._started:
            text = text.lstrip(self._space)
            if not text:
                return
            self._started = True
        body = text.rstrip(self._space)
        if not body:
            self._ws.append(text)
            return
        out = "".join(self._ws) + body  # not empty: _out's test is not needed (hot path)
        self._ws = [text[len(body) :]]
        self._content.append(out)
        self._events.append(TextDelta(out))

    def _degrade(self, reason: str) -> None:
        """The candidate block is not calls: its text is content; the caller goes on
        scanning what follows it as text."""
        self._warnings.append(reason)
        raw = "".join(self._lead) + "".join(self._raw)
        self._lead, self._raw = [], []
        self._mode = _TEXT
        self._text(raw)

    def _stray(self, text: str) -> None:
        """Text inside a call where none belongs: kept in its raw text, otherwise ignored."""
        if not text:
            return
        self._raw.append(text)
        if not self._junk and text.strip(self._space) and self._mode != _SKIP:
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
        if mode == _VALUE:
            return self._on_value(buf)
        if mode == _BODY or mode == _SKIP:
            return self._on_body(buf)
        if mode == _KEY:
            return self._on_key(buf)
        if mode == _AFTER_KEY:
            return self._on_after_key(buf)
        if mode == _NAME:
            return self._on_name(buf)
        if mode == _OPENING:
            return self._on_opening(buf)
        if mode == _TAIL:
            return self._on_tail(buf)
        return self._on_between(buf)

    def _find(self, buf: str, markers: tuple[str, ...]) -> tuple[int, str] | None:
        """The first of ``markers`` in ``buf``; with none, what may not be one is stray and
        the suffix that may start one is held."""
        found = [(i, m) for m in markers if (i := buf.find(m)) >= 0]
        if found:
            i, marker = min(found)
            self._stray(buf[:i])
            return i, marker
        keep = held_suffix(buf, markers)
        self._stray(buf[: len(buf) - keep])
        self._hold = buf[len(buf) - keep :]
        return None

    def _on_text(self, buf: str) -> str:
        i = buf.find(self._open)
        if i < 0:
            keep = held_suffix(buf, self._open_only)
            self._text(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        self._text(buf[:i])
        self._raw, self._in_block = [self._open], 0
        self._mode = _OPENING if self._syntax.name.open else _NAME
        return buf[i + len(self._open) :]

    def _on_opening(self, buf: str) -> str:
        """After a block's tag: whitespace, then its first call's name tag."""
        s = self._syntax
        rest = buf.lstrip(self._space)
        # Whitespace is taken as it comes, never held: only a partial tag is (bounded).
        self._raw.append(buf[: len(buf) - len(rest)])
        if not rest:
            return ""
        tag = s.name.open
        if rest.startswith(tag):
            if s.many:  # the call's own text starts here
                self._lead, self._raw = self._raw, [tag]
            else:
                self._raw.append(tag)
            self._mode = _NAME
            return rest[len(tag) :]
        if s.many and rest.startswith(s.block_close):
            self._raw.append(s.block_close)
            self._degrade(f"{s.block_open} holds no call; kept as text")
            return rest[len(s.block_close) :]
        if any(tag.startswith(rest) for tag in self._tags.opening):
            self._hold = rest
            return ""
        self._degrade(
            f"{s.block_open} is not followed by {s.name.open}name{s.name.close}; kept as text"
        )
        return rest

    def _on_between(self, buf: str) -> str:
        """Between the calls of a block: the next call, or the block's end."""
        s = self._syntax
        rest = buf.lstrip(self._space)
        if not rest:
            return ""
        if rest.startswith(s.name.open):
            self._raw = [s.name.open]
            self._mode = _NAME
            return rest[len(s.name.open) :]
        if rest.startswith(s.block_close):
            self._end_block()
            return rest[len(s.block_close) :]
        if rest.startswith(s.block_open):
            self._warnings.append(f"a tool call block has no {s.block_close}")
            self._end_block()
            return rest
        if any(tag.startswith(rest) for tag in self._tags.between):
            self._hold = rest
            return ""
        # Stray text between calls: ignored up to the next tag, with a warning.
        found = [i for m in self._tags.between if (i := rest.find(m)) >= 0]
        end = min(found) if found else len(rest) - held_suffix(rest, self._tags.between)
        if rest[:end].strip(self._space) and not self._junk:
            self._junk = True
            self._warnings.append("text between tool calls was ignored")
        self._hold = "" if found else rest[end:]
        return rest[end:] if found else ""

    def _on_name(self, buf: str) -> str:
        """A tool's name, after its tag (or, bare, right after the block's)."""
        s = self._syntax
        if not s.name.close:
            return self._on_bare_name(buf)
        read = self._names.read(buf)
        if read is None:
            self._hold = buf
            return ""
        name, n = read
        if name is None:
            if not self._in_block:
                self._degrade(f"{s.block_open}{s.name.open} has no valid tool name; kept as text")
                return buf
            self._warnings.append(f"an {self._tags.element} without a valid tool name was ignored")
            self._raw = []
            self._mode = _SKIP
            return buf
        self._raw.append(buf[:n])
        self._announce(name)
        return buf[n:]

    def _on_bare_name(self, buf: str) -> str:
        """A name written without tags: up to the first ``<``, which must open an argument's
        key or end the call; decided as soon as no character can make it valid."""
        names = self._names
        rule = names.rule
        j = buf.find("<")
        name = buf if j < 0 else buf[:j]
        stripped = name.strip(self._space) if rule.strip else name
        bad = len(name) > MAX_NAME or names.search(name) is not None
        bad = bad or (bool(stripped) and rule.valid is not None and not rule.valid(stripped))
        if not bad and j >= 0:
            rest = buf[j:]
            if not rest.startswith(self._tags.bare_next):
                if any(tag.startswith(rest) for tag in self._tags.bare_next):
                    self._hold = buf  # a tag split across chunks
                    return ""
                bad = True
        if bad or (j >= 0 and not stripped):
            self._degrade(f"{self._open} is not followed by a tool name; kept as text")
            return buf
        if j < 0:
            self._hold = buf
            return ""
        self._raw.append(name)
        self._announce(stripped)
        return buf[j:]

    def _announce(self, name: str) -> None:
        self._calls.start(name)
        self._in_block += 1
        self._lead = []
        self._ws = []  # the whitespace before a block of calls is layout
        self._params = {}
        self._junk = False
        self._mode = _BODY

    def _on_body(self, buf: str) -> str:
        """Inside a call (or the rest of a broken one): the next argument, the call's end, or
        a tag that means the call was never closed."""
        skipping = self._mode == _SKIP
        markers = self._tags.ends if skipping else self._tags.body
        found = [(i, m) for m in markers if (i := buf.find(m)) >= 0]
        if not found:
            keep = held_suffix(buf, markers)
            self._stray(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        i, marker = min(found)
        self._stray(buf[:i])
        rest = buf[i + len(marker) :]
        tags = self._tags
        if marker == tags.key_open:
            self._raw.append(marker)
            self._mode = _KEY
            return rest
        s = self._syntax
        if marker == tags.end:
            self._raw.append(marker)
            if not skipping:
                self._calls.stream("}" if self._params else "{}")
                self._calls.end()
            if s.many:
                self._record()
                self._mode = _BETWEEN
            elif s.call_close and not skipping:
                self._mode = _TAIL
            else:
                self._end_call_block()
            return rest
        # The block ended, or another call or block began, before this call closed.
        if not skipping:
            self._calls.cut(f"has no {tags.end}")
        if s.many:
            self._record()
            self._mode = _BETWEEN
            return buf[i:]
        if marker == s.block_close:
            self._raw.append(marker)
            self._end_call_block()
            return rest
        self._end_call_block()
        return buf[i:]

    def _on_tail(self, buf: str) -> str:
        """After a call's end tag (one call per block): up to the block's end."""
        s = self._syntax
        found = self._find(buf, self._tags.ends)
        if found is None:
            return ""
        i, marker = found
        if marker == s.block_close:
            self._raw.append(marker)
            self._end_call_block()
            return buf[i + len(marker) :]
        self._warnings.append(f"tool call {self._calls.count - 1} has no {s.block_close}")
        self._end_call_block()
        return buf[i:]

    def _on_key(self, buf: str) -> str:
        read = self._keys.read(buf)
        if read is None:
            self._hold = buf
            return ""
        key, n = read
        if key is None:
            self._calls.cut(f"has a malformed {self._syntax.words[1]}")
            self._mode = _SKIP
            return buf
        self._raw.append(buf[:n])
        self._key = key
        self._value = []
        self._mode = _AFTER_KEY if self._syntax.value_open else _VALUE
        return buf[n:]

    def _on_after_key(self, buf: str) -> str:
        """After a key: its value's tag."""
        s = self._syntax
        found = self._find(buf, self._tags.after_key)
        if found is None:
            return ""
        i, marker = found
        if marker == s.value_open:
            self._raw.append(marker)
            self._mode = _VALUE
            return buf[i + len(marker) :]
        self._calls.cut(f"has {s.words[1]} {self._key!r} without a value")
        self._mode = _SKIP
        return buf[i:]

    def _on_value(self, buf: str) -> str:
        close = self._value_close
        k = buf.find(close)
        if k < 0:
            keep = held_suffix(buf, (close,))
            self._value.append(buf[: len(buf) - keep])
            self._raw.append(buf[: len(buf) - keep])
            self._hold = buf[len(buf) - keep :]
            return ""
        self._value.append(buf[:k])
        self._raw.append(buf[: k + len(close)])
        self._mode = _BODY
        self._argument_closed()
        return buf[k + len(close) :]

    # ==== Calls ====

    def _argument_closed(self) -> None:
        s = self._syntax
        value = "".join(self._value)
        self._value = []
        before, after = s.pad  # the newlines the template writes around a bare value
        if before and value.startswith(before):
            value = value[len(before) :]
        if after and value.endswith(after):
            value = value[: -len(after)]
        call = self._calls.open
        assert call is not None
        key = self._key
        if key in self._params:
            # Its arguments would hold the key twice ({"a": 1, "a": 2}), which strict JSON
            # readers reject and lenient ones read either way: not a call a client may run.
            self._calls.cut(f"repeats {s.words[0]} {key!r}")
            self._mode = _SKIP
            return
        lead = ", " if self._params else "{"
        self._params[key] = None
        typed = typed_value(value, parameter_schema(self._schemas, call.name, key))
        self._calls.stream(f"{lead}{json_text(key)}: {json_text(typed)}")

    def _record(self) -> None:
        """The current call's text is over: keep it (an announced call), or drop it (a call
        skipped before it was named)."""
        if self._calls.open is not None:
            self._calls.record("".join(self._raw))
        self._raw = []

    def _end_call_block(self) -> None:
        """A block that held one call is over."""
        self._record()
        self._end_block()

    def _end_block(self) -> None:
        self._mode = _TEXT
        self._after_block = len(self._content)
        self._lead = []


__all__ = ["XMLSyntaxParser"]
