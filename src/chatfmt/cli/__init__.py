"""The ``chatfmt`` command: parsing and dispatch with ``render``, ``parse``, ``count``, ``fit``,
``tools`` and ``chat`` (``main.py``; the terminal chat itself in ``chat.py``), ``serve``
(``serve.py``), ``store`` (``store.py``), the interpreter's options (``kernel.py``) and what the
commands share (``options.py``)."""

from .main import main

__all__ = ["main"]
