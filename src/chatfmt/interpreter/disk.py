"""The disk cap of a kernel's working directory: what the code may leave on the host's disk.

``RLIMIT_FSIZE`` bounds each file, not their sum (a 1 MB zip unpacked into 1 GB of files passes
it). An unprivileged server cannot give a host directory a quota or mount a sized file system
on it, and the files must stay on the host (uploads and downloads go there, and they outlive a
kernel restart), so the sum is enforced by measuring: while code runs the directory is measured
every :data:`CHECK_EVERY` seconds, before each run, and between runs by the server's session
sweeper. When the directory holds more than the cap and has grown since it was last allowed,
the kernel is killed and restarted (a background thread or process the code left would go on
writing through an interrupt), and the model reads why. The files stay: the model may delete
some and go on. How far a writer gets past the cap is bounded by what it can write in one
interval; ``RLIMIT_FSIZE`` is kept at or under the cap, so one file never passes it.

The cap covers all the host disk the code can fill, not just the working directory's names:

* the kernel's runtime directory (its IPC sockets, connection file and log), measured with it
  (see :meth:`DiskGuard.watch`; why it cannot simply be read-only is said in
  :meth:`.sandbox.Sandbox.command`);
* files deleted while still open: their blocks stay taken until the last descriptor closes,
  but no walk of a directory finds them, so the descriptors (``/proc/<pid>/fd``) and mappings
  (``/proc/<pid>/maps``) of the kernel's processes are read (:func:`held_deleted`) for deleted
  files under those directories. They are freed when the kernel is restarted, as it then is.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

#: Seconds between two measures while code runs (a walk of a few thousand files takes ms).
CHECK_EVERY = 0.25
#: Entries looked at, at most, in one measure (walking must stay cheap; with every entry
#: charged at least :data:`MIN_ENTRY`, this many hold 4 GB, past any sane cap).
MAX_ENTRIES = 1_000_000
#: What an entry costs at least: a block and an inode, so a flood of empty files (which a count
#: of bytes alone would miss) fills the cap too.
MIN_ENTRY = 4096
_BLOCK = 512  # st_blocks is in 512-byte units on Linux
_DELETED = " (deleted)"  # how /proc names a file that has no name left


def usage(root: Path, *, stop_above: int | None = None) -> int:
    """Bytes of disk the entries under ``root`` take, each at least :data:`MIN_ENTRY` (links
    not followed, a file with several hard links counted once, sparse files by what they
    really take); counting stops once past ``stop_above`` or after :data:`MAX_ENTRIES`."""
    total, entries = 0, 0
    seen: set[tuple[int, int]] = set()
    stack = [str(root)]
    while stack:
        try:
            scan = os.scandir(stack.pop())
        except OSError:  # gone or unreadable meanwhile: the code may delete as this walks
            continue
        with scan:
            for entry in scan:
                entries += 1
                if entries > MAX_ENTRIES:
                    return total
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                    if (info.st_dev, info.st_ino) in seen:
                        continue
                    seen.add((info.st_dev, info.st_ino))
                total += max(info.st_blocks * _BLOCK, MIN_ENTRY)
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
                if stop_above is not None and total > stop_above:
                    return total
    return total


def held_deleted(pids: Iterable[int], roots: Sequence[Path]) -> int:
    """Bytes of disk that files deleted from under ``roots`` still take because one of the
    processes ``pids`` holds them, each file once.

    A file held by a descriptor is charged by its blocks (``stat`` through
    ``/proc/<pid>/fd/<n>``, which the server may read: the kernel runs as its user). A file
    held only by a mapping whose descriptor was closed cannot be opened without privileges
    (``/proc/<pid>/map_files`` needs ``CAP_CHECKPOINT_RESTORE``), so it is charged by the end of
    its furthest mapping (a lower bound of the file's size unless it is sparse). Files on
    ``/tmp`` or ``/dev/shm`` (memory, inside the sandbox) and deleted system files (a library
    replaced by an upgrade) are not under ``roots``, so not charged.
    """
    prefixes = tuple(os.path.realpath(r).rstrip("/") + "/" for r in roots)
    total = 0
    charged: set[int] = set()  # inode numbers (maps and stat may name devices differently)
    mapped: dict[int, int] = {}
    for pid in pids:
        base = f"/proc/{pid}"
        try:
            fds = os.listdir(f"{base}/fd")
        except OSError:  # gone, or not ours
            fds = []
        for fd in fds:
            link = f"{base}/fd/{fd}"
            try:
                target = os.readlink(link)
                if not (target.endswith(_DELETED) and target.startswith(prefixes)):
                    continue
                info = os.stat(link)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 0 and info.st_ino not in charged:
                charged.add(info.st_ino)
                total += max(info.st_blocks * _BLOCK, MIN_ENTRY)
        try:
            with open(f"{base}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    if not line.rstrip("\n").endswith(_DELETED):
                        continue
                    fields = line.split(maxsplit=5)
                    if len(fields) < 6 or not fields[5].startswith(prefixes):
                        continue
                    start, _, end = fields[0].partition("-")
                    inode = int(fields[4])
                    reach = int(fields[2], 16) + int(end, 16) - int(start, 16)
                    mapped[inode] = max(mapped.get(inode, 0), reach)
        except (OSError, ValueError):
            pass
    total += sum(max(size, MIN_ENTRY) for ino, size in mapped.items() if ino not in charged)
    return total


class DiskGuard:
    """Measures one working directory against ``limit_mb`` (``None``: no cap), with whatever
    else of the host's disk the running kernel can fill (:meth:`watch`).

    ``allowed`` is what the directory may hold without the kernel being stopped: the cap, or
    more when it already held more before the current run (code may then delete, not add).
    """

    def __init__(self, root: Path, limit_mb: int | None, *, every: float = CHECK_EVERY) -> None:
        self.root = root
        self.limit_mb = limit_mb
        self.limit = limit_mb * 1024 * 1024 if limit_mb is not None else None
        self.every = every
        self.allowed = self.limit
        self._next = 0.0
        self._also: tuple[Path, ...] = ()
        self._baseline = 0  # what the directories ``also`` held when watched: the server's
        self._processes: Callable[[], Iterable[int]] | None = None

    def watch(
        self, also: Sequence[Path] = (), processes: Callable[[], Iterable[int]] | None = None
    ) -> None:
        """Measure the directories ``also`` (a kernel's runtime directory) with the working
        directory, and charge deleted files under any of them that ``processes()`` (the
        running kernel's) still hold; ``watch()`` alone stops both (the kernel is gone).

        What ``also`` holds now is not charged, only what it gains: call this before any
        code runs (its sockets and connection file are the server's, and a file exactly at
        the cap must stay within it)."""
        self._also, self._processes = tuple(also), processes
        self._baseline = sum(usage(other) for other in self._also)

    def usage(self, stop_above: int | None = None) -> int:
        """What the code holds now on the host's disk: the directories' entries and the
        deleted files its processes hold (counting stops past ``stop_above``)."""
        total = usage(self.root, stop_above=stop_above)
        if self._also and (stop_above is None or total <= stop_above):
            rest = None if stop_above is None else stop_above - total + self._baseline
            grown = sum(usage(other, stop_above=rest) for other in self._also)
            total += max(0, grown - self._baseline)
        if self._processes is not None and (stop_above is None or total <= stop_above):
            total += held_deleted(self._processes(), (self.root, *self._also))
        return total

    def measure(self) -> int:
        """The usage now (counting stops past what is allowed)."""
        return self.usage(stop_above=self.allowed)

    def over(self) -> bool:
        """Whether the code holds more than it may (measured now)."""
        return self.allowed is not None and self.measure() > self.allowed

    def due_and_over(self) -> bool:
        """:meth:`over`, measured at most every ``every`` seconds (for a polling loop)."""
        if self.allowed is None:
            return False
        now = time.monotonic()
        if now < self._next:
            return False
        over = self.over()
        # A slow walk (a huge directory) spaces the measures out, so it never dominates.
        self._next = time.monotonic() + max(self.every, 4 * (time.monotonic() - now))
        return over

    def due_in(self) -> float | None:
        """Seconds until :meth:`due_and_over` measures again (``None``: no cap), so that a
        polling loop waits no longer than that."""
        if self.allowed is None:
            return None
        return max(0.0, self._next - time.monotonic())

    def settle(self) -> None:
        """After a run (or a restart): what the code holds now is allowed until it grows (at
        least the cap)."""
        if self.limit is not None:
            self.allowed = max(self.limit, self.usage())
            self._next = 0.0

    def room(self) -> int | None:
        """Bytes that may still be added without passing the cap (``None``: no cap)."""
        if self.limit is None:
            return None
        return max(0, self.limit - self.usage(stop_above=self.limit))

    def note(self) -> str:
        """The one-line note the model and the page read."""
        return (
            f"disk limit reached ({self.limit_mb} MB in the working directory): the kernel was "
            "stopped and restarted; delete files to free space"
        )


__all__ = ["CHECK_EVERY", "MAX_ENTRIES", "MIN_ENTRY", "DiskGuard", "held_deleted", "usage"]
