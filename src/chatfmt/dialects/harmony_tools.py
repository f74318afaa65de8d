"""Function tools as harmony's developer message describes them: a TypeScript-like
``namespace functions { … }`` written from each tool's JSON schema, as the reference writes it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..messages import Tool


def _lines(text: str) -> list[str]:
    """Lines as Rust's ``str::lines`` gives them (``\\n`` or ``\\r\\n``, no empty last line)."""
    parts = text.split("\n")
    last = parts.pop()
    lines = [p.removesuffix("\r") for p in parts]
    return [*lines, last] if last else lines


def _default(value: Any, owner: Any, *, raw_enum: bool = True) -> str:
    """A ``default`` comment: strings quoted, an enum's string bare (or as JSON), else JSON."""
    enum = owner.get("enum") if isinstance(owner, dict) else None
    if isinstance(value, str) and not (isinstance(enum, list) and enum):
        return f'default: "{value}"'
    if isinstance(value, str) and raw_enum:
        return f"default: {value}"
    return "default: " + json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _variant(schema: Any, indent: str, *, drop: str | None, raw_enum: bool = True) -> str:
    """One ``oneOf`` variant: `` | type`` and its notes (description unless it is ``drop``)."""
    text = typescript(schema, indent + "   ")
    if isinstance(schema, dict) and schema.get("nullable") is True and "null" not in text:
        text += " | null"
    notes = [d] if (d := _str(schema, "description")) is not None and d != drop else []
    if isinstance(schema, dict) and "default" in schema:
        notes.append(_default(schema["default"], schema, raw_enum=raw_enum))
    return f"{indent} | {text}" + (" // " + " ".join(notes) if notes else "")


def _str(schema: Any, key: str) -> str | None:
    value = schema.get(key) if isinstance(schema, dict) else None
    return value if isinstance(value, str) else None


def typescript(schema: Any, indent: str = "") -> str:
    """A JSON schema as the TypeScript-like type the harmony reference writes for a tool."""
    if not isinstance(schema, dict):
        return "any"
    variants = schema.get("oneOf")
    if isinstance(variants, list):
        return "".join("\n" + _variant(v, indent, drop=None, raw_enum=False) for v in variants)
    kind = schema.get("type")
    if isinstance(kind, list):
        names = ["number" if k == "integer" else k for k in kind if isinstance(k, str)]
        if names:
            return " | ".join(names)
    if kind == "object":
        return _object(schema, indent)
    if kind == "string":
        values = schema.get("enum")
        names = [f'"{v}"' for v in values if isinstance(v, str)] if isinstance(values, list) else []
        return " | ".join(names) if names else "string"
    if kind in ("number", "integer", "boolean"):
        return "boolean" if kind == "boolean" else "number"
    if kind == "array":
        return typescript(schema["items"], indent) + "[]" if "items" in schema else "Array<any>"
    return "any"


def _object(schema: dict[str, Any], indent: str) -> str:
    desc = _str(schema, "description")
    out = (f"{indent}// {desc}\n" if desc is not None else "") + "{\n"
    props = schema.get("properties")
    if isinstance(props, dict):
        req = schema.get("required")
        required = {r for r in req if isinstance(r, str)} if isinstance(req, list) else set()
        for key, value in props.items():
            out += _property(key, value, key in required, indent)
    return out + indent + "}"


def _property(key: str, value: Any, required: bool, indent: str) -> str:
    v: dict[str, Any] = value if isinstance(value, dict) else {}
    out = ""
    if (title := _str(v, "title")) is not None:
        out += f"{indent}// {title}\n{indent}//\n"
    desc = _str(v, "description")
    if desc is not None and "oneOf" not in v:
        out += f"{indent}// {desc}\n"
    examples = v.get("examples")
    if isinstance(examples, list) and examples:
        out += f"{indent}// Examples:\n"
        out += "".join(f'{indent}// - "{e}"\n' for e in examples if isinstance(e, str))
    mark = "" if required else "?"
    variants = v.get("oneOf")
    if not isinstance(variants, list):
        text = typescript(value, indent + "    ")
        if v.get("nullable") is True and "null" not in text:
            text += " | null"
        out += f"{indent}{key}{mark}: {text},"
        if "oneOf" not in v and "default" in v:
            out += f" // {_default(v['default'], v)}"
        return out + "\n"
    # The property's description goes above, unless the first variant repeats it.
    above = desc is not None and (_str(variants[0], "description") if variants else None) != desc
    out += f"{indent}// {desc}\n" if above else ""
    out += f"{indent}// {_default(v['default'], v)}\n" if "default" in v else ""
    out += f"{indent}{key}{mark}:\n"
    for i, var in enumerate(variants):
        drop = _str(var, "description") if i == 0 and above else desc
        out += _variant(var, indent, drop=drop) + "\n"
    return out + f"{indent},\n"


def tools_section(tools: Sequence[Tool]) -> str:
    """The developer message's ``# Tools`` section for function tools."""
    parts = ["## functions\n", "namespace functions {\n"]
    for tool in tools:
        fn = tool.function
        parts += [f"// {line}" for line in _lines(_str(fn, "description") or "")]
        params = fn.get("parameters")
        signature = "()" if params is None else f"(_: {typescript(params)})"
        parts.append(f"type {tool.name} = {signature} => any;\n")
    parts.append("} // namespace functions")
    return "# Tools\n\n" + "\n".join(parts)
