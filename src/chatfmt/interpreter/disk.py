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
"""

from __future__ import annotations

import os
import stat
import time
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


class DiskGuard:
    """Measures one working directory against ``limit_mb`` (``None``: no cap).

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

    def measure(self) -> int:
        """The directory's usage now (counting stops past what is allowed)."""
        return usage(self.root, stop_above=self.allowed)

    def over(self) -> bool:
        """Whether the directory holds more than it may (measured now)."""
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

    def settle(self) -> None:
        """After a run (or a restart): what the directory holds now is allowed until it grows
        (at least the cap)."""
        if self.limit is not None:
            self.allowed = max(self.limit, usage(self.root))
            self._next = 0.0

    def room(self) -> int | None:
        """Bytes that may still be added without passing the cap (``None``: no cap)."""
        if self.limit is None:
            return None
        return max(0, self.limit - usage(self.root, stop_above=self.limit))

    def note(self) -> str:
        """The one-line note the model and the page read."""
        return (
            f"disk limit reached ({self.limit_mb} MB in the working directory): the kernel was "
            "stopped and restarted; delete files to free space"
        )


__all__ = ["CHECK_EVERY", "MAX_ENTRIES", "MIN_ENTRY", "DiskGuard", "usage"]
