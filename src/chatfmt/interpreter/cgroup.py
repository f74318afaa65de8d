"""A memory cgroup per kernel: a limit on the memory the sandbox really uses (resident pages,
page cache included), where the host lets this process create one.

Two layouts, as Linux offers them: cgroup v2 (one ``cgroup2`` mount; ``memory.max``,
``memory.swap.max``, ``memory.events``) and v1 (a ``memory`` hierarchy;
``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes``, ``memory.oom_control``). The group
is made under this process's own cgroup, so a container's or a systemd unit's limits still
apply above it. Where neither can be made (no permission, the v2 "no internal processes" rule,
no memory controller), :meth:`MemoryCgroup.create` returns ``None`` and the caller falls back to
an address-space limit, saying so.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path

_COUNTER = itertools.count()
_PROC = Path("/proc/self")


def _mounts() -> list[tuple[str, str, str]]:
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
            out.append((fields[4].replace("\\040", " "), tail[0], tail[2]))
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


class MemoryCgroup:
    """One kernel's memory cgroup; :attr:`procs` is where its launcher writes its own pid."""

    def __init__(self, path: Path, version: int) -> None:
        self.path, self.version = path, version

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    @classmethod
    def create(cls, limit_bytes: int) -> MemoryCgroup | None:
        """A new group limited to ``limit_bytes`` (swap included), or ``None`` if this host
        does not let this process make one."""
        own = _own_paths()
        name = f"chatfmt-kernel-{os.getpid()}-{next(_COUNTER)}"
        for point, fstype, options in _mounts():
            if fstype == "cgroup2" and "" in own:
                group = cls._make(Path(point), own[""], name, 2)
                if group is not None and group._limit_v2(limit_bytes):
                    return group
            elif fstype == "cgroup" and "memory" in options.split(",") and "memory" in own:
                group = cls._make(Path(point), own["memory"], name, 1)
                if group is not None and group._limit_v1(limit_bytes):
                    return group
        return None

    @classmethod
    def _make(cls, point: Path, own: str, name: str, version: int) -> MemoryCgroup | None:
        parent = point / own.lstrip("/")
        if version == 2:
            try:
                controllers = (parent / "cgroup.controllers").read_text().split()
                enabled = (parent / "cgroup.subtree_control").read_text().split()
            except OSError:
                return None
            if "memory" not in controllers:
                return None
            if "memory" not in enabled:
                try:  # refused when the parent holds processes (v2's "no internal processes")
                    (parent / "cgroup.subtree_control").write_text("+memory")
                except OSError:
                    return None
        try:
            (parent / name).mkdir()
        except OSError:
            return None
        return cls(parent / name, version)

    def _write(self, file: str, value: str) -> bool:
        try:
            (self.path / file).write_text(value)
        except OSError:
            return False
        return True

    def _limit_v2(self, limit: int) -> bool:
        if self._write("memory.max", str(limit)):
            self._write("memory.swap.max", "0")  # absent without swap accounting: fine
            return True
        self.remove()
        return False

    def _limit_v1(self, limit: int) -> bool:
        if self._write("memory.limit_in_bytes", str(limit)):
            self._write("memory.memsw.limit_in_bytes", str(limit))  # swap too, where counted
            return True
        self.remove()
        return False

    def oom_kills(self) -> int:
        """How many processes of the group the kernel has killed for memory so far."""
        file = "memory.events" if self.version == 2 else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in (self.path / file).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def remove(self) -> None:
        """Delete the group (once its processes are gone; a no-op if it is already)."""
        with contextlib.suppress(OSError):
            self.path.rmdir()

    def __repr__(self) -> str:
        return f"MemoryCgroup({str(self.path)!r}, v{self.version})"
