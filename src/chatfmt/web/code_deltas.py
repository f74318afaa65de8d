"""Interpreter code streamed out of the JSON argument fragments of its call."""

from __future__ import annotations

import json
import re

_CODE_KEY = re.compile(r'"code"\s*:\s*"')
_HEX = set("0123456789abcdefABCDEF")


class CodeDeltas:
    """Turns the JSON argument fragments of an interpreter call into code text deltas.

    The arguments stream as JSON (``{"code": "import m``...); this decodes the ``code``
    string as far as it is complete, holding back a half-written escape (``\\u00`` or the
    first half of a surrogate pair) until the rest arrives.
    """

    def __init__(self) -> None:
        self._buf = ""
        self._pos: int | None = None  # where the undecoded part of the code string starts
        self._done = False

    def feed(self, fragment: str) -> str:
        """The code text that ``fragment`` completes (may be empty)."""
        if self._done:
            return ""
        self._buf += fragment
        if self._pos is None:
            match = _CODE_KEY.search(self._buf)
            if match is None:
                return ""
            self._pos = match.end()
        buf, i, safe = self._buf, self._pos, self._pos
        n = len(buf)
        while i < n:
            ch = buf[i]
            if ch == '"':
                self._done = True
                safe = i
                break
            if ch != "\\":
                i += 1
                safe = i
                continue
            if i + 1 >= n:
                break
            if buf[i + 1] != "u":
                i += 2
                safe = i
                continue
            digits = buf[i + 2 : i + 6]
            if len(digits) < 4 or not set(digits) <= _HEX:
                if len(digits) == 4:  # malformed escape: give up on deltas for this call
                    self._done = True
                break
            i += 6
            if 0xD800 <= int(digits, 16) <= 0xDBFF:
                continue  # a high surrogate is only safe together with its low half
            safe = i
        chunk = buf[self._pos : safe]
        self._pos = safe
        if not chunk:
            return ""
        try:
            decoded: str = json.loads('"' + chunk + '"')
        except json.JSONDecodeError:
            self._done = True
            return ""
        return decoded
