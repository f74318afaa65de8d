"""InterpreterSessions: one interpreter per conversation, shared starts, idle and LRU closing,
and a cancelled request's cell finishing before the next request gets the kernel."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from chatfmt.errors import ChatFmtError
from chatfmt.interpreter import InterpreterSessions


class FakeInterpreter:
    """Records the code it runs; :meth:`execute` blocks while ``hold`` is clear."""

    def __init__(self) -> None:
        self.codes: list[str] = []
        self.closed = False
        self.interrupted = 0
        self.hold = threading.Event()
        self.hold.set()
        self.running = threading.Event()

    def execute(self, code: str, timeout: float | None = None) -> Any:
        self.codes.append(code)
        self.running.set()
        self.hold.wait(10)
        return f"ran {code}"

    def interrupt(self) -> None:
        self.interrupted += 1
        self.hold.set()

    def close(self) -> None:
        self.closed = True


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_sessions_close_when_idle_and_over_the_limit() -> None:
    made: list[FakeInterpreter] = []

    def factory() -> FakeInterpreter:
        made.append(FakeInterpreter())
        return made[-1]

    async def scenario() -> None:
        sessions = InterpreterSessions(factory, idle_timeout=0.2, max_sessions=2)
        try:
            async with sessions.use("conv-1111") as interp:
                interp.execute("1", None)
            assert "conv-1111" in sessions
            async with sessions.use("conv-2222"):
                pass
            async with sessions.use("conv-3333"):  # over max_sessions: the oldest goes
                pass
            assert "conv-1111" not in sessions and made[0].closed
            for _ in range(200):  # the sweeper closes idle kernels (a close ends in a thread)
                if not len(sessions) and all(m.closed for m in made):
                    break
                await asyncio.sleep(0.05)
            assert len(sessions) == 0 and all(m.closed for m in made)
        finally:
            await sessions.close_all()

    run(scenario())


def test_start_is_shared_and_survives_a_stop() -> None:
    """Two requests of one conversation share one kernel start; a request cancelled while
    the kernel starts does not leak it."""
    made: list[FakeInterpreter] = []

    def slow_factory() -> FakeInterpreter:
        time.sleep(0.2)
        made.append(FakeInterpreter())
        return made[-1]

    async def scenario() -> InterpreterSessions:
        sessions = InterpreterSessions(slow_factory)

        async def use(cid: str) -> FakeInterpreter:
            async with sessions.use(cid) as interp:
                return interp.inner  # type: ignore[attr-defined, no-any-return]

        try:
            first, second = await asyncio.gather(use("conv-shared"), use("conv-shared"))
            assert first is second and len(made) == 1
            stopped = asyncio.create_task(use("conv-stopped"))
            await asyncio.sleep(0.05)
            stopped.cancel()
            with pytest.raises(asyncio.CancelledError):
                await stopped
            for _ in range(100):
                if "conv-stopped" in sessions:
                    break
                await asyncio.sleep(0.02)
            assert "conv-stopped" in sessions and len(made) == 2
        finally:
            await sessions.close_all()
        return sessions

    assert len(run(scenario())) == 0
    assert all(m.closed for m in made)


def test_cancelled_cell_is_interrupted_before_the_next_request() -> None:
    kernel = FakeInterpreter()

    async def scenario() -> None:
        sessions = InterpreterSessions(lambda: kernel)
        kernel.hold.clear()  # the first cell runs until interrupted

        async def first() -> None:
            async with sessions.use("conv-cells") as interp:
                await asyncio.to_thread(interp.execute, "while True: pass")

        try:
            task = asyncio.create_task(first())
            await asyncio.to_thread(kernel.running.wait, 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The request's exit interrupted the cell and waited for it to end.
            assert kernel.interrupted == 1
            async with sessions.use("conv-cells") as interp:
                assert not interp.busy  # type: ignore[attr-defined]
                assert interp.execute("2", None) == "ran 2"
        finally:
            await sessions.close_all()
        assert kernel.codes == ["while True: pass", "2"] and kernel.closed

    run(scenario())


def test_all_sessions_busy_is_an_error() -> None:
    async def scenario() -> None:
        sessions = InterpreterSessions(FakeInterpreter, max_sessions=1)
        try:
            async with sessions.use("conv-aaaa"):
                with pytest.raises(ChatFmtError, match="all 1 code interpreter sessions are busy"):
                    async with sessions.use("conv-bbbb"):
                        pass
            async with sessions.use("conv-bbbb"):  # free again: the idle one is closed
                assert "conv-aaaa" not in sessions
        finally:
            await sessions.close_all()

    run(scenario())


def test_a_request_cancelled_again_while_stopping_its_cell_still_waits_for_it() -> None:
    kernel = FakeInterpreter()
    slow_interrupt = threading.Event()

    def interrupt() -> None:
        kernel.interrupted += 1
        slow_interrupt.wait(0.3)  # the interrupt takes a while: time for a second cancel
        kernel.hold.set()

    kernel.interrupt = interrupt  # type: ignore[method-assign]

    async def scenario() -> None:
        sessions = InterpreterSessions(lambda: kernel)
        kernel.hold.clear()

        async def first() -> None:
            async with sessions.use("conv-twice") as interp:
                await asyncio.to_thread(interp.execute, "while True: pass")

        try:
            task = asyncio.create_task(first())
            await asyncio.to_thread(kernel.running.wait, 10)
            task.cancel()
            await asyncio.sleep(0.05)
            task.cancel()  # as a server's response scope does when the client is gone
            with pytest.raises(asyncio.CancelledError):
                await task
            assert kernel.hold.is_set()  # the cell ended before the request let go
            async with sessions.use("conv-twice") as interp:
                assert not interp.busy  # type: ignore[attr-defined]
        finally:
            await sessions.close_all()

    run(scenario())


def test_a_kernel_started_for_a_waiting_request_is_not_evicted() -> None:
    async def scenario() -> None:
        made: list[FakeInterpreter] = []

        def factory() -> FakeInterpreter:
            time.sleep(0.1)
            made.append(FakeInterpreter())
            return made[-1]

        sessions = InterpreterSessions(factory, max_sessions=1)
        got: list[bool] = []

        async def first() -> None:
            async with sessions.use("conv-first") as interp:
                got.append(interp.inner.closed)  # type: ignore[attr-defined]
                await asyncio.sleep(0.2)

        async def second() -> None:
            while "conv-first" not in sessions:  # registered, not yet handed to its request
                await asyncio.sleep(0)
            with pytest.raises(ChatFmtError, match="busy"):
                async with sessions.use("conv-other"):
                    pass

        try:
            await asyncio.gather(first(), second())
        finally:
            await sessions.close_all()
        assert got == [False] and len(made) == 1

    run(scenario())
