"""What an :class:`~.spec.XMLSyntax`'s parser looks for in each of its modes, read from the
syntax once: the tags that end each mode, and a reader for each kind of name."""

from __future__ import annotations

import functools
import re

from .spec import MAX_NAME, NameRule, XMLSyntax


class Tags:
    """The tags each of a parser's modes looks for, read from its syntax once."""

    __slots__ = (
        "after_key",
        "bare_next",
        "between",
        "body",
        "element",
        "end",
        "ends",
        "key",
        "key_open",
        "name",
        "opening",
    )

    def __init__(self, s: XMLSyntax) -> None:
        end = s.call_close or s.block_close  # what closes a call
        # What ends a call, besides its end tag: a block's end, or another block or call.
        ends = (s.block_open, s.block_close) + ((s.name.open, s.call_close) if s.many else ())
        self.ends = ends  # also what a broken call is skipped to
        self.body = (s.key.open, *dict.fromkeys((end, *ends)))
        self.after_key = (s.value_open, *self.body)
        self.opening = (s.name.open, s.block_close, s.block_open) if s.many else (s.name.open,)
        self.between = (s.name.open, s.block_close, s.block_open)
        self.bare_next = (s.key.open, end)  # what may follow a bare name
        self.element = "<" + s.name.open[1:].split(" ")[0].rstrip("=") + ">"  # "<invoke>"
        self.end, self.key_open = end, s.key.open
        self.name = NameReader(s.name.close, s.name_rule, s.space)
        self.key = NameReader(s.key.close, s.key_rule, s.space)


@functools.lru_cache(maxsize=64)
def tags_of(syntax: XMLSyntax) -> Tags:
    """A syntax's :class:`Tags`, read once (they never change)."""
    return Tags(syntax)


class NameReader:
    """Reads a name up to the first character of its closing tag, which must then follow
    whole; what its :class:`~.spec.NameRule` forbids makes it none."""

    __slots__ = ("close", "first", "rest", "rule", "search", "space")

    def __init__(self, close: str, rule: NameRule, space: str | None) -> None:
        self.close, self.first, self.rest = close, close[:1], close[1:]
        self.rule, self.space = rule, space
        # A character the rule forbids ("(?!)" matches nothing: the rule forbids none).
        self.search = re.compile(
            f"[{re.escape(rule.forbidden)}]" if rule.forbidden else "(?!)"
        ).search

    def read(self, buf: str) -> tuple[str | None, int] | None:
        """``None`` while more text may decide the name; else the name (``None``: not a valid
        one) and the length read, its closing tag included."""
        j = buf.find(self.first)
        name = buf if j < 0 else buf[:j]
        if len(name) > MAX_NAME or self.search(name) is not None:
            return None, 0  # no character can make it a name again
        if j < 0:
            return None  # the name goes on
        rest, after = self.rest, buf[j + 1 :]
        if not after.startswith(rest):
            return None if rest.startswith(after) else (None, 0)  # the tag may be split
        rule = self.rule
        stripped = name.strip(self.space) if rule.strip else name
        if not stripped or (rule.valid is not None and not rule.valid(stripped)):
            return None, 0
        return stripped, j + len(self.close)


__all__ = ["NameReader", "Tags", "tags_of"]
