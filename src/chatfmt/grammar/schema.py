"""JSON Schema → GBNF rules, for values written as JSON or as Python literals.

What is enforced: ``type`` (one or several), ``enum``, ``const``, ``properties`` with
``required`` (optional properties may be left out; declared order is kept),
``additionalProperties`` (``false``, ``true`` or a schema; when absent and properties are
declared, only those are generated, which the schema allows), ``items``, ``prefixItems``,
``minItems``/``maxItems``, ``minLength``/``maxLength``, ``anyOf``/``oneOf``, ``allOf`` (merged),
``$ref`` to ``#/$defs/…`` or ``#/definitions/…`` (recursion allowed), ``format`` ``date``,
``time``, ``date-time`` and ``uuid``, and for integers the sign (``minimum >= 0``) or a small
range (at most 256 values).

Anything else that restricts values (``pattern``, ``not``, ``multipleOf``, other bounds,
…) cannot be enforced by these grammars: with ``strict=True`` it is an error
(:class:`SchemaError`, naming the keyword and where it is), otherwise it is ignored and listed
in :attr:`SchemaConverter.ignored`, and the value follows the rest of the schema.

Python literals (ChatGLM3's ``tool_call(k=v)``) differ from JSON in ``True``/``False``/
``None`` and in string escapes (no ``\\/``); the structure is the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from ..errors import SchemaError, SchemaTooDeep
from ..pycall import is_argument_name
from .gbnf import WS_RULE, Rules, literal, repeat

Syntax = Literal["json", "python"]

#: Keywords that only describe: no effect on which values are valid.
_ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "$schema", "$id", "$comment",
        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "discriminator",
        "strict", "name", "nullable",
    }
)  # fmt: skip
#: Keywords handled below (for their types).
_HANDLED = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties", "items",
        "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "anyOf", "oneOf",
        "allOf", "$ref", "format", "minimum", "maximum",
    }
)  # fmt: skip
_FORMATS = {
    "date": "date",
    "time": "time",
    "date-time": "date-time",
    "uuid": "uuid",
}
_MAX_INT_RANGE = 256
#: The largest string length and item count a grammar spells out.
_MAX_LENGTH, _MAX_ITEMS = 1000, 100
#: How deep schemas may nest (subschemas within subschemas, ``$ref`` hops included). Real
#: tool and output schemas stay within a dozen levels; the limit keeps a hostile one from
#: exhausting Python's recursion (several frames per level) and from building a grammar
#: llama.cpp would have to recurse through as deeply.
MAX_SCHEMA_DEPTH = 64


class SchemaConverter:
    """Converts schemas into rules of one :class:`~chatfmt.grammar.gbnf.Rules` set.

    ``strict``: fail on keywords that cannot be enforced instead of ignoring them.
    """

    def __init__(
        self,
        rules: Rules,
        root_schema: Mapping[str, Any] | bool = True,
        *,
        syntax: Syntax = "json",
        strict: bool = False,
    ) -> None:
        self.rules = rules
        self.syntax = syntax
        self.strict = strict
        self._root = root_schema
        self._refs: dict[str, str] = {}
        #: ``(path, keyword)`` of constraints left out of the grammar (non-strict only).
        self.ignored: list[tuple[str, str]] = []
        self.ws = rules.shared("ws", WS_RULE)
        self._depth = 0

    # ==== Entry point ====

    def value(self, schema: Any, hint: str = "value", path: str = "") -> str:
        """A GBNF expression for the values ``schema`` allows."""
        if self._depth >= MAX_SCHEMA_DEPTH:
            raise SchemaTooDeep(
                f"the schema nests more than {MAX_SCHEMA_DEPTH} levels deep; flatten it "
                f"(at most {MAX_SCHEMA_DEPTH} levels of subschemas)",
                path=path[:200] + ("…" if len(path) > 200 else ""),
            )
        self._depth += 1
        try:
            return self._value(schema, hint, path)
        finally:
            self._depth -= 1

    def _value(self, schema: Any, hint: str, path: str) -> str:
        if schema is True or schema == {}:
            return self._any()
        if schema is False:
            raise SchemaError("the schema 'false' allows no value", path=path)
        if not isinstance(schema, Mapping):
            raise SchemaError(f"a schema must be an object or a boolean, not {schema!r}", path=path)
        if "$ref" in schema:
            return self._ref(schema, path)
        if "allOf" in schema:
            return self.value(self._merge_all_of(schema, path), hint, path)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                rest = {k: v for k, v in schema.items() if k != key}
                branches = _list(schema[key], key, path)
                alts = [
                    self.value(
                        self._merge(rest, _as_mapping(b, path), path), hint, f"{path}.{key}[{i}]"
                    )
                    for i, b in enumerate(branches)
                ]
                return self.rules.add(hint, " | ".join(alts))
        self._check_keywords(schema, path)
        if "const" in schema:
            return self._literal(schema["const"], path)
        if "enum" in schema:
            values = _list(schema["enum"], "enum", path)
            return "(" + " | ".join(self._literal(v, path) for v in values) + ")"
        types = schema.get("type")
        if types is None:
            if "properties" in schema or "additionalProperties" in schema:
                types = "object"
            elif "items" in schema or "prefixItems" in schema:
                types = "array"
            else:
                return self._any()
        if isinstance(types, list):
            alts = [self._typed(schema, t, hint, path) for t in types]
            return "(" + " | ".join(alts) + ")"
        return self._typed(schema, types, hint, path)

    # ==== Types ====

    def _typed(self, schema: Mapping[str, Any], kind: Any, hint: str, path: str) -> str:
        if kind == "object":
            return self._object(schema, hint, path)
        if kind == "array":
            return self._array(schema, hint, path)
        if kind == "string":
            return self._string(schema, path)
        if kind == "integer":
            return self._integer(schema, path)
        if kind == "number":
            self._unenforced(schema, path, ("minimum", "maximum"))
            return self._primitive("number")
        if kind == "boolean":
            return self._primitive("boolean")
        if kind == "null":
            return self._primitive("null")
        self._ignore(path, f"type {kind!r}", why="is not a JSON Schema type")
        return self._any()

    def _object(self, schema: Mapping[str, Any], hint: str, path: str) -> str:
        name = self.rules.reserve(hint)
        members = self.members(schema, hint, path)
        body = f'"{{" {self.ws} {members} {self.ws} "}}"' if members else f'"{{" {self.ws} "}}"'
        return self.rules.define(name, body)

    def members(
        self, schema: Mapping[str, Any] | bool, hint: str, path: str = "", *, kwargs: bool = False
    ) -> str:
        """The inside of an object of ``schema``: its properties, comma-separated (``""``
        when it can only be empty). ``kwargs``: as Python keyword arguments, ``k=v``."""
        schema = _as_mapping(schema, path)
        self._check_keywords(schema, path)
        props = schema.get("properties") or {}
        if not isinstance(props, Mapping):
            raise SchemaError("'properties' must be an object", path=path)
        required = set(_list(schema.get("required", []), "required", path))
        extra = schema.get("additionalProperties", None if props else True)
        missing = [k for k in required if k not in props]
        if missing and extra is False:
            raise SchemaError(
                f"required properties {missing} are not in 'properties' and "
                "additionalProperties is false: no object is valid",
                path=path,
            )
        # A required name without a schema may hold any value.
        props = {**props, **dict.fromkeys(missing, True)}
        items: list[tuple[str, bool]] = []
        for key, sub in props.items():
            value = self.value(sub, f"{hint}-{key}", f"{path}.properties.{key}")
            items.append((self._member(key, value, hint, path, kwargs), key in required))
        sep = f'{self.ws} "," {self.ws}'
        # After the declared properties: more of additionalProperties, when allowed.
        led = free = ""
        # Extra keyword arguments are left out (allowed, never required): a grammar cannot
        # easily keep Python's keywords out of their names.
        if extra not in (None, False) and not kwargs:
            value = self.value(extra, f"{hint}-extra", f"{path}.additionalProperties")
            colon = f'{self.ws} ":" {self.ws}'
            kv = self.rules.add(f"{hint}-extra-kv", f"{self._string_rule()} {colon} {value}")
            led, free = f"({sep} {kv})*", repeat(kv, 0, None, sep=sep)
        # Declared properties in order, each optional one present or not, commas between:
        # led: the rest when a comma must precede its first member; free: when none may.
        for kv, is_required in reversed(items):
            with_led = f"{sep} {kv} {led}".rstrip()
            with_free = f"{kv} {led}".rstrip()
            if is_required:
                led, free = with_led, with_free
            else:
                led = self.rules.add(f"{hint}-rest", _optional(with_led, led))
                free = self.rules.add(f"{hint}-rest", _optional(with_free, free))
        return free

    def _member(self, key: str, value: str, hint: str, path: str, kwargs: bool) -> str:
        if kwargs:
            if not is_argument_name(key):
                raise SchemaError(
                    f"property {key!r} cannot be a keyword argument (not a Python name)", path=path
                )
            return self.rules.add(f"{hint}-{key}-kv", f"{literal(key + '=')} {value}")
        return self.rules.add(
            f"{hint}-{key}-kv", f'{self._key(key)} {self.ws} ":" {self.ws} {value}'
        )

    def _array(self, schema: Mapping[str, Any], hint: str, path: str) -> str:
        low, high = self._bounds(schema, "minItems", "maxItems", _MAX_ITEMS, path)
        sep = f'{self.ws} "," {self.ws}'
        items = schema.get("items", True)
        prefix = _list(schema.get("prefixItems", []), "prefixItems", path)
        if isinstance(items, list):  # draft 4-2019: "items" as a list is a tuple
            prefix, items = items, schema.get("additionalItems", True)
        if prefix:
            self._unenforced(schema, path, ("minItems", "maxItems"))
            # A tuple: the listed items in order, then (if allowed) more of ``items``.
            parts = [
                self.value(s, f"{hint}-{i}", f"{path}.prefixItems[{i}]")
                for i, s in enumerate(prefix)
            ]
            body = f" {sep} ".join(parts)
            if items is not False:
                item = self.value(items, f"{hint}-item", f"{path}.items")
                body += f" ({sep} {item})*"
            return self.rules.add(hint, f'"[" {self.ws} {body} {self.ws} "]"')
        item = self.value(items, f"{hint}-item", f"{path}.items")
        inner = repeat(item, low, high, sep=sep)
        return self.rules.add(hint, f'"[" {self.ws} {inner} {self.ws} "]"')

    def _string(self, schema: Mapping[str, Any], path: str) -> str:
        fmt = schema.get("format")
        if fmt is not None:
            if fmt in _FORMATS:
                return self._format(_FORMATS[fmt])
            self._unenforced(schema, path, ("format",))
        low, high = self._bounds(schema, "minLength", "maxLength", _MAX_LENGTH, path)
        if low == 0 and high is None:
            return self._string_rule()
        char = self.char_rule()
        return f'"\\"" {repeat(char, low, high)} "\\""'

    def _integer(self, schema: Mapping[str, Any], path: str) -> str:
        low, high = schema.get("minimum"), schema.get("maximum")
        if isinstance(low, int) and isinstance(high, int) and 0 <= high - low < _MAX_INT_RANGE:
            return "(" + " | ".join(literal(str(n)) for n in range(low, high + 1)) + ")"
        if isinstance(low, int) and low >= 0 and high is None:
            if low <= 1:
                return "[1-9] [0-9]{0,15}" if low == 1 else '("0" | [1-9] [0-9]{0,15})'
            self._unenforced(schema, path, ("minimum",))
            return '("0" | [1-9] [0-9]{0,15})'
        self._unenforced(schema, path, ("minimum", "maximum"))
        return self._primitive("integer")

    def _bounds(
        self, schema: Mapping[str, Any], lo: str, hi: str, cap: int, path: str
    ) -> tuple[int, int | None]:
        """A count's bounds; past ``cap`` a bound is not enforced (llama.cpp refuses grammars
        whose repetitions expand past a few thousand symbols)."""
        low = _int(schema.get(lo, 0), lo, path)
        high = schema.get(hi)
        high = None if high is None else _int(high, hi, path)
        if high is not None and high < low:
            raise SchemaError(f"{lo} {low} is more than {hi} {high}: no value is valid", path=path)
        if low > cap:
            self._ignore(path, lo, why=f"above {cap} cannot be enforced")
            low = 0
        if high is not None and high > cap:
            self._ignore(path, hi, why=f"above {cap} cannot be enforced")
            high = None
        return low, high

    # ==== Shared rules ====

    def _primitive(self, kind: str) -> str:
        if kind == "boolean":
            t, f = ("True", "False") if self.syntax == "python" else ("true", "false")
            return self.rules.shared(f"{self.syntax}-boolean", f'"{t}" | "{f}"')
        if kind == "null":
            return self.rules.shared(
                f"{self.syntax}-null", '"None"' if self.syntax == "python" else '"null"'
            )
        integer = self.rules.shared("integer", '"-"? ("0" | [1-9] [0-9]{0,15})')
        if kind == "integer":
            return integer
        return self.rules.shared("number", f'{integer} ("." [0-9]+)? ([eE] [-+]? [0-9]+)?')

    def char_rule(self) -> str:
        escapes = '["\\\\bfnrt]' if self.syntax == "python" else '["\\\\/bfnrt]'
        return self.rules.shared(
            f"{self.syntax}-char",
            f'[^"\\\\\\x00-\\x1F] | "\\\\" ({escapes} | "u" [0-9a-fA-F]{{4}})',
        )

    def _string_rule(self) -> str:
        char = self.char_rule()
        return self.rules.shared(f"{self.syntax}-string", f'"\\"" {char}* "\\""')

    def _any(self) -> str:
        """Any value (of this syntax), arbitrarily nested."""
        name = f"{self.syntax}-value"
        if name in self.rules:
            return name
        self.rules.shared(name, "")  # reserved: the containers below refer to it
        string, sep = self._string_rule(), f'{self.ws} "," {self.ws}'
        kv = f'{string} {self.ws} ":" {self.ws} {name}'
        obj = self.rules.shared(
            f"{self.syntax}-object", f'"{{" {self.ws} {repeat(kv, 0, None, sep=sep)} {self.ws} "}}"'
        )
        arr = self.rules.shared(
            f"{self.syntax}-array", f'"[" {self.ws} {repeat(name, 0, None, sep=sep)} {self.ws} "]"'
        )
        alts = [
            obj,
            arr,
            string,
            self._primitive("number"),
            self._primitive("boolean"),
            self._primitive("null"),
        ]
        return self.rules.define(name, " | ".join(alts))

    def _format(self, fmt: str) -> str:
        date = '[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1])'
        zone = '("Z" | [+-] [0-9]{2} ":" [0-9]{2})'
        time = (
            f'([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{{1,6}})? {zone}'
        )
        bodies = {
            "date": date,
            "time": time,
            "date-time": f'{date} "T" {time}',
            "uuid": '[0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}',
        }
        return self.rules.shared(f"{fmt}-string", f'"\\"" {bodies[fmt]} "\\""')

    # ==== Helpers ====

    def _key(self, key: str) -> str:
        return literal(json.dumps(key, ensure_ascii=False))

    def _literal(self, value: Any, path: str) -> str:
        try:
            return literal(self._dump(value))
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"const/enum value {value!r} is not JSON: {exc}", path=path) from None

    def _dump(self, value: Any) -> str:
        """``value`` written in this syntax (as the parser will read it back)."""
        if self.syntax == "json":
            return json.dumps(value, ensure_ascii=False, allow_nan=False)
        if value is None or isinstance(value, bool):
            return repr(value)
        if isinstance(value, list):
            return "[" + ", ".join(self._dump(v) for v in value) + "]"
        if isinstance(value, dict):
            items = (
                f"{json.dumps(str(k), ensure_ascii=False)}: {self._dump(v)}"
                for k, v in value.items()
            )
            return "{" + ", ".join(items) + "}"
        return json.dumps(value, ensure_ascii=False, allow_nan=False)

    def _ref(self, schema: Mapping[str, Any], path: str) -> str:
        ref = schema["$ref"]
        siblings = {k: v for k, v in schema.items() if k != "$ref" and k not in _ANNOTATIONS}
        target = self._target(ref, path)
        if siblings:  # its own rule: the siblings apply here only, not at every use
            return self.value(self._merge(_as_mapping(target, path), siblings, path), "ref", path)
        if ref in self._refs:
            return self._refs[ref]
        name = self.rules.reserve(str(ref).rsplit("/", 1)[-1] or "root-ref")
        self._refs[ref] = name  # before converting: a recursive schema refers back to it
        body = self.value(target, name, f"{path}.$ref")
        if name in body.split(" | ") or body == name:
            raise SchemaError(f"$ref {ref!r} refers to itself with nothing in between", path=path)
        return self.rules.define(name, body)

    def _merge_all_of(self, schema: Mapping[str, Any], path: str) -> dict[str, Any]:
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for i, part in enumerate(_list(schema["allOf"], "allOf", path)):
            part = dict(_as_mapping(part, f"{path}.allOf[{i}]"))
            if "$ref" in part:
                part = {**_as_mapping(self._target(part.pop("$ref"), path), path), **part}
            merged = self._merge(merged, part, f"{path}.allOf[{i}]")
        return merged

    def _merge(self, base: Mapping[str, Any], more: Mapping[str, Any], path: str) -> dict[str, Any]:
        """Both schemas at once (as far as a grammar can): properties and required lists
        joined; another keyword in both must agree, or the second is not enforced."""
        merged = dict(base)
        for key, value in more.items():
            if key == "properties":
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required":
                merged["required"] = [*merged.get("required", []), *value]
            elif key in merged and merged[key] != value and key not in _ANNOTATIONS:
                self._ignore(path, key, why="given twice with different values is not merged")
            else:
                merged.setdefault(key, value)
        return merged

    def _target(self, ref: Any, path: str) -> Any:
        """What a local ``$ref`` (``#/$defs/Name``) points at."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaError(
                f"$ref {ref!r}: only references inside the schema ('#/...') are supported",
                path=path,
            )
        target: Any = self._root
        for part in ref[1:].lstrip("/").split("/") if ref.strip("#/") else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise SchemaError(f"$ref {ref!r} points at nothing", path=path)
            target = target[part]
        return target

    def _check_keywords(self, schema: Mapping[str, Any], path: str) -> None:
        for key in schema:
            if key not in _ANNOTATIONS and key not in _HANDLED:
                self._ignore(path, key)

    def _unenforced(self, schema: Mapping[str, Any], path: str, keys: tuple[str, ...]) -> None:
        for key in keys:
            if key in schema:
                self._ignore(path, key)

    def _ignore(self, path: str, key: str, *, why: str = "") -> None:
        if self.strict:
            what = f"{key!r} {why}" if why else f"{key!r} is not supported"
            raise SchemaError(
                f"{what} by chatfmt's constrained decoding; remove it or send the schema "
                "without strict",
                path=path,
            )
        self.ignored.append((path, key))


def _optional(present: str, absent: str) -> str:
    """``present`` or else ``absent`` (which may be empty)."""
    return f"({present}) | {absent}" if absent else f"({present})?"


def _list(value: Any, key: str, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise SchemaError(f"{key!r} must be an array", path=path)
    return value


def _as_mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is True:
        return {}
    if not isinstance(value, Mapping):
        raise SchemaError(f"a schema must be an object, not {value!r}", path=path)
    return value


def _int(value: Any, key: str, path: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SchemaError(f"{key!r} must be a non-negative integer", path=path)
    return value
