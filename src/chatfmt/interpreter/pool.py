"""A pool of started kernels, so a new session gets an interpreter without waiting ~1 s."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from typing import Any

from ..errors import InterpreterError
from .jupyter import JupyterInterpreter
from .lifetime import Resource
from .process import close_thread_loop
from .sandbox import Sandbox, detect


class KernelPool(Resource):
    """Keeps ``size`` started kernels; :meth:`acquire` hands one out and starts a replacement.

    Interpreters are never reused between callers (a kernel keeps the previous session's
    variables and files); the caller closes what it acquired (``with pool.acquire() as k:``).
    :meth:`close` shuts down every kernel the pool started, handed out or not. ``kwargs`` go to
    :class:`JupyterInterpreter` (each kernel gets its own temporary ``work_dir`` unless
    :meth:`acquire` is given one).
    """

    def __init__(self, size: int = 2, **kwargs: Any) -> None:
        if size < 1:
            raise InterpreterError("a kernel pool needs size >= 1")
        if "work_dir" in kwargs:
            raise InterpreterError("give work_dir to acquire(), not to the pool")
        self.size = size
        # Detected once for every kernel of the pool (a probe runs bubblewrap).
        kwargs.setdefault("sandbox", detect("auto"))
        self._kwargs = kwargs
        self._cond = threading.Condition()
        self._ready: list[JupyterInterpreter] = []
        self._pending = 0
        self._threads: list[threading.Thread] = []
        self._issued: weakref.WeakSet[JupyterInterpreter] = weakref.WeakSet()
        self._last_error: BaseException | None = None
        self._started = False
        self._closed = False

    def start(self) -> KernelPool:
        """Start filling the pool in the background; returns at once."""
        with self._cond:
            if self._closed:
                raise InterpreterError("this kernel pool is closed")
            if not self._started:
                self._started = True
                for _ in range(self.size):
                    self._spawn()
        return self

    @property
    def ready(self) -> int:
        """How many started kernels are waiting."""
        with self._cond:
            return len(self._ready)

    def _spawn(self) -> None:
        # Called with the lock held.
        self._pending += 1
        thread = threading.Thread(target=self._fill, name="chatfmt-kernel-pool", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def _fill(self) -> None:
        try:
            self._fill_one()
        finally:
            close_thread_loop()

    def _fill_one(self) -> None:
        interp = JupyterInterpreter(**self._kwargs)
        try:
            interp.start()
        except BaseException as exc:
            with self._cond:
                self._pending -= 1
                self._last_error = exc
                self._cond.notify_all()
            interp.close()
            return
        with self._cond:
            self._pending -= 1
            if not self._closed:
                self._ready.append(interp)
                self._cond.notify_all()
                return
        interp.close()  # the pool closed while this kernel was starting

    def wait_ready(self, count: int | None = None, timeout: float | None = None) -> bool:
        """Block until ``count`` (default: ``size``) kernels are ready; False on timeout."""
        want = self.size if count is None else count
        self.start()
        with self._cond:
            return (
                self._cond.wait_for(
                    lambda: len(self._ready) >= want or self._closed or not self._pending, timeout
                )
                and len(self._ready) >= want
            )

    def acquire(
        self, *, timeout: float | None = None, work_dir: str | os.PathLike[str] | None = None
    ) -> JupyterInterpreter:
        """A started interpreter, waiting for one if none is ready; a replacement starts.

        If no kernel is ready or starting (earlier starts failed), one is started here, so
        its error is raised as :class:`InterpreterError`. With ``work_dir`` and an isolating
        sandbox, a kernel is started for that directory (a warm kernel sees only its own).
        """
        self.start()
        sandbox: Sandbox = self._kwargs["sandbox"]
        if work_dir is not None and sandbox.isolate:
            fresh = JupyterInterpreter(work_dir, **self._kwargs)
            with self._cond:
                if self._closed:
                    raise InterpreterError("this kernel pool is closed")
                self._issued.add(fresh)
            return fresh.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._ready:
                if self._closed:
                    raise InterpreterError("this kernel pool is closed")
                if not self._pending:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise InterpreterError(f"no kernel became ready within {timeout} s")
                self._cond.wait(remaining)
            interp = self._ready.pop(0) if self._ready else None
            self._spawn()  # keep the pool full
        if interp is None:
            interp = JupyterInterpreter(**self._kwargs).start()
        elif not interp.is_alive():  # died while waiting in the pool
            interp.restart()
        with self._cond:
            self._issued.add(interp)
        if work_dir is not None:
            interp.chdir(work_dir)
        return interp

    def close(self) -> None:
        """Shut down every kernel of the pool, including those handed out."""
        with self._cond:
            self._closed = True
            ready, self._ready = self._ready, []
            issued = list(self._issued)
            threads = list(self._threads)
            self._cond.notify_all()
        for interp in ready + issued:
            with contextlib.suppress(Exception):
                interp.close()
        for thread in threads:  # starting kernels close themselves when their start ends
            thread.join(timeout=30)

    def __repr__(self) -> str:
        return f"KernelPool(size={self.size}, ready={self.ready})"
