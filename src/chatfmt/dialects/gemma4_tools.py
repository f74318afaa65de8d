"""Gemma 4's tool declarations: each tool as ``declaration:NAME{…}`` in the call notation.

The system turn lists each tool between ``<|tool>`` and ``<tool|>`` as the published template
writes it: the description and parameters in the notation of calls (strings in ``<|"|>``,
keys bare, sorted without case), each parameter with its description, type in capitals and,
by type, its ``enum``, ``items``, ``properties`` and ``required``. :func:`declaration`
follows the template field by field, quirks included (a parameter named like a schema keyword
is left out; a type list is printed as Python prints the list; a ``parameters`` object without
a ``type`` leaves its brace open), so that the prompt is the one the model was trained on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .parsers.gemma4 import Part, format_parts, sorted_items

#: Keys of a parameter's schema that the template never lists as nested parameters.
_SCHEMA_KEYS = frozenset({"description", "type", "properties", "required", "nullable"})


class _Missing:
    """A key the schema does not have (the template's undefined: false, printed as "")."""

    def __bool__(self) -> bool:
        return False


_MISSING = _Missing()


def _get(value: Any, key: str) -> Any:
    return value.get(key, _MISSING) if isinstance(value, Mapping) else _MISSING


def _str(value: Any) -> str:
    """A value as the template prints it (Python's ``str``; nothing for a missing key)."""
    return "" if value is _MISSING else str(value)


def _quoted(value: Any) -> list[Part]:
    return [None, _str(value), None]


def _names(values: Any) -> list[Part]:
    """A ``required`` list: each name quoted, comma-separated."""
    out: list[Part] = []
    for n, v in enumerate(values if isinstance(values, (list, tuple, str)) else ()):
        out += ([","] if n else []) + _quoted(v)
    return out


def _joined(fields: list[list[Part]]) -> list[Part]:
    out: list[Part] = []
    for n, f in enumerate(fields):
        out += ([","] if n else []) + f
    return out


def _parameters(properties: Mapping[str, Any]) -> list[Part]:
    """The template's ``format_parameters``: each parameter as ``name:{…}``."""
    out: list[list[Part]] = []
    for key, value in sorted_items(properties):
        if key in _SCHEMA_KEYS:
            continue
        fields: list[list[Part]] = []
        if _get(value, "description"):
            fields.append(["description:", *_quoted(value["description"])])
        kind = _str(_get(value, "type")).upper()
        if kind == "STRING":
            if _get(value, "enum"):
                fields.append(["enum:", *format_parts(value["enum"], quote_keys=True)])
        elif kind == "ARRAY":
            items = _get(value, "items")
            if isinstance(items, Mapping) and items:
                fields.append(["items:{", *_items(items), "}"])
        if _get(value, "nullable"):
            fields.append(["nullable:true"])
        if kind == "OBJECT":
            props = _get(value, "properties")
            # Without properties the template lists the schema's own keys as parameters.
            nested = props if isinstance(props, Mapping) else value
            fields.append(["properties:{", *_parameters(nested), "}"])
            if _get(value, "required"):
                fields.append(["required:[", *_names(value["required"]), "]"])
        fields.append(["type:", *_quoted(kind)])
        out.append([key + ":{", *_joined(fields), "}"])
    return _joined(out)


def _items(items: Mapping[str, Any]) -> list[Part]:
    """An array parameter's ``items`` schema, key by key."""
    out: list[list[Part]] = []
    for key, value in sorted_items(items):
        if value is None:
            continue
        if key == "properties":
            nested = _parameters(value) if isinstance(value, Mapping) else []
            out.append(["properties:{", *nested, "}"])
        elif key == "required":
            out.append(["required:[", *_names(value), "]"])
        elif key == "type":
            kinds: Any = (
                value.upper() if isinstance(value, str) else [_str(v).upper() for v in value]
            )
            out.append(["type:", *format_parts(kinds, quote_keys=True)])
        else:
            out.append([key + ":", *format_parts(value, quote_keys=True)])
    return _joined(out)


def declaration(function: Mapping[str, Any]) -> list[Part]:
    """One tool's ``declaration:NAME{…}`` (what goes between ``<|tool>`` and ``<tool|>``), as
    parts (``None``: the quote token)."""
    name = _str(function.get("name", _MISSING))
    out: list[Part] = ["declaration:" + name + "{description:"]
    out += _quoted(function.get("description", _MISSING))
    params = function.get("parameters", _MISSING)
    if params:
        out.append(",parameters:{")
        props = _get(params, "properties")
        if props:
            out += ["properties:{", *_parameters(props), "},"]
        if _get(params, "required"):
            out += ["required:[", *_names(params["required"]), "],"]
        if _get(params, "type"):
            out += ["type:", *_quoted(_str(params["type"]).upper()), "}"]
    if "response" in function:
        response = function["response"]
        out.append(",response:{")
        if _get(response, "description"):
            out += ["description:", *_quoted(response["description"]), ","]
        if _str(_get(response, "type")).upper() == "OBJECT":
            out += ["type:", *_quoted("OBJECT"), "}"]
    # The template trims the declaration, which starts with a word and ends with "}".
    return [*out, "}"]


__all__ = ["declaration"]
