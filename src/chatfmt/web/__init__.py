"""The web chat served by the chatfmt server at ``/``.

:func:`mount_web` adds the page and its JSON/SSE API to a FastAPI app (needs the ``server``
extra); :func:`demo_tools` is a registry of two harmless tools to try tool mode with. The
FastAPI import is deferred so that ``import chatfmt.web`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .demo import calculator, demo_tools, get_weather

if TYPE_CHECKING:
    from ..interpreter.sessions import InterpreterSessions
    from .modes import INTERPRETER_TOOL
    from .routes import mount_web

_LAZY = {
    "INTERPRETER_TOOL": "chatfmt.web.modes",
    "InterpreterSessions": "chatfmt.interpreter.sessions",
    "mount_web": "chatfmt.web.routes",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'chatfmt.web' has no attribute {name!r}")


__all__ = [
    "INTERPRETER_TOOL",
    "InterpreterSessions",
    "calculator",
    "demo_tools",
    "get_weather",
    "mount_web",
]
