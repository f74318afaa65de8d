"""An XML-ish call syntax, declared once: the layout its template writes, read into tags.

A family's calls are written by three small templates, as its chat template prints them::

    block     "<tool_call>\\n{call}</tool_call>"        ({calls}: several calls in one block)
    call      "<function={name}>\\n{arguments}</function>\\n"
    argument  "<parameter={key}>\\n{value}\\n</parameter>\\n"

From these, :class:`XMLSyntax` reads the tags the parser looks for (the text around each
placeholder without its whitespace, split where a tag begins) and keeps the exact layout for
the renderer (:meth:`XMLSyntax.render`) and the grammar (``grammar.py``): the three cannot
disagree on a tag or a newline. Whitespace in the layout is what the parser skips between a
call's elements, except around a value with no opening tag of its own, where one newline each
side is the template's padding and is trimmed (Qwen3-Coder's ``<parameter=…>\\nVALUE\\n``).

What the layout cannot say is declared beside it: which tags are control tokens, how values
other than strings are written (``scalars``), what a name may hold (:class:`NameRule`), the
whitespace the format means, and whether the text around calls is trimmed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ...jsonscan import WS
from ...markup import escape_lone_surrogates
from ...segments import BlockBuilder, Control, Segment, Text
from ..parsers.calls import MAX_NAME
from ..parsers.values import json_text, render_value

# One tag of a layout: from a "<" to the next one, or what comes before the first "<".
_TAG = re.compile(r"<[^<]*|[^<]+")


@dataclass(frozen=True)
class NameRule:
    """What a tool's or an argument's name may be, besides its length (:data:`MAX_NAME`).

    ``forbidden``: characters that make it no name; ``strip``: whitespace around it is
    layout (else part of the name); ``valid``: a test of the stripped name, for formats whose
    names are bare words (GLM-4.5+: a name runs up to the next tag)."""

    forbidden: str = "<>\n"
    strip: bool = True
    valid: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class Tagged:
    """The tags around one placeholder of a layout: ``open``, the last tag before it (``""``:
    none), and ``close``, the first after it (``""``: none, it ends where the next tag
    begins)."""

    open: str
    close: str

    @classmethod
    def around(cls, before: str, after: str) -> Tagged:
        """The tags of a placeholder between the layout texts ``before`` and ``after``."""
        opening, closing = _tags(before), _tags(after)
        return cls(opening[-1] if opening else "", closing[0] if closing else "")


def _split_controls(text: str, controls: Sequence[str]) -> Iterator[tuple[bool, str]]:
    """Layout text as ``(is_control, text)`` pieces, its control tags apart."""
    if not controls:
        if text:
            yield False, text
        return
    for part in re.split("(" + "|".join(map(re.escape, controls)) + ")", text):
        if part:
            yield part in controls, part


def _tags(layout: str) -> list[str]:
    return [t for t in (m.strip() for m in _TAG.findall(layout)) if t]


def _split(template: str, first: str, second: str) -> tuple[str, str, str]:
    """``template``'s text before ``{first}``, between it and ``{second}``, and after."""
    head, sep, rest = template.partition("{" + first + "}")
    middle, sep2, tail = rest.partition("{" + second + "}")
    if not sep or not sep2:
        raise ValueError(f"layout {template!r} needs {{{first}}} then {{{second}}}")
    return head, middle, tail


def _layouts(block: str, call: str, argument: str) -> tuple[str, ...]:
    head, sep, tail = block.partition("{calls}" if "{calls}" in block else "{call}")
    if not sep:
        raise ValueError(f"layout {block!r} needs {{call}} or {{calls}}")
    return (head, tail, *_split(call, "name", "arguments"), *_split(argument, "key", "value"))


def layouts(syntax: XMLSyntax) -> tuple[str, ...]:
    """The layout text around each placeholder: the block's head and tail; before the name,
    between it and the arguments, after them; before the key, between it and the value,
    after it."""
    return _layouts(syntax.block, syntax.call, syntax.argument)


@dataclass(frozen=True)
class XMLSyntax:
    """One family's call syntax (see the module docstring for the layouts).

    ``block``: the layout around a turn's calls, with ``{call}`` (one call per block, which
    is then the call's own text: Qwen3-Coder, GLM) or ``{calls}`` (all of them: MiniMax).
    ``call``: ``{name}`` then ``{arguments}``; ``argument``: ``{key}`` then ``{value}``.
    ``controls``: the tags that are control tokens of the vocabulary (rendered as such, and
    kept whole by a grammar). ``scalars``: how a value that is not a string is written —
    ``"python"`` as Python prints it (``True``, ``None``; mappings and lists as JSON), or
    ``"json"``. ``space``: the whitespace the format means (``None``: Python's). ``trim``:
    the text around the calls is the message's content written stripped (GLM). ``rule``:
    the prefix of the grammar's rule names. ``words``: what warnings call an argument and
    its key.
    """

    block: str
    call: str
    argument: str
    controls: tuple[str, ...]
    scalars: Literal["python", "json"]
    name_rule: NameRule = NameRule()
    key_rule: NameRule = NameRule()
    space: str | None = WS
    trim: bool = False
    rule: str = "xml"
    words: tuple[str, str] = ("parameter", "parameter name")
    # Read from the layouts (see __post_init__).
    many: bool = field(init=False)
    block_open: str = field(init=False)
    block_close: str = field(init=False)
    name: Tagged = field(init=False)
    call_close: str = field(init=False)
    key: Tagged = field(init=False)
    value_open: str = field(init=False)
    value_close: str = field(init=False)
    pad: tuple[str, str] = field(init=False)
    #: Each layout text of :func:`layouts` split into ``(is_control, text)`` pieces, once.
    plan: tuple[tuple[tuple[bool, str], ...], ...] = field(init=False, repr=False, compare=False)
    #: Where a call's own layout (name, arguments, its end) holds no control tag: its text
    #: before and after the name, the call's end, before and after a key, after a value
    #: (``None`` where it holds one).
    plain: tuple[str, ...] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        texts = _layouts(self.block, self.call, self.argument)
        head, tail, name_before, name_after, call_tail, key_before, key_after, value_after = texts
        plan = tuple(tuple(_split_controls(text, self.controls)) for text in texts)
        inner = plan[2:]
        key_tags = _tags(key_after)  # the key's closing tag, then the value's opening one
        value_open = key_tags[1] if len(key_tags) > 1 else ""
        # A value without an opening tag of its own is padded by the layout around it.
        lead = "" if value_open else key_after[len(key_after.rstrip(WS)) :]
        trail = value_after[: len(value_after) - len(value_after.lstrip(WS))]
        read = {
            "many": "{calls}" in self.block,
            "block_open": _tags(head)[-1],
            "block_close": _tags(tail)[0],
            "name": Tagged.around(name_before, name_after),
            "call_close": (_tags(call_tail) or [""])[0],
            "key": Tagged.around(key_before, key_after),
            "value_open": value_open,
            "value_close": _tags(value_after)[0],
            "pad": (lead, trail),
            "plan": plan,
            "plain": (
                None
                if any(control for part in inner for control, _ in part)
                else tuple("".join(text for _, text in part) for part in inner)
            ),
        }
        for attr, value in read.items():
            object.__setattr__(self, attr, value)  # a frozen dataclass's derived fields
        if self.many and not (self.name.open and self.call_close):
            raise ValueError("a block of several calls needs each call's opening and end tags")

    # ==== Rendering ====

    def value_text(self, value: Any) -> str:
        """An argument's value as the template writes it: a string as it is, anything else
        by :attr:`scalars`."""
        if isinstance(value, str) or self.scalars == "python":
            return render_value(value)
        return json_text(value)

    def pieces(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> Iterator[tuple[bool, str]]:
        """``calls`` (name, arguments) as the template writes them, one block per call (or
        one for all, :attr:`many`): ``(is_control, text)`` pieces, controls only from the
        layout, never from a name or a value."""
        head, tail, name_before, name_after, call_tail, key_before, key_after, value_after = (
            self.plan
        )
        for group in [calls] if self.many else [[c] for c in calls]:
            yield from head
            for name, arguments in group:
                yield from name_before
                yield False, escape_lone_surrogates(name)
                yield from name_after
                for key, value in arguments.items():
                    yield from key_before
                    yield False, escape_lone_surrogates(key)
                    yield from key_after
                    yield False, self.value_text(value)
                    yield from value_after
                yield from call_tail
            yield from tail

    def write(self, b: BlockBuilder, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Write :meth:`pieces` of ``calls`` (its control tags as optional controls: a
        vocabulary without them spells them as text). Adjacent text goes to the builder as
        one piece. This is the render's hot path: a call whose layout holds no control tag
        (Qwen's, MiniMax's: the tags are the block's) is joined as one string."""
        if self.plain is not None and not self.many and len(calls) == 1:
            # One call in its own block (Qwen3-Coder): the block's tags around one string.
            nb, na, ct, kb, ka, va = self.plain
            esc, value_text = escape_lone_surrogates, self.value_text
            name, arguments = calls[0]
            body = f"{nb}{esc(name)}{na}"
            for k, v in arguments.items():  # a loop, not a generator: the hot path
                body += f"{kb}{esc(k)}{ka}{value_text(v)}{va}"
            pieces: Iterable[tuple[bool, str]] = (*self.plan[0], (False, body + ct), *self.plan[1])
        else:
            pieces = self.pieces(calls)
        run: list[str] = []
        for control, text in pieces:
            if control:
                if run:
                    b.text("".join(run))
                    run.clear()
                b.control(text, required=False)
            else:
                run.append(text)
        if run:
            b.text("".join(run))

    def opening(self, name: str | None) -> tuple[Segment, ...]:
        """A call's text up to its first argument (up to its name when ``name`` is
        ``None``): the prefix a forced call starts the reply with."""
        head, _, name_before, name_after = self.plan[:4]
        layout = [*head, *name_before]
        named = [(False, name), *name_after] if name is not None else []
        out: list[Segment] = []
        for control, text in [*layout, *named]:
            if control:
                out.append(Control(text, False))
            elif out and isinstance(out[-1], Text):
                out[-1] = Text(out[-1].text + text)
            else:
                out.append(Text(text))
        return tuple(out)

    def render(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """The text of :meth:`pieces`."""
        return "".join(text for _, text in self.pieces(calls))


__all__ = ["MAX_NAME", "NameRule", "Tagged", "XMLSyntax", "layouts"]
