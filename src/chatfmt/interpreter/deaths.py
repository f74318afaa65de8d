"""Why a kernel ended, in words the model can act on: the signal or status it ended with, and
the limit it met where one is known (its memory cgroup's OOM kills, the CPU-time signal, a
SIGKILL under an address-space limit)."""

from __future__ import annotations

import contextlib
import signal

from .cgroup import KernelCgroups
from .sandbox import Limits


def death_cause(
    returncode: int | None,
    *,
    isolated: bool,
    limits: Limits,
    group: KernelCgroups | None,
    oom_seen: int,
) -> tuple[str, str | None]:
    """How the kernel ended, and the one-line note of the limit it met (``None``: unknown).

    ``oom_seen``: the cgroup's OOM kills already reported, so that an old one is not blamed
    again; ``isolated``: the kernel ran in bubblewrap, which exits with 128 + the signal that
    killed the kernel inside it."""
    signum = -returncode if isinstance(returncode, int) and returncode < 0 else None
    if isolated and isinstance(returncode, int) and 128 < returncode < 160:
        signum = returncode - 128
    how = "exited" if returncode is None else f"exited with status {returncode}"
    if signum is not None:
        with contextlib.suppress(ValueError):
            how = f"killed by {signal.Signals(signum).name}"
    if group is not None and group.oom_kills() > oom_seen:
        return how, f"memory limit reached ({limits.memory_mb} MB): the kernel was killed"
    if signum == signal.SIGXCPU and limits.cpu_seconds is not None:
        return how, f"CPU time limit reached ({limits.cpu_seconds} s): the kernel was killed"
    if (group is None or not group.limits_memory) and limits.memory_mb is not None:
        if signum == signal.SIGKILL:
            return how, f"killed, perhaps out of memory (limit {limits.memory_mb} MB)"
    return how, None


def died_error(how: str, note: str | None, *, before: bool) -> str:
    """The error a run reports when its kernel died (and was restarted)."""
    when = "had died before this code ran" if before else "died while running this code"
    return (
        f"KernelDied: the kernel {when} ({how}{'; ' + note if note else ''}). It was "
        "restarted: variables, imports and definitions are lost; run the needed code again."
    )
