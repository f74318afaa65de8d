"""Interpreter sessions: one code interpreter per conversation of an owner, for servers.

A session belongs to an owner (a server's API key, as :func:`chatfmt.store.owner_of`
names it; ``""`` when the server has no key) and a conversation id: another owner's request for
the same id reaches another session, or none. A conversation's kernel keeps its variables
between requests; it is closed after it has been idle for ``idle_timeout`` seconds, to make room
(least recently used first), and by :meth:`InterpreterSessions.close_all` (server shutdown).

Room is shared fairly: the server runs at most ``max_sessions`` kernels, and each owner at most
``max_per_owner`` of them. A new session closes an idle one of its own owner when that owner is
at its share, so one key can never close another key's kernels (and delete their files) by
opening sessions, unless there are more owners than sessions: each owner's share is then one,
and a full server closes the least recently used idle session of any owner (logged as a
warning). When nothing can be closed, :class:`SessionsBusy` says which limit was met.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InterpreterError

if TYPE_CHECKING:
    from .runner import CodeRunner

logger = logging.getLogger("chatfmt.interpreter")
#: Seconds between two sweeps at most (idle kernels, and directories past their disk cap).
_DISK_SWEEP = 2.0


class _Guarded:
    """An interpreter that knows whether a cell is running.

    A cancelled request cannot stop the worker thread running its cell, so the session is not
    handed to the next request until that cell has ended (or the kernel was interrupted).
    """

    def __init__(self, inner: CodeRunner) -> None:
        self.inner = inner
        self._idle = threading.Event()
        self._idle.set()

    def execute(self, code: str, timeout: float | None = None) -> Any:
        self._idle.clear()
        try:
            return self.inner.execute(code, timeout)
        finally:
            self._idle.set()

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    def interrupt(self) -> None:
        """Ask the kernel to stop the running cell, if the interpreter can."""
        method = getattr(self.inner, "interrupt", None)
        if callable(method):
            try:
                method()
            except Exception:
                logger.warning("interrupting the interpreter failed", exc_info=True)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)


#: A session's key: (owner, conversation id).
Key = tuple[str, str]


class SessionsBusy(InterpreterError):
    """No session can start now. ``status`` is the HTTP answer: 429 when the owner is at its
    share (its own sessions are all in use), 503 when the whole server is."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Session:
    interpreter: _Guarded
    last_used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class InterpreterSessions:
    """One interpreter per (owner, conversation), closed after ``idle_timeout`` seconds idle.

    Requests of the same conversation take turns on its kernel (a lock), so two tabs that share
    an id cannot interleave cells. Creating and closing kernels blocks, so it runs in threads.
    ``max_per_owner`` (default: ``max_sessions``, one owner) is each owner's share.
    """

    def __init__(
        self,
        factory: Callable[[], CodeRunner],
        *,
        idle_timeout: float = 600.0,
        max_sessions: int = 8,
        max_per_owner: int | None = None,
    ) -> None:
        if max_sessions < 1 or (max_per_owner is not None and max_per_owner < 1):
            raise InterpreterError("max_sessions and max_per_owner must be at least 1")
        self.factory = factory
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self.max_per_owner = min(max_per_owner or max_sessions, max_sessions)
        self._sessions: dict[Key, _Session] = {}
        self._creating: dict[Key, asyncio.Task[_Session]] = {}
        # Requests waiting for a conversation's session: it is not idle, even before they hold it.
        self._wanted: dict[Key, int] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: object) -> bool:
        """``(owner, conversation_id)``, or a conversation id of the owner ``""``."""
        return (("", key) if isinstance(key, str) else key) in self._sessions

    def owned(self, owner: str) -> int:
        """How many sessions ``owner`` has (started or starting)."""
        return sum(k[0] == owner for k in (*self._sessions, *self._creating))

    @asynccontextmanager
    async def use(self, conversation_id: str, owner: str = "") -> AsyncIterator[CodeRunner]:
        """The conversation's interpreter (started on first use), held for this request.
        Raises :class:`SessionsBusy` when no session can start."""
        key = (owner, conversation_id)
        self._wanted[key] = self._wanted.get(key, 0) + 1
        try:
            session = await self._get(key)
            session.users += 1
        finally:
            left = self._wanted.pop(key) - 1
            if left:
                self._wanted[key] = left
        try:
            async with session.lock:
                session.last_used = time.monotonic()
                try:
                    yield session.interpreter
                finally:
                    if session.interpreter.busy:  # the request was cancelled mid-cell
                        await self._stop_cell(session)
        finally:
            session.users -= 1
            session.last_used = time.monotonic()

    @staticmethod
    async def _stop_cell(session: _Session) -> None:
        """Interrupt the running cell and wait for it to end. However often this request is
        cancelled meanwhile, it waits: the lock must not pass on while the cell still runs."""

        async def stop() -> None:
            await asyncio.to_thread(session.interpreter.interrupt)
            await asyncio.to_thread(session.interpreter.wait_idle)

        task = asyncio.ensure_future(stop())
        cancelled = False
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError

    async def start(self, conversation_id: str, owner: str = "") -> None:
        """Start the conversation's interpreter now if it has none (marked as just used), so
        that :class:`SessionsBusy` can be answered before a response begins."""
        session = await self._get((owner, conversation_id))
        session.last_used = time.monotonic()

    async def directory(
        self, conversation_id: str, *, create: bool, owner: str = ""
    ) -> Path | None:
        """The working directory of the conversation's interpreter (started first when
        ``create``), or ``None`` when it has none (or the interpreter keeps no files)."""
        session = self._sessions.get((owner, conversation_id))
        if session is None and create:
            session = await self._get((owner, conversation_id))
        work_dir = getattr(session.interpreter.inner, "work_dir", None) if session else None
        return Path(work_dir) if work_dir is not None else None

    async def disk_room(self, conversation_id: str, owner: str = "") -> int | None:
        """Bytes the conversation's working directory may still take under its disk cap
        (``None``: no session, or no cap)."""
        session = self._sessions.get((owner, conversation_id))
        room = getattr(session.interpreter.inner, "disk_room", None) if session else None
        return await asyncio.to_thread(room) if callable(room) else None

    async def _get(self, key: Key) -> _Session:
        self._ensure_sweeper()
        while True:
            session = self._sessions.get(key)
            if session is not None:
                return session
            pending = self._creating.get(key)
            if pending is not None:
                break
            if await self._make_room(key[0]):
                continue  # closing took a while: look again (another request may have begun)
            pending = asyncio.get_running_loop().create_task(self._create(key))
            self._creating[key] = pending
            break
        # Shielded: a request stopped while the kernel starts leaves the start to finish, and
        # the kernel is registered for the conversation's next request (never leaked).
        return await asyncio.shield(pending)

    async def _create(self, key: Key) -> _Session:
        try:
            interpreter = await asyncio.to_thread(self.factory)
        finally:
            del self._creating[key]
        session = _Session(_Guarded(interpreter), time.monotonic())
        self._sessions[key] = session
        return session

    def _idle(self, owner: str | None) -> list[tuple[float, Key]]:
        return [
            (s.last_used, k)
            for k, s in self._sessions.items()
            if s.users == 0 and k not in self._wanted and (owner is None or k[0] == owner)
        ]

    async def _make_room(self, owner: str) -> bool:
        """Make room for one more session of ``owner``: True if a session was closed for it
        (the caller looks again), False if there is room; :class:`SessionsBusy` if neither."""
        if self.max_per_owner < self.max_sessions and self.owned(owner) >= self.max_per_owner:
            mine = self._idle(owner)
            if not mine:
                raise SessionsBusy(
                    f"this API key already has {self.max_per_owner} code interpreter sessions "
                    f"(each key's share of the server's {self.max_sessions}), all in use; try "
                    "again when one of its conversations is done",
                    429,
                )
            await self.close(min(mine)[1][1], owner)
            return True
        if len(self._sessions) + len(self._creating) >= self.max_sessions:
            # Reached only within an owner's share, which the shares' sum keeps within the
            # server's cap unless there are more owners than sessions.
            idle = self._idle(None)
            if not idle:
                raise SessionsBusy(
                    f"all {self.max_sessions} code interpreter sessions are busy; try again later",
                    503,
                )
            key = min(idle)[1]
            if key[0] != owner:
                logger.warning(
                    "all %d code interpreter sessions are taken: closing the idle session of "
                    "another API key (conversation %s) for a new one; serve at most as many "
                    "keys as sessions to avoid it",
                    self.max_sessions,
                    key[1],
                )
            await self.close(key[1], key[0])
            return True
        return False

    async def close(self, conversation_id: str, owner: str = "") -> None:
        """Shut the conversation's kernel down (no-op if it has none)."""
        session = self._sessions.pop((owner, conversation_id), None)
        if session is not None:
            await asyncio.to_thread(_close_interpreter, session.interpreter.inner)

    async def sweep(self) -> None:
        """Close the kernels idle for longer than ``idle_timeout``; stop those whose working
        directory grew past its disk cap since their last run (see :mod:`.disk`)."""
        now = time.monotonic()
        for key, session in list(self._sessions.items()):
            if session.users == 0 and now - session.last_used > self.idle_timeout:
                logger.info("closing the idle interpreter of conversation %s", key[1])
                await self.close(key[1], key[0])
                continue
            enforce = getattr(session.interpreter.inner, "enforce_disk_limit", None)
            if callable(enforce) and not session.interpreter.busy:
                if await asyncio.to_thread(enforce):
                    logger.warning(
                        "the interpreter of conversation %s wrote past its disk cap between "
                        "runs; its kernel was restarted",
                        key[1],
                    )

    async def close_all(self) -> None:
        """Stop the sweeper and close every kernel (server shutdown)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for owner, cid in list(self._sessions):
            await self.close(cid, owner)

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        # At most every few seconds: the sweep also bounds what code left running between runs
        # can write past the disk cap.
        interval = max(0.05, min(self.idle_timeout / 4, _DISK_SWEEP))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception:  # a kernel that fails to close must not stop the sweeper
                logger.exception("closing an idle interpreter failed")


def _close_interpreter(interpreter: CodeRunner) -> None:
    for name in ("close", "shutdown"):
        method = getattr(interpreter, name, None)
        if callable(method):
            method()
            return
