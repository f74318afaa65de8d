"""What keeps the page and its API to their own origin: security headers, the static files
that carry them, and the same-origin check of ``/api`` POSTs."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request, Response
from fastapi.staticfiles import StaticFiles

from ..server.errors import ApiError

STATIC_DIR = Path(__file__).resolve().parent / "static"

# The page is self-contained: scripts, styles and fetches from its own origin only; images may
# also be data: URLs (interpreter plots).
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


class SecureStatic(StaticFiles):
    """Static files with the page's security headers: ``/static/index.html`` is the page too."""

    async def get_response(self, path: str, scope: Any) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


def require_same_origin(request: Request) -> None:
    """403 for a request that a page of another origin sent (its ``Origin`` is not our host)."""
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc.lower() != host.lower():
            raise ApiError(403, "cross-origin requests are not allowed", type="permission_error")
