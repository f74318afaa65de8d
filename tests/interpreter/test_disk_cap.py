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
