"""Python call syntax for tool arguments: ``tool_call(location="beijing", unit="celsius")``.

ChatGLM3 writes tool arguments as a Python call in a fenced code block. The official demos
``eval`` it; chatfmt parses it with :mod:`ast` and accepts literals only: strings, numbers,
``True``/``False``/``None`` and lists, tuples and dicts of them. Anything else (names,
attribute access, calls, lambdas, comprehensions, f-strings, operators, starred or positional
arguments) is rejected with a reason. Nothing here ever evaluates or executes model output.

:func:`format_tool_call` is the inverse, used to render calls: ``parse(format(x)) == x``.
"""

from __future__ import annotations

import ast
import json
import keyword
import math
import re
import unicodedata
import warnings
from collections.abc import Mapping
from typing import Any

from .errors import PyCallError

#: The function name ChatGLM3 uses for tool calls.
TOOL_CALL = "tool_call"
#: Longest call text parsed; longer text is rejected before :mod:`ast` sees it.
MAX_SOURCE_CHARS = 1_000_000
#: Deepest nesting of lists, tuples and dicts accepted in one argument value.
MAX_DEPTH = 64


def parse_tool_call(source: str, *, function: str = TOOL_CALL) -> dict[str, Any]:
    """The keyword arguments of ``function(k=v, ...)`` in ``source``, as JSON-ready values.

    Tuples become lists. Raises :class:`PyCallError` for anything that is not one call of
    ``function`` with literal keyword arguments.
    """
    if len(source) > MAX_SOURCE_CHARS:
        raise PyCallError(f"call text is longer than {MAX_SOURCE_CHARS} characters")
    try:
        with warnings.catch_warnings():
            # Invalid escapes like "\d" only warn (as in eval); the value is still literal.
            warnings.simplefilter("ignore")
            tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise PyCallError(f"not valid Python: {exc.msg}") from None
    except (MemoryError, RecursionError, ValueError):
        # The parser gives up on absurd nesting with MemoryError/RecursionError.
        raise PyCallError("the call is nested too deeply to parse") from None
    call = tree.body
    if not isinstance(call, ast.Call):
        raise PyCallError(f"expected a call of {function}(...), got {_describe(call)}")
    if not isinstance(call.func, ast.Name) or call.func.id != function:
        raise PyCallError(
            f"expected a call of {function}(...), got a call of {_describe(call.func)}"
        )
    if call.args:
        first = call.args[0]
        if isinstance(first, ast.Starred):
            raise PyCallError("starred arguments (*args) are not allowed")
        raise PyCallError("positional arguments are not allowed; write name=value")
    out: dict[str, Any] = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise PyCallError("**kwargs arguments are not allowed; write name=value")
        if kw.arg in out:
            raise PyCallError(f"argument {kw.arg!r} is given twice")
        out[kw.arg] = _literal(kw.value, 0)
    return out


def _literal(node: ast.expr, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise PyCallError(f"argument values are nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, ast.Constant):
        return _constant(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = node.operand
        # One sign before a number literal, as repr() writes negative numbers; no arithmetic.
        if (
            isinstance(operand, ast.Constant)
            and isinstance(operand.value, int | float)
            and not isinstance(operand.value, bool)
        ):
            value = _constant(operand.value)
            return -value if isinstance(node.op, ast.USub) else value
        raise PyCallError("a sign is allowed only directly before a number")
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e, depth + 1) for e in node.elts]
    if isinstance(node, ast.Dict):
        result: dict[str, Any] = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:
                raise PyCallError("dict unpacking (**) is not allowed")
            if not isinstance(k, ast.Constant) or not isinstance(k.value, str):
                raise PyCallError("dict keys must be string literals (JSON object keys)")
            result[k.value] = _literal(v, depth + 1)
        return result
    raise PyCallError(f"only literal values are allowed, got {_describe(node)}")


def _constant(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        # JSON readers (Python's own included) refuse integers past ~4,300 digits.
        if value.bit_length() > 13_000:
            raise PyCallError("integer literal too large")
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise PyCallError("string literal holds a lone surrogate (not valid Unicode)") from None
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PyCallError("numbers must be finite")
        return value
    raise PyCallError(f"{type(value).__name__} literals are not allowed")


_DESCRIPTIONS: dict[type[ast.AST], str] = {
    ast.Name: "a name",
    ast.Attribute: "attribute access",
    ast.Call: "a function call",
    ast.Lambda: "a lambda",
    ast.ListComp: "a comprehension",
    ast.SetComp: "a comprehension",
    ast.DictComp: "a comprehension",
    ast.GeneratorExp: "a generator expression",
    ast.JoinedStr: "an f-string",
    ast.BinOp: "an operator expression",
    ast.BoolOp: "an operator expression",
    ast.Compare: "a comparison",
    ast.Subscript: "a subscript",
    ast.Set: "a set",
    ast.IfExp: "a conditional expression",
    ast.Starred: "a starred expression",
    ast.NamedExpr: "an assignment expression",
    ast.Await: "await",
}


def _describe(node: ast.AST) -> str:
    for kind, text in _DESCRIPTIONS.items():
        if isinstance(node, kind):
            return text
    return type(node).__name__


# ==== Formatting (the inverse) ====


def is_argument_name(name: str) -> bool:
    """Whether ``name`` can be written as ``name=value`` and read back unchanged.

    Python normalises identifiers with NFKC, so a name that changes under NFKC would come
    back as a different key.
    """
    return (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and unicodedata.normalize("NFKC", name) == name
    )


def format_value(value: Any) -> str:
    """A JSON value as a Python literal (strings double-quoted, ``True``/``False``/``None``).

    Raises :class:`ValueError` for values with no literal form (non-finite floats, other types).
    """
    if value is None:
        return "None"
    if value is True:
        return "True"
    if value is False:
        return "False"
    if isinstance(value, str):
        # JSON string escapes are valid Python string escapes. Lone surrogates are escaped
        # too: they have no UTF-8 form, so no tokenizer could encode them raw.
        return _SURROGATE.sub(_escape, json.dumps(value, ensure_ascii=False))
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} has no Python literal form; use a finite number")
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        items = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"dict key {k!r} is not a string")
            items.append(f"{format_value(k)}: {format_value(v)}")
        return "{" + ", ".join(items) + "}"
    raise ValueError(f"{type(value).__name__} values have no literal form in a tool call")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def format_tool_call(arguments: Mapping[str, Any], *, function: str = TOOL_CALL) -> str:
    """``function(k=v, ...)`` for a JSON arguments object (the form ChatGLM3 writes)."""
    parts = []
    for name, value in arguments.items():
        if not is_argument_name(name):
            raise ValueError(
                f"argument name {name!r} cannot be written as name=value in Python; "
                "rename the parameter or give the call's raw text"
            )
        parts.append(f"{name}={format_value(value)}")
    return f"{function}({', '.join(parts)})"
