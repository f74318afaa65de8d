"""Cutting tool output to a budget: :func:`truncate`, which lives in
:mod:`chatfmt.truncation` (a core module, so that :mod:`chatfmt.context` can use it without
depending on the tools layer) and is re-exported here, where tools and the interpreter find it.
"""

from __future__ import annotations

from ..truncation import Keep, marker, truncate

__all__ = ["Keep", "marker", "truncate"]
