"""InterpreterSessions across owners (API keys): one session per (owner, conversation), each
owner's fair share of the server's sessions, and a clear, typed error naming the limit met."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from chatfmt.errors import InterpreterError
from chatfmt.interpreter import InterpreterSessions
from chatfmt.interpreter.sessions import SessionsBusy


class Fake:
    """An interpreter with a working directory, closed on request."""

    def __init__(self, root: Path) -> None:
        self.work_dir = root
        self.closed = False

    def execute(self, code: str, timeout: float | None = None) -> Any:
        return code

    def close(self) -> None:
        self.closed = True


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def factory(tmp_path: Path, made: list[Fake]) -> Any:
    lock = threading.Lock()

    def make() -> Fake:
        with lock:
            made.append(Fake(tmp_path / f"k{len(made)}"))
            return made[-1]

    return make


def test_the_same_conversation_id_of_two_owners_is_two_sessions(tmp_path: Path) -> None:
    made: list[Fake] = []

    async def scenario() -> None:
        sessions = InterpreterSessions(factory(tmp_path, made))
        try:
            async with sessions.use("conv-shared1", "alice") as a:
                pass
            async with sessions.use("conv-shared1", "bob") as b:
                pass
            assert a is not b and len(made) == 2
            assert ("alice", "conv-shared1") in sessions and ("bob", "conv-shared1") in sessions
            assert "conv-shared1" not in sessions  # the owner "" (no key) has none
            # Another owner's directory is not reachable by the id: it has none of its own.
            assert await sessions.directory("conv-shared1", create=False, owner="carol") is None
            bobs = await sessions.directory("conv-shared1", create=False, owner="bob")
            assert bobs == made[1].work_dir
        finally:
            await sessions.close_all()

    run(scenario())


def test_one_owner_opening_sessions_never_closes_another_owners(tmp_path: Path) -> None:
    """The issue's attack: eight one-byte uploads by key B closed key A's session."""
    made: list[Fake] = []

    async def scenario() -> None:
        sessions = InterpreterSessions(factory(tmp_path, made), max_sessions=8, max_per_owner=4)
        try:
            await sessions.start("conv-alice01", "A")
            for i in range(12):  # B goes on opening conversations
                await sessions.start(f"conv-bob-{i:04d}", "B")
            assert ("A", "conv-alice01") in sessions and not made[0].closed
            assert sessions.owned("B") == 4  # B's own oldest went to make room
            assert sum(f.closed for f in made) == 12 - 4
        finally:
            await sessions.close_all()

    run(scenario())


def test_an_owner_at_its_share_gets_429_naming_the_limit(tmp_path: Path) -> None:
    made: list[Fake] = []

    async def scenario() -> None:
        sessions = InterpreterSessions(factory(tmp_path, made), max_sessions=4, max_per_owner=2)
        try:
            async with sessions.use("conv-b-0001", "B"), sessions.use("conv-b-0002", "B"):
                with pytest.raises(SessionsBusy) as info:
                    await sessions.start("conv-b-0003", "B")
                assert info.value.status == 429
                assert "2 code interpreter sessions" in str(info.value)
                assert "share of the server's 4" in str(info.value)
                await sessions.start("conv-a-0001", "A")  # A still has its own share
            assert isinstance(info.value, InterpreterError)
        finally:
            await sessions.close_all()

    run(scenario())


def test_a_full_server_is_503(tmp_path: Path) -> None:
    made: list[Fake] = []

    async def scenario() -> None:
        sessions = InterpreterSessions(factory(tmp_path, made), max_sessions=1)
        try:
            async with sessions.use("conv-aaaa"):
                with pytest.raises(SessionsBusy, match="all 1 code interpreter sessions") as info:
                    await sessions.start("conv-bbbb")
            assert info.value.status == 503
        finally:
            await sessions.close_all()

    run(scenario())


def test_bad_caps_are_refused() -> None:
    with pytest.raises(InterpreterError, match="at least 1"):
        InterpreterSessions(lambda: Fake(Path(".")), max_per_owner=0)
