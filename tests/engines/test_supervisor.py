"""The child-process supervisor with a small real child (a Python HTTP server): readiness,
restart after a crash, a squatter on the port, long log lines, and nothing left behind."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from typing import Any

import pytest

from chatfmt.engines.supervisor import Supervisor, owns_port
from chatfmt.errors import EngineError

psutil = pytest.importorskip("psutil")

CHILD = """
import http.server, sys
print("x" * int(sys.argv[2]), flush=True)  # one long log line
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


async def probe(port: int) -> bool:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.write(b"GET / HTTP/1.0\r\n\r\n")
    answer = await reader.read()
    writer.close()
    return answer.startswith(b"HTTP/1.0 200")


def supervisor(log_line: int = 10, **kw: Any) -> Supervisor:
    def command(port: int) -> list[str]:
        return [sys.executable, "-c", CHILD, str(port), str(log_line)]

    return Supervisor("child", command, kw.pop("probe", probe), startup_timeout=30, **kw)


def test_restarts_after_a_crash_and_stops_cleanly() -> None:
    async def main() -> None:
        sup = supervisor(log_line=200_000)  # longer than the pipe reader's line limit
        await sup.start()
        first = sup.pid
        assert sup.ready and first is not None and owns_port(first, sup.port)
        os.kill(first, signal.SIGKILL)
        await asyncio.sleep(0.2)
        assert await sup.wait_ready(30), sup.log_tail()
        assert sup.restarts == 1 and sup.pid != first and sup.failed is None
        assert "x" * 100 in sup.log_tail(), "the long line was kept (cut), the reader lives on"
        await sup.start()  # already supervised: no second child
        assert sup.restarts == 1
        second = sup.pid
        await sup.stop()
        assert second is not None and not psutil.pid_exists(second)

    asyncio.run(main())


def test_wait_ready_right_after_a_crash_waits_for_the_restart() -> None:
    """The child is dead (its exit status known) before the watcher has run: the old
    readiness must not be taken for the new one (CI saw ``wait_ready`` answer False at once)."""

    async def main() -> None:
        sup = supervisor()
        await sup.start()
        first = sup.pid
        assert first is not None and sup._proc is not None
        os.kill(first, signal.SIGKILL)
        # Wait for the exit status alone, as a request that saw the connection drop does.
        while sup._proc.returncode is None:
            await asyncio.sleep(0)
        assert not sup.ready
        assert await sup.wait_ready(30), sup.log_tail()
        assert sup.pid != first and sup.restarts == 1
        await sup.stop()

    asyncio.run(main())


def test_a_squatter_on_the_port_is_never_trusted() -> None:
    """Another process listening on the chosen port answers the probe; the child is not it."""
    squatters: list[socket.socket] = []

    async def squatted_probe(port: int) -> bool:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:  # the child got there first this time: make it someone else's
            s.close()
            return False
        s.listen()
        squatters.append(s)
        return True

    async def main() -> None:
        sup = supervisor(probe=squatted_probe)
        with pytest.raises(EngineError, match="taken by other processes"):
            await sup.start()
        await sup.stop()

    try:
        asyncio.run(main())
    finally:
        for s in squatters:
            s.close()
    assert squatters, "the probe never squatted a port"


def test_owns_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert owns_port(os.getpid(), port) is True
        assert owns_port(1, port) is False
