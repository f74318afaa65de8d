"""Dialects by name: :func:`get_dialect`, :func:`list_dialects` and :func:`register_dialect`.

The built-in dialects are listed here; a separately installed package adds one with an entry
point in the ``chatfmt.dialects`` group (``name = "package.module:constructor"``, the
constructor taking no arguments and returning a :class:`Dialect`), loaded on the first
:func:`get_dialect` or :func:`list_dialects`, or at run time with :func:`register_dialect`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import metadata

from ..decoding import ControlSplitter
from ..errors import DialectPluginError, UnknownDialectError
from .base import Dialect, StreamParser

#: The entry-point group through which installed packages add dialects.
ENTRY_POINT_GROUP = "chatfmt.dialects"


def _chatml() -> Dialect:
    from .chatml import ChatML

    return ChatML()


def _qwen25() -> Dialect:
    from .chatml import Qwen25

    return Qwen25()


def _qwen3() -> Dialect:
    from .qwen3 import Qwen3

    return Qwen3()


def _qwq() -> Dialect:
    from .qwen3 import QwQ

    return QwQ()


def _qwen3_coder() -> Dialect:
    from .qwen3_coder import Qwen3Coder

    return Qwen3Coder()


def _qwen35() -> Dialect:
    from .qwen3_coder import Qwen35

    return Qwen35()


def _deepseek_r1() -> Dialect:
    from .deepseek import DeepSeekR1

    return DeepSeekR1()


def _deepseek_v31() -> Dialect:
    from .deepseek import DeepSeekV31

    return DeepSeekV31()


def _deepseek_v32() -> Dialect:
    from .deepseek_dsml import DeepSeekV32

    return DeepSeekV32()


def _deepseek_v4() -> Dialect:
    from .deepseek_dsml import DeepSeekV4

    return DeepSeekV4()


def _chatglm3() -> Dialect:
    from .chatglm3 import ChatGLM3

    return ChatGLM3()


def _glm4() -> Dialect:
    from .glm4 import GLM4

    return GLM4()


def _glm46() -> Dialect:
    from .glm45 import GLM46

    return GLM46()


def _glm47() -> Dialect:
    from .glm45 import GLM47

    return GLM47()


def _kimi_k2() -> Dialect:
    from .kimi import KimiK2

    return KimiK2()


def _kimi_k2_thinking() -> Dialect:
    from .kimi import KimiK2Thinking

    return KimiK2Thinking()


def _llama4() -> Dialect:
    from .llama4 import Llama4

    return Llama4()


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


def _gemma4() -> Dialect:
    from .gemma4 import Gemma4

    return Gemma4()


def _granite4() -> Dialect:
    from .granite import Granite4

    return Granite4()


def _granite41() -> Dialect:
    from .granite import Granite41

    return Granite41()


def _magistral() -> Dialect:
    from .magistral import Magistral

    return Magistral()


def _minimax_m2() -> Dialect:
    from .minimax import MiniMaxM2

    return MiniMaxM2()


def _nemotron3() -> Dialect:
    from .nemotron import Nemotron3

    return Nemotron3()


def _nemotron_nano2() -> Dialect:
    from .nemotron import NemotronNano2

    return NemotronNano2()


def _harmony() -> Dialect:
    from .harmony import Harmony

    return Harmony()


DIALECT_CONSTRUCTORS: dict[str, Callable[[], Dialect]] = {
    "chatml": _chatml,
    "qwen2.5": _qwen25,
    "qwen3": _qwen3,
    "qwq": _qwq,
    "qwen3-coder": _qwen3_coder,
    "qwen3.5": _qwen35,
    "deepseek-r1": _deepseek_r1,
    "deepseek-v3.1": _deepseek_v31,
    "deepseek-v3.2": _deepseek_v32,
    "deepseek-v4": _deepseek_v4,
    "chatglm3": _chatglm3,
    "mistral-v3": _mistral_v3,
    "mistral-v7": _mistral_v7,
    "mistral-v11": _mistral_v11,
    "magistral": _magistral,
    "llama3": _llama3,
    "llama4": _llama4,
    "gemma3": _gemma3,
    "gemma4": _gemma4,
    "glm4": _glm4,
    "glm4.6": _glm46,
    "glm4.7": _glm47,
    "kimi-k2": _kimi_k2,
    "kimi-k2-thinking": _kimi_k2_thinking,
    "harmony": _harmony,
    "granite4": _granite4,
    "granite4.1": _granite41,
    "minimax-m2": _minimax_m2,
    "nemotron3": _nemotron3,
    "nemotron-nano2": _nemotron_nano2,
}


_BUILT_IN = frozenset(DIALECT_CONSTRUCTORS)
_plugins_loaded = False
_plugins_lock = threading.Lock()


def register_dialect(name: str, constructor: Callable[[], Dialect]) -> None:
    """Make :func:`get_dialect` accept ``name``: ``constructor()`` makes the dialect. A
    built-in name, or one already registered, cannot be taken (:class:`DialectPluginError`)."""
    if not name or not isinstance(name, str):
        raise DialectPluginError(f"a dialect name must be a non-empty string, got {name!r}")
    _load_plugins()
    _register(name, constructor, source="register_dialect")


def _register(name: str, constructor: Callable[[], Dialect], *, source: str) -> None:
    if name in DIALECT_CONSTRUCTORS:
        what = "a built-in dialect" if name in _BUILT_IN else "a dialect already registered"
        raise DialectPluginError(f"{source} cannot register dialect {name!r}: it is {what}")
    if not callable(constructor):
        raise DialectPluginError(f"{source}: the constructor of dialect {name!r} is not callable")
    DIALECT_CONSTRUCTORS[name] = constructor


def _load_plugins() -> None:
    """Register the ``chatfmt.dialects`` entry points once (importing each plugin module only
    now, so ``import chatfmt`` stays light). A plugin that fails to import, or whose name is
    taken, is an error that names it: a silently missing dialect would be worse."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    with _plugins_lock:
        if _plugins_loaded:
            return
        # Marked first: a plugin module may itself call register_dialect while it loads.
        _plugins_loaded = True
        for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            source = f"dialect plugin {ep.name!r} ({ep.value})"
            try:
                constructor = ep.load()
            except Exception as exc:  # whatever the plugin raises, say which one it was
                raise DialectPluginError(f"{source} failed to load: {exc!r}") from exc
            _register(ep.name, constructor, source=source)


def list_dialects() -> list[str]:
    """Names accepted by :func:`get_dialect` (built-in, plugins, registered)."""
    _load_plugins()
    return sorted(DIALECT_CONSTRUCTORS)


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name`` (see :func:`list_dialects`)."""
    _load_plugins()
    try:
        constructor = DIALECT_CONSTRUCTORS[name]
    except KeyError:
        raise UnknownDialectError(
            f"unknown dialect {name!r}; available: {', '.join(list_dialects())}"
        ) from None
    dialect = constructor()
    if not isinstance(dialect, Dialect):
        raise DialectPluginError(
            f"the constructor of dialect {name!r} returned {type(dialect).__name__}, not a Dialect"
        )
    return dialect


__all__ = [
    "ENTRY_POINT_GROUP",
    "ControlSplitter",
    "Dialect",
    "DialectPluginError",
    "StreamParser",
    "get_dialect",
    "list_dialects",
    "register_dialect",
]
