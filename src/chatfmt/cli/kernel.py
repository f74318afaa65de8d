"""The code interpreter's command-line options, shared by ``chatfmt chat`` and ``chatfmt serve``:
the sandbox, its limits, and the kernel's Python."""

from __future__ import annotations

import argparse
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


def kernel_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for :class:`~chatfmt.interpreter.JupyterInterpreter` (and the pool)
    from the options; raises :class:`InterpreterError` naming the flag and the fix."""
    from ..interpreter.sandbox import Limits, detect

    if args.kernel_memory_mb <= 0:
        raise InterpreterError(f"--kernel-memory-mb must be positive, got {args.kernel_memory_mb}")
    if not args.kernel_timeout > 0:
        raise InterpreterError(f"--kernel-timeout must be positive, got {args.kernel_timeout}")
    python = args.kernel_python
    if python is not None:
        found = shutil.which(python) or (python if os.access(python, os.X_OK) else None)
        if found is None:
            raise InterpreterError(
                f"--kernel-python {python!r} is not an executable; give the path of a Python "
                "that has ipykernel installed"
            )
        python = found
    sandbox = detect(
        args.sandbox, limits=Limits(memory_mb=args.kernel_memory_mb), network=args.sandbox_network
    )
    return {"sandbox": sandbox, "python": python, "timeout": args.kernel_timeout}


def announce(kwargs: dict[str, Any]) -> None:
    """Say on stderr what protection model-written code runs under."""
    line = kwargs["sandbox"].describe()
    warn = "" if kwargs["sandbox"].isolate else "WARNING: "
    print(f"chatfmt: code interpreter: {warn}{line}", file=sys.stderr, flush=True)


def give_files(interpreter: Any, paths: Sequence[str], system: str | None) -> str | None:
    """Copy ``paths`` into the interpreter's working directory (``--file``) and return the
    system prompt that tells the model where they are."""
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
    note = "Files for the code interpreter: " + ", ".join(saved)
    return f"{system}\n\n{note}" if system else note
