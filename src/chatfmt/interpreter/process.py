"""A kernel's process: how it is started (one long-lived thread, a private directory, its
message sockets, its environment) and how it is killed and cleaned up. Used by :mod:`.jupyter`."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from .._imports import require
from .cgroup import KernelCgroups


@functools.cache
def manager_class() -> Any:
    """A KernelManager whose kernel spec is built here rather than looked up by name.

    Why: chatfmt must not depend on which kernelspecs a machine has installed, and needs its
    own command line (history off). Built lazily so jupyter_client loads only when used.
    """
    manager = require("jupyter_client.manager", extra="jupyter")
    kernelspec = require("jupyter_client.kernelspec", extra="jupyter")

    class _Manager(manager.KernelManager):  # type: ignore[misc, name-defined]
        chatfmt_argv: ClassVar[list[str]] = []  # set per instance before start

        @property
        def kernel_spec(self) -> Any:
            return kernelspec.KernelSpec(
                argv=list(self.chatfmt_argv),
                display_name="chatfmt",
                language="python",
                # Through the control channel: a signal to the sandbox's process group would
                # reach bubblewrap, not the kernel inside its PID namespace.
                interrupt_mode="message",
            )

    return _Manager


#: What this process buffers of a kernel's messages: at most this many per socket (more are
#: dropped by ZeroMQ), none larger than this (its sender is disconnected, then reconnects).
#: Without it, code printing in a background thread between runs fills the server's memory.
_RCVHWM = 32
_MAXMSGSIZE = 16 * 1024 * 1024


@functools.cache
def zmq_context() -> Any:
    zmq = require("zmq", extra="jupyter")
    context = zmq.Context()
    context.setsockopt(zmq.RCVHWM, _RCVHWM)
    context.setsockopt(zmq.MAXMSGSIZE, _MAXMSGSIZE)
    return context


@functools.cache
def private_root() -> Path:
    """This process's directory for kernels' working and runtime directories: mode 0700, and
    never visible inside a sandbox. Files the code writes there are the server user's (the
    sandbox's user maps to it) and the code may set their mode, setuid bits included; inside
    this directory no other user of the host can reach them."""
    root = Path(tempfile.mkdtemp(prefix="chatfmt-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    _start_reaper(root)
    return root


#: The write end of the pipe the reaper watches (held, never written, until this process
#: ends) and the reaper itself (kept, so that it is not reported as a forgotten child).
_REAPER: list[Any] = []

# The reaper: waits for end-of-file on the pipe, which comes when the server is gone however it
# ended (atexit hooks do not run after SIGTERM re-raised by uvicorn, nor after SIGKILL), then
# removes the directory, trying again while kernels that die with the server still write.
_REAPER_CODE = """
import os, shutil, signal, sys, time
for name in ("SIGINT", "SIGHUP", "SIGTERM"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
fd, root = int(sys.argv[1]), sys.argv[2]
try:
    while os.read(fd, 4096):
        pass
except OSError:
    pass
for _ in range(40):
    shutil.rmtree(root, ignore_errors=True)
    if not os.path.exists(root):
        break
    time.sleep(0.25)
"""


def _start_reaper(root: Path) -> None:
    """Start a small process that removes ``root`` once this process has ended, whatever
    ended it. Only this process holds the pipe's write end (descriptors are not inherited by
    kernels), so its end is the pipe's."""
    read_end, write_end = os.pipe()
    try:
        reaper = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _REAPER_CODE, str(read_end), str(root)],
            pass_fds=(read_end,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl+C in the terminal is for the server, not for it
        )
    except OSError:  # no reaper: the atexit hook still removes the directory on a normal exit
        os.close(write_end)
    else:
        _REAPER.extend((write_end, reaper))
    finally:
        os.close(read_end)


def close_thread_loop() -> None:
    """Close the event loop that jupyter_client's ``run_sync`` left in this worker thread
    (else it is collected at exit, after its selector, with an error on stderr)."""
    with warnings.catch_warnings(), contextlib.suppress(Exception):
        warnings.simplefilter("ignore", DeprecationWarning)
        loop = asyncio.get_event_loop()
        if not loop.is_running():
            loop.close()
        asyncio.set_event_loop(None)


def in_launcher(launch: Any) -> None:
    try:
        launch()
    finally:
        close_thread_loop()


@functools.cache
def launcher() -> concurrent.futures.ThreadPoolExecutor:
    """The one long-lived thread that starts every kernel. The sandbox ends with the thread
    that started it (Linux's parent-death signal follows the thread, not the process), so
    kernels started from short-lived threads (the pool's) would die with those."""
    return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="chatfmt-kernel-start")


def kill_kernel(pid: int, pgid: int | None, process: Any) -> None:
    """SIGKILL the kernel and its process group (everything the code spawned), then reap it.

    The group is killed even when its leader is already gone: children of a crashed kernel
    stay in the group. jupyter_client starts kernels in a new session, so the group is theirs.
    """
    # Only a group the kernel leads, never ours (a kernel not started in its own session).
    if pgid is not None and pgid == pid and pgid != os.getpgrp():
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    if process is not None:
        with contextlib.suppress(Exception):
            process.wait(timeout=5)


def reap_kernel(
    pid: int, pgid: int | None, process: Any, runtime: Path, client: Any, group: Any
) -> None:
    """The last resort for a forgotten interpreter: kill its kernel and remove its files.

    Run by ``weakref.finalize`` when an interpreter that was not closed is garbage collected
    or at interpreter exit. It must not refer to the interpreter, hence a plain function.
    """
    with contextlib.suppress(Exception):
        client.stop_channels()
    kill_kernel(pid, pgid, process)
    shutil.rmtree(runtime, ignore_errors=True)
    remove_group(group)


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it, now. In the sandbox that is every process
    of its PID namespace: orphans there (``setsid``, double forks) are adopted by the
    namespace's init, a descendant of ``pid``; no process can leave it."""
    found: list[int] = []
    seen: set[int] = set()
    stack = [pid]
    children = _children_of if os.path.exists(f"/proc/{pid}/task/{pid}/children") else None
    parents: dict[int, list[int]] | None = None
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        found.append(current)
        if children is not None:
            stack.extend(children(current))
        else:  # a kernel without CONFIG_PROC_CHILDREN: every process's parent, once
            parents = _parents() if parents is None else parents
            stack.extend(parents.get(current, ()))
    return found


def _children_of(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    out.extend(int(c) for c in fh.read().split())
    return out


def _parents() -> dict[int, list[int]]:
    """Children per parent, from every process's ``/proc/<pid>/stat``."""
    out: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{name}/stat") as fh:
                    # The name in parentheses may hold spaces and parentheses itself.
                    ppid = int(fh.read().rpartition(")")[2].split()[1])
                out.setdefault(ppid, []).append(int(name))
    return out


def kernel_processes(pid: int, group: KernelCgroups | None) -> list[int]:
    """The kernel's processes: its process tree, and the members of its cgroups (which hold
    processes that left the tree, where the kernel runs without a PID namespace)."""
    found = process_tree(pid)
    if group is not None:
        found.extend(sorted(group.members() - set(found)))
    return found


def remove_group(group: KernelCgroups | None) -> None:
    """Delete a kernel's cgroups (they wait for its processes to be gone after the kill)."""
    if group is not None:
        group.remove()


_MPL_INLINE = "module://matplotlib_inline.backend_inline"
# Environment variables a kernel gets without inherit_env (plus LC_*).
_ENV_KEEP = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
        "TMPDIR", "TEMP", "TMP", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME",
        "LD_LIBRARY_PATH", "SYSTEMROOT", "MPLBACKEND", "MPLCONFIGDIR", "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "JUPYTER_PATH", "JUPYTER_CONFIG_DIR",
        "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR",
    }
)  # fmt: skip


def kernel_env(*, inherit: bool, extra: Mapping[str, str]) -> dict[str, str]:
    """A kernel's environment: this process's (``inherit``) or only its neutral variables,
    the kernel's settings, then ``extra``."""
    if inherit:
        env = dict(os.environ)
    else:
        # Model-written code can read its environment; API keys and tokens of the host
        # process must not be there, so only neutral variables are passed on.
        env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith("LC_")}
    env.setdefault("MPLBACKEND", _MPL_INLINE)
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # silences a debugpy warning at start-up
    # The working directory is not put first on the path at start (Python 3.11+): a module
    # the code planted there (say ipykernel_launcher.py) must not take over its restarts.
    env["PYTHONSAFEPATH"] = "1"
    env.update(extra)
    return env
