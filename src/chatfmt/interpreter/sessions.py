"""Interpreter sessions: one code interpreter per conversation, for servers.

A conversation's kernel keeps its variables between requests; it is closed after it has been
idle for ``idle_timeout`` seconds, when more than ``max_sessions`` are open (least recently
used first), and by :meth:`InterpreterSessions.close_all` (server shutdown).
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

from ..errors import ChatFmtError

if TYPE_CHECKING:
    from ..agent import CodeRunner

logger = logging.getLogger("chatfmt.interpreter")


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


@dataclass
class _Session:
    interpreter: _Guarded
    last_used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class InterpreterSessions:
    """One interpreter per browser conversation, closed after ``idle_timeout`` seconds idle.

    Requests of the same conversation take turns on its kernel (a lock), so two tabs that share
    an id cannot interleave cells. Creating and closing kernels blocks, so it runs in threads.
    """

    def __init__(
        self,
        factory: Callable[[], CodeRunner],
        *,
        idle_timeout: float = 600.0,
        max_sessions: int = 8,
    ) -> None:
        self.factory = factory
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self._sessions: dict[str, _Session] = {}
        self._creating: dict[str, asyncio.Task[_Session]] = {}
        # Requests waiting for a conversation's session: it is not idle, even before they hold it.
        self._wanted: dict[str, int] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, conversation_id: object) -> bool:
        return conversation_id in self._sessions

    @asynccontextmanager
    async def use(self, conversation_id: str) -> AsyncIterator[CodeRunner]:
        """The conversation's interpreter (started on first use), held for this request."""
        self._wanted[conversation_id] = self._wanted.get(conversation_id, 0) + 1
        try:
            session = await self._get(conversation_id)
            session.users += 1
        finally:
            left = self._wanted.pop(conversation_id) - 1
            if left:
                self._wanted[conversation_id] = left
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

    async def directory(self, conversation_id: str, *, create: bool) -> Path | None:
        """The working directory of the conversation's interpreter (started first when
        ``create``), or ``None`` when it has none (or the interpreter keeps no files)."""
        session = self._sessions.get(conversation_id)
        if session is None and create:
            session = await self._get(conversation_id)
        work_dir = getattr(session.interpreter.inner, "work_dir", None) if session else None
        return Path(work_dir) if work_dir is not None else None

    async def _get(self, conversation_id: str) -> _Session:
        self._ensure_sweeper()
        session = self._sessions.get(conversation_id)
        if session is not None:
            return session
        pending = self._creating.get(conversation_id)
        if pending is None:
            await self._make_room()
            pending = asyncio.get_running_loop().create_task(self._create(conversation_id))
            self._creating[conversation_id] = pending
        # Shielded: a request stopped while the kernel starts leaves the start to finish, and
        # the kernel is registered for the conversation's next request (never leaked).
        return await asyncio.shield(pending)

    async def _create(self, conversation_id: str) -> _Session:
        try:
            interpreter = await asyncio.to_thread(self.factory)
        finally:
            del self._creating[conversation_id]
        session = _Session(_Guarded(interpreter), time.monotonic())
        self._sessions[conversation_id] = session
        return session

    async def _make_room(self) -> None:
        while len(self._sessions) + len(self._creating) >= self.max_sessions:
            idle = [
                (s.last_used, k)
                for k, s in self._sessions.items()
                if s.users == 0 and k not in self._wanted
            ]
            if not idle:
                raise ChatFmtError(
                    f"all {self.max_sessions} code interpreter sessions are busy; try again later"
                )
            await self.close(min(idle)[1])

    async def close(self, conversation_id: str) -> None:
        """Shut the conversation's kernel down (no-op if it has none)."""
        session = self._sessions.pop(conversation_id, None)
        if session is not None:
            await asyncio.to_thread(_close_interpreter, session.interpreter.inner)

    async def sweep(self) -> None:
        """Close the kernels idle for longer than ``idle_timeout``."""
        now = time.monotonic()
        for key, session in list(self._sessions.items()):
            if session.users == 0 and now - session.last_used > self.idle_timeout:
                logger.info("closing the idle interpreter of conversation %s", key)
                await self.close(key)

    async def close_all(self) -> None:
        """Stop the sweeper and close every kernel (server shutdown)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for key in list(self._sessions):
            await self.close(key)

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        interval = max(0.05, min(self.idle_timeout / 4, 30.0))
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
