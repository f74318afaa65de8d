"""The cgroups of one kernel: a limit on the memory its sandbox really uses (resident pages,
page cache included) and on its tasks, where the host lets this process create them.

Both layouts Linux offers are read: cgroup v2 (one ``cgroup2`` mount; ``memory.max``,
``memory.swap.max``, ``pids.max``, ``memory.events``) and v1 (one hierarchy per controller;
``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes``, ``pids.max``,
``memory.oom_control``). Groups are made under this process's own cgroup, so a container's or
a systemd unit's limits still apply above them. A controller whose group cannot be made (no
permission, v2's "no internal processes" rule, no such controller) is simply not used; the
caller falls back to rlimits and says so.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
from pathlib import Path

_COUNTER = itertools.count()
_OURS = re.compile(r"chatfmt-kernel-(\d+)-\d+")
_PROC = Path("/proc/self")


def _mounts() -> list[tuple[Path, str, list[str]]]:
    """``(mount point, file system type, super options)`` of this process's mounts."""
    out = []
    try:
        lines = (_PROC / "mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            out.append((Path(fields[4].replace("\\040", " ")), tail[0], tail[2].split(",")))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup per hierarchy: ``""`` for v2, controller names for v1."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in (_PROC / "cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                out[name] = path
    return out


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
    except OSError:
        return False
    return True


class KernelCgroups:
    """One kernel's groups; its launcher writes its own pid into every :attr:`procs` file."""

    def __init__(self) -> None:
        #: ``(group directory, cgroup version)`` per controller in use.
        self.groups: dict[str, tuple[Path, int]] = {}

    @property
    def procs(self) -> list[Path]:
        return sorted({path / "cgroup.procs" for path, _ in self.groups.values()})

    @property
    def limits_memory(self) -> bool:
        return "memory" in self.groups

    @property
    def limits_tasks(self) -> bool:
        return "pids" in self.groups

    @classmethod
    def create(cls, *, memory_bytes: int | None, tasks: int | None) -> KernelCgroups:
        """Groups for whichever limits this host lets this process set (possibly none)."""
        out = cls()
        name = f"chatfmt-kernel-{os.getpid()}-{next(_COUNTER)}"
        wanted = {"memory": memory_bytes, "pids": tasks}
        own = _own_paths()
        made: set[Path] = set()
        for point, fstype, options in _mounts():
            for controller, limit in wanted.items():
                if limit is None or controller in out.groups:
                    continue
                if fstype == "cgroup2" and "" in own:
                    group = _make_v2(point / own[""].lstrip("/"), name, controller)
                    version = 2
                elif fstype == "cgroup" and controller in options and controller in own:
                    group = _make_v1(point / own[controller].lstrip("/"), name)
                    version = 1
                else:
                    continue
                if group is not None:
                    made.add(group)
                    if _limit(group, controller, limit, version):
                        out.groups[controller] = (group, version)
        for path in made - {p for p, _ in out.groups.values()}:
            _rmdir(path)  # made, but its limit could not be set
        return out

    def members(self) -> set[int]:
        """The processes in the groups now (those that left the kernel's process tree too)."""
        out: set[int] = set()
        for procs in self.procs:
            with contextlib.suppress(OSError, ValueError):
                out.update(int(pid) for pid in procs.read_text().split())
        return out

    def oom_kills(self) -> int:
        """How many processes of the group the kernel has killed for memory so far."""
        if "memory" not in self.groups:
            return 0
        path, version = self.groups["memory"]
        file = "memory.events" if version == 2 else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in (path / file).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def remove(self) -> None:
        """Delete the groups; their processes may take a moment to be gone after a kill."""
        for path in {p for p, _ in self.groups.values()}:
            _rmdir(path, wait=1.0)

    def __repr__(self) -> str:
        return f"KernelCgroups({ {c: str(p) for c, (p, _) in self.groups.items()} })"


def _sweep(parent: Path) -> None:
    """Remove groups left by chatfmt processes that are gone (killed before they could clean
    up); a group that still holds processes cannot be removed and stays."""
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            found = _OURS.fullmatch(entry.name)
            if found is None or int(found.group(1)) == os.getpid():
                continue
            try:
                os.kill(int(found.group(1)), 0)
            except ProcessLookupError:
                _rmdir(entry)
            except OSError:
                pass  # alive, another user's


def _make_v2(parent: Path, name: str, controller: str) -> Path | None:
    try:
        available = (parent / "cgroup.controllers").read_text().split()
        enabled = (parent / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    if controller not in available:
        return None
    # Refused when the parent holds processes (v2's "no internal processes" rule).
    if controller not in enabled and not _write(
        parent / "cgroup.subtree_control", f"+{controller}"
    ):
        return None
    return _make_v1(parent, name)


def _make_v1(parent: Path, name: str) -> Path | None:
    _sweep(parent)
    path = parent / name
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return None
    return path


def _limit(group: Path, controller: str, limit: int, version: int) -> bool:
    if controller == "pids":
        return _write(group / "pids.max", str(limit))
    if version == 2:
        if not _write(group / "memory.max", str(limit)):
            return False
        _write(group / "memory.swap.max", "0")  # absent without swap accounting: fine
        return True
    if not _write(group / "memory.limit_in_bytes", str(limit)):
        return False
    _write(group / "memory.memsw.limit_in_bytes", str(limit))  # swap too, where counted
    return True


def _rmdir(path: Path, wait: float = 0.0) -> None:
    deadline = time.monotonic() + wait
    while True:
        with contextlib.suppress(OSError):
            path.rmdir()
        if not path.exists() or time.monotonic() >= deadline:
            return
        time.sleep(0.02)
