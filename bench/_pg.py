"""A throwaway PostgreSQL server for benchmarks, in a temporary directory.

The same recipe as the store tests' server, kept apart so that benchmarks import nothing from
the test suite: ``initdb`` and ``postgres`` from ``PATH`` or Debian's
``/usr/lib/postgresql/<version>/bin``, loopback on a free port, trust authentication, no
fsync (the data dies with the run), and as root the server runs as ``nobody`` (PostgreSQL
refuses root).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def find_binaries() -> Path | None:
    """The folder of ``initdb`` and ``postgres``, or ``None`` when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found is not None and shutil.which("postgres") is not None:
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def postgres(database: str) -> Iterator[tuple[str, int] | str]:
    """A running server with an empty ``database``: (its URL, the server's pid); or why there
    is none (a string). The server is stopped and its directory deleted on leaving."""
    import psycopg

    binaries = find_binaries()
    if binaries is None:
        yield "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql)"
        return
    # Not under a private temporary directory: the server may run as another user (nobody).
    home = Path(tempfile.mkdtemp(prefix="chatfmt-soak-pg-"))
    run_as: dict[str, Any] = {}
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(home, nobody.pw_uid, nobody.pw_gid)
        run_as = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
    data, log, port = home / "data", home / "server.log", _free_port()
    process: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run(
            [str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
             "-E", "UTF8", "--locale=C", "--no-sync"],
            check=True, capture_output=True, cwd=home, **run_as,
        )  # fmt: skip
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(binaries / "postgres"), "-D", str(data), "-k", str(home),
                 "-h", "127.0.0.1", "-p", str(port), "-c", "fsync=off",
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                stdout=out, stderr=subprocess.STDOUT, cwd=home, **run_as,
            )  # fmt: skip
        admin = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(admin, autocommit=True, connect_timeout=2) as conn:
                    conn.execute(f'CREATE DATABASE "{database}"')
                break
            except psycopg.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"PostgreSQL did not start: {log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)
        yield f"postgresql://postgres@127.0.0.1:{port}/{database}", process.pid
    finally:
        if process is not None:
            # SIGINT is PostgreSQL's fast shutdown (SIGTERM would wait for every client).
            process.send_signal(signal.SIGINT)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        shutil.rmtree(home, ignore_errors=True)
