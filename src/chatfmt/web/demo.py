"""Two harmless demo tools for the web chat's tool mode.

``get_weather`` returns made-up readings (clearly marked as demo data); ``calculator`` evaluates
arithmetic by walking the ``ast`` of the expression — numbers and ``+ - * / ** %`` and
parentheses only. Nothing is ever passed to ``eval``.
"""

from __future__ import annotations

import ast
import math
import operator
import zlib
from collections.abc import Callable
from typing import Annotated, Any, Literal

from ..tools import ToolRegistry, tool

_CONDITIONS = ("sunny", "partly cloudy", "cloudy", "light rain", "windy", "snow")

#: Longest expression the calculator accepts, and the largest integer result (in bits): bounds
#: the work a model (or a user) can make the server do with ``9 ** 9 ** 9``.
MAX_EXPRESSION_CHARS = 500
MAX_INT_BITS = 4096

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


@tool
def get_weather(
    city: Annotated[str, "The city name, e.g. Beijing"],
    unit: Annotated[Literal["celsius", "fahrenheit"], "Temperature unit"] = "celsius",
) -> dict[str, Any]:
    """Get the current weather in a city (demo data: a fixed, made-up reading)."""
    # crc32, not hash(): the fake reading must be the same in every process.
    seed = zlib.crc32(city.strip().lower().encode("utf-8"))
    celsius = seed % 35 - 5
    temperature = celsius if unit == "celsius" else round(celsius * 9 / 5 + 32)
    return {
        "city": city,
        "temperature": temperature,
        "unit": unit,
        "condition": _CONDITIONS[seed // 35 % len(_CONDITIONS)],
        "source": "demo data, not a real weather reading",
    }


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or its result is too large."""


def _check_pow(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and abs(exponent) > 1:
        if base.bit_length() * abs(exponent) > MAX_INT_BITS * 2:
            raise CalculatorError("the result is too large")


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        # bool is an int subclass; True + 1 is not arithmetic anyone asked for.
        if isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return node.value
        raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))  # type: ignore[no-any-return]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            _check_pow(left, right)
        value = _BINARY[type(node.op)](left, right)
        if isinstance(value, complex):
            raise CalculatorError("the result is a complex number")
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise CalculatorError("the result is too large")
        return value  # type: ignore[no-any-return]
    raise CalculatorError(
        f"unsupported syntax ({type(node).__name__}); use numbers, + - * / ** % and parentheses"
    )


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression; raises :class:`CalculatorError` otherwise."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not a valid expression ({exc.msg})") from None
    except (RecursionError, MemoryError):
        raise CalculatorError("the expression is nested too deeply") from None
    try:
        value = _evaluate(tree)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large") from None
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    return value


@tool
def calculator(expression: Annotated[str, "Arithmetic, e.g. (2 + 3) * 4 ** 2 / 7"]) -> str:
    """Evaluate an arithmetic expression: numbers, + - * / ** % and parentheses."""
    return str(evaluate(expression))


def demo_tools() -> ToolRegistry:
    """A registry with :func:`get_weather` and :func:`calculator`."""
    return ToolRegistry([get_weather, calculator], timeout=5.0)


__all__ = ["CalculatorError", "calculator", "demo_tools", "evaluate", "get_weather"]
