"""The tool registry: register functions or tool dicts, describe them, call them safely."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

from ..errors import ToolError
from .dispatch import (
    ToolResult,
    bind,
    describe_exception,
    parse_arguments,
    run_in_thread,
    to_text,
)
from .schema import FunctionSpec, spec_from_dict, spec_from_function
from .truncate import truncate

F = TypeVar("F", bound=Callable[..., Any])

#: Attribute where :func:`tool` leaves the spec of a decorated function.
SPEC_ATTR = "__chatfmt_tool__"

logger = logging.getLogger("chatfmt.tools")


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(*, name: str | None = None, description: str | None = None) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None, /, *, name: str | None = None, description: str | None = None
) -> F | Callable[[F], F]:
    """Mark a function as a tool: ``@tool`` or ``@tool(name=..., description=...)``.

    The schema is built (and checked) at once; the function itself is returned unchanged, so
    it stays callable. Register it with ``ToolRegistry([fn])`` or ``registry.register(fn)``.
    """

    def mark(f: F) -> F:
        setattr(f, SPEC_ATTR, spec_from_function(f, name=name, description=description))
        return f

    return mark(fn) if fn is not None else mark


ToolLike = Callable[..., Any] | Mapping[str, Any] | FunctionSpec


class ToolRegistry:
    """Tools by name: their schemas for the prompt, and a dispatcher for the model's calls.

    ``timeout`` (seconds, ``None`` for none) bounds each call; ``max_result_chars`` and, with a
    ``count_tokens`` function, ``max_result_tokens`` bound the observation text.
    """

    def __init__(
        self,
        tools: Iterable[ToolLike] = (),
        *,
        timeout: float | None = 30.0,
        max_result_chars: int | None = 8000,
        max_result_tokens: int | None = None,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        if max_result_tokens is not None and count_tokens is None:
            raise ToolError("max_result_tokens needs count_tokens (a function str -> int)")
        self.timeout = timeout
        self.max_result_chars = max_result_chars
        self.max_result_tokens = max_result_tokens
        self.count_tokens = count_tokens
        self._specs: dict[str, FunctionSpec] = {}
        for item in tools:
            self.register(item)

    # -- registration -------------------------------------------------------------------------

    @overload
    def register(
        self,
        fn: F,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        replace: bool = False,
    ) -> F: ...

    @overload
    def register(
        self,
        fn: Mapping[str, Any] | FunctionSpec,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        replace: bool = False,
    ) -> FunctionSpec: ...

    @overload
    def register(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        replace: bool = False,
    ) -> Callable[[F], F]: ...

    def register(
        self,
        fn: ToolLike | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        replace: bool = False,
    ) -> Any:
        """Register a function (sync or async), an OpenAI/bare tool dict, or a spec.

        Usable as a decorator, with or without arguments. A tool dict gives a schema-only tool:
        it is described to the model, but calling it yields an error observation. Raises
        :class:`ToolError` for a bad signature or name, or a duplicate name unless ``replace``.
        """
        if fn is None:

            def deco(f: F) -> F:
                self.register(f, name=name, description=description, replace=replace)
                return f

            return deco
        spec = self._spec_of(fn, name=name, description=description)
        if spec.name in self._specs and not replace:
            raise ToolError(f"a tool named {spec.name!r} is already registered (pass replace=True)")
        self._specs[spec.name] = spec
        return fn if callable(fn) and not isinstance(fn, FunctionSpec) else spec

    def tool(
        self, fn: F | None = None, /, *, name: str | None = None, description: str | None = None
    ) -> Any:
        """Decorator: ``@registry.tool`` or ``@registry.tool(name=...)``."""
        if fn is None:
            return self.register(name=name, description=description)
        return self.register(fn, name=name, description=description)

    @staticmethod
    def _spec_of(fn: ToolLike, *, name: str | None, description: str | None) -> FunctionSpec:
        if isinstance(fn, FunctionSpec):
            spec = fn
        elif isinstance(fn, Mapping):
            spec = spec_from_dict(fn)
        else:
            from ..messages import Tool

            if isinstance(fn, Tool):  # a chatfmt.messages.Tool: its definition dict
                spec = spec_from_dict(fn.definition)
            else:
                marked = getattr(fn, SPEC_ATTR, None)
                if isinstance(marked, FunctionSpec) and name is None and description is None:
                    return marked
                return spec_from_function(fn, name=name, description=description)
        if name is not None or description is not None:
            from dataclasses import replace as dc_replace

            spec = dc_replace(
                spec,
                name=name if name is not None else spec.name,
                description=description if description is not None else spec.description,
            )
        return spec

    def unregister(self, name: str) -> None:
        """Remove a tool; raise :class:`ToolError` if there is none by that name."""
        if self._specs.pop(name, None) is None:
            raise ToolError(f"no tool named {name!r}")

    # -- description --------------------------------------------------------------------------

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._specs))

    def names(self) -> list[str]:
        """Tool names in registration order."""
        return list(self._specs)

    def get(self, name: str) -> FunctionSpec:
        """The spec of a tool; raise :class:`ToolError` if unknown."""
        try:
            return self._specs[name]
        except KeyError:
            raise ToolError(f"no tool named {name!r}") from None

    def openai_tools(self) -> list[dict[str, Any]]:
        """``[{"type": "function", "function": {name, description, parameters}}, ...]``."""
        return [s.openai_tool() for s in self._specs.values()]

    def functions(self) -> list[dict[str, Any]]:
        """Bare ``{name, description, parameters}`` objects, as ChatGLM3's system prompt lists."""
        return [s.function() for s in self._specs.values()]

    # -- dispatch -----------------------------------------------------------------------------

    async def acall(
        self,
        name: str,
        arguments: str | Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> ToolResult:
        """Call a tool with JSON (or dict) arguments; never raises for a bad call.

        ``timeout`` overrides the registry's (use ``math.inf`` for none). Sync tools run in a
        worker thread; a timed-out sync tool cannot be stopped and finishes in the background.
        """
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(self._specs) or "none"
            return ToolResult.failure(name, f"unknown tool '{name}'; available tools: {known}")
        if spec.fn is None:
            return ToolResult.failure(name, f"tool '{name}' has no implementation here")
        decoded = parse_arguments(arguments)
        if isinstance(decoded, str):
            return ToolResult.failure(name, f"tool '{name}': {decoded}")
        bound = bind(spec, decoded)
        if isinstance(bound, str):
            return ToolResult.failure(name, bound)
        args, kwargs = bound
        limit = self.timeout if timeout is None else timeout
        if limit is not None and math.isinf(limit):
            limit = None
        try:
            if spec.is_async:
                call = spec.fn(*args, **kwargs)
            else:
                call = run_in_thread(spec.fn, args, kwargs, name=name)
            value = await asyncio.wait_for(call, limit)
        except asyncio.TimeoutError:
            return ToolResult.failure(name, f"tool '{name}' timed out after {limit:g} s")
        except Exception as exc:
            logger.warning("tool %r raised", name, exc_info=exc)
            return ToolResult.failure(name, f"tool '{name}' raised {describe_exception(exc)}")
        text = to_text(value)
        cut = truncate(
            text,
            max_chars=self.max_result_chars,
            max_tokens=self.max_result_tokens,
            count_tokens=self.count_tokens,
        )
        return ToolResult(name=name, ok=True, content=cut, truncated=cut != text)

    def call(
        self,
        name: str,
        arguments: str | Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> ToolResult:
        """Blocking :meth:`acall`. Inside a running event loop it runs on a helper thread."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.acall(name, arguments, timeout=timeout))
        box: list[ToolResult] = []

        def run() -> None:
            box.append(asyncio.run(self.acall(name, arguments, timeout=timeout)))

        helper = threading.Thread(target=run, name="chatfmt-tool-call", daemon=True)
        helper.start()
        helper.join()
        return box[0]

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()!r})"
