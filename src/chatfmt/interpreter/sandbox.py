"""The sandbox a kernel runs in: what model-written code may see, reach and use.

With bubblewrap (``bwrap``, Debian's ``bubblewrap`` package) a kernel gets fresh user, PID,
network, IPC, UTS and cgroup namespaces, no capabilities, and a file system of read-only system
and Python directories plus its own working directory (read-write), the directory of its IPC
sockets (read-write) and its connection file (read-only); nothing else of the host is there
(no home, no other sessions, no server files, no ``/etc`` beyond what Python and fonts need).
Without a network namespace's routes it reaches no host, localhost included. Its init is PID 1
of its namespace: when the kernel is killed, so is every process it started, ``setsid`` and
double forks included.

Limits apply with or without bubblewrap (rlimits set by a small launcher before ``bwrap``):
CPU seconds per process, file size, open files; the total the code can leave on the host's
disk (working directory, sockets' directory, deleted files held open) by measure
(:mod:`.disk`). Memory and tasks (processes and threads, so a
fork bomb stops at the cap) are limited by cgroups where the host allows them
(:mod:`.cgroup`; memory: real usage); otherwise memory by the address space (``RLIMIT_AS``,
virtual memory) and tasks by ``RLIMIT_NPROC`` inside the sandbox's user namespace (which binds
unless the server runs as root), as the description then says.

:func:`detect` finds what this host supports once; :meth:`Sandbox.describe` says in one line
what protection is in force.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ..errors import InterpreterError

SandboxMode = Literal["auto", "bwrap", "off"]
#: Files of /etc that Python, the dynamic loader and fontconfig read (all world-readable).
_ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "fonts", "localtime", "passwd", "group",
    "nsswitch.conf", "alternatives", "mime.types", "matplotlibrc",
)  # fmt: skip
#: System directories, read-only; a missing one is skipped (``/lib`` may be a symlink).
_SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
#: Inside the sandbox, the kernel's home and caches live in a private tmpfs.
_INNER_HOME = "/tmp/home"
_UID = 1000
# What an error says when the sandbox has no network: unreachable hosts, refused connections
# (localhost is the sandbox's own), names that do not resolve.
_NETWORK_SIGNS = (
    "Network is unreachable", "Connection refused", "Name or service not known",
    "Temporary failure in name resolution", "No address associated with hostname",
    "ConnectionRefusedError", "gaierror",
)  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """Per-kernel resource limits (``None``: not limited)."""

    memory_mb: int | None = 2048
    cpu_seconds: int | None = 3600
    processes: int | None = 256
    file_mb: int | None = 2048
    open_files: int | None = 1024
    #: The most the working directory may hold, all files together (see :mod:`.disk`).
    disk_mb: int | None = 512

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpu_seconds", "processes", "file_mb", "open_files", "disk_mb"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InterpreterError(f"sandbox limit {name} must be positive, got {value}")

    @property
    def file_cap_mb(self) -> int | None:
        """The size one file may reach: the file limit, and never more than the disk cap (a
        single file then stops at the cap by the kernel's own ``RLIMIT_FSIZE``)."""
        caps = [c for c in (self.file_mb, self.disk_mb) if c is not None]
        return min(caps) if caps else None


@dataclass(frozen=True)
class Sandbox:
    """How kernels are confined. ``isolate``: bubblewrap namespaces (else only limits);
    ``network``: allow network access (only meaningful with ``isolate``)."""

    isolate: bool
    limits: Limits = field(default_factory=Limits)
    network: bool = False
    #: Why isolation is off when it was asked for with ``auto`` (shown by :meth:`describe`).
    missing: str | None = None
    #: Whether this host let :func:`detect` make a memory and a pids cgroup (``None``: not
    #: probed); what :meth:`describe` says when not told about a running kernel.
    cgroups: tuple[bool, bool] | None = None

    def describe(
        self, *, memory_cgroup: bool | None = None, tasks_cgroup: bool | None = None
    ) -> str:
        """One line: what protection is in force (``None``: as probed, or not known)."""
        if self.cgroups is not None:
            memory_cgroup = self.cgroups[0] if memory_cgroup is None else memory_cgroup
            tasks_cgroup = self.cgroups[1] if tasks_cgroup is None else tasks_cgroup
        lim = self.limits
        parts = []
        if lim.memory_mb is not None:
            how = "real usage where the host allows a cgroup"
            if memory_cgroup is not None:
                how = "real usage" if memory_cgroup else "address space per process only"
            parts.append(f"memory {lim.memory_mb} MB ({how})")
        if lim.cpu_seconds is not None:
            parts.append(f"CPU {lim.cpu_seconds} s")
        if lim.processes is not None:
            enforced = self._tasks_enforced(tasks_cgroup)
            if enforced is None:
                parts.append(f"{lim.processes} tasks where the host allows")
            elif enforced:
                parts.append(f"{lim.processes} tasks")
        if lim.file_cap_mb is not None:
            parts.append(f"files up to {lim.file_cap_mb} MB")
        if lim.disk_mb is not None:
            parts.append(f"disk {lim.disk_mb} MB per working directory")
        limits = ", ".join(parts) or "none"
        if not self.isolate:
            why = f" ({self.missing})" if self.missing else ""
            return (
                f"sandbox OFF{why}: code runs with this server's rights, network and files; "
                f"limits: {limits}"
            )
        net = "network allowed" if self.network else "no network"
        return (
            f"sandbox on (bubblewrap): {net}, only its working directory writable and no other "
            f"host files, own process namespace; limits: {limits}"
        )

    def note_for(self, error: str) -> str | None:
        """The one-line note for a limit that the error text ``error`` shows (the network, a
        file's size, the task cap), or ``None``."""
        if self.isolate and not self.network and any(s in error for s in _NETWORK_SIGNS):
            return "network access is blocked in this sandbox"
        if "File too large" in error and self.limits.file_cap_mb is not None:
            return f"file size limit reached ({self.limits.file_cap_mb} MB per file)"
        if "Resource temporarily unavailable" in error and self.isolate:
            return f"process limit reached ({self.limits.processes} tasks)"
        return None

    def _tasks_enforced(self, tasks_cgroup: bool | None) -> bool | None:
        if tasks_cgroup:
            return True
        # RLIMIT_NPROC binds only inside the sandbox's user namespace, and never a user that
        # is root on the host (as the sandbox's user is when the server runs as root).
        inner = self.isolate and os.geteuid() != 0
        return inner or (None if tasks_cgroup is None else False)

    def command(
        self,
        argv: Sequence[str],
        *,
        work_dir: Path,
        sockets: Path,
        connection_file: Path,
        python: str,
        cgroup_procs: Sequence[Path] = (),
        memory_in_cgroup: bool = False,
        tasks_in_cgroup: bool = False,
    ) -> list[str]:
        """The kernel's command line: the launcher (cgroups, rlimits), bwrap, then ``argv``
        (after an inner launcher that sets the task limit inside the user namespace).

        ``sockets`` is the directory where the kernel binds its IPC sockets (writable in the
        sandbox) and ``connection_file`` the file it reads them from (read-only there)."""
        plan = {
            "cgroups": [str(p) for p in cgroup_procs],
            "limits": self._rlimits(memory_in_cgroup),
        }
        outer = [sys.executable, "-I", "-S", "-c", _LAUNCHER, json.dumps(plan)]
        if not self.isolate:
            return [*outer, *argv]
        inner = list(argv)
        if self.limits.processes is not None and not tasks_in_cgroup:
            tasks = {"cgroups": [], "limits": {"RLIMIT_NPROC": self.limits.processes}}
            inner = [python, "-I", "-S", "-c", _LAUNCHER, json.dumps(tasks), *inner]
        return [*outer, *self._bwrap(work_dir, sockets, connection_file, python), *inner]

    def _rlimits(self, memory_in_cgroup: bool) -> dict[str, int]:
        lim, mb = self.limits, 1024 * 1024
        out: dict[str, int] = {}
        if lim.memory_mb is not None and not memory_in_cgroup:
            out["RLIMIT_AS"] = lim.memory_mb * mb
        if lim.cpu_seconds is not None:
            out["RLIMIT_CPU"] = lim.cpu_seconds
        if lim.file_cap_mb is not None:
            out["RLIMIT_FSIZE"] = lim.file_cap_mb * mb
        if lim.open_files is not None:
            out["RLIMIT_NOFILE"] = lim.open_files
        return out

    def _bwrap(
        self, work_dir: Path, sockets: Path, connection_file: Path, python: str
    ) -> list[str]:
        args = [
            _bwrap_path(), "--unshare-all", "--unshare-user", "--uid", str(_UID),
            "--gid", str(_UID), "--die-with-parent", "--cap-drop", "ALL",
        ]  # fmt: skip
        if _bwrap_has("--disable-userns"):  # no nested user namespaces (kernel attack surface)
            args.append("--disable-userns")
        if self.network:
            args.append("--share-net")
        # The private /tmp first: a bind under /tmp made before it (a venv or a working
        # directory there) would be hidden by it. Both tmpfs are sized: without a memory cgroup
        # nothing else would bound them (a tmpfs defaults to half the host's memory).
        mb = 1024 * 1024
        tmp_size = (self.limits.memory_mb or 1024) * mb
        sized = _bwrap_has("--size")
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += [
            *(["--size", str(max(tmp_size // 4, 64 * mb))] if sized else []),
            "--tmpfs",
            "/dev/shm",
        ]
        args += [*(["--size", str(tmp_size)] if sized else []), "--tmpfs", "/tmp"]
        args += ["--dir", _INNER_HOME]
        for path in _SYSTEM:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for name in _ETC:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for root in _python_roots(python):
            args += ["--ro-bind", root, root]
        # The kernel's runtime files, at their host paths. Its IPC sockets must be made by the
        # kernel itself (it binds them) where the server can reach them: a host directory
        # writable inside the sandbox. It cannot be read-only (bind() then fails with EROFS),
        # nor a tmpfs of the sandbox's (the server could not reach its sockets), and an
        # unprivileged server cannot put a quota or a sized mount on a host directory. So the
        # sandbox gets only that directory writable, the connection file read-only on top
        # (code cannot rewrite the key or the ports), the log not at all (only through the
        # kernel's stderr, a descriptor); the directory holding the three, descriptor-written
        # log included, is measured with the working directory under the one disk cap
        # (:meth:`.disk.DiskGuard.watch`), and it is emptied at every restart.
        args += ["--bind", str(sockets), str(sockets)]
        args += ["--ro-bind", str(connection_file), str(connection_file)]
        args += ["--bind", str(work_dir), str(work_dir)]
        # The sandbox's own root (where /etc's few files are mounted) is read-only too.
        args += ["--remount-ro", "/", "--chdir", str(work_dir), "--setenv", "HOME", _INNER_HOME]
        args += ["--setenv", "MPLCONFIGDIR", _INNER_HOME + "/.matplotlib"]
        args += ["--setenv", "IPYTHONDIR", _INNER_HOME + "/.ipython", "--setenv", "USER", "user"]
        # The server is not in the kernel's PID namespace, so ipykernel must not poll for it
        # (PID 1 turns its poller off); --die-with-parent ends the sandbox with the server.
        args += ["--setenv", "JPY_PARENT_PID", "1"]
        return args


# Run by the kernel's launchers (an isolated Python, no site): join the cgroups, set the limits
# (soft = hard, so code cannot raise them), then become bwrap or the kernel. The task limit is
# set by a second launcher inside the sandbox: set before bwrap, it would also cap the user
# namespace's parent count, which holds every process of the host user.
_LAUNCHER = """
import json, os, resource, sys
plan = json.loads(sys.argv[1])
for procs in plan["cgroups"]:
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
for name, value in plan["limits"].items():
    hard = value + 5 if name == "RLIMIT_CPU" else value
    resource.setrlimit(getattr(resource, name), (value, hard))
os.execvp(sys.argv[2], sys.argv[2:])
"""


@functools.cache
def _bwrap_path() -> str:
    return shutil.which("bwrap") or "bwrap"


@functools.cache
def _python_roots(python: str) -> tuple[str, ...]:
    """The directories a Python needs: its prefix and base prefix (a venv and its base)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    else:
        code = (
            "import sys; print(sys.prefix, sys.base_prefix, sys.exec_prefix, "
            "sys.base_exec_prefix, sep='\\n')"
        )
        try:
            out = subprocess.run(
                [python, "-I", "-c", code], capture_output=True, text=True, timeout=30, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise InterpreterError(f"cannot run the kernel's Python {python!r}: {exc}") from None
        roots = set(out.split("\n")) - {""}
    real = {os.path.realpath(r) for r in roots} | roots
    # A root inside another is already bound; the system directories are bound apart.
    keep = sorted(r for r in real if not _under(r, _SYSTEM) and os.path.isdir(r))
    return tuple(r for r in keep if not _under(r, [o for o in keep if o != r]))


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


@functools.cache
def _bwrap_has(flag: str) -> bool:
    """Whether this bubblewrap knows ``flag`` (``--size``, ``--disable-userns``: 0.7+, 0.8+)."""
    probe = [_bwrap_path(), "--unshare-all", "--unshare-user", "--ro-bind", "/", "/"]
    probe += ["--size", "1048576", "--tmpfs", "/tmp"] if flag == "--size" else [flag]
    try:
        done = subprocess.run([*probe, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@functools.cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot confine kernels on this host, or ``None`` if it can."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt install bubblewrap)"
    probe = [_bwrap_path(), "--unshare-all", "--unshare-user", "--die-with-parent"]
    probe += ["--ro-bind", "/", "/", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bubblewrap does not run: {exc}"
    if done.returncode != 0:
        err = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return f"bubblewrap cannot create namespaces here ({err[0]})"
    return None


def detect(
    mode: SandboxMode = "auto", *, limits: Limits | None = None, network: bool = False
) -> Sandbox:
    """The sandbox for ``mode``: ``auto`` isolates when this host can (else runs with limits
    only, saying why), ``bwrap`` requires isolation (raises :class:`InterpreterError` naming the
    fix), ``off`` turns isolation off."""
    lim = limits or Limits()
    probed = _probe_cgroups(lim)
    if mode == "off":
        return Sandbox(isolate=False, limits=lim, missing="turned off", cgroups=probed)
    if mode not in ("auto", "bwrap"):
        raise InterpreterError(f"unknown sandbox mode {mode!r}; use auto, bwrap or off")
    if sys.platform != "linux":
        problem: str | None = "namespaces need Linux"
    else:
        problem = bwrap_problem()
    if problem is None:
        return Sandbox(isolate=True, limits=lim, network=network, cgroups=probed)
    if mode == "bwrap":
        raise InterpreterError(
            f"the code interpreter's sandbox is not available: {problem}; fix that, or run "
            "with --sandbox off to run model-written code without isolation"
        )
    return Sandbox(isolate=False, limits=lim, missing=problem, cgroups=probed)


def _probe_cgroups(limits: Limits) -> tuple[bool, bool]:
    """Whether this process can make the memory and pids cgroups of a kernel (made, then
    removed at once)."""
    from .cgroup import KernelCgroups

    memory = limits.memory_mb * 1024 * 1024 if limits.memory_mb is not None else None
    groups = KernelCgroups.create(memory_bytes=memory, tasks=limits.processes)
    groups.remove()
    return groups.limits_memory, groups.limits_tasks


def with_limits(sandbox: Sandbox, **changes: int | None) -> Sandbox:
    """``sandbox`` with some limits changed."""
    return replace(sandbox, limits=replace(sandbox.limits, **changes))
