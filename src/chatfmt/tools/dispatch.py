"""Calling a tool: arguments → validation → run (with a timeout) → observation text.

Nothing here raises for a bad call: an unknown tool, bad JSON, invalid arguments, an exception
inside the tool or a timeout each become a short :class:`ToolResult` whose ``content`` is what
the model reads next, so the agent loop can carry on and the model can correct itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pydantic
from pydantic_core import to_jsonable_python

from .schema import FunctionSpec

if TYPE_CHECKING:
    from ..messages import Message

logger = logging.getLogger("chatfmt.tools")

_MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call.

    ``content`` is the observation text for the model (the result, or ``"Error: ..."``);
    ``error`` is the problem alone, ``None`` on success; ``truncated`` says the result was cut.
    """

    name: str
    ok: bool
    content: str
    error: str | None = None
    truncated: bool = False

    @classmethod
    def failure(cls, name: str, error: str) -> ToolResult:
        """A failed call whose observation is ``Error: <error>``."""
        error = _clip(error)
        return cls(name=name, ok=False, content=f"Error: {error}", error=error)

    def to_message(self, tool_call_id: str | None = None) -> Message:
        """This result as a ``tool`` message (a ChatGLM3 observation)."""
        from ..messages import Message

        return Message(role="tool", content=self.content, name=self.name, tool_call_id=tool_call_id)


def _clip(text: str, limit: int = _MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_arguments(arguments: str | Mapping[str, Any] | None) -> dict[str, Any] | str:
    """Decode call arguments into a dict, or return a readable problem (a ``str``)."""
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not isinstance(arguments, str):
        return f"arguments must be a JSON object, got {type(arguments).__name__}"
    if not arguments.strip():
        return {}  # models often send "" for a call without arguments
    try:
        decoded = json.loads(arguments)
    except json.JSONDecodeError as exc:
        return f"arguments are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    if not isinstance(decoded, dict):
        return f"arguments must be a JSON object, got {type(decoded).__name__}"
    return decoded


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return _clip(text, 60)


def describe_validation_error(exc: pydantic.ValidationError) -> str:
    """One line per problem, naming the argument: ``missing required argument 'city'``."""
    problems: list[str] = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        kind = err.get("type", "")
        if kind == "missing" and len(err.get("loc", ())) == 1:
            problems.append(f"missing required argument '{loc}'")
        elif kind == "extra_forbidden" and len(err.get("loc", ())) == 1:
            problems.append(f"unexpected argument '{loc}'")
        else:
            msg = str(err.get("msg", "invalid value"))
            msg = msg[:1].lower() + msg[1:]
            problems.append(f"argument '{loc}': {msg} (got {_short(err.get('input'))})")
    return "; ".join(problems)


def bind(spec: FunctionSpec, arguments: dict[str, Any]) -> tuple[list[Any], dict[str, Any]] | str:
    """Validate ``arguments`` against the spec; return (args, kwargs) or a readable problem."""
    if spec.model is None:
        return [], dict(arguments)
    try:
        validated = spec.model.model_validate(arguments)
    except pydantic.ValidationError as exc:
        return f"invalid arguments for tool '{spec.name}': {describe_validation_error(exc)}"
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for pname, internal, positional in spec.bindings:
        value = getattr(validated, internal)
        if positional:
            args.append(value)
        else:
            kwargs[pname] = value
    if spec.accepts_extra and validated.model_extra:
        kwargs.update(validated.model_extra)
    return args, kwargs


def to_text(value: Any) -> str:
    """A return value as observation text: strings as they are, else JSON, else ``str()``."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(to_jsonable_python(value), ensure_ascii=False)
    except (TypeError, ValueError):  # PydanticSerializationError is a ValueError
        return str(value)


class _Aborted(Exception):
    """A tool ended with a BaseException (SystemExit, ...): awaiting that would end the loop."""


def describe_exception(exc: BaseException) -> str:
    """``ValueError: bad city`` — the type and message, never a traceback."""
    if isinstance(exc, _Aborted):
        return str(exc)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def run_in_thread(
    fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], *, name: str
) -> Any:
    """Run a sync tool in its own daemon thread and await its result.

    Why not ``asyncio.to_thread``: a timed-out call cannot be killed, and the default executor
    is joined at loop shutdown and interpreter exit, so one stuck tool would hang
    ``asyncio.run`` (and so :meth:`ToolRegistry.call`) and the process exit. A daemon thread
    is simply abandoned.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if future.done():  # cancelled by a timeout meanwhile
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def worker() -> None:
        try:
            outcome: tuple[bool, Any] = (True, context.run(fn, *args, **kwargs))
        except Exception as exc:
            outcome = (False, exc)
        except BaseException as exc:  # sys.exit() in a tool is just a failed call, not an exit
            outcome = (False, _Aborted(describe_exception(exc)))
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop closed after a timeout; nobody waits any more
            pass

    threading.Thread(target=worker, name=f"chatfmt-tool-{name}", daemon=True).start()
    return await future
