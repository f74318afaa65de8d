"""What keeps the page and its API to their own origin: security headers, the static files
that carry them, and the same-origin check of ``/api`` POSTs."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request, Response
from fastapi.staticfiles import StaticFiles

from ..server.http.errors import ApiError

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


#: Host names a server on loopback answers (the default of ``mount_web``'s ``allowed_hosts``).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def require_same_origin(request: Request, allowed_hosts: Collection[str] | None) -> None:
    """403 for a request that a page of another origin sent (its ``Origin`` is not our host),
    or that names a host the server does not serve (``allowed_hosts``; ``None``: any).

    The host check is what stops DNS rebinding: a page on ``attacker.example`` that rebinds its
    name to 127.0.0.1 is "same-origin" with itself, but its requests say ``Host:
    attacker.example``.
    """
    if allowed_hosts is not None:
        name = urlsplit("//" + request.headers.get("host", "")).hostname or ""
        if name.lower() not in allowed_hosts:
            raise ApiError(
                403,
                f"this server does not answer requests for the host {name!r}; it serves "
                f"{', '.join(sorted(allowed_hosts))} (pass allowed_hosts to mount_web to add "
                "the names it is reached by)",
                type="permission_error",
            )
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc.lower() != host.lower():
            raise ApiError(403, "cross-origin requests are not allowed", type="permission_error")
