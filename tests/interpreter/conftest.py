"""Fixtures for the code interpreter tests: a shared kernel and process checks."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

pytest.importorskip(
    "jupyter_client", reason="needs the jupyter extra: pip install 'chatfmt[jupyter]'"
)
pytest.importorskip("ipykernel", reason="needs the jupyter extra: pip install 'chatfmt[jupyter]'")
psutil = pytest.importorskip("psutil", reason="psutil (an ipykernel dependency) checks processes")

from chatfmt.interpreter import JupyterInterpreter  # noqa: E402


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def wait_gone() -> Callable[[int], bool]:
    """Poll for up to 5 s until a process is gone."""

    def wait(pid: int, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process_gone(pid):
                return True
            time.sleep(0.05)
        return process_gone(pid)

    return wait


@pytest.fixture(scope="module")
def kernel() -> Iterator[JupyterInterpreter]:
    """One kernel shared by the tests of a module that do not break it."""
    with JupyterInterpreter(timeout=20, max_output_chars=4000) as interp:
        yield interp
