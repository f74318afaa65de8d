"""An incremental, strict JSON scanner for one tool-call object, shared by dialects.

Dialects whose calls are a JSON object (Hermes/Qwen2.5 ``{"name": …, "arguments": …}``, and the
JSON-call families such as Llama 3 and GLM-4) feed the model's text to :class:`CallScanner` as it
streams. It checks the JSON character by character, picks out the call's ``name`` and its
``arguments`` (or ``parameters``), and says how much of the arguments text is safe to stream:
a prefix of valid JSON that no later character can take back (a number or a literal streams
only once it ends). A call cut off mid-way is never completed: its streamed text is all there
is of it (see ``dialects/parsers/calls.py``).
"""

from __future__ import annotations

import json
import re
from typing import Literal

WS = " \t\r\n"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_STR_RUN = re.compile(r'[^"\\\x00-\x1f]+')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_NUM_CHARS = frozenset("0123456789+-.eE")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = frozenset('"\\/bfnrtu')
#: Longest number accepted in tool arguments (json.loads rejects ints past 4,300 digits).
_MAX_NUMBER_CHARS = 4000
# Deeper arguments are refused: json.loads (used to check a finished call) recurses per level.
_MAX_DEPTH = 128
_ARG_KEYS = ("arguments", "parameters")

# JSON scanner states.
_VALUE, _VALUE_OR_CLOSE, _KEY_OR_CLOSE, _KEY, _COLON, _AFTER = range(6)
_STRING, _ESCAPE, _UNICODE, _NUMBER_ST, _LITERAL = range(6, 11)
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}


class CallScanner:
    """An incremental, strict JSON checker for one candidate call object.

    It validates as it goes (so a malformed object is detected at the first bad character),
    records the top-level ``name`` and the ``arguments`` (or ``parameters``) value, and keeps the
    raw arguments text, marking how much of it is *safe*: a valid JSON prefix that appending
    closers (and a quote) would turn into a valid object. Only safe text is streamed, so what a
    client has received is always the start of the arguments the model is writing.
    """

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.state = _VALUE
        self.done = False
        self.error: str | None = None
        self.name: str | None = None
        self.name_invalid = False
        self.saw_name_key = False
        self.args_state: Literal["none", "object", "string", "done", "null", "invalid"] = "none"
        self.args_error: str | None = None
        self._args_base = 0
        self._pending: list[str] = []
        self._pending_len = 0
        self._safe_len = 0
        self._safe_in_string = False
        self._key: str | None = None  # the current top-level key
        self._capture: list[str] | None = None  # raw text of a top-level string being kept
        self._capture_kind = ""  # "key" | "name" | "args"
        self._str_is_key = False
        self._number: list[str] = []
        self._literal = ""
        self._unicode_left = 0

    # -- arguments text --

    def take_safe(self) -> str:
        """The safe arguments text not yet taken."""
        if self._safe_len == 0:
            return ""
        if self._safe_len == self._pending_len:
            out = self._pending[0] if len(self._pending) == 1 else "".join(self._pending)
            self._pending = []
            self._pending_len = self._safe_len = 0
            return out
        text = "".join(self._pending)
        out, rest = text[: self._safe_len], text[self._safe_len :]
        self._pending = [rest] if rest else []
        self._pending_len = len(rest)
        self._safe_len = 0
        return out

    def _args_add(self, text: str) -> None:
        self._pending.append(text)
        self._pending_len += len(text)

    # -- scanning --

    def feed(self, text: str) -> int:
        """Scan ``text``; return how many characters were consumed. Stops after the closing
        ``}`` of the object (``done``) or at a bad character (``error``)."""
        i = 0
        n = len(text)
        while i < n:
            st = self.state
            in_args = self.args_state == "object"
            if st == _STRING:
                m = _STR_RUN.match(text, i)
                if m is not None:
                    run = m.group()
                    if self._capture is not None:
                        self._capture.append(run)
                    if in_args:
                        self._args_add(run)
                        if not self._str_is_key:
                            self._mark_safe(in_string=True)
                    i = m.end()
                    continue
            c = text[i]
            if not self._step(c):
                return i
            i += 1
            if in_args:
                # The char belongs to the arguments if they were open before it (the closing
                # brace included); the opening brace is added by _start_value.
                self._args_add(c)
            if self.args_state == "object":
                st = self.state
                if st in (_AFTER, _KEY_OR_CLOSE, _VALUE_OR_CLOSE):
                    self._mark_safe(in_string=False)
                elif st == _STRING and not self._str_is_key:
                    self._mark_safe(in_string=True)
            elif in_args:  # the arguments object just closed
                self._safe_len = self._pending_len
                self._safe_in_string = False
            if self.done:
                return i
        return i

    def _mark_safe(self, *, in_string: bool) -> None:
        self._safe_len = self._pending_len
        self._safe_in_string = in_string

    def _fail(self, message: str) -> bool:
        self.error = message
        return False

    def _step(self, c: str) -> bool:
        """Advance by one character; False (with ``error``) if it cannot continue the JSON."""
        st = self.state
        if st == _STRING:
            if c == '"':
                self._end_string()
            elif c == "\\":
                self.state = _ESCAPE
            else:  # a control character (the fast path took everything else)
                return self._fail(f"control character {c!r} in a JSON string")
            if self._capture is not None:
                self._capture.append(c)
            return True
        if st == _ESCAPE:
            if c not in _ESCAPES:
                return self._fail(f"invalid escape '\\{c}' in a JSON string")
            self.state = _UNICODE if c == "u" else _STRING
            self._unicode_left = 4
            if self._capture is not None:
                self._capture.append(c)
            return True
        if st == _UNICODE:
            if c not in _HEX:
                return self._fail(f"invalid \\u escape digit {c!r}")
            self._unicode_left -= 1
            if self._unicode_left == 0:
                self.state = _STRING
            if self._capture is not None:
                self._capture.append(c)
            return True
        if st == _NUMBER_ST:
            if c in _NUM_CHARS:
                self._number.append(c)
                return True
            number = "".join(self._number)
            if not _NUMBER.match(number):
                return self._fail(f"invalid number {number[:40]!r}")
            if len(number) > _MAX_NUMBER_CHARS:
                # Python's json refuses to read such integers back; stop before streaming it.
                return self._fail(f"a number of {len(number)} characters is too long")
            self._end_value()
            return self._step(c)
        if st == _LITERAL:
            if c != self._literal[0]:
                return self._fail(f"unexpected {c!r} in a JSON literal")
            self._literal = self._literal[1:]
            if not self._literal:
                self._end_value()
            return True
        if c in WS:
            return True
        if st == _VALUE or st == _VALUE_OR_CLOSE:
            if c == "]" and st == _VALUE_OR_CLOSE:
                return self._close(c)
            return self._start_value(c)
        if st == _KEY_OR_CLOSE or st == _KEY:
            if c == "}" and st == _KEY_OR_CLOSE:
                return self._close(c)
            if c != '"':
                return self._fail(f"expected a string key, got {c!r}")
            self.state = _STRING
            self._str_is_key = True
            if len(self.stack) == 1:
                self._capture = ['"']
                self._capture_kind = "key"
            return True
        if st == _COLON:
            if c != ":":
                return self._fail(f"expected ':', got {c!r}")
            self.state = _VALUE
            return True
        # _AFTER: a value ended
        if c == ",":
            self.state = _KEY if self.stack[-1] == "{" else _VALUE
            return True
        if c == "}" or c == "]":
            return self._close(c)
        return self._fail(f"expected ',' or a closing bracket, got {c!r}")

    def _start_value(self, c: str) -> bool:
        top = len(self.stack) == 1
        key = self._key if top else None
        is_args = top and key in _ARG_KEYS and self.args_state == "none"
        if top and key == "name" and c != '"':
            self.name_invalid = True
        if c == "{" or c == "[":
            if len(self.stack) >= _MAX_DEPTH:
                return self._fail(f"JSON nested deeper than {_MAX_DEPTH} levels")
            if is_args:
                if c == "{":
                    self.args_state = "object"
                    self._args_base = len(self.stack)
                    self._args_add(c)
                else:
                    self._invalid_args("arguments is an array, not an object")
            self.stack.append(c)
            self.state = _KEY_OR_CLOSE if c == "{" else _VALUE_OR_CLOSE
            if is_args and c == "{":
                self._mark_safe(in_string=False)
            return True
        if c == '"':
            self.state = _STRING
            self._str_is_key = False
            if top and (key == "name" or is_args):
                self._capture = ['"']
                self._capture_kind = "name" if key == "name" else "args"
                if is_args:
                    self.args_state = "string"
            return True
        if c == "-" or (c.isdigit() and c.isascii()):
            self.state = _NUMBER_ST
            self._number = [c]
            if is_args:
                self._invalid_args("arguments is a number, not an object")
            return True
        rest = _LITERALS.get(c)
        if rest is not None:
            self.state = _LITERAL
            self._literal = rest
            if is_args:
                if c == "n":
                    self.args_state = "null"
                else:
                    self._invalid_args("arguments is a boolean, not an object")
            return True
        return self._fail(f"expected a JSON value, got {c!r}")

    def _invalid_args(self, problem: str) -> None:
        self.args_state = "invalid"
        self.args_error = problem

    def _end_string(self) -> None:
        if self._str_is_key:
            self.state = _COLON
            if self._capture is not None:
                self._capture.append('"')
                self._key = json.loads("".join(self._capture))
                if self._key == "name":
                    self.saw_name_key = True
                self._capture = None
            return
        if self._capture is not None:
            self._capture.append('"')
            value = json.loads("".join(self._capture))
            kind = self._capture_kind
            self._capture = None
            if kind == "name":
                if value and self.name is None and not _LONE_SURROGATE.search(value):
                    self.name = value
                elif not value or _LONE_SURROGATE.search(value):
                    self.name_invalid = True  # (a "\ud800" escape is no name: not Unicode)
            elif kind == "args":
                self._decode_string_args(value)
        self._end_value()

    def _decode_string_args(self, value: str) -> None:
        # Some models write the arguments as a JSON string holding the object.
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            decoded = None
        if isinstance(decoded, dict):
            self.args_state = "done"
            self._pending = [value]
            self._pending_len = self._safe_len = len(value)
        else:
            self._invalid_args("arguments is a string that does not hold a JSON object")

    def _end_value(self) -> None:
        self.state = _AFTER
        if not self.stack:
            self.done = True

    def _close(self, c: str) -> bool:
        want = "{" if c == "}" else "["
        if not self.stack or self.stack[-1] != want:
            return self._fail(f"unexpected {c!r}")
        self.stack.pop()
        if self.args_state == "object" and len(self.stack) == self._args_base:
            self.args_state = "done"
        self._end_value()
        return True
