"""The warm kernel pool: fast acquisition, replacement, and a clean close."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from chatfmt.errors import InterpreterError
from chatfmt.interpreter import KernelPool

pytestmark = pytest.mark.slow


def test_acquire_is_fast_and_the_pool_refills(
    tmp_path: Path, wait_gone: Callable[[int], bool]
) -> None:
    pool = KernelPool(size=2, timeout=10).start()
    try:
        assert pool.wait_ready(timeout=60)
        first = pool.acquire()  # how fast: bench/bench_interpreter.py
        assert first.is_alive() and first.execute("1 + 1").text == "2\n"

        second = pool.acquire(work_dir=tmp_path / "session")
        assert second.pid != first.pid
        second.upload("in.txt", "uploaded")
        assert second.execute("open('in.txt').read()").text == "'uploaded'\n"
        assert second.work_dir == (tmp_path / "session").resolve()

        assert pool.wait_ready(timeout=60)  # two replacements were started meanwhile
        assert pool.ready == 2
        with pool.acquire() as third:  # a context manager closes what it acquired
            third_pid = third.pid
            assert third_pid is not None
        assert wait_gone(third_pid)
        pids = [p for p in (first.pid, second.pid) if p is not None]
    finally:
        pool.close()
    assert len(pids) == 2 and all(wait_gone(pid) for pid in pids)
    with pytest.raises(InterpreterError, match="closed"):
        pool.acquire()


def test_close_right_after_start_leaves_no_kernels(wait_gone: Callable[[int], bool]) -> None:
    import psutil

    me = psutil.Process()
    before = {c.pid for c in me.children(recursive=True)}
    with KernelPool(size=2):
        time.sleep(0.2)  # kernels are starting in the background
    leftover = [
        c.pid for c in me.children(recursive=True) if c.pid not in before and not wait_gone(c.pid)
    ]
    assert leftover == []


def test_pool_arguments_are_checked() -> None:
    with pytest.raises(InterpreterError, match="size"):
        KernelPool(size=0)
    with pytest.raises(InterpreterError, match="work_dir"):
        KernelPool(work_dir="/tmp")
