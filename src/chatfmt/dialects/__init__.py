"""Dialects by name: :func:`get_dialect` and :func:`list_dialects`."""

from __future__ import annotations

from collections.abc import Callable

from ..decoding import ControlSplitter
from ..errors import UnknownDialectError
from .base import Dialect, StreamParser


def _chatml() -> Dialect:
    from .chatml import ChatML

    return ChatML()


def _qwen25() -> Dialect:
    from .chatml import Qwen25

    return Qwen25()


def _chatglm3() -> Dialect:
    from .chatglm3 import ChatGLM3

    return ChatGLM3()


def _glm4() -> Dialect:
    from .glm4 import GLM4

    return GLM4()


def _llama3() -> Dialect:
    from .llama3 import Llama3

    return Llama3()


def _mistral_v3() -> Dialect:
    from .mistral import MistralV3

    return MistralV3()


def _mistral_v7() -> Dialect:
    from .mistral import MistralV7

    return MistralV7()


def _mistral_v11() -> Dialect:
    from .mistral_v11 import MistralV11

    return MistralV11()


def _gemma3() -> Dialect:
    from .gemma3 import Gemma3

    return Gemma3()


def _harmony() -> Dialect:
    from .harmony import Harmony

    return Harmony()


DIALECT_CONSTRUCTORS: dict[str, Callable[[], Dialect]] = {
    "chatml": _chatml,
    "qwen2.5": _qwen25,
    "chatglm3": _chatglm3,
    "mistral-v3": _mistral_v3,
    "mistral-v7": _mistral_v7,
    "mistral-v11": _mistral_v11,
    "llama3": _llama3,
    "gemma3": _gemma3,
    "glm4": _glm4,
    "harmony": _harmony,
}


def list_dialects() -> list[str]:
    """Names accepted by :func:`get_dialect`."""
    return sorted(DIALECT_CONSTRUCTORS)


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name`` (see :func:`list_dialects`)."""
    try:
        constructor = DIALECT_CONSTRUCTORS[name]
    except KeyError:
        raise UnknownDialectError(
            f"unknown dialect {name!r}; available: {', '.join(list_dialects())}"
        ) from None
    return constructor()


__all__ = ["ControlSplitter", "Dialect", "StreamParser", "get_dialect", "list_dialects"]
