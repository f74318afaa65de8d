"""A request's reasoning controls → the dialect configured for it.

Clients ask for thinking in several dialects of their own: OpenAI's ``reasoning_effort`` (chat
completions) and ``reasoning.effort`` (Responses), and the template switches vLLM and SGLang
pass through ``chat_template_kwargs`` (Qwen3's ``enable_thinking``, DeepSeek's ``thinking``).
They all come down to two things, thinking on or off and a level, which
:meth:`~chatfmt.dialects.base.Dialect.with_reasoning` maps onto the family's own switch; what
the family cannot do is a 400 that says what it can.
"""

from __future__ import annotations

from typing import Any

from ...dialects.base import Dialect
from ...errors import ReasoningOptionError
from ..http.errors import ApiError

#: The ``chat_template_kwargs`` keys that mean "thinking on/off", and the one for a level.
_SWITCHES = ("enable_thinking", "thinking")
_EFFORT_KEY = "reasoning_effort"


def controls_of(
    effort: Any, template_kwargs: dict[str, Any] | None, *, effort_param: str
) -> tuple[bool | None, str | None]:
    """``(enabled, effort)`` from a request's fields, each ``None`` when not asked for."""
    enabled: bool | None = None
    kwargs = template_kwargs or {}
    unknown = sorted(k for k in kwargs if k not in (*_SWITCHES, _EFFORT_KEY))
    if unknown:
        raise ApiError(
            400,
            f"chat_template_kwargs {', '.join(map(repr, unknown))} not understood: chatfmt "
            "renders each format in code rather than through a template, and takes only "
            "'enable_thinking' and 'thinking' (true or false) and 'reasoning_effort' there",
            param="chat_template_kwargs",
        )
    for key in _SWITCHES:
        if key not in kwargs:
            continue
        value = kwargs[key]
        if not isinstance(value, bool):
            raise ApiError(
                400,
                f"chat_template_kwargs.{key} must be true or false, got {value!r}",
                param=f"chat_template_kwargs.{key}",
            )
        if enabled is not None and enabled != value:
            raise ApiError(
                400,
                "chat_template_kwargs asks for thinking both on and off; send one switch",
                param="chat_template_kwargs",
            )
        enabled = value
    level = effort if effort is not None else kwargs.get(_EFFORT_KEY)
    if level is not None and not isinstance(level, str):
        raise ApiError(400, f"{effort_param} must be a string, got {level!r}", param=effort_param)
    return enabled, level


def configure(dialect: Dialect, enabled: bool | None, effort: str | None, *, param: str) -> Dialect:
    """``dialect`` for these controls, or a 400 naming what the model can do."""
    if enabled is None and effort is None:
        return dialect
    try:
        return dialect.with_reasoning(enabled=enabled, effort=effort)
    except ReasoningOptionError as exc:
        raise ApiError(400, str(exc), param=param, code="unsupported_reasoning") from None
