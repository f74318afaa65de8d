"""Files in and out of a conversation's code interpreter: uploads into its working directory,
the list of what is there, and downloads.

The working directory is also the sandboxed code's, so anything in it may be a trap the code
set: a symbolic link to a host file, a directory swapped for a link between a check and a use.
So every path is opened one component at a time relative to the directory's own descriptor
with ``O_NOFOLLOW`` (a link is never followed, whatever happens meanwhile); uploads take a plain
file name (no directories) and are written with ``O_EXCL`` and renamed into place, which
replaces a link rather than writing through it. Downloads are always sent as attachments
(``Content-Disposition``, ``nosniff``), so HTML the code wrote never runs on the page's origin.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import ChatFmtError

#: A plain file name: no separators, no leading dot, no control characters, at most 255 bytes.
_NAME = re.compile(r"[^/\\\x00-\x1f\x7f.][^/\\\x00-\x1f\x7f]{0,254}")
#: Most entries listed (the code may write thousands of files), entries looked at, and depth.
MAX_LISTED = 200
_MAX_VISITED = 5000
_MAX_DEPTH = 16
_CHUNK = 64 * 1024


class FileError(ChatFmtError):
    """A file request that cannot be served; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def check_name(name: str) -> str:
    """``name`` if it is a plain file name, else :class:`FileError` saying what is allowed."""
    if not _NAME.fullmatch(name) or len(name.encode("utf-8", "surrogatepass")) > 255:
        raise FileError(
            f"file name {name!r} is not allowed: use a plain name (no '/' or '\\', not starting "
            "with '.', at most 255 bytes)"
        )
    return name


def save_upload(root: Path, name: str, data: bytes) -> Path:
    """Write ``data`` as ``root/name`` (a plain name), atomically, never through a link."""
    check_name(name)
    fd, tmp = tempfile.mkstemp(dir=root, prefix=".upload-")  # O_EXCL: never an existing file
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, root / name)  # rename replaces a link named `name`, not its target
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise FileError(f"cannot save {name!r}: {exc.strerror or exc}", 409) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return root / name


def _open_inside(root: Path, rel: str) -> int:
    """A descriptor of the regular file ``rel`` under ``root``, no link followed on the way."""
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise FileError(f"no file {rel!r} here", 404)
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open(parts[-1], flags | getattr(os, "O_NONBLOCK", 0), dir_fd=fd)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        raise FileError(f"no file {rel!r} here", 404) from None
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(leaf).st_mode):
        os.close(leaf)
        raise FileError(f"{rel!r} is not a regular file", 404)
    return leaf


def open_download(root: Path, rel: str) -> tuple[Iterator[bytes], int, dict[str, str]]:
    """The file's content (read in chunks), its size, and the headers of an attachment."""
    fd = _open_inside(root, rel)
    size = os.fstat(fd).st_size

    def chunks() -> Iterator[bytes]:
        with os.fdopen(fd, "rb") as fh:
            while block := fh.read(_CHUNK):
                yield block

    name = rel.rsplit("/", 1)[-1]
    headers = {
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name, safe='')}",
        "Content-Type": "application/octet-stream",
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
    }
    return chunks(), size, headers


def list_files(root: Path) -> list[dict[str, Any]]:
    """Regular files under ``root`` (relative names, sizes), links and hidden entries left out,
    at most :data:`MAX_LISTED`, by name. Directories are opened from their parent's descriptor
    with ``O_NOFOLLOW``, so one swapped for a link while this runs is not entered."""
    out: list[dict[str, Any]] = []
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        top = os.open(root, flags)
    except OSError:
        return out
    stack: list[tuple[int, str]] = [(top, "")]
    visited = 0
    try:
        while stack and len(out) < MAX_LISTED and visited < _MAX_VISITED:
            fd, prefix = stack.pop()
            try:
                # scandir works on its own copy of the descriptor; `fd` stays open to open
                # the subdirectories relative to it.
                with os.scandir(fd) as entries:
                    found = sorted((e.name, e) for e in entries if not e.name.startswith("."))
                for name, entry in found:
                    visited += 1
                    if entry.is_file(follow_symlinks=False):
                        size = entry.stat(follow_symlinks=False).st_size
                        out.append({"name": prefix + name, "size": size})
                    elif entry.is_dir(follow_symlinks=False) and prefix.count("/") < _MAX_DEPTH:
                        with contextlib.suppress(OSError):
                            stack.append((os.open(name, flags, dir_fd=fd), f"{prefix}{name}/"))
                    if len(out) >= MAX_LISTED or visited >= _MAX_VISITED:
                        break
            except OSError:
                pass
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return sorted(out, key=lambda f: f["name"])
