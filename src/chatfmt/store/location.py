"""Where a store lives, as ``--store`` gives it: a PostgreSQL URL or a SQLite file's path.

``postgresql://…`` and ``postgres://…`` (libpq's two spellings) select the PostgreSQL backend;
anything without a scheme is a path. Any other scheme (``mysql://``, ``http://``) is refused:
taken as a path it used to create a folder named after the scheme, holding a SQLite file,
while the operator believed the data went to a server.

A URL may hold a password; :func:`redact` is how it is shown in messages and logs.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import StoreError

#: The schemes of the PostgreSQL backend (libpq accepts both).
POSTGRES_SCHEMES = ("postgresql", "postgres")
#: What a URL's scheme looks like (RFC 3986): a letter, then letters, digits, ``+ - .``; two
#: or more characters, so that a Windows drive (``C:\…``) stays a path.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
#: What replaces a password in what is shown.
HIDDEN = "***"


def is_postgres(location: str | Path) -> bool:
    """Whether ``location`` names a PostgreSQL store; :class:`~chatfmt.errors.StoreError` for
    a URL of a scheme no backend serves."""
    if isinstance(location, Path):
        return False
    found = _SCHEME.match(location)
    if found is None:
        return False
    scheme = found.group(1).lower()
    if scheme in POSTGRES_SCHEMES:
        return True
    raise StoreError(
        f"--store {redact(location)}: no store backend for {scheme}:// URLs; give a "
        "postgresql://user@host/database URL (the postgres extra: pip install "
        "'chatfmt[postgres]') or the path of a SQLite file"
    )


def redact(location: str | Path) -> str:
    """``location`` with any password in it replaced by ``***`` (in the user part and in a
    ``password=`` parameter): what messages and logs show of a store's URL."""
    text = str(location)
    if _SCHEME.match(text) is None:
        return text
    try:
        parts = urlsplit(text)
        netloc = parts.netloc
        if "@" in netloc:
            user, _, host = netloc.rpartition("@")
            if ":" in user:
                user = user.split(":", 1)[0] + ":" + HIDDEN
            netloc = f"{user}@{host}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            query = urlencode(
                [(k, HIDDEN if k.lower() == "password" else v) for k, v in pairs], safe="*"
            )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        # Not parseable as a URL (a bad port, say): show no part of it that could be secret.
        return f"{text.split('://', 1)[0]}://{HIDDEN}"
