"""Values of calls written as text: typed by the tool's JSON schema, and written back.

Formats whose calls carry each argument as raw text (Qwen3-Coder's and Qwen3.5's
``<parameter=…>``, GLM-4.5+'s ``<arg_value>``, MiniMax's ``<parameter name=…>``, Gemma 4's
notation) read a value by the type its tool's schema gives it (:func:`typed_value`), from the
schemas of a request's tools (:func:`tool_schemas`, ``$ref`` resolved), and write values back as
their templates print them (:func:`render_value`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...grammar import ToolLike
from ...jsonscan import WS
from ...markup import escape_lone_surrogates
from ...messages import Tool

#: Tool name → the ``properties`` of its parameters' schema: what types a call's values.
Schemas = Mapping[str, Mapping[str, Any]]

_INTEGER = re.compile(r"-?[0-9]+")
# What a value must start with to be read as JSON when no schema says what it is.
_JSON_START = tuple('{["-0123456789')
# Schema nesting read for types, and schema nodes a tool's $refs are resolved into: a request's
# tools are not trusted to be small or acyclic.
_MAX_DEPTH = 64
_REF_BUDGET = 10_000


def schema_types(schema: Any, _depth: int = 0) -> tuple[str, ...] | None:
    """The JSON types a parameter's schema allows; ``None`` when it does not say.

    Read from ``type`` (a name or a list), else ``const`` (its value's type), else ``enum``
    (its members' types), else the branches: ``anyOf`` / ``oneOf`` allow what any branch
    allows (``None`` if a branch says nothing: that branch allows anything), ``allOf`` what
    every branch that says allows. A ``$ref`` says nothing here: :func:`tool_schemas`
    resolves the ones the tool's ``$defs`` / ``definitions`` hold before this is asked.
    """
    if not isinstance(schema, Mapping) or _depth > _MAX_DEPTH:
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return (kind,)
    if isinstance(kind, list) and kind and all(isinstance(k, str) for k in kind):
        return tuple(kind)
    members = _members(schema)
    if members is not None:
        return tuple(dict.fromkeys(_json_type(v) for v in members))
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            found: list[str] = []
            for branch in branches:
                types = schema_types(branch, _depth + 1)
                if types is None:
                    return None
                found += types
            return tuple(dict.fromkeys(found))
    branches = schema.get("allOf")
    if isinstance(branches, list):
        met: tuple[str, ...] | None = None
        for branch in branches:
            types = schema_types(branch, _depth + 1)
            if types is not None:
                met = types if met is None else _meet(met, types)
        return met or None  # no branch says, or they contradict: nothing to go by
    return None


def _members(schema: Mapping[str, Any]) -> list[Any] | None:
    """The values a schema's ``const`` or ``enum`` allows (``None``: it has neither)."""
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return enum if isinstance(enum, list) and enum else None


def _json_type(value: Any) -> str:
    """The JSON type of a Python value read from JSON."""
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "object" if isinstance(value, Mapping) else "array"


def _meet(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    """The types both ``a`` and ``b`` allow (an integer is a number)."""
    out = []
    for kind in a:
        if kind in b or (kind == "integer" and "number" in b):
            out.append(kind)
        elif kind == "number" and "integer" in b:
            out.append("integer")
    return tuple(dict.fromkeys(out))


def _json(text: str) -> Any:
    """``text`` as strict JSON (finite numbers only); raises ``ValueError`` if it is not."""
    value = json.loads(text, parse_constant=_no_constant)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def _as_type(text: str, kind: str) -> tuple[bool, Any]:
    """``(True, value)`` when ``text`` reads as a value of JSON type ``kind``."""
    t = text.strip(WS)
    try:
        if kind == "integer":
            return (True, int(t)) if _INTEGER.fullmatch(t) else (False, None)
        if kind == "boolean":
            # The templates write Python's True/False; JSON's spelling is read too.
            low = t.lower()
            return (low in ("true", "false"), low == "true")
        if kind == "null":
            return (t in ("null", "None"), None)
        if kind in ("number", "object", "array"):
            value = _json(t)
            if kind == "number":
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            else:
                ok = isinstance(value, dict if kind == "object" else list)
            return (ok, value)
    except (ValueError, RecursionError):
        pass
    return (False, None)


def typed_value(text: str, schema: Any) -> Any:
    """A parameter's raw ``text`` as the value its ``schema`` says it is.

    ``schema`` is ``None`` when there is none to go by (no tools given, or a call to a tool
    that is not among them); otherwise it is the parameter's schema, and a parameter the tool
    does not declare has the empty schema ``{}`` (:func:`parameter_schema`). The rules, in
    order:

    - a ``const`` or ``enum`` member: text equal to a string member stays that string; text
      that reads as a non-string member (``8`` for ``8``, ``True`` for ``true``) is that value;
    - a schema that allows a string (:func:`schema_types`: ``type``, ``const``, ``enum``,
      ``anyOf`` / ``oneOf`` / ``allOf``, a resolved ``$ref``) keeps the text as it is;
    - a schema that says no type at all (``{}``, a description only, an unresolved ``$ref``,
      an undeclared parameter) keeps the text too: the model's ``7`` is never made a number
      without a schema that asks for one;
    - otherwise the text is read as each allowed type in turn (integer, number, boolean,
      null, object, array); when none fits it stays a string.

    Without a schema (``None``) a value that looks like JSON — an object, an array, a number,
    ``true``, ``false`` or ``null`` — is that JSON value, anything else a string.
    """
    if schema is None:
        t = text.strip(WS)
        if t.startswith(_JSON_START) or t in ("true", "false", "null"):
            try:
                return _json(t)
            except (ValueError, RecursionError):
                pass
        return text
    members = _members(schema) if isinstance(schema, Mapping) else None
    if members is not None:
        if text in members:  # a string member (no other member equals a str)
            return text
        for member in members:
            if isinstance(member, str):
                continue
            ok, value = _as_type(text, _json_type(member))
            if ok and value == member and _json_type(value) == _json_type(member):
                return value
    types = schema_types(schema)
    if types is None or "string" in types:
        return text
    for kind in types:
        ok, value = _as_type(text, kind)
        if ok:
            return value
    return text


def render_value(value: Any) -> str:
    """A parameter's value as the templates write it: mappings and lists as JSON, other
    values as Python's ``str`` (``True``, ``None``, ``1.0``); lossy where two values print
    alike (the string ``"True"`` and ``True``)."""
    if isinstance(value, (dict, list)):
        return json_text(value)
    # A lone surrogate (from a "\ud800" escape) is not text a tokenizer can take: keep it escaped.
    return escape_lone_surrogates(value if type(value) is str else str(value))


def json_text(value: Any) -> str:
    """``value`` as JSON, lone surrogates kept escaped."""
    return escape_lone_surrogates(json.dumps(value, ensure_ascii=False))


def tool_schemas(tools: Sequence[ToolLike]) -> dict[str, Mapping[str, Any]]:
    """The :data:`Schemas` of a request's ``tools``: each tool's name → the ``properties`` of
    its parameters (empty when it declares none), each ``$ref`` into the parameters'
    ``$defs`` / ``definitions`` resolved (so a string defined there types as one)."""
    schemas: dict[str, Mapping[str, Any]] = {}
    for t in tools:
        fn = Tool.of(t).function
        params = fn.get("parameters")
        root = params if isinstance(params, Mapping) else {}
        props = root.get("properties")
        if not isinstance(props, Mapping):
            schemas[fn["name"]] = {}
            continue
        budget = [_REF_BUDGET]
        schemas[fn["name"]] = {
            k: _resolve_refs(v, root, frozenset(), budget, 0) for k, v in props.items()
        }
    return schemas


def parameter_schema(schemas: Schemas | None, tool: str, name: str) -> Any:
    """What :func:`typed_value` types parameter ``name`` of a call to ``tool`` by: ``None``
    with no schemas or for a tool not among them, ``{}`` for a parameter the tool does not
    declare."""
    props = schemas.get(tool) if schemas is not None else None
    if not isinstance(props, Mapping):
        return None
    return props.get(name, {})


def _resolve_refs(
    schema: Any, root: Mapping[str, Any], seen: frozenset[str], budget: list[int], depth: int
) -> Any:
    """``schema`` with its local ``$ref`` s replaced by what they point to in ``root`` (the
    keywords beside a ``$ref`` kept); a cycle, an unknown target, too deep a nesting or an
    exhausted ``budget`` leaves a ``$ref`` as it is."""
    budget[0] -= 1
    if not isinstance(schema, Mapping) or budget[0] < 0 or depth > _MAX_DEPTH:
        return schema
    out = dict(schema)
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        target = _pointer(root, ref)
        if isinstance(target, Mapping):
            del out["$ref"]
            resolved = _resolve_refs(target, root, seen | {ref}, budget, depth + 1)
            out = {**resolved, **out}
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(out.get(key), list):
            out[key] = [_resolve_refs(b, root, seen, budget, depth + 1) for b in out[key]]
    if isinstance(out.get("items"), Mapping):
        out["items"] = _resolve_refs(out["items"], root, seen, budget, depth + 1)
    if isinstance(out.get("properties"), Mapping):
        out["properties"] = {
            k: _resolve_refs(v, root, seen, budget, depth + 1) for k, v in out["properties"].items()
        }
    return out


def _pointer(root: Mapping[str, Any], ref: str) -> Any:
    """The node a local JSON pointer (``#/$defs/Name``) names in ``root``; ``None`` if none."""
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


__all__ = [
    "Schemas",
    "json_text",
    "parameter_schema",
    "render_value",
    "schema_types",
    "tool_schemas",
    "typed_value",
]
