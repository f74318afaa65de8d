"""Model runtimes behind one interface: token ids in, generated ids out.

- :class:`LocalEngine` (``chatfmt[local]``): a GGUF model in-process via llama-cpp-python.
- :class:`RemoteEngine` (``chatfmt[server]``): an OpenAI-compatible ``/v1/completions``
  server that accepts token-id prompts (llama.cpp server, llama-cpp-python, vLLM).
- :class:`FakeEngine`: scripted replies for tests of the layers above.

Importing this package loads neither llama.cpp nor httpx; each engine does on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Engine, Generation, GenerationChunk, SamplingParams

if TYPE_CHECKING:
    from .fake import FakeEngine
    from .local import LocalEngine
    from .remote import RemoteEngine

__all__ = [
    "Engine",
    "FakeEngine",
    "Generation",
    "GenerationChunk",
    "LocalEngine",
    "RemoteEngine",
    "SamplingParams",
]

_LAZY = {"FakeEngine": ".fake", "LocalEngine": ".local", "RemoteEngine": ".remote"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
