"""The OpenAI-compatible HTTP server (``chatfmt[server]``): :func:`create_app`."""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
