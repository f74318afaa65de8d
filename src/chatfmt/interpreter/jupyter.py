"""A code interpreter on a real Jupyter (IPython) kernel.

Model-written code runs only inside the kernel process, never in this one. Each kernel:

* runs ``python -m ipykernel_launcher`` (the Python of this process unless ``python=`` says
  otherwise) over IPC sockets in a private temporary directory, so no TCP port is opened;
* has its working directory set to ``work_dir`` (the role of ChatGLM3's ``/mnt/data``);
* runs in a :class:`~.sandbox.Sandbox` (by default the best this host offers, see
  :func:`~.sandbox.detect`): bubblewrap namespaces (no network, no host files but its own
  directories, its own PID namespace) and limits on memory (a cgroup: real usage, where the
  host allows one; else the address space), CPU time, tasks, file size and open files;
* uses matplotlib's inline backend (``MPLBACKEND``), so a figure becomes ``image/png`` output;
* is killed on :meth:`JupyterInterpreter.close`, on exit of the ``with`` block, when a forgotten
  interpreter is garbage collected, and at interpreter exit (``weakref.finalize``, which runs at
  exit like ``atexit``): its whole process group, and in the sandbox its whole PID namespace,
  so processes the code started with ``setsid`` or a double fork go too. ipykernel also exits
  by itself when this process dies, as does the sandbox (``--die-with-parent``).

A run that exceeds its timeout is interrupted (an ``interrupt_request`` on the control
channel, which ipykernel turns into SIGINT for itself); if the kernel is not idle again within
``interrupt_grace`` seconds it is restarted. A kernel that dies is restarted. Either way the
:class:`ExecutionResult` says so (``timed_out``, ``restarted``, and a ``note`` naming a limit
that was met) and the model is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InterpreterError
from .cgroup import KernelCgroups
from .deaths import death_cause, died_error
from .disk import DiskGuard
from .lifetime import Resource
from .process import (
    in_launcher,
    kernel_env,
    kernel_processes,
    kill_kernel,
    launcher,
    manager_class,
    private_root,
    reap_kernel,
    remove_group,
    zmq_context,
)
from .results import ExecutionResult, _Collector
from .sandbox import Sandbox, detect, with_limits


class JupyterInterpreter(Resource):
    """One IPython kernel that runs model-written code; use it as a context manager.

    ``timeout`` (seconds) is the default per run; ``max_output_chars`` bounds
    :meth:`ExecutionResult.observation`; ``sandbox`` confines the kernel (default:
    ``detect("auto")``, the best this host offers); ``memory_limit_mb``, when given, replaces
    the sandbox's memory limit. ``work_dir`` is created if missing; without it a temporary
    directory is used and removed on close; the sandbox's ``disk_mb`` caps what it may hold,
    all files together (:mod:`.disk`). The kernel sees only neutral environment variables
    (``PATH``, ``HOME``, locale, ...) plus ``env``, unless ``inherit_env=True``.
    """

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        timeout: float = 30.0,
        memory_limit_mb: int | None = None,
        max_output_chars: int | None = 4000,
        startup_timeout: float = 60.0,
        interrupt_grace: float = 3.0,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = False,
        sandbox: Sandbox | None = None,
    ) -> None:
        if memory_limit_mb is not None and memory_limit_mb <= 0:
            raise InterpreterError("memory_limit_mb must be positive")
        box = sandbox if sandbox is not None else detect("auto")
        if memory_limit_mb is not None:
            box = with_limits(box, memory_mb=memory_limit_mb)
        self.sandbox = box
        self.timeout = timeout
        self.memory_limit_mb = box.limits.memory_mb
        self.max_output_chars = max_output_chars
        self.startup_timeout = startup_timeout
        self.interrupt_grace = interrupt_grace
        self.python = python or sys.executable
        self.env = dict(env or {})
        self.inherit_env = inherit_env
        self._owns_work_dir = work_dir is None
        self._work_dir = Path(
            tempfile.mkdtemp(prefix="data-", dir=private_root()) if work_dir is None else work_dir
        ).resolve()
        # An owned temporary work_dir goes when the interpreter is closed, collected or at exit.
        self._work_dir_cleanup: weakref.finalize[Any, Any] | None = (
            weakref.finalize(self, shutil.rmtree, self._work_dir, ignore_errors=True)
            if self._owns_work_dir
            else None
        )
        self._disk = DiskGuard(self._work_dir, box.limits.disk_mb)
        self._disk_stopped = False  # restarted between runs for the cap; the next run says so
        self._lock = threading.RLock()  # one run (or restart) at a time
        self._km: Any = None
        self._kc: Any = None
        self._runtime: Path | None = None
        self._pid: int | None = None
        self._pgid: int | None = None
        self._process: Any = None  # the kernel's Popen
        self._group: KernelCgroups | None = None  # its cgroups, where the host allows them
        self._oom_seen = 0
        self._control_lock = threading.Lock()  # interrupts may come from any thread
        self._closed = False
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self.restarts = 0

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def work_dir(self) -> Path:
        """The kernel's working directory, where :meth:`upload` puts files."""
        return self._work_dir

    @property
    def pid(self) -> int | None:
        """The kernel's process id (``None`` before start and after close)."""
        return self._pid

    def describe(self) -> str:
        """One line: what protection this interpreter's kernel runs under."""
        group = self._group
        if self._km is None or group is None:
            return self.sandbox.describe()
        return self.sandbox.describe(
            memory_cgroup=group.limits_memory, tasks_cgroup=group.limits_tasks
        )

    @property
    def started(self) -> bool:
        return self._km is not None

    def is_alive(self) -> bool:
        """Whether the kernel process is running."""
        # Popen.poll directly: jupyter_client's is_alive goes through run_sync, which leaves an
        # event loop behind in every worker thread that calls it.
        process = self._process
        return bool(process is not None and process.poll() is None)

    def start(self) -> JupyterInterpreter:
        """Start the kernel (a no-op if running); raise :class:`InterpreterError` on failure."""
        with self._lock:
            if self._closed:
                raise InterpreterError("this interpreter is closed; create a new one")
            if self._km is None:
                self._start_kernel()
        return self

    def close(self) -> None:
        """Shut the kernel down (its whole process group) and remove temporary files."""
        if self._closed:
            return
        self._closed = True
        self._stop_kernel()
        if self._work_dir_cleanup is not None:
            self._work_dir_cleanup()

    def restart(self) -> None:
        """Replace the kernel with a fresh one (all state is lost)."""
        with self._lock:
            if self._closed:
                raise InterpreterError("this interpreter is closed; create a new one")
            self._stop_kernel()
            self._start_kernel()
            self.restarts += 1

    def _start_kernel(self) -> None:
        self._work_dir.mkdir(parents=True, exist_ok=True)
        # The runtime directory: the connection file (read-only in the sandbox), the log (the
        # kernel's stderr, not mounted there) and the sockets' directory (writable there); all
        # of it counts against the disk cap (see Sandbox.command).
        runtime = Path(tempfile.mkdtemp(prefix="kernel-", dir=private_root()))
        # Short names: a socket's path must fit in 107 bytes (sockets/ipc-1 did not, under a
        # long TMPDIR); "s/k-1" is as long as the "ipc-1" of old.
        sockets = runtime / "s"
        sockets.mkdir()
        km_class = manager_class()
        km = km_class(
            transport="ipc",
            ip=str(sockets / "k"),
            connection_file=str(runtime / "kernel.json"),
            context=zmq_context(),
        )
        kernel = [
            self.python,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            "--HistoryManager.enabled=False",  # no shared sqlite file between kernels
        ]
        limits = self.sandbox.limits
        memory = limits.memory_mb * 1024 * 1024 if limits.memory_mb is not None else None
        group = KernelCgroups.create(memory_bytes=memory, tasks=limits.processes)
        self._group, self._oom_seen = group, 0
        log_path = runtime / "kernel.log"
        self._runtime, self._km = runtime, km
        try:
            # The connection file must exist before the sandbox mounts it (jupyter_client
            # writes it again at start, with the same ports and key).
            km.write_connection_file()
            km.chatfmt_argv = self.sandbox.command(
                kernel,
                work_dir=self._work_dir,
                sockets=sockets,
                connection_file=runtime / "kernel.json",
                python=self.python,
                cgroup_procs=group.procs,
                memory_in_cgroup=group.limits_memory,
                tasks_in_cgroup=group.limits_tasks,
            )
            with open(log_path, "wb") as log:
                launch = functools.partial(
                    km.start_kernel,
                    cwd=str(self._work_dir),
                    env=kernel_env(inherit=self.inherit_env, extra=self.env),
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
                launcher().submit(in_launcher, launch).result()
            self._pid = getattr(km.provisioner, "pid", None)
            self._pgid = getattr(km.provisioner, "pgid", None)
            self._process = getattr(km.provisioner, "process", None)
            kc = km.client(context=zmq_context())
            kc.start_channels()
            self._kc = kc
            if self._pid is not None:
                self._finalizer = weakref.finalize(
                    self, reap_kernel, self._pid, self._pgid, self._process, runtime, kc, group
                )
            kc.wait_for_ready(timeout=self.startup_timeout)
            self._setup()
            # Measured from here on, before any model-written code runs: what the runtime
            # directory holds now (connection file, sockets, start-up log) is the server's.
            # Not a method of self: the guard must not keep the interpreter alive.
            processes = (
                functools.partial(kernel_processes, self._pid, group)
                if self._pid is not None
                else None
            )
            self._disk.watch([runtime], processes)
            self._disk.settle()  # a fresh kernel: what the directory holds now is allowed
        except Exception as exc:
            tail = self._log_tail()
            self._stop_kernel()
            raise InterpreterError(
                f"could not start a Jupyter kernel with {self.python}: {exc}"
                + (f"\nkernel log: {tail}" if tail else "")
            ) from exc

    def _setup(self) -> None:
        """Run the silent start-up cell: the working directory (limits are set before the
        kernel starts, by its launcher)."""
        self._silent(
            f"import os as _chatfmt_os\n_chatfmt_os.chdir({str(self._work_dir)!r})\ndel _chatfmt_os"
        )

    def _silent(self, code: str) -> None:
        """Run set-up code that the model never sees; raise if it fails."""
        kc = self._kc
        msg_id = kc.execute(code, silent=True, store_history=False, allow_stdin=False)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise InterpreterError("the kernel did not run its set-up code in time")
            try:
                reply = kc.shell_channel.get_msg(timeout=min(remaining, 1.0))
            except queue.Empty:
                if not self.is_alive():
                    raise InterpreterError("the kernel died during set-up") from None
                continue
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                break
        content = reply.get("content", {})
        if content.get("status") != "ok":
            raise InterpreterError(
                f"kernel set-up failed: {content.get('ename')}: {content.get('evalue')}"
            )

    def _log_tail(self, lines: int = 5) -> str:
        if self._runtime is None:
            return ""
        try:
            text = (self._runtime / "kernel.log").read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def _stop_kernel(self) -> None:
        km, kc, runtime, pid = self._km, self._kc, self._runtime, self._pid
        pgid, process, group = self._pgid, self._process, self._group
        self._km = self._kc = self._runtime = self._pid = self._pgid = self._process = None
        self._group = None
        self._disk.watch()  # the kernel's runtime directory and processes go with it
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if kc is not None:
            with contextlib.suppress(Exception):
                kc.stop_channels()
        if pid is not None:
            # Kill first, ourselves: the kernel state is thrown away anyway, a graceful
            # shutdown of a kernel busy in C code waits out shutdown_wait_time, and
            # jupyter_client polls for the exit only every 0.1 s. The kernel leads its own
            # process group, so whatever the code spawned goes too.
            kill_kernel(pid, pgid, process)
        if km is not None:
            with contextlib.suppress(Exception):
                km.shutdown_kernel(now=True)  # now a formality that cleans up its files
        if runtime is not None:
            shutil.rmtree(runtime, ignore_errors=True)
        remove_group(group)

    # -- files --------------------------------------------------------------------------------

    def disk_room(self) -> int | None:
        """Bytes that may still be added to ``work_dir`` under the disk cap (``None``: no cap),
        so that a server refuses an upload that would pass it."""
        return self._disk.room()

    def upload(self, name: str, data: bytes | str) -> Path:
        """Write a file into ``work_dir`` (atomically) and return its path.

        ``name`` is a relative path inside ``work_dir``; ``..`` and absolute paths are refused.
        """
        target = (self._work_dir / name).resolve()
        if not name or Path(name).is_absolute() or not target.is_relative_to(self._work_dir):
            raise InterpreterError(f"upload name {name!r} must be a relative path inside work_dir")
        target.parent.mkdir(parents=True, exist_ok=True)
        payload = data.encode("utf-8") if isinstance(data, str) else data
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upload-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(payload)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return target

    def chdir(self, work_dir: str | os.PathLike[str]) -> None:
        """Move the (running) kernel to another working directory, creating it if missing.

        In an isolating sandbox the kernel sees only the directory it started in: the new one
        must lie inside it."""
        path = Path(work_dir).resolve()
        if self.sandbox.isolate and not path.is_relative_to(self._work_dir):
            raise InterpreterError(
                f"the sandboxed kernel cannot see {str(path)!r}: only its working directory "
                f"{str(self._work_dir)!r} is there; start an interpreter with "
                "work_dir= that directory instead"
            )
        path.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self.start()
            if self._work_dir_cleanup is not None:
                self._work_dir_cleanup()
                self._work_dir_cleanup = None
            if not path.is_relative_to(self._work_dir):
                self._work_dir, self._owns_work_dir = path, False
                self._disk.root = path
                self._disk.settle()
            self._silent(f"import os as _o\n_o.chdir({str(path)!r})\ndel _o")

    # -- running code -------------------------------------------------------------------------

    def execute(self, code: str, timeout: float | None = None) -> ExecutionResult:
        """Run ``code`` in the kernel and collect its output; never raises for bad code.

        A dead kernel (killed, out of memory) is restarted, before or during the run, and the
        result has ``restarted=True`` and an error saying that all state was lost.
        """
        limit = self.timeout if timeout is None else timeout
        with self._lock:
            try:
                self.start()
            except InterpreterError as exc:
                if self._closed:
                    raise
                return ExecutionResult(max_output_chars=self.max_output_chars).with_error(
                    f"KernelUnavailable: {exc}", ename="KernelUnavailable"
                )
            if not self.is_alive():
                error, note = self._died_note(before=True)
                error += self._restart_quietly()
                return ExecutionResult(
                    error=error,
                    ename="KernelDied",
                    restarted=True,
                    max_output_chars=self.max_output_chars,
                    note=note,
                )
            if self._disk_stopped or self._disk.over():  # written since the last run
                restart, self._disk_stopped = not self._disk_stopped, False
                result = ExecutionResult(max_output_chars=self.max_output_chars)
                return self._disk_stop(result, restart=restart)
            try:
                result = self._noted(self._run(code, limit))
                if not result.restarted and self._disk.over():  # written between two measures
                    return self._disk_stop(result, running=True)
                self._disk.settle()
                return result
            except Exception:
                if not self._closed:
                    raise
                # close() from another thread (a pool closing, exit) pulled the kernel away.
                return ExecutionResult(max_output_chars=self.max_output_chars).with_error(
                    "InterpreterClosed: the interpreter was closed while this code ran."
                )

    def enforce_disk_limit(self) -> bool:
        """Between runs (a server's sweeper): stop and restart the kernel if its directory grew
        past the disk cap since the last run; True if it did. A no-op while code runs (the run
        checks for itself) or before start."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._km is None or self._closed or not self._disk.over():
                return False
            self._disk_stop(ExecutionResult())
            self._disk_stopped = True
            return True
        finally:
            self._lock.release()

    def _disk_stop(
        self, result: ExecutionResult, *, running: bool = False, restart: bool = True
    ) -> ExecutionResult:
        """Kill and restart a kernel whose working directory grew past the disk cap: an
        interrupt would leave background threads and processes writing (see :mod:`.disk`)."""
        failed = self._restart_quietly() if restart else ""
        result.restarted, result.note = True, self._disk.note()
        when = "while this code ran" if running else "since the last run (code left running)"
        return result.with_error(
            f"DiskLimit: the working directory grew past its {self._disk.limit_mb} MB cap {when}, "
            "so the kernel was stopped and restarted: variables, imports and definitions are "
            "lost; the files are kept. Delete files to free space." + failed,
            ename="DiskLimit",
        )

    def interrupt(self) -> None:
        """Interrupt the running cell, e.g. when its request was cancelled.

        Safe to call from another thread while :meth:`execute` runs; that run then ends with a
        ``KeyboardInterrupt`` error and the kernel keeps its state. A no-op when not running.
        """
        # What jupyter_client does for interrupt_mode "message", minus run_sync and its
        # per-thread event loops; ipykernel answers it from its control thread, even while
        # the main thread is busy.
        kc = self._kc
        if kc is None or not self.is_alive():
            return
        with self._control_lock, contextlib.suppress(Exception):
            kc.control_channel.send(kc.session.msg("interrupt_request", content={}))

    def _restart_quietly(self) -> str:
        """Restart the kernel; if that fails, say so (for the result) instead of raising: the
        next run tries to start one again."""
        try:
            self.restart()
        except InterpreterError as exc:
            return f" The restart failed ({exc}); the next run tries again."
        return ""

    def _noted(self, result: ExecutionResult) -> ExecutionResult:
        """Add the one-line note for a limit the error shows: the network, a file's size."""
        if result.note is None and not result.ok:
            result.note = self.sandbox.note_for(f"{result.ename}: {result.evalue}")
        return result

    async def aexecute(self, code: str, timeout: float | None = None) -> ExecutionResult:
        """:meth:`execute` on a worker thread, for async servers (it always returns in time)."""
        return await asyncio.to_thread(self.execute, code, timeout)

    def _died_note(self, *, before: bool) -> tuple[str, str | None]:
        """The error and note of a run whose kernel died (see :mod:`.deaths`)."""
        code = None
        with contextlib.suppress(Exception):
            code = self._process.returncode
        group = self._group
        how, note = death_cause(
            code,
            isolated=self.sandbox.isolate,
            limits=self.sandbox.limits,
            group=group,
            oom_seen=self._oom_seen,
        )
        if group is not None:
            self._oom_seen = group.oom_kills()
        return died_error(how, note, before=before), note

    def _run(self, code: str, limit: float) -> ExecutionResult:
        kc = self._kc
        msg_id = kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=True)
        out = _Collector()
        deadline = time.monotonic() + limit
        interrupted_at: float | None = None
        while not out.idle:
            now = time.monotonic()
            if interrupted_at is None and now >= deadline:
                self.interrupt()
                interrupted_at = now
            if interrupted_at is not None and now - interrupted_at > self.interrupt_grace:
                failed = self._restart_quietly()
                return out.result(
                    self.max_output_chars,
                    timed_out=True,
                    restarted=True,
                ).with_error(
                    f"TimeoutError: the code ran longer than {limit:g} s and did not stop when "
                    "interrupted, so the kernel was restarted: variables, imports and "
                    "definitions are lost." + failed
                )
            if self._disk.due_and_over():
                result = out.result(self.max_output_chars, timed_out=interrupted_at is not None)
                return self._disk_stop(result, running=True)
            wait = 0.2 if interrupted_at is None else 0.1
            due = self._disk.due_in()  # measured on time, not a poll's wait later
            if due is not None:
                wait = min(wait, due)
            try:
                msg = kc.iopub_channel.get_msg(timeout=min(wait, max(deadline - now, 0.01)))
            except queue.Empty:
                if not self.is_alive():
                    error, note = self._died_note(before=False)
                    error += self._restart_quietly()
                    result = out.result(self.max_output_chars, restarted=True)
                    result.note = note
                    return result.with_error(error, ename="KernelDied")
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                out.handle(msg)
        self._drain_reply(msg_id)
        result = out.result(self.max_output_chars, timed_out=interrupted_at is not None)
        if interrupted_at is not None:
            # Replaces the KeyboardInterrupt traceback, which would only confuse the model.
            result = result.with_error(
                f"TimeoutError: the code ran longer than {limit:g} s and was interrupted "
                "(the kernel and its state are kept)."
            )
        return result

    def _drain_reply(self, msg_id: str) -> None:
        """Consume the shell reply of a finished run so replies do not pile up."""
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                reply = self._kc.shell_channel.get_msg(timeout=0.5)
            except queue.Empty:
                return
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self.started else "not started")
        return f"JupyterInterpreter(work_dir={str(self._work_dir)!r}, pid={self._pid}, {state})"
