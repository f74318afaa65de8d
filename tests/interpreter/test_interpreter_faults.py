"""Timeouts, killed kernels, memory limits, and no processes left behind."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from chatfmt.interpreter import JupyterInterpreter
from chatfmt.interpreter.sandbox import detect

pytestmark = pytest.mark.slow


def test_timeout_interrupts_and_keeps_the_kernel() -> None:
    with JupyterInterpreter(timeout=10) as interp:
        interp.execute("kept = 'state'")
        pid = interp.pid
        start = time.perf_counter()
        res = interp.execute("print('started')\nwhile True:\n    pass", timeout=1)
        assert time.perf_counter() - start < 4
        assert res.timed_out and not res.restarted
        assert res.ename == "TimeoutError" and res.error is not None
        assert "ran longer than 1 s and was interrupted" in res.error
        assert res.text == "started\n"  # output before the interrupt is kept
        assert "KeyboardInterrupt" not in res.observation()
        after = interp.execute("kept")
        assert after.ok and after.text == "'state'\n" and interp.pid == pid


def test_interrupt_from_another_thread_keeps_state() -> None:
    with JupyterInterpreter(timeout=20) as interp:
        interp.execute("kept = 1")
        threading.Timer(0.5, interp.interrupt).start()
        start = time.perf_counter()
        res = interp.execute("import time\ntime.sleep(30)")
        assert time.perf_counter() - start < 5
        assert res.ename == "KeyboardInterrupt" and not res.timed_out and not res.restarted
        assert interp.execute("kept").text == "1\n"


def test_code_that_ignores_interrupts_gets_a_restart(wait_gone: Callable[[int], bool]) -> None:
    with JupyterInterpreter(timeout=10, interrupt_grace=1) as interp:
        old_pid = interp.pid
        assert old_pid is not None
        code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
        res = interp.execute(code, timeout=0.5)
        assert res.timed_out and res.restarted and interp.restarts == 1
        assert res.error is not None and "kernel was restarted" in res.error
        assert wait_gone(old_pid)
        assert interp.pid != old_pid
        assert interp.execute("6 * 7").text == "42\n"


def test_kernel_killed_mid_run_is_restarted(wait_gone: Callable[[int], bool]) -> None:
    with JupyterInterpreter(timeout=20) as interp:
        pid = interp.pid
        assert pid is not None
        threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
        start = time.perf_counter()
        res = interp.execute("import time\nprint('working')\ntime.sleep(30)")
        assert time.perf_counter() - start < 10
        assert res.restarted and not res.timed_out and res.ename == "KernelDied"
        assert res.error is not None
        assert "died while running this code (killed by SIGKILL)" in res.error
        assert "variables, imports and definitions are lost" in res.observation()
        assert res.text == "working\n"
        assert wait_gone(pid)
        assert interp.pid != pid and interp.is_alive()
        assert interp.execute("'alive'").text == "'alive'\n"


def test_kernel_that_died_while_idle_is_restarted_on_next_run() -> None:
    with JupyterInterpreter() as interp:
        pid = interp.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while interp.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        res = interp.execute("1 + 1")
        assert (
            res.restarted and res.error is not None and "had died before this code ran" in res.error
        )
        assert interp.execute("1 + 1").text == "2\n"


def test_memory_limit_stops_a_huge_allocation() -> None:
    with JupyterInterpreter(memory_limit_mb=1500) as interp:
        res = interp.execute("big = b'x' * (3 * 1024**3)")  # touched pages: real usage
        # Under a cgroup the kernel is killed (and said so); under an address-space limit the
        # allocation fails inside it.
        assert res.ename in ("MemoryError", "KernelDied"), res.error
        if res.ename == "KernelDied":
            assert res.restarted and res.note is not None and "memory limit" in res.note
            assert res.note in res.observation()
        assert interp.execute("len(bytearray(10 * 1024**2))").text == "10485760\n"


def test_close_kills_kernel_and_its_children(wait_gone: Callable[[int], bool]) -> None:
    # Host process ids: without the sandbox's PID namespace (tests/interpreter/test_sandbox.py
    # checks the sandboxed case by what is left running).
    interp = JupyterInterpreter(sandbox=detect("off")).start()
    pid = interp.pid
    assert pid is not None
    child = int(interp.execute("import subprocess\nsubprocess.Popen(['sleep', '60']).pid").text)
    interp.close()
    assert interp.pid is None and not interp.is_alive()
    assert wait_gone(pid) and wait_gone(child)
    interp.close()  # idempotent


def test_atexit_shuts_down_kernels_left_open(wait_gone: Callable[[int], bool]) -> None:
    script = (
        "from chatfmt.interpreter import JupyterInterpreter\n"
        "k = JupyterInterpreter().start()\n"
        "print(k.pid, k.work_dir, flush=True)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    pid, work_dir = out.stdout.split()
    assert wait_gone(int(pid))
    assert not Path(work_dir).exists()


def test_forgotten_interpreter_is_killed_when_collected(wait_gone: Callable[[int], bool]) -> None:
    interp = JupyterInterpreter().start()
    pid, work_dir = interp.pid, interp.work_dir
    assert pid is not None
    del interp
    gc.collect()
    assert wait_gone(pid)
    assert not work_dir.exists()


def test_close_from_another_thread_during_a_run() -> None:
    interp = JupyterInterpreter().start()
    threading.Timer(0.5, interp.close).start()
    res = interp.execute("import time\ntime.sleep(30)")
    assert res.error is not None and res.error.startswith(("InterpreterClosed", "KernelDied"))
