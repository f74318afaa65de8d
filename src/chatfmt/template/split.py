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


class UnsafeTemplate(ValidationError):
    """The template's render cannot be told apart into its own text and the request's."""


@dataclass(frozen=True, slots=True)
class Part:
    """A run of the real render: the template's own text (``own``) or a request string."""

    text: str
    own: bool


class Masker:
    """Replaces a request's strings by markers, one per distinct string (``originals`` maps
    each marker back)."""

    def __init__(self, avoid: Callable[[str], bool]) -> None:
        nonce = secrets.token_hex(4)
        while avoid(nonce):  # pragma: no cover - a collision with 32 random bits
            nonce = secrets.token_hex(4)
        self._prefix = f"CFm{nonce}x"
        self.originals: dict[str, str] = {}
        self._markers: dict[str, str] = {}

    def string(self, s: str) -> str:
        if not s.strip():
            return s  # blank text is no control token, and "" must stay falsy
        marker = self._markers.get(s)
        if marker is None:
            marker = f"{self._prefix}{len(self._markers)}y"
            self._markers[s] = marker
            self.originals[marker] = s
        return marker

    def pattern(self) -> re.Pattern[str]:
        return re.compile(re.escape(self._prefix) + r"\d+y")

    def data(self, v: Any) -> Any:
        """Caller data (a call's arguments): every string masked, keys included."""
        if isinstance(v, str):
            return self.string(v)
        if isinstance(v, Mapping):
            return {self.data(k): self.data(item) for k, item in v.items()}
        if isinstance(v, list | tuple):
            return [self.data(item) for item in v]
        return v  # numbers, booleans, None: no text a control token could hide in

    def schema(self, v: Any) -> Any:
        """A JSON schema: its keywords and type names kept (templates read ``param.type``),
        property names and every other string masked."""
        if isinstance(v, Mapping):
            out: dict[Any, Any] = {}
            for k, item in v.items():
                if k == "properties" and isinstance(item, Mapping):
                    out[k] = {self.data(n): self.schema(p) for n, p in item.items()}
                elif k == "type" and (item in _SCHEMA_TYPES or isinstance(item, list)):
                    out[k] = item if isinstance(item, str) else self.schema(item)
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
    pieces = pattern.split(masked)
    markers = pattern.findall(masked)
    literals = pieces  # literal k precedes marker k; the last follows the last marker
    if not real.startswith(literals[0]):
        return None
    # Depth-first over each marker's forms; (marker, position) pairs known to fail are not
    # tried twice, so a template that writes one string in several ways stays linear.
    failed: set[tuple[int, int]] = set()
    stack: list[tuple[int, int, list[Part]]] = [(0, len(literals[0]), [Part(literals[0], True)])]
    while stack:
        k, pos, parts = stack.pop()
        if k == len(markers):
            if pos == len(real):
                return [p for p in parts if p.text]
            continue
        if (k, pos) in failed:
            continue
        failed.add((k, pos))
        after = literals[k + 1]
        for form in reversed(_forms(originals[markers[k]])):  # pushed last: tried first
            end = pos + len(form)
            if real.startswith(form, pos) and real.startswith(after, end):
                found = [*parts, Part(form, False), Part(after, True)]
                stack.append((k + 1, end + len(after), found))
    return None


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
    real = render([dict(m) for m in messages], [dict(t) for t in tools] if tools else None)
    parts = match(masked, real, masker.pattern(), masker.originals)
    if parts is None:
        raise UnsafeTemplate(
            "the model's chat template changes this conversation's text in a way chatfmt cannot "
            "follow (it branches on, cuts or rewrites a message's content), so its control "
            "tokens cannot be told from the messages' text; rephrase the message, or serve "
            "the model with a built-in dialect (--dialect)",
            rule="template",
        )
    return parts
