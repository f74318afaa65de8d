"""Which characters of a template's render came from the template, and which from the request.

A chat template is a program that mixes its own text (role tokens, tags, layout) with the
request's strings (contents, names, arguments, tool descriptions). To encode a render safely,
control tokens may be taken only from the template's own text: a message that holds
``<|im_end|>`` must stay that text. So :func:`split_render` renders the conversation twice:

1. *masked*: every request string replaced by a marker (letters and digits only, unique to
   the string, so that equal strings stay equal and a template's comparisons take the same
   branches), and
2. *real*: the conversation as given (what ``apply_chat_template`` returns).

The masked render is the template's own text with markers in it; the real render must be that
same text with each marker replaced by its string, as the template wrote it (as is, trimmed, or
escaped inside a ``tojson``). The split is where the two agree. Every character outside a
string's place equals the masked render's character at that place, which holds no request text:
a control token found there is the template's.

Where the real render is not the masked one with strings put back (the template branched on a
string's content, cut it, or changed its case), there is no safe split, and the conversation is
refused (:class:`UnsafeTemplate`) rather than encoded with a control token of unknown origin.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError

#: Keys of a JSON schema that are structure, not the caller's text (kept, so that a template
#: that reads ``param.type`` or iterates ``properties`` sees what it expects).
_SCHEMA_KEYS = frozenset(
    {
        "type", "properties", "required", "description", "enum", "items", "default",
        "additionalProperties", "anyOf", "oneOf", "allOf", "not", "format", "minimum",
        "maximum", "minLength", "maxLength", "minItems", "maxItems", "pattern", "title",
        "const", "nullable", "$ref", "$defs", "definitions", "examples", "strict",
        "exclusiveMinimum", "exclusiveMaximum", "uniqueItems", "multipleOf",
    }
)  # fmt: skip
_SCHEMA_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
#: A message's text: what is masked (roles and call types are structure).
_MESSAGE_TEXT = ("content", "reasoning_content", "name", "tool_call_id")
#: The keys of an OpenAI tool and its function (others are the caller's text).
_TOOL_KEYS = frozenset({"type", "function", "name", "description", "parameters", "strict"})


_UNSAFE = (
    "the model's chat template rewrites, reorders or branches on this conversation's text (it "
    "changes a message's case, sorts a call's arguments, or tests what a message says), so "
    "its control tokens cannot be told from the messages' text; rephrase the message, or serve "
    "the model with a built-in dialect (--dialect)"
)


class UnsafeTemplate(ValidationError):
    """The template's render cannot be told apart into its own text and the request's."""


@dataclass(frozen=True, slots=True)
class Part:
    """A run of the real render: the template's own text (``own``) or a request string."""

    text: str
    own: bool


#: How deep a call's arguments may nest (deeper is refused, not a recursion error).
MAX_DEPTH = 64


class Masker:
    """Replaces a request's strings by markers, one per distinct non-empty string
    (``originals`` maps each marker back). Markers are numbered in the order their strings
    first appear, with a fixed width; :meth:`mirror` numbers the same strings the other way
    round, with a prefix that sorts after the words chatfmt keeps (roles, schema keywords),
    where this one's sorts before them."""

    def __init__(self, avoid: Callable[[str], bool], *, nonce: str | None = None) -> None:
        while nonce is None or avoid(nonce):
            nonce = secrets.token_hex(4)
        self.nonce = nonce
        self._prefix = f"CFm{nonce}x"
        self.originals: dict[str, str] = {}
        self._markers: dict[str, str] = {}
        #: Each string's number (its marker's), in the order strings first appeared.
        self.order: dict[str, int] = {}

    def mirror(self) -> Masker:
        """A masker for the same strings, numbered in reverse and sorting after ``zz``."""
        other = Masker(lambda _: False, nonce=self.nonce)
        other._prefix = f"zzm{self.nonce}x"
        last = len(self.order) - 1
        for text, n in self.order.items():
            other._add(text, last - n)
        return other

    def _add(self, s: str, n: int) -> str:
        marker = f"{self._prefix}{n:06d}y"
        self._markers[s] = marker
        self.order[s] = n
        self.originals[marker] = s
        return marker

    def string(self, s: str) -> str:
        if not s:
            return s  # "" must stay falsy, and holds no token
        marker = self._markers.get(s)
        return marker if marker is not None else self._add(s, len(self._markers))

    def pattern(self) -> re.Pattern[str]:
        return re.compile(re.escape(self._prefix) + r"\d+y")

    def canonical(self, text: str, order: Mapping[str, int]) -> str:
        """``text`` with each marker written as its string's number in ``order`` (a marker
        no string owns, from a template that cut one, as itself)."""

        def number(m: re.Match[str]) -> str:
            original = self.originals.get(m.group())
            return m.group() if original is None else f"\x00{order[original]}\x00"

        return self.pattern().sub(number, text)

    def data(self, v: Any, depth: int = 0) -> Any:
        """Caller data (a call's arguments): every string masked, keys included."""
        if depth > MAX_DEPTH:
            raise ValidationError(
                f"a call's arguments nest deeper than {MAX_DEPTH} levels; flatten them",
                rule="template",
            )
        if isinstance(v, str):
            return self.string(v)
        if isinstance(v, Mapping):
            return {self.data(k): self.data(item, depth + 1) for k, item in v.items()}
        if isinstance(v, list | tuple):
            return [self.data(item, depth + 1) for item in v]
        return v  # numbers, booleans, None: no text a control token could hide in

    def schema(self, v: Any) -> Any:
        """A JSON schema: its keywords and type names kept (templates read ``param.type``),
        property names and every other string masked."""
        if isinstance(v, Mapping):
            out: dict[Any, Any] = {}
            for k, item in v.items():
                if k == "properties" and isinstance(item, Mapping):
                    out[k] = {self.data(n): self.schema(p) for n, p in item.items()}
                elif k == "type" and isinstance(item, str) and item in _SCHEMA_TYPES:
                    out[k] = item
                elif k == "type" and isinstance(item, list):
                    out[k] = self.schema(item)  # ["string", "null"]: type names kept
                elif k in _SCHEMA_KEYS:
                    out[k] = self.schema(item)
                else:
                    out[self.data(k)] = self.data(item)
            return out
        if isinstance(v, list | tuple):
            return [self.schema(item) for item in v]
        if isinstance(v, str) and v in _SCHEMA_TYPES:
            return v
        return self.data(v)

    def messages(self, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """OpenAI message dicts (as :func:`~.check.template_messages` makes them) with their
        text masked; roles and ``"type": "function"`` kept."""
        out = []
        for m in messages:
            d = dict(m)
            for key in _MESSAGE_TEXT:
                if isinstance(d.get(key), str):
                    d[key] = self.string(d[key])
            if d.get("tool_calls"):
                d["tool_calls"] = [self._call(c) for c in d["tool_calls"]]
            out.append(d)
        return out

    def _call(self, call: Mapping[str, Any]) -> dict[str, Any]:
        d = dict(call)
        if isinstance(d.get("id"), str):
            d["id"] = self.string(d["id"])
        fn = dict(d.get("function") or {})
        fn["name"] = self.data(fn.get("name"))
        fn["arguments"] = self.data(fn.get("arguments"))
        d["function"] = fn
        return d

    def tools(self, tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
        """Tool definitions with their names, descriptions and schemas masked."""
        if not tools:
            return None
        return [self._function(t, _TOOL_KEYS) for t in tools]

    def _function(self, d: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
        """A tool (or its ``function``): ``keys`` kept, their text masked, any other key the
        caller's data; ``parameters`` a schema."""
        out: dict[str, Any] = {}
        for k, v in d.items():
            if k == "function" and isinstance(v, Mapping):
                out[k] = self._function(v, _TOOL_KEYS)
            elif k == "parameters":
                out[k] = self.schema(v)
            elif k == "type" and v == "function":
                out[k] = v
            else:
                out[k if k in keys else self.data(k)] = self.data(v)
        return out


def _forms(s: str) -> list[str]:
    """The ways a template writes a string: as is, trimmed (``trim``, ``strip('\\n')``), or
    inside JSON (``tojson``, with or without ASCII escapes), longest first."""
    forms = [
        s,
        s.strip(),
        s.strip("\n"),
        s.lstrip(),
        s.rstrip(),
        s.lstrip("\n"),
        s.rstrip("\n"),
        json.dumps(s, ensure_ascii=False)[1:-1],
        json.dumps(s)[1:-1],
    ]
    return sorted(set(forms), key=len, reverse=True)


def match(
    masked: str, real: str, pattern: re.Pattern[str], originals: Mapping[str, str]
) -> list[Part] | None:
    """``real`` as the template's own text and request strings, following ``masked``
    (``None``: ``real`` is not ``masked`` with its markers replaced by their strings)."""
    literals = pattern.split(masked)  # literal k precedes marker k; the last follows
    markers = pattern.findall(masked)
    if not real.startswith(literals[0]) or any(m not in originals for m in markers):
        return None  # (a marker no string owns: the template cut one)
    # Depth-first over each marker's forms; (marker, position) pairs known to fail are not
    # tried twice, so a template that writes one string in several ways stays linear. Each
    # step points back at the one before it rather than copying the parts found so far.
    failed: set[tuple[int, int]] = set()
    Step = tuple[Any, str] | None  # (the step before, the form chosen)
    stack: list[tuple[int, int, Step]] = [(0, len(literals[0]), None)]
    while stack:
        k, pos, step = stack.pop()
        if k == len(markers):
            if pos == len(real):
                return _parts(literals, step)
            continue
        if (k, pos) in failed:
            continue
        failed.add((k, pos))
        if len(failed) > _TRIES_PER_STRING * (len(markers) + 1):
            # Many ways to line the strings up (a run of strings that read alike written side
            # by side): ambiguous, and the search would grow with the square of the run.
            return None
        after = literals[k + 1]
        for form in reversed(_forms(originals[markers[k]])):  # pushed last: tried first
            end = pos + len(form)
            if real.startswith(form, pos) and real.startswith(after, end):
                stack.append((k + 1, end + len(after), (step, form)))
    return None


#: How many (string, position) pairs the match may try per string before it gives up.
_TRIES_PER_STRING = 8


def _parts(literals: Sequence[str], step: Any) -> list[Part]:
    forms: list[str] = []
    while step is not None:
        step, form = step
        forms.append(form)
    forms.reverse()
    parts = [Part(literals[0], True)]
    for form, literal in zip(forms, literals[1:], strict=True):
        parts += [Part(form, False), Part(literal, True)]
    return [p for p in parts if p.text]


def split_render(
    render: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], str],
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    avoid: Callable[[str], bool],
) -> list[Part]:
    """The render of ``messages`` and ``tools`` (``render(messages, tools)``) split into the
    template's own text and the request's strings; :class:`UnsafeTemplate` when no split holds.
    ``avoid`` says whether a marker prefix occurs in the template (it must not)."""
    masker = Masker(avoid)
    masked = render(masker.messages(messages), masker.tools(tools))
    # The same strings numbered the other way and sorting last instead of first: a template
    # that orders or picks text by its value (``dictsort``, ``sort``, ``min``) lays the two
    # out differently, and its real render could line up with the masked one wrongly.
    mirror = masker.mirror()
    mirrored = render(mirror.messages(messages), mirror.tools(tools))
    order = masker.order
    if masker.canonical(masked, order) != mirror.canonical(mirrored, order):
        raise UnsafeTemplate(_UNSAFE, rule="template")
    real = render([dict(m) for m in messages], [dict(t) for t in tools] if tools else None)
    parts = match(masked, real, masker.pattern(), masker.originals)
    if parts is None:
        raise UnsafeTemplate(_UNSAFE, rule="template")
    return parts
