"""Dialects by name: :func:`get_dialect`, :func:`list_dialects` and :func:`register_dialect`.

The built-in dialects are listed here; a separately installed package adds one with an entry
point in the ``chatfmt.dialects`` group (``name = "package.module:constructor"``, the
constructor taking no arguments and returning a :class:`Dialect`), loaded on the first
:func:`get_dialect` or :func:`list_dialects`, or at run time with :func:`register_dialect`.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from importlib import metadata

from ..decoding import ControlSplitter
from ..errors import DialectPluginError, UnknownDialectError
from .base import Dialect, StreamParser

#: The entry-point group through which installed packages add dialects.
ENTRY_POINT_GROUP = "chatfmt.dialects"


#: The built-in dialects: name → ``module:Class`` in this package, imported on first use so that
#: ``import chatfmt`` stays light. Everything else a dialect is (its detection fingerprint,
#: training end rule, validation rules, reasoning mode) it declares itself.
BUILT_IN: dict[str, str] = {
    "chatml": "chatml:ChatML",
    "qwen2.5": "chatml:Qwen25",
    "qwen3": "qwen3:Qwen3",
    "qwq": "qwen3:QwQ",
    "qwen3-coder": "qwen3_coder:Qwen3Coder",
    "qwen3.5": "qwen3_coder:Qwen35",
    "deepseek-r1": "deepseek:DeepSeekR1",
    "deepseek-v3.1": "deepseek:DeepSeekV31",
    "deepseek-v3.2": "deepseek_dsml:DeepSeekV32",
    "deepseek-v4": "deepseek_dsml:DeepSeekV4",
    "chatglm3": "chatglm3:ChatGLM3",
    "mistral-v3": "mistral:MistralV3",
    "mistral-v7": "mistral:MistralV7",
    "mistral-v11": "mistral_v11:MistralV11",
    "magistral": "magistral:Magistral",
    "llama3": "llama3:Llama3",
    "llama4": "llama4:Llama4",
    "gemma3": "gemma3:Gemma3",
    "gemma4": "gemma4:Gemma4",
    "glm4": "glm4:GLM4",
    "glm4.6": "glm45:GLM46",
    "glm4.7": "glm45:GLM47",
    "kimi-k2": "kimi:KimiK2",
    "kimi-k2-thinking": "kimi:KimiK2Thinking",
    "harmony": "harmony:Harmony",
    "granite4": "granite:Granite4",
    "granite4.1": "granite:Granite41",
    "minimax-m2": "minimax:MiniMaxM2",
    "nemotron3": "nemotron:Nemotron3",
    "nemotron-nano2": "nemotron:NemotronNano2",
}


def _built_in(target: str) -> Callable[[], Dialect]:
    """The constructor of a :data:`BUILT_IN` entry: imports its module when first called."""
    module, _, cls = target.partition(":")

    def construct() -> Dialect:
        made: Dialect = getattr(importlib.import_module(f"{__name__}.{module}"), cls)()
        return made

    construct.__qualname__ = construct.__name__ = cls
    return construct


#: Every dialect by name: built-ins, then plugins and :func:`register_dialect` additions.
DIALECT_CONSTRUCTORS: dict[str, Callable[[], Dialect]] = {
    name: _built_in(target) for name, target in BUILT_IN.items()
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
