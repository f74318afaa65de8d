"""DeepSeek V3.2's and V4's DSML calls: the parser of one turn's answer, and their grammar.

``text\n\n<｜DSML｜function_calls>`` (V4: ``tool_calls``), then per call
``<｜DSML｜invoke name="NAME">`` with one ``<｜DSML｜parameter name="K" string="true|false">V
</｜DSML｜parameter>`` per argument (a raw string, or a JSON value), ``</｜DSML｜invoke>``. The
markers are text around the ``｜DSML｜`` token, so this parser reads a character stream (control
tokens as their text) and holds back what may be the start of a marker. A call ends complete
only at ``</｜DSML｜invoke>`` (:mod:`.calls`); output that does not parse degrades to text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Literal

from ...events import Event, Finish
from ...grammar import Grammar, ToolLike, Trigger
from ...grammar.calls import CallRules
from ...grammar.gbnf import literal
from ...grammar.schema import SchemaConverter
from ...jsonscan import WS
from ...markup import held_suffix
from ..base import StreamParser, finish_reason_for
from .calls import MAX_NAME, CallStream, cut_problem
from .deepseek import DSML, valid_name
from .turn import TurnOutput

# ==== DSML (V3.2, V4) ====

_D_TEXT, _D_BLOCK, _D_NAME, _D_INVOKE, _D_KEY, _D_VALUE, _D_AFTER, _D_SKIP = range(8)


class DSMLCallsParser(TurnOutput, StreamParser):
    """One answer with DSML calls in a ``block`` (``function_calls``: V3.2; ``tool_calls``:
    V4). The blank line the format puts before the block is layout, not content."""

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (),
        block: str = "function_calls",
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._open = f"<{DSML}{block}>"
        self._close = f"</{DSML}{block}>"
        self._invoke = f'<{DSML}invoke name="'
        self._invoke_end = f"</{DSML}invoke>"
        self._param = f'<{DSML}parameter name="'
        self._param_end = f"</{DSML}parameter>"
        self._mode = _D_TEXT
        # Undecided text: a possible marker, a name or key not yet closed (bounded by
        # MAX_NAME). Trailing newlines of the text (the blank line before a block is layout)
        # are counted, not held: re-reading a growing buffer per chunk is quadratic.
        self._buf = ""
        self._newlines = 0
        self._raw: list[str] = []  # the block's text since its last call, kept for degrading
        self._key = ""
        self._string = True
        self._value: list[str] = []
        self._params = 0  # parameters of the open call so far
        self._keys: set[str] = set()  # their names
        self._kind_pending = False  # the string="…" attribute's value is still to come
        self._in_block = 0
        self._noted_skip = False
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls = CallStream(self._new_id, self._emit, self._warnings, raw_in_calls=False)

    # ==== Input ====

    def on_text(self, text: str) -> list[Event]:
        self._buf += text
        while self._buf and self._step():
            pass
        return self._drain()

    def _step(self) -> bool:
        """Consume what can be decided of the buffer; ``False``: wait for more."""
        mode, buf = self._mode, self._buf
        if mode == _D_TEXT:
            at = buf.find(self._open)
            if at < 0:
                keep = held_suffix(buf, (self._open,))
                # Trailing newlines are held too: the blank line before a block is layout.
                head = buf[: len(buf) - keep]
                body = head.rstrip("\n")
                if body:
                    self._out("\n" * self._newlines + body)
                    self._newlines = 0
                self._newlines += len(head) - len(body)
                self._buf = buf[len(head) :]
                return False
            before = "\n" * self._newlines + buf[:at]
            self._newlines = 0
            self._out(before[:-2] if before.endswith("\n\n") else before)
            self._mode, self._raw, self._in_block = _D_BLOCK, [self._open], 0
            self._buf = buf[at + len(self._open) :]
            return True
        if mode == _D_SKIP:
            if buf.strip(WS) and not self._noted_skip:
                self._noted_skip = True
                self._warnings.append("the output after the malformed call was ignored")
            self._buf = ""
            return False
        if mode == _D_VALUE:
            return self._on_value()
        if mode in (_D_NAME, _D_KEY):
            end = '">' if mode == _D_NAME else '" string="'
            at = buf.find(end)
            if (at if at >= 0 else len(buf)) > MAX_NAME:
                # Decided on the length alone, so any chunking decides alike.
                self._broken("a tool or parameter name that is too long")
                return True
            if at < 0:
                if "\n" in buf or "<" in buf:
                    self._broken("a malformed tag")
                return False
            self._raw.append(buf[: at + len(end)])
            self._buf = buf[at + len(end) :]
            if mode == _D_NAME:
                self._start(buf[:at])
            elif buf[:at] in self._keys:
                # Its arguments would hold the key twice ({"a": 1, "a": 2}), which strict
                # JSON readers reject and lenient ones read either way: not runnable.
                self._broken(f"a repeated parameter {buf[:at]!r}")
            else:
                self._key = buf[:at]
                self._keys.add(self._key)
                self._mode = _D_VALUE
                self._string = True
                self._value = []
                self._kind_pending = True
            return True
        # Between tags: _D_BLOCK (before an invoke or the close), _D_INVOKE (before a
        # parameter or the invoke's end), _D_AFTER (text after the block).
        body = buf.lstrip(WS)
        if mode == _D_AFTER:
            self._mode = _D_TEXT
            return True
        if not body:
            self._raw.append(buf)
            self._buf = ""
            return False
        tags = (self._invoke, self._close) if mode == _D_BLOCK else (self._param, self._invoke_end)
        for tag in tags:
            if body.startswith(tag):
                self._raw.append(buf[: len(buf) - len(body) + len(tag)])
                self._buf = body[len(tag) :]
                self._on_tag(tag)
                return True
        if any(tag.startswith(body) for tag in tags):
            return False  # a tag still arriving
        self._broken("expected a DSML tag")
        return True

    def on_control(self, token: str) -> list[Event]:
        return self.on_text(token)  # the DSML token is part of the markers' text

    def _on_tag(self, tag: str) -> None:
        if tag == self._invoke:
            self._mode = _D_NAME
        elif tag == self._close:
            self._mode = _D_AFTER if self._in_block else _D_TEXT
            if not self._in_block:
                self._warnings.append("the tool calls block holds no call")
        elif tag == self._param:
            self._mode = _D_KEY
        else:  # the invoke's end: the call is whole
            self._calls.stream("}" if self._params else "{}")
            self._calls.end()
            self._record()
            self._in_block += 1
            self._mode = _D_BLOCK

    def _start(self, name: str) -> None:
        if not valid_name(name):
            self._broken(f"tool call name {name!r} is not a function name")
            return
        self._calls.start(name)
        self._params = 0
        self._keys = set()
        self._mode = _D_INVOKE

    def _on_value(self) -> bool:
        buf = self._buf
        if self._kind_pending:
            for kind in ('true">', 'false">'):
                if buf.startswith(kind):
                    self._raw.append(kind)
                    self._string = kind == 'true">'
                    self._buf = buf = buf[len(kind) :]
                    self._kind_pending = False
                    self._open_value()
                    break
            else:
                if not ('true">'.startswith(buf) or 'false">'.startswith(buf)):
                    self._broken("a parameter's string attribute is not true or false")
                    return True
                return False
        at = buf.find(self._param_end)
        part = buf if at < 0 else buf[:at]
        keep = held_suffix(part, (self._param_end,)) if at < 0 else 0
        part = part[: len(part) - keep]
        self._raw.append(part)
        self._value.append(part)
        if self._string:
            self._calls.stream(json.dumps(part, ensure_ascii=False)[1:-1])
        if at < 0:
            self._buf = buf[len(part) :]
            return False
        self._raw.append(self._param_end)
        self._buf = buf[at + len(self._param_end) :]
        self._close_value()
        return True

    def _open_value(self) -> None:
        head = ", " if self._params else "{"
        if self._string:
            self._calls.stream(f'{head}{json.dumps(self._key, ensure_ascii=False)}: "')

    def _close_value(self) -> None:
        if self._string:
            self._calls.stream('"')
        else:
            text = "".join(self._value)
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                self._broken(f"parameter {self._key!r} is not JSON", held=False)
                return
            head = ", " if self._params else "{"
            key = json.dumps(self._key, ensure_ascii=False)
            self._calls.stream(f"{head}{key}: {json.dumps(value, ensure_ascii=False)}")
        self._params += 1
        self._mode = _D_INVOKE

    # ==== Output ====

    def _record(self) -> None:
        self._calls.record("".join(self._raw))
        self._raw = []

    def _broken(self, reason: str, *, held: bool = True) -> None:
        """The block does not parse here: an open call ends incomplete and the rest is
        ignored; before any call, the block is text."""
        if self._calls.open is not None:
            if held:  # the held text belongs to the broken part
                self._raw.append(self._buf)
            self._calls.cut(f"has {reason}")
            self._record()
            self._warnings.append("the output after the malformed call was ignored")
            self._mode, self._noted_skip, self._buf = _D_SKIP, True, ""
            return
        if self._in_block:
            self._warnings.append(f"{reason} after a tool call; the rest was ignored")
            self._mode, self._noted_skip, self._buf = _D_SKIP, True, ""
            return
        self._warnings.append(f"{reason}; kept as text")
        # The block's text so far is text; what is still buffered is read again as text
        # (it may open another block), so any chunking decides alike.
        text = "".join(self._raw)
        self._raw, self._mode = [], _D_TEXT
        self._out(text)

    # ==== End ====

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        cut = cut_problem(reason)
        if self._mode == _D_TEXT:
            self._out("\n" * self._newlines + self._buf)
            self._newlines = 0
        elif self._mode == _D_AFTER:
            self._out(self._buf.lstrip(WS))
        elif self._calls.open is not None:
            # The call's raw text is all the model wrote of it, held text included.
            self._raw.append(self._buf)
            if self._mode == _D_VALUE and not self._kind_pending and self._string:
                # What was held as a possible closing tag is the value's text after all.
                self._calls.stream(json.dumps(self._buf, ensure_ascii=False)[1:-1])
            self._calls.cut(cut)
            self._record()
        elif self._mode != _D_SKIP and not self._in_block:
            self._broken(f"the tool call {cut}")
            self._out(self._buf)  # what was held as a possible tag is text
        self._buf = ""
        self._events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        return self._drain()


# ==== Grammar ====


def dsml_call_grammar(
    tools: Sequence[ToolLike], *, block: str, required: bool, single: bool
) -> Grammar:
    """DSML calls of ``tools`` in a ``block``: the tool's declared properties in the schema's
    order, the required ones present, a string property as raw text without ``<``, any other
    a JSON value of its schema; lazy from the block's opening tag unless ``required``."""
    c = CallRules(tools)
    d = literal(DSML)
    alts = []
    for t in c.tools:
        schema = t.function.get("parameters") or {"type": "object", "properties": {}}
        conv = SchemaConverter(c.rules, schema, strict=t.function.get("strict") is True)
        needed = set(schema.get("required") or ())
        params = []
        # In the schema's order, as models write them: the required ones must be there.
        for key, prop in (schema.get("properties") or {}).items():
            is_string = isinstance(prop, dict) and prop.get("type") == "string"
            value = "[^<]*" if is_string else conv.value(prop, f"{t.name}-{key}")
            open_tag = f'parameter name="{key}" string="{"true" if is_string else "false"}">'
            param = f'"<" {d} {literal(open_tag)} {value} "</" {d} "parameter>\\n"'
            params.append(f"({param})" if key in needed else f"({param})?")
        invoke = f'"<" {d} {literal(f"invoke name={json.dumps(t.name)}>" + chr(10))}'
        rule = f'{invoke} {" ".join(params)} "</" {d} "invoke>\\n"'
        alts.append(c.rules.add(f"call-{t.name}", rule))
    call = c.rules.add("call", " | ".join(alts))
    many = call if single else f"{call}+"
    open_tag = f'"<" {d} {literal(block + ">" + chr(10))}'
    body = f'{open_tag} {many} "</" {d} {literal(block + ">")}'
    if required:  # the block follows the thought or empty content after blank lines
        body = f"[\\n]* {body}"
    trigger = f"<{DSML}{block}>"
    triggers = () if required else (Trigger("word", trigger),)
    return c.grammar(body, triggers=triggers, preserved=(DSML,))
