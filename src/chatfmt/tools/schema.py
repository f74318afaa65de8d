"""JSON schema and argument validation for tools, built from Python signatures with pydantic.

The schema of a function comes from its signature: ``typing.Annotated[T, "description"]``
(as in ChatGLM3's ``register_tool``) or ``Annotated[T, Field(...)]``, defaults, ``Literal`` and
``Enum`` (→ ``enum``), ``Optional``, lists and dicts; its docstring gives the description (first
paragraph) and parameter descriptions (Google-style ``Args:`` or Sphinx ``:param x:`` lines).
The schema is cleaned for prompts: no ``title`` keys, ``$ref`` inlined, ``Optional[T] = None``
shown as ``T``, and ``type`` / ``description`` first in each property.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from ..errors import ToolError

#: OpenAI's rule for function names; it also keeps a ChatGLM3 metadata line to one word.
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_SECTION_RE = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Returns|Return|Yields|"
    r"Raises|Examples?|Notes?|Attributes|Warnings?|See Also|Todo|References)\s*:\s*$"
)
_ARGS_SECTIONS = {"Args", "Arguments", "Parameters", "Params", "Keyword Args", "Keyword Arguments"}
_ARG_LINE_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_SPHINX_PARAM_RE = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_KEY_ORDER = ("type", "description", "enum", "const", "items", "properties", "required")


@dataclass(frozen=True)
class Docstring:
    """What a docstring says: the description and per-parameter descriptions."""

    description: str = ""
    params: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> Docstring:
    """Parse the first paragraph and Google-style ``Args:`` / Sphinx ``:param:`` lines."""
    if not doc:
        return Docstring()
    lines = inspect.cleandoc(doc).splitlines()
    first: list[str] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or _SECTION_RE.match(stripped) or stripped.startswith(":"):
            break
        first.append(stripped)
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    entry_indent = 0
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION_RE.match(stripped)
        if header and indent == 0:
            section, current = header.group(1), None
            continue
        sphinx = _SPHINX_PARAM_RE.match(stripped)
        if sphinx:
            section, current = None, sphinx.group(1)
            params[current] = sphinx.group(2).strip()
            entry_indent = indent
            continue
        if not stripped:
            continue
        if indent == 0 and section is not None:
            section, current = None, None
        if section in _ARGS_SECTIONS:
            match = _ARG_LINE_RE.match(stripped)
            if match and (current is None or indent <= entry_indent):
                current, entry_indent = match.group(1), indent
                params[current] = match.group(3).strip()
                continue
        if current is not None and indent > entry_indent:
            params[current] = (params[current] + " " + stripped).strip()  # continuation line
    return Docstring(" ".join(first), params)


@dataclass(frozen=True)
class FunctionSpec:
    """A tool's name, description and parameters schema, plus what is needed to call it.

    ``fn`` is ``None`` for a tool known only by its schema (registered from a tool dict).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] | None = None
    model: type[BaseModel] | None = None
    #: (parameter name, model field name, positional only) in signature order.
    bindings: tuple[tuple[str, str, bool], ...] = ()
    accepts_extra: bool = False
    is_async: bool = False

    def function(self) -> dict[str, Any]:
        """The bare function object ``{"name", "description", "parameters"}`` (ChatGLM3)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def openai_tool(self) -> dict[str, Any]:
        """The OpenAI tool object ``{"type": "function", "function": {...}}``."""
        return {"type": "function", "function": self.function()}


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid tool name, else raise :class:`ToolError`."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ToolError(
            f"invalid tool name {name!r}: use 1-64 letters, digits, '_' or '-' (OpenAI's rule)"
        )
    return name


def spec_from_dict(value: Mapping[str, Any]) -> FunctionSpec:
    """A schema-only spec from an OpenAI tool dict or a bare function dict."""
    fn = value.get("function")
    obj: Mapping[str, Any] = (
        fn if value.get("type") == "function" and isinstance(fn, Mapping) else value
    )
    name = obj.get("name")
    if not isinstance(name, str):
        raise ToolError("a tool dict needs a 'name' (OpenAI shape: {'type': 'function', ...})")
    parameters = obj.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, Mapping):
        raise ToolError(f"tool {name!r}: 'parameters' must be a JSON schema object")
    description = obj.get("description", "")
    return FunctionSpec(
        name=check_name(name),
        description=description if isinstance(description, str) else str(description),
        parameters=json.loads(json.dumps(parameters)),  # a private deep copy
    )


def _is_async(fn: Callable[..., Any]) -> bool:
    target = getattr(fn, "func", fn)  # functools.partial
    call = getattr(target, "__call__", None)  # noqa: B004 - callable objects
    return inspect.iscoroutinefunction(target) or (
        not inspect.isfunction(target) and inspect.iscoroutinefunction(call)
    )


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    target = getattr(fn, "func", fn)
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = getattr(target, "__call__", target)  # noqa: B004
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:
        raise ToolError(
            f"cannot resolve the type annotations of {getattr(fn, '__name__', fn)!r} ({exc}); "
            "define the types it uses at module level"
        ) from None


def spec_from_function(
    fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> FunctionSpec:
    """Build the spec of a Python function (sync or async) from its signature and docstring."""
    if not callable(fn):
        raise ToolError(f"cannot register {fn!r}: not callable")
    tool_name = check_name(name if name is not None else getattr(fn, "__name__", type(fn).__name__))
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolError(f"tool {tool_name!r}: cannot read its signature ({exc})") from None
    hints = _type_hints(fn)
    doc = parse_docstring(inspect.getdoc(fn))
    fields: dict[str, Any] = {}
    bindings: list[tuple[str, str, bool]] = []
    accepts_extra = False
    for i, (pname, param) in enumerate(signature.parameters.items()):
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            accepts_extra = True
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            continue  # a model passes named arguments only
        hint = hints.get(pname, Any)
        annotated_doc, base, metadata = _split_annotated(hint)
        field_infos = [m for m in metadata if isinstance(m, FieldInfo)]
        default: Any = param.default
        if isinstance(default, FieldInfo):  # def f(x: int = Field(3, description=...))
            field_infos.append(default)
        desc = (
            annotated_doc
            or next((f.description for f in field_infos if f.description), None)
            or doc.params.get(pname)
        )
        extra = Field(alias=pname, description=desc) if desc else Field(alias=pname)
        annotation: Any = base
        for meta in (*metadata, extra):  # nested Annotated flattens into one
            annotation = Annotated[annotation, meta]
        # Field names are internal ("p0", ...) and aliased to the parameter names, so a
        # parameter may be called "json", "copy" or "_x" without clashing with BaseModel.
        internal = f"p{i}"
        fields[internal] = (annotation, ... if default is inspect.Parameter.empty else default)
        bindings.append((pname, internal, param.kind is inspect.Parameter.POSITIONAL_ONLY))
    config = ConfigDict(
        extra="allow" if accepts_extra else "forbid",
        arbitrary_types_allowed=True,
        populate_by_name=False,
    )
    try:
        model = pydantic.create_model(f"{tool_name}_arguments", __config__=config, **fields)
        raw = model.model_json_schema(by_alias=True)
    except Exception as exc:
        raise ToolError(f"tool {tool_name!r}: cannot build a JSON schema ({exc})") from None
    return FunctionSpec(
        name=tool_name,
        description=description if description is not None else doc.description,
        parameters=clean_schema(raw),
        fn=fn,
        model=model,
        bindings=tuple(bindings),
        accepts_extra=accepts_extra,
        is_async=_is_async(fn),
    )


def _split_annotated(hint: Any) -> tuple[str | None, Any, list[Any]]:
    """Split ``Annotated[T, "doc", meta...]`` into (doc, T, [meta...])."""
    if typing.get_origin(hint) is not Annotated:
        return None, hint, []
    base, *rest = typing.get_args(hint)
    doc = next((m for m in rest if isinstance(m, str)), None)
    # Strings are descriptions; ChatGLM3's register_tool also puts a `required` bool here,
    # which the default value already expresses, so booleans are dropped too.
    metadata = [m for m in rest if not isinstance(m, str | bool)]
    return doc, base, metadata


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Make a pydantic model schema prompt-friendly (see the module docstring)."""
    defs = schema.get("$defs", {})
    try:
        inlined = _inline(schema, defs, ())
    except RecursionError:  # pragma: no cover - guarded by the cycle check below
        inlined = schema
    if not isinstance(inlined, dict):  # pragma: no cover
        return schema
    if "$ref" in json.dumps(inlined):
        inlined = dict(inlined, **({"$defs": defs} if defs else {}))  # recursive types keep $defs
    else:
        inlined.pop("$defs", None)
    properties = inlined.get("properties", {})
    required = set(inlined.get("required", []))
    out_props: dict[str, Any] = {}
    for pname, prop in properties.items():
        out_props[pname] = _order(_collapse_optional(prop) if pname not in required else prop)
    out: dict[str, Any] = {"type": "object", "properties": out_props}
    if inlined.get("required"):
        out["required"] = list(inlined["required"])
    if "$defs" in inlined:
        out["$defs"] = inlined["$defs"]
    return out


def _inline(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(n, defs, seen) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        key = ref[len("#/$defs/") :]
        if key in seen or key not in defs:
            return {k: v for k, v in node.items() if k != "title"}  # recursive: keep the $ref
        merged = dict(_inline(defs[key], defs, (*seen, key)))
        merged.update({k: _inline(v, defs, seen) for k, v in node.items() if k != "$ref"})
        merged.pop("title", None)
        return merged
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "patternProperties") and isinstance(value, dict):
            out[key] = {k: _inline(v, defs, seen) for k, v in value.items()}
        elif key in ("default", "enum", "const", "examples", "required"):
            out[key] = value  # values, not schemas: a property named "title" stays
        else:
            out[key] = _inline(value, defs, seen)
    return out


def _collapse_optional(prop: dict[str, Any]) -> dict[str, Any]:
    """``{"anyOf": [X, {"type": "null"}], "default": None}`` → ``X`` (the default says it)."""
    options = prop.get("anyOf")
    if not isinstance(options, list) or prop.get("default", ...) is not None:
        return prop
    non_null = [o for o in options if o != {"type": "null"}]
    if len(non_null) != 1 or len(non_null) == len(options):
        return prop
    out = dict(non_null[0])
    out.update({k: v for k, v in prop.items() if k not in ("anyOf", "default")})
    return out


def _order(prop: dict[str, Any]) -> dict[str, Any]:
    first = {k: prop[k] for k in _KEY_ORDER if k in prop}
    return first | {k: v for k, v in prop.items() if k not in first}
