"""The working directory's disk cap: the total the code leaves on the host's disk, measured
(files, hard links, floods of empty files) and enforced on a real kernel, during a run, at its
end, and between runs; the model reads the note as for the other limits."""

from __future__ import annotations

import io
import os
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatfmt.interpreter import JupyterInterpreter
from chatfmt.interpreter.disk import MIN_ENTRY, DiskGuard, usage
from chatfmt.interpreter.sandbox import Limits, Sandbox, detect

MB = 1024 * 1024
CAP_MB = 20


# ==== Measuring ====


def test_usage_counts_what_the_files_take(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(os.urandom(MB))
    os.link(tmp_path / "a.bin", tmp_path / "sub" / "same.bin")  # one file, two names
    (tmp_path / "link").symlink_to("/usr")  # never followed
    with open(tmp_path / "sparse", "wb") as fh:  # 1 GB apparent, nothing on disk
        fh.truncate(1024 * MB)
    used = usage(tmp_path)
    assert MB <= used < 2 * MB


def test_a_flood_of_empty_files_fills_the_cap(tmp_path: Path) -> None:
    for i in range(300):
        (tmp_path / f"e{i}").touch()
    assert usage(tmp_path) >= 300 * MIN_ENTRY
    guard = DiskGuard(tmp_path, 1)  # 1 MB: 256 entries
    assert guard.over() and guard.room() == 0


def test_the_guard_allows_what_was_there_and_no_more(tmp_path: Path) -> None:
    guard = DiskGuard(tmp_path, 1)
    assert not guard.over() and guard.room() is not None and guard.room() > MB // 2
    (tmp_path / "big").write_bytes(os.urandom(2 * MB))
    assert guard.over()
    guard.settle()  # after a restart: it may delete, not add
    assert not guard.over() and guard.room() == 0
    (tmp_path / "more").write_bytes(b"x")
    assert guard.over()
    assert DiskGuard(tmp_path, None).room() is None


# ==== On a real kernel ====

pytest.importorskip("ipykernel", reason="needs the jupyter extra: pip install 'chatfmt[jupyter]'")


@pytest.fixture(scope="module")
def box() -> Sandbox:
    return detect("auto", limits=Limits(memory_mb=1024, disk_mb=CAP_MB))


@pytest.fixture
def kernel(box: Sandbox, tmp_path: Path) -> Iterator[JupyterInterpreter]:
    with JupyterInterpreter(tmp_path / "work", sandbox=box, timeout=30) as k:
        yield k


def test_unpacking_a_small_zip_past_the_cap_stops_the_kernel(kernel: JupyterInterpreter) -> None:
    """The issue's case: a small zip unpacked by the code into far more than the cap."""
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as zf:
        for i in range(10):
            zf.writestr(f"part{i}.bin", b"\0" * (8 * MB))  # 80 MB, a few hundred kB zipped
    assert len(data.getvalue()) < MB
    kernel.upload("bomb.zip", data.getvalue())
    kernel.execute("keep = 41")
    result = kernel.execute(
        "import zipfile, time\n"
        "with zipfile.ZipFile('bomb.zip') as z:\n"
        "    for name in z.namelist():\n"
        "        z.extract(name, 'out')\n"
        "        time.sleep(0.05)\n"
        "print('unpacked')"
    )
    assert result.ename == "DiskLimit" and result.restarted
    assert result.note is not None and f"disk limit reached ({CAP_MB} MB" in result.note
    assert f"[disk limit reached ({CAP_MB} MB" in result.observation()
    assert "unpacked" not in result.text
    # Stopped near the cap (one file and one measuring interval past it at most), not at 80 MB.
    assert usage(kernel.work_dir) < (CAP_MB + 8 + 8) * MB
    # The kernel is back (state lost, as the model is told) and the code may clean up.
    assert kernel.execute("print('keep' in globals())").text.strip() == "False"
    cleanup = kernel.execute("import shutil\nshutil.rmtree('out')\nprint('ok')")
    assert cleanup.ok and cleanup.text.strip() == "ok"
    assert kernel.execute("open('small.txt', 'w').write('fine')").ok


def test_many_files_written_at_once_are_caught_at_the_end_of_the_run(
    kernel: JupyterInterpreter,
) -> None:
    result = kernel.execute(
        "import os\nfor i in range(30):\n"
        "    with open(f'f{i}.bin', 'wb') as f:\n        f.write(os.urandom(1024 * 1024))"
    )
    assert result.ename == "DiskLimit" and result.restarted, result.error
    assert "Delete files to free space" in (result.error or "")


def test_one_file_stops_at_the_cap_by_the_file_size_limit(kernel: JupyterInterpreter) -> None:
    result = kernel.execute(
        "with open('one.bin', 'wb') as f:\n"
        "    for _ in range(40):\n        f.write(b'x' * 1024 * 1024)"
    )
    assert result.note == f"file size limit reached ({CAP_MB} MB per file)"
    assert os.path.getsize(kernel.work_dir / "one.bin") <= CAP_MB * MB


def test_writing_left_running_between_runs_is_stopped(kernel: JupyterInterpreter) -> None:
    started = kernel.execute(
        "import threading, time, os\n"
        "def fill():\n"
        "    for i in range(60):\n"
        "        open(f'bg{i}.bin', 'wb').write(os.urandom(1024 * 1024))\n"
        "        time.sleep(0.05)\n"
        "threading.Thread(target=fill, daemon=True).start()"
    )
    assert started.ok
    deadline = time.monotonic() + 20
    stopped = False
    while not stopped and time.monotonic() < deadline:  # as the server's sweeper calls it
        time.sleep(0.2)
        stopped = kernel.enforce_disk_limit()
    assert stopped
    size = usage(kernel.work_dir)
    time.sleep(0.5)
    assert usage(kernel.work_dir) == size  # the writer is gone with the old kernel
    after = kernel.execute("print('next')")
    assert after.ename == "DiskLimit" and "since the last run" in (after.error or "")
    assert kernel.execute("print('next')").text.strip() == "next"


def test_the_cap_is_in_the_description(box: Sandbox) -> None:
    assert f"disk {CAP_MB} MB per working directory" in box.describe()
    assert f"files up to {CAP_MB} MB" in box.describe()


# ==== What the code can write besides its working directory ====

#: Writes 10 files of 3 MB (30 MB, past the 20 MB cap) into the directory ``target`` names,
#: slowly enough for the measure to see them; prints "refused" when the writes are refused.
_FILL_DIR = (
    "import json, os, time\n"
    "from ipykernel.connect import get_connection_file, get_connection_info\n"
    "where = {{'connection': os.path.dirname(get_connection_file()),\n"
    "         'sockets': os.path.dirname(json.loads(get_connection_info())['ip'])}}[{target!r}]\n"
    "try:\n"
    "    for i in range(10):\n"
    "        with open(os.path.join(where, f'fill{{i}}.bin'), 'wb') as f:\n"
    "            f.write(os.urandom(3 * 1024 * 1024))\n"
    "        time.sleep(0.05)\n"
    "except OSError as exc:\n"
    "    print('refused', exc)\n"
)


def _runtime_usage(kernel: JupyterInterpreter) -> int:
    """What the kernel's runtime directory (connection file, sockets, log) takes on the host."""
    runtime = kernel._runtime
    assert runtime is not None
    return usage(runtime)


@pytest.mark.parametrize("target", ["connection", "sockets"])
def test_the_kernels_runtime_directory_cannot_hold_more_than_the_cap(
    kernel: JupyterInterpreter, target: str
) -> None:
    """The review's case: the directory of the connection file (and of the IPC sockets) is on
    the host's disk too; filling it with 30 MB at a 20 MB cap must be refused or stopped."""
    result = kernel.execute(_FILL_DIR.format(target=target))
    # Refused, kept inside the sandbox (its /tmp is memory), or stopped: never on the host.
    assert result.ename != "DiskLimit" or result.restarted
    assert _runtime_usage(kernel) < MB, (result.text, result.error)
    assert kernel.execute("print('next')").text.strip() == "next"


def test_the_kernels_log_descriptor_cannot_hold_more_than_the_cap(
    kernel: JupyterInterpreter,
) -> None:
    """The kernel's stderr (its log on the host) is a descriptor the code holds: writes to it
    count against the cap too (a file is kept within it by the file size limit, so half of it
    is used in the working directory first)."""
    assert kernel.execute(f"open('half.bin', 'wb').write(b'x' * {CAP_MB // 2 * MB})").ok
    result = kernel.execute(
        "import os, sys, time\n"
        "fd = getattr(sys.stderr, '_original_stdstream_copy', None) or 2\n"
        "try:\n"
        "    for i in range(10):\n"
        "        os.write(fd, b'x' * 3 * 1024 * 1024)\n"
        "        time.sleep(0.05)\n"
        "except OSError as exc:\n"
        "    print('refused', exc)\n"
    )
    assert result.ename == "DiskLimit" and result.restarted, (result.text, result.error)
    assert _runtime_usage(kernel) < MB


def test_deleted_files_held_open_count_against_the_cap(kernel: JupyterInterpreter) -> None:
    """The review's case: files unlinked while open keep their blocks but have no name."""
    result = kernel.execute(
        "import os, time\nheld = []\n"
        "for i in range(10):\n"
        "    f = open(f'tmp{i}.bin', 'wb'); os.unlink(f'tmp{i}.bin')\n"
        "    f.write(os.urandom(4 * 1024 * 1024)); f.flush(); held.append(f)\n"
        "    time.sleep(0.05)\n"
        "print('held')"
    )
    assert result.ename == "DiskLimit" and result.restarted, (result.text, result.error)
    assert "held" not in result.text
    after = kernel.execute("print('held' in globals())")
    assert after.ok and after.text.strip() == "False"


def test_deleted_files_a_child_process_holds_between_runs_are_stopped(
    kernel: JupyterInterpreter,
) -> None:
    """A process the code left behind holds deleted files after the run: the sweeper's check
    sees the kernel's whole process tree."""
    child = (
        "import os, time\nheld = []\n"
        "for i in range(10):\n"
        "    f = open(f'gone{i}.bin', 'wb'); os.unlink(f'gone{i}.bin')\n"
        "    f.write(os.urandom(4 * 1024 * 1024)); f.flush(); held.append(f)\n"
        "    time.sleep(0.1)\n"
        "time.sleep(600)\n"
    )
    started = kernel.execute(
        f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {child!r}])"
    )
    assert started.ok or started.ename == "DiskLimit", started.error
    if started.ename != "DiskLimit":
        deadline = time.monotonic() + 20
        stopped = False
        while not stopped and time.monotonic() < deadline:  # as the server's sweeper calls it
            time.sleep(0.2)
            stopped = kernel.enforce_disk_limit()
        assert stopped
        assert kernel.execute("print('next')").ename == "DiskLimit"
    assert kernel.execute("print('next')").text.strip() == "next"


def test_held_deleted_files_are_measured_in_this_process(tmp_path: Path) -> None:
    """The measure itself, on this process's own descriptors and mappings: a deleted file is
    charged by its blocks once (however many descriptors), one elsewhere is not."""
    import ctypes
    import mmap

    from chatfmt.interpreter.disk import held_deleted

    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    files = []
    try:
        for directory in (tmp_path, outside):
            path = directory / "gone.bin"
            fh = open(path, "wb")
            os.unlink(path)
            fh.write(os.urandom(2 * MB))
            fh.flush()
            files.append(fh)
        files.append(open(f"/proc/self/fd/{files[0].fileno()}", "rb"))
        charged = held_deleted([os.getpid()], [tmp_path])
        assert 2 * MB <= charged < 3 * MB
        # A mapping whose descriptor is closed: charged by what it maps.
        path = tmp_path / "mapped.bin"
        with open(path, "wb+") as fh:
            fh.truncate(MB)
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_int, ctypes.c_long]  # fmt: skip
            address = libc.mmap(None, MB, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED,
                                fh.fileno(), 0)  # fmt: skip
            assert address not in (None, ctypes.c_void_p(-1).value)
            ctypes.memset(address, 1, MB)
        os.unlink(path)
        try:
            assert held_deleted([os.getpid()], [tmp_path]) >= charged + MB
        finally:
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            libc.munmap(ctypes.c_void_p(address), MB)
    finally:
        for fh in files:
            fh.close()
