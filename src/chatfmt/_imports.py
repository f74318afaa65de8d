"""Lazy imports of optional dependencies with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError


def require(module: str, *, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming ``chatfmt[extra]``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"`{module}` is not installed; install it with `pip install 'chatfmt[{extra}]'`"
        ) from exc
