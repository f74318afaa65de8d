"""The code interpreter's command-line options, shared by ``chatfmt chat`` and ``chatfmt serve``:
the sandbox, its limits, and the kernel's Python; and for ``serve``, the checks that refuse to
offer the interpreter on a public address without an API key, or to several API keys without
its sandbox."""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InterpreterError


def add_kernel_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("code interpreter")
    g.add_argument(
        "--sandbox",
        choices=["auto", "bwrap", "off"],
        default="auto",
        help="confine model-written code: bwrap (bubblewrap namespaces: no network, no host "
        "files but its working directory, own processes) or fail; auto: bwrap where this host "
        "has it, else limits only, said at start; off: no isolation (default: auto)",
    )
    g.add_argument("--sandbox-network", action="store_true",
                   help="let sandboxed code reach the network (default: no network)")  # fmt: skip
    g.add_argument("--kernel-python", metavar="PATH",
                   help="the Python that runs the kernel (it needs ipykernel; default: this one, "
                   "with the data stack chatfmt installs)")  # fmt: skip
    g.add_argument("--kernel-memory-mb", type=int, default=2048, metavar="MB",
                   help="memory per kernel (default: 2048)")  # fmt: skip
    g.add_argument("--kernel-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long one run of code may take before it is interrupted "
                   "(default: 60)")  # fmt: skip
    g.add_argument("--kernel-disk-mb", type=int, default=512, metavar="MB",
                   help="most a conversation's working directory may hold, all files together; "
                   "past it the kernel is restarted (default: 512)")  # fmt: skip


def add_public_bind_option(p: argparse.ArgumentParser) -> None:
    """``serve``'s escape hatch from :func:`check_public_bind`."""
    p.add_argument("--allow-public-without-key", action="store_true",
                   help="serve the code interpreter on a non-loopback --host without --api-key "
                   "(anyone who reaches the address runs code on this machine; only for a "
                   "network you trust)")  # fmt: skip


def add_keys_without_sandbox_option(p: argparse.ArgumentParser) -> None:
    """``serve``'s escape hatch from :func:`check_keys_sandbox`."""
    p.add_argument("--allow-keys-without-sandbox", action="store_true",
                   help="serve the code interpreter to several API keys although its sandbox "
                   "is off (each key's code could read the others' files; only for keys whose "
                   "holders trust each other)")  # fmt: skip


def sandbox_problem(mode: str) -> str | None:
    """Why ``--sandbox mode`` leaves kernels unconfined on this host, or ``None`` (``bwrap``
    either confines them or refuses to start)."""
    if mode == "off":
        return "--sandbox off"
    if mode == "bwrap":
        return None
    if sys.platform != "linux":
        return "namespaces need Linux"
    from ..interpreter.sandbox import bwrap_problem

    return bwrap_problem()


def check_keys_sandbox(
    keys: Sequence[str] | None, sandbox: str, *, interpreter: bool, allow: bool
) -> None:
    """Refuse (:class:`InterpreterError`, one line naming the fixes) to serve the code
    interpreter to several API keys while its sandbox is off, unless ``allow``: kernels then
    run as this server's user, so one key's code could read the working directories of the
    other keys' kernels. With ``allow``, a warning on stderr."""
    if not interpreter or not keys or len(keys) < 2:
        return
    problem = sandbox_problem(sandbox)
    if problem is None:
        return
    if allow:
        print(
            f"chatfmt: WARNING: {len(keys)} API keys share the code interpreter without its "
            f"sandbox ({problem}; --allow-keys-without-sandbox): each key's code can read the "
            "others' files",
            file=sys.stderr,
            flush=True,
        )
        return
    raise InterpreterError(
        f"{len(keys)} API keys share the code interpreter but its sandbox is off ({problem}): "
        "kernels run as this server's user and one key's code could read another key's files; "
        "install bubblewrap and use --sandbox auto or bwrap, serve one key, turn the "
        "interpreter off with --no-interpreter, or pass --allow-keys-without-sandbox if the "
        "keys' holders trust each other"
    )


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` keeps the server on this machine (``localhost``,
    127.0.0.0/8, ``::1``); a wildcard or any other name or address does not."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def check_public_bind(
    host: str, keys: Sequence[str] | None, *, interpreter: bool, allow: bool
) -> None:
    """Refuse (:class:`InterpreterError`, one line naming the fixes) to serve the code
    interpreter on a non-loopback address without an API key, unless ``allow``: anyone who can
    reach the address could run code on this machine. With ``allow``, a warning on stderr."""
    if not interpreter or keys or is_loopback(host):
        return
    if allow:
        print(
            f"chatfmt: WARNING: the code interpreter is served on {host} without an API key "
            "(--allow-public-without-key): anyone who reaches it runs code on this machine",
            file=sys.stderr,
            flush=True,
        )
        return
    raise InterpreterError(
        f"--host {host} offers the code interpreter (code runs on this machine) to anyone who "
        "can reach that address, and no API key is set: give --api-key (or --api-key-file), "
        "bind to 127.0.0.1, turn the interpreter off with --no-interpreter, or pass "
        "--allow-public-without-key if every client on that network may run code here"
    )


def interpreter_wanted(args: argparse.Namespace) -> bool:
    """Whether ``serve`` would offer the code interpreter: its web chat is on, the
    interpreter is not turned off, and the kernel's packages are installed."""
    import importlib.util

    if getattr(args, "no_web", False) or getattr(args, "no_interpreter", False):
        return False
    return all(importlib.util.find_spec(m) is not None for m in ("jupyter_client", "ipykernel"))


def kernel_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for :class:`~chatfmt.interpreter.JupyterInterpreter` (and the pool)
    from the options; raises :class:`InterpreterError` naming the flag and the fix."""
    from ..interpreter.sandbox import Limits, detect

    if args.kernel_memory_mb <= 0:
        raise InterpreterError(f"--kernel-memory-mb must be positive, got {args.kernel_memory_mb}")
    if not args.kernel_timeout > 0:
        raise InterpreterError(f"--kernel-timeout must be positive, got {args.kernel_timeout}")
    disk_mb = getattr(args, "kernel_disk_mb", 512)
    if disk_mb <= 0:
        raise InterpreterError(f"--kernel-disk-mb must be positive, got {disk_mb}")
    python = args.kernel_python
    if python is not None:
        found = shutil.which(python) or (python if os.access(python, os.X_OK) else None)
        if found is None:
            raise InterpreterError(
                f"--kernel-python {python!r} is not an executable; give the path of a Python "
                "that has ipykernel installed"
            )
        python = found
    limits = Limits(memory_mb=args.kernel_memory_mb, disk_mb=disk_mb)
    sandbox = detect(args.sandbox, limits=limits, network=args.sandbox_network)
    return {"sandbox": sandbox, "python": python, "timeout": args.kernel_timeout}


def announce(kwargs: dict[str, Any]) -> None:
    """Say on stderr what protection model-written code runs under."""
    line = kwargs["sandbox"].describe()
    warn = "" if kwargs["sandbox"].isolate else "WARNING: "
    print(f"chatfmt: code interpreter: {warn}{line}", file=sys.stderr, flush=True)


def give_files(interpreter: Any, paths: Sequence[str], system: str | None) -> str | None:
    """Copy ``paths`` into the interpreter's working directory (``--file``) and return the
    system prompt that tells the model where they are."""
    from ..prompts import upload_note
    from ..web.files import FileError, check_name

    saved = []
    for path in paths:
        source = Path(path)
        try:
            check_name(source.name)
            data = source.read_bytes()
        except (OSError, FileError) as exc:
            raise InterpreterError(f"--file {path}: {exc}") from None
        saved.append(str(interpreter.upload(source.name, data)))
    if not saved:
        return system
    note = "\n".join(upload_note(path) for path in saved)
    return f"{system}\n\n{note}" if system else note
