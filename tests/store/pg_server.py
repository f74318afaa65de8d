"""A real PostgreSQL server for the store tests, started in a temporary directory.

``initdb`` and ``postgres`` are found on ``PATH`` or where Debian's ``postgresql`` package puts
them (``/usr/lib/postgresql/<version>/bin``; ``scripts/install --dev`` installs it). The
server listens on 127.0.0.1 on a free port and a socket in its own directory, trusts local
connections, and writes nothing it would keep (no fsync: the data dies with the test run).
PostgreSQL refuses to run as root, so as root it runs as ``nobody``.

``CHATFMT_TEST_POSTGRES_URL`` (a superuser's URL, e.g. CI's service container) uses that server
instead: each test still gets a database of its own.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
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

#: The environment variable naming a server to use instead of starting one.
URL_ENV = "CHATFMT_TEST_POSTGRES_URL"


def find_binaries() -> Path | None:
    """The folder of ``initdb`` and ``postgres`` (``None``: PostgreSQL is not installed)."""
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


class PostgresServer:
    """A server to create test databases in: :meth:`database` gives a new one's URL."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self._names = itertools.count()
        self._prefix = f"chatfmt_test_{os.getpid()}_"

    def url_of(self, name: str, *, password: str | None = None) -> str:
        """The URL of database ``name`` on this server (with ``password`` in it if given:
        the test server trusts local connections, so any password is accepted)."""
        import psycopg

        info = psycopg.conninfo.conninfo_to_dict(self.admin_url)
        user = str(info.get("user", "postgres"))
        credentials = user if password is None else f"{user}:{password}"
        host, port = info.get("host", "127.0.0.1"), info.get("port", 5432)
        return f"postgresql://{credentials}@{host}:{port}/{name}"

    def database(self, *, password: str | None = None) -> str:
        """A new, empty database's URL."""
        import psycopg

        name = f"{self._prefix}{next(self._names)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name, password=password)

    def execute(self, url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """``sql`` (``?`` placeholders, SQLite's style) on a connection of its own to ``url``,
        the store's tables first on the search path; the rows it returns."""
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET search_path TO chatfmt, public")
            cursor = conn.execute(sql.replace("?", "%s"), args or None)
            return cursor.fetchall() if cursor.description is not None else []


@contextlib.contextmanager
def running_server() -> Iterator[PostgresServer | str]:
    """A running server (stopped and deleted on leaving), or why there is none (a string)."""
    given = os.environ.get(URL_ENV)
    if given:
        yield PostgresServer(given)
        return
    binaries = find_binaries()
    if binaries is None:
        yield (
            "PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql): "
            "scripts/install --dev installs Debian's postgresql package, or set "
            f"{URL_ENV} to a server's URL"
        )
        return
    # Not under pytest's temporary directory: it is private to this user, and the server may
    # run as another one (nobody, when the tests run as root).
    home = Path(tempfile.mkdtemp(prefix="chatfmt-pg-"))
    run_as: dict[str, Any] = {}
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(home, nobody.pw_uid, nobody.pw_gid)
        run_as = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
    data, log = home / "data", home / "server.log"
    port = _free_port()
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
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                 "-c", "max_connections=400"],
                stdout=out, stderr=subprocess.STDOUT, cwd=home, **run_as,
            )  # fmt: skip
        server = PostgresServer(f"postgresql://postgres@127.0.0.1:{port}/postgres")
        _wait_ready(server, process, log)
        yield server
    finally:
        if process is not None:
            # SIGINT: PostgreSQL's fast shutdown (SIGTERM would wait for every client to go).
            process.send_signal(signal.SIGINT)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        shutil.rmtree(home, ignore_errors=True)


def _wait_ready(server: PostgresServer, process: subprocess.Popen[bytes], log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + 60
    while True:
        try:
            with psycopg.connect(server.admin_url, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if process.poll() is not None:
                raise RuntimeError(
                    f"PostgreSQL exited with {process.returncode}: {log.read_text()[-2000:]}"
                ) from None
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"PostgreSQL was not ready in 60 s: {log.read_text()[-2000:]}"
                ) from None
            time.sleep(0.1)
