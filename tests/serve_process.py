"""``chatfmt serve`` in its own process, as a user starts it: for the end-to-end tests of the
command (the web chat, a GGUF's dialect, a model served through its own template)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def chatfmt_serve(
    args: Sequence[str],
    *,
    ready: Callable[[str], bool],
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
) -> Iterator[tuple[int, list[str]]]:
    """``chatfmt serve --port PORT *args``, its output read until a line is ``ready`` (or it
    ends, or ``timeout`` passes); yields the port and the lines read. The caller asserts that
    it started. The process is stopped on the way out, killed if it will not stop."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "chatfmt.cli", "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if ready(line):
                break
        yield port, lines
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
