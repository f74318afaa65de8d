"""Markup that many formats share, and the string helpers every streaming stage needs.

The lowest module of the formats: the decode pipeline, the parsers, the call-syntax engines and
the family modules all import from here, and it imports nothing of chatfmt. A tag that several
families write (``<think>``, Hermes' ``<tool_call>``) is defined once here rather than in the
first family that happened to use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "THINK",
    "THINK_END",
    "TOOL_CALL",
    "TOOL_CALL_END",
    "TOOL_RESPONSE",
    "TOOL_RESPONSE_END",
    "escape_lone_surrogates",
    "held_suffix",
    "replace_lone_surrogates",
]

# ==== Tags shared by several families ====

#: A thought (Qwen3, DeepSeek, GLM-4.5+, Kimi, MiniMax, Nemotron, ...).
THINK = "<think>"
THINK_END = "</think>"
#: Hermes-style calls and results (Qwen2.5 and after, GLM-4.5+, Granite, Nemotron).
TOOL_CALL = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
TOOL_RESPONSE = "<tool_response>"
TOOL_RESPONSE_END = "</tool_response>"

# ==== Lone surrogates ====

#: A UTF-16 surrogate standing alone: Python strings can hold one (a ``"\ud800"`` JSON escape
#: decodes to it) but no tokenizer can encode it and no UTF-8 stream can carry it.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written as its JSON escape (``\\ud800``), as a
    template's ``tojson`` leaves it: the text stays encodable and means the same JSON."""
    if text.isascii() or not _LONE_SURROGATE.search(text):  # isascii: the common case, fast
        return text
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def replace_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, as a UTF-8 decoder shows bytes
    it cannot read: for text that is shown or sent, not re-parsed as JSON."""
    if not _LONE_SURROGATE.search(text):
        return text
    return _LONE_SURROGATE.sub("\ufffd", text)


# ==== Holding back a partial marker ====


def held_suffix(text: str, markers: Iterable[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``.

    That suffix must be held back by a streaming stage: the next chunk may complete the marker.
    Costs O(longest marker), whatever the length of ``text``.
    """
    best = 0
    n = len(text)
    for marker in markers:
        m = len(marker)
        if m <= 1 or m - 1 <= best:
            continue
        start = text.find(marker[0], max(0, n - m + 1))
        while start >= 0:
            k = n - start
            if k <= best:
                break
            if marker.startswith(text[start:]):
                best = k
                break
            start = text.find(marker[0], start + 1)
    return best
