"""The ``chatfmt`` command: ``render``, ``parse``, ``count``, ``fit``, ``tools`` (``main``),
``chat`` (the terminal chat, ``chat.py``) and ``serve`` (``serve.py``)."""

from .main import main

__all__ = ["main"]
