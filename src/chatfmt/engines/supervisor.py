"""A supervised child process: started, watched, restarted after a crash, never orphaned.

The managed engine runs llama.cpp's ``llama-server`` as a child. What can go wrong with a
child, and what this module does about it:

- **It crashes.** A watcher task notices the exit, keeps the last lines of its log for the
  error message, and starts it again (on a fresh port) after a short, growing pause (at most
  30 s). After ``max_restarts`` failed starts in a row :attr:`Supervisor.failed` says why; the
  supervisor keeps trying. Any failure of its own is reported there too, never swallowed.
- **It never becomes ready.** :meth:`Supervisor.start` waits for the readiness probe up to
  ``startup_timeout`` and fails with the child's own last log lines, which name the cause
  (a bad model file, no memory, a port in use).
- **The parent dies.** The child runs in its own process group (so whatever it starts is killed
  with it) and, on Linux, asks the kernel for ``SIGKILL`` when its parent dies
  (``PR_SET_PDEATHSIG``): even ``kill -9`` of chatfmt leaves no orphan. An ``atexit`` hook
  covers interpreters that exit without closing the supervisor.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from ..errors import EngineError

log = logging.getLogger("chatfmt.engine")

#: ``prctl`` option: the signal the kernel sends the child when its parent thread exits.
_PR_SET_PDEATHSIG = 1
#: Environment variables of this process that the child does not inherit.
_CHILD_ENV_PREFIXES = ("LLAMA_ARG_", "LLAMA_API_KEY")
#: The most of one log line kept (a verbose child can log whole requests on one line).
_LOG_LINE_LIMIT = 4096


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (a child started right after can bind it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # Only async-signal-safe work here: one system call through an already loaded libc.
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

#: Supervisors with a live child, for the exit hook.
_LIVE: weakref.WeakSet[Supervisor] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for sup in list(_LIVE):
        sup.kill_now()


#: Builds the command line for a port; the readiness probe for a port (True when ready).
CommandFor = Callable[[int], Sequence[str]]
ProbeFor = Callable[[int], Awaitable[bool]]


class Supervisor:
    """Runs ``command(port)`` as a child and keeps it running until :meth:`stop`.

    ``probe(port)`` answers whether the child serves requests yet; ``on_ready(port)`` runs
    each time it becomes ready (after the first start and after every restart). ``env`` is
    added to this process's environment for the child.
    """

    def __init__(
        self,
        name: str,
        command: CommandFor,
        probe: ProbeFor,
        *,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 300.0,
        stop_timeout: float = 5.0,
        max_restarts: int = 5,
        log_lines: int = 200,
        on_ready: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self._command = command
        self._probe = probe
        # llama.cpp reads its options from LLAMA_ARG_* too: inherited ones would silently
        # change the child chatfmt configured (its host, its TLS, its key).
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(_CHILD_ENV_PREFIXES)}
        self._env = {**inherited, **(env or {})}
        self._host = host
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._max_restarts = max_restarts
        self._on_ready = on_ready
        self._log: deque[str] = deque(maxlen=log_lines)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False
        self._ready = asyncio.Event()
        self.port = 0
        #: Times the child was started again after it exited unexpectedly.
        self.restarts = 0
        #: Why the supervisor gave up on the child (``None`` while it is trying).
        self.failed: str | None = None

    # ==== State ====

    @property
    def ready(self) -> bool:
        """Whether the child is running and passed its readiness probe."""
        return self._ready.is_set() and self._proc is not None and self._proc.returncode is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def log_tail(self, lines: int = 20) -> str:
        """The child's last output lines (stdout and stderr together)."""
        return "\n".join(list(self._log)[-lines:])

    async def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the child to be ready; whether it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.ready:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            if self._ready.is_set():
                # Stale: the child has exited but the watcher has not run yet to clear the
                # flag and restart it. Waiting on the event would return at once.
                await asyncio.sleep(min(0.05, remaining))
                continue
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(self._ready.wait(), remaining)
        return True

    # ==== Lifecycle ====

    async def start(self) -> None:
        """Start the child and wait until it is ready; :class:`EngineError` if it cannot.

        While the child is supervised already (running, or being restarted) this only waits
        for it to be ready: there is never a second child."""
        if self._watcher is not None and not self._watcher.done():
            if not await self.wait_ready(self._startup_timeout):
                raise EngineError(self.failed or f"{self.name} is not ready")
            return
        self._stopping = False
        self.failed = None
        try:
            await self._launch()
        except EngineError as exc:
            self.failed = str(exc)
            raise
        self._watcher = asyncio.create_task(self._watch(), name=f"{self.name}-watcher")
        self._watcher.add_done_callback(self._watcher_ended)

    def _watcher_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        # A bug of ours must not leave requests waiting for a restart that never comes.
        self.failed = f"{self.name} supervision failed: {task.exception()!r}"
        log.error("%s", self.failed)

    async def _launch(self) -> None:
        """Start one child process and wait for readiness (a new port each time)."""
        try:
            for _attempt in range(3):
                try:
                    await self._launch_once()
                    return
                except _PortTaken as exc:
                    log.warning("%s", exc)
            raise EngineError(f"{self.name}: three free ports were taken by other processes")
        except EngineError:
            raise
        except Exception as exc:  # no file descriptors, a probe that failed oddly, ...
            if self._proc is not None and self._proc.returncode is None:
                _signal_group(self._proc.pid, signal.SIGKILL)
            raise EngineError(f"cannot start {self.name}: {exc!r}") from exc

    async def _launch_once(self) -> None:
        self._ready.clear()
        self.port = free_port(self._host)
        argv = list(self._command(self.port))
        self._log.clear()
        log.info("starting %s: %s", self.name, " ".join(argv))
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=self._env,
                start_new_session=True,  # its own process group, killed as one
                preexec_fn=_die_with_parent if _libc is not None else None,
            )
        except OSError as exc:
            raise EngineError(f"cannot start {self.name} ({argv[0]}): {exc}") from None
        _LIVE.add(self)
        self._reader = asyncio.create_task(self._read_log(self._proc), name=f"{self.name}-log")
        deadline = time.monotonic() + self._startup_timeout
        while True:
            if self._proc.returncode is not None:
                await self._drain_log()
                raise EngineError(
                    f"{self.name} exited with status {self._proc.returncode} while starting; "
                    f"its last output:\n{self.log_tail()}"
                )
            if await self._probe(self.port):
                if owns_port(self._proc.pid, self.port) is False:
                    # Someone else bound the port between our choosing it and the child
                    # binding it: never send them the key or a prompt.
                    _signal_group(self._proc.pid, signal.SIGKILL)
                    raise _PortTaken(
                        f"port {self.port} answers, but not from {self.name}; trying another"
                    )
                break
            if time.monotonic() > deadline:
                _signal_group(self._proc.pid, signal.SIGKILL)
                raise EngineError(
                    f"{self.name} was not ready after {self._startup_timeout:.0f} s; its last "
                    f"output:\n{self.log_tail()}"
                )
            await asyncio.sleep(0.1)
        if self._on_ready is not None:
            await self._on_ready(self.port)
        self._ready.set()
        log.info("%s ready on port %d (pid %d)", self.name, self.port, self._proc.pid)

    async def _read_log(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            try:
                line = await proc.stdout.readline()
            except ValueError:  # a line longer than the stream's limit: keep its start
                line = await proc.stdout.read(_LOG_LINE_LIMIT)
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            self._log.append(text[:_LOG_LINE_LIMIT])
            log.debug("%s: %s", self.name, text)

    async def _drain_log(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), 1.0)

    async def _watch(self) -> None:
        """Restart the child whenever it exits while not being stopped."""
        failures = 0
        while not self._stopping:
            proc = self._proc
            if proc is None:
                return
            status = await proc.wait()
            if self._stopping:
                return
            self._ready.clear()
            await self._drain_log()
            self.restarts += 1
            log.warning(
                "%s exited unexpectedly (status %s); restarting. Its last output:\n%s",
                self.name,
                status,
                self.log_tail(),
            )
            while not self._stopping:
                await asyncio.sleep(min(30.0, 0.5 * 2**failures))
                if self._stopping:
                    return
                try:
                    await self._launch()
                except EngineError as exc:
                    failures += 1
                    if failures >= self._max_restarts:
                        # Still trying (every 30 s at most), but say what keeps failing.
                        self.failed = f"{self.name} failed {failures} times in a row: {exc}"
                        log.error("%s", self.failed)
                    continue
                failures = 0
                self.failed = None
                break

    async def stop(self) -> None:
        """Stop the child (SIGTERM to its group, SIGKILL after ``stop_timeout``)."""
        self._stopping = True
        self._ready.clear()
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(BaseException):  # its failure was logged already
                await self._watcher
            self._watcher = None
        proc = self._proc
        if proc is not None and proc.returncode is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), self._stop_timeout)
            except (asyncio.TimeoutError, TimeoutError):
                _signal_group(proc.pid, signal.SIGKILL)
                await proc.wait()
        if proc is not None:
            # The group may hold processes the child started; they go with it.
            _signal_group(proc.pid, signal.SIGKILL)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        _LIVE.discard(self)

    def kill_now(self) -> None:
        """Kill the child's process group at once (exit hooks, failed starts)."""
        self._stopping = True
        if self._proc is not None and self._proc.returncode is None:
            _signal_group(self._proc.pid, signal.SIGKILL)


class _PortTaken(EngineError):
    pass


def owns_port(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds the socket listening on loopback TCP ``port`` (from
    ``/proc``); ``None`` where that cannot be told (no ``/proc``)."""
    inodes: set[str] = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(FileNotFoundError), open(table, encoding="ascii") as f:
                for row in f.readlines()[1:]:
                    fields = row.split()
                    # local_address is HEXIP:HEXPORT; state 0A is LISTEN; field 9 the inode
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(fields[9])
        if not inodes:
            return None
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
