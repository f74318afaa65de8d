"""Red team: each case is a real attempt, from inside a real sandboxed kernel, to leave the
sandbox or exhaust the host. Skipped (with the reason) only where this host cannot sandbox;
CI installs bubblewrap, so there they run.

Run alone: ``.venv/bin/python -m pytest tests/interpreter/test_sandbox.py``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from chatfmt.interpreter import JupyterInterpreter
from chatfmt.interpreter.sandbox import Limits, Sandbox, bwrap_problem, detect

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bwrap_problem() is not None, reason=f"no sandbox here: {bwrap_problem()}"),
]


@pytest.fixture
def box() -> Sandbox:
    return detect("bwrap", limits=Limits(memory_mb=1024, file_mb=64, processes=128))


@pytest.fixture
def kernel(box: Sandbox, tmp_path: Path) -> Iterator[JupyterInterpreter]:
    with JupyterInterpreter(tmp_path / "work", sandbox=box, timeout=20) as k:
        yield k


def running_with(marker: str) -> list[psutil.Process]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if marker in " ".join(p.info["cmdline"] or ()) and p.pid != psutil.Process().pid:
            found.append(p)
    return found


def tasks_with(marker: str) -> int:
    """Threads of the host processes whose command line holds ``marker``."""
    count = 0
    for p in running_with(marker):
        try:
            count += p.num_threads()
        except psutil.Error:  # gone meanwhile
            pass
    return count


def wait_until(check: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return bool(check())  # type: ignore[operator]


def test_describe_says_what_is_in_force(kernel: JupyterInterpreter) -> None:
    line = kernel.describe()
    assert line.startswith("sandbox on (bubblewrap): no network")
    assert "memory 1024 MB (real usage)" in line or "memory 1024 MB (address space only)" in line


def test_no_connection_to_a_server_on_the_hosts_loopback(kernel: JupyterInterpreter) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[object] = []
    listener.settimeout(5)

    def accept() -> None:
        try:
            accepted.append(listener.accept())
        except OSError:  # the timeout: nobody came
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        res = kernel.execute(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)"
        )
        assert res.ename == "ConnectionRefusedError", res.observation()
        assert res.note == "network access is blocked in this sandbox"
        res = kernel.execute(
            "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=3)"
        )
        assert not res.ok and res.note == "network access is blocked in this sandbox"
    finally:
        thread.join(6)
        listener.close()
    assert accepted == []  # the host's listener never saw a connection


def test_host_files_outside_the_working_directory_cannot_be_read(
    kernel: JupyterInterpreter, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the server's secret")
    project = Path(__file__).resolve().parents[2] / "pyproject.toml"
    for path in (secret, project, Path.home() / ".bashrc", Path("/etc/shadow")):
        res = kernel.execute(f"open({str(path)!r}).read()")
        assert res.ename in ("FileNotFoundError", "PermissionError"), (path, res.observation())
    listing = kernel.execute("import os\nsorted(os.listdir('/'))")
    assert str(tmp_path.parts[1]) not in ("home", "root") or "home" not in listing.text
    assert kernel.execute(f"import os\nos.listdir({str(tmp_path)!r})").text.strip() == "['work']"


def test_nothing_outside_the_working_directory_can_be_written(
    kernel: JupyterInterpreter, tmp_path: Path
) -> None:
    # Beside the working directory: the sandbox's /tmp is its own tmpfs, so the write may
    # succeed there, but the host's file is never written.
    outside = tmp_path / "planted.txt"
    kernel.execute(f"open({str(outside)!r}, 'w').write('x')")
    assert not outside.exists()
    project = Path(__file__).resolve().parent / "planted.txt"
    paths = ("/usr/planted", "/etc/planted", "/planted", str(project), kernel.python + ".x")
    for path in paths:
        res = kernel.execute(f"open({path!r}, 'w').write('x')")
        assert not res.ok, (path, res.observation())
    # /tmp is the sandbox's own: what is written there never reaches the host's /tmp.
    name = f"chatfmt-redteam-{uuid.uuid4().hex}"
    assert kernel.execute(f"open('/tmp/{name}', 'w').write('x')").ok
    assert not Path("/tmp", name).exists()
    assert not project.exists()
    assert kernel.execute("open('inside.txt', 'w').write('ok')").ok
    assert (kernel.work_dir / "inside.txt").read_text() == "ok"


def test_setsid_and_double_forked_processes_die_with_the_session(box: Sandbox) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}"
    interp = JupyterInterpreter(sandbox=box).start()
    code = f"""
import os, subprocess
subprocess.Popen(['sleep', '{marker}1'], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp('sleep', ['sleep', '{marker}2'])
    os._exit(0)
os.wait()
"""
    assert interp.execute(code).ok
    assert wait_until(lambda: len(running_with(marker)) == 2)
    interp.close()
    assert wait_until(lambda: not running_with(marker)), running_with(marker)


def test_a_fork_bomb_is_contained_and_the_host_stays_responsive() -> None:
    # Every process forks forever; memory is generous so that the task limit is what holds.
    box = detect("bwrap", limits=Limits(memory_mb=4096, processes=64))
    marker = f"chatfmt-bomb-{uuid.uuid4().hex[:8]}"
    code = "import os, time\nwhile True:\n    try: os.fork()\n    except OSError: time.sleep(0.01)"
    bomb = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {code!r}, {marker!r}])"
    interp = JupyterInterpreter(sandbox=box, timeout=20).start()
    try:
        assert interp.execute(bomb).ok
        assert wait_until(lambda: tasks_with(marker) > 30)
        for _ in range(10):  # never past the cap while it runs
            assert tasks_with(marker) <= 64
            time.sleep(0.2)
        # The host, another sandbox, and the bombed kernel itself still answer.
        with JupyterInterpreter(sandbox=box, timeout=20) as other:
            assert other.execute("6 * 7").text == "42\n"
        assert interp.execute("print('alive')").text == "alive\n"
    finally:
        interp.close()
    assert wait_until(lambda: not running_with(marker)), len(running_with(marker))


def test_a_huge_allocation_is_killed_with_a_memory_note_and_the_kernel_restarts(
    kernel: JupyterInterpreter,
) -> None:
    assert kernel.execute("keep = 1").ok
    res = kernel.execute("big = b'x' * (4 * 1024**3)")
    if "(real usage)" in kernel.describe():
        assert res.ename == "KernelDied" and res.restarted, res.observation()
        assert res.note == "memory limit reached (1024 MB): the kernel was killed"
        assert "[memory limit reached" in res.observation()
        assert kernel.execute("keep").ename == "NameError"  # a fresh kernel
    else:  # an address-space limit: the allocation fails inside the kernel
        assert res.ename == "MemoryError"
    assert kernel.execute("print('back')").text == "back\n"


def test_a_10_gb_file_is_stopped_by_the_file_size_limit(kernel: JupyterInterpreter) -> None:
    code = (
        "block = b'x' * 1024**2\n"
        "with open('big.bin', 'wb') as f:\n"
        "    for _ in range(10 * 1024):\n"
        "        f.write(block)\n"
    )
    res = kernel.execute(code)
    assert res.ename == "OSError" and "File too large" in (res.evalue or "")
    assert res.note == "file size limit reached (64 MB per file)"
    assert (kernel.work_dir / "big.bin").stat().st_size <= 64 * 1024**2


def test_proc_shows_only_the_sandboxs_own_processes(kernel: JupyterInterpreter) -> None:
    res = kernel.execute(
        "import os\n"
        "pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]\n"
        "print(len(pids), max(pids))"
    )
    count, highest = map(int, res.text.split())
    assert count <= 3 and highest < 100  # its init, the kernel (and the shell of a subprocess)
    res = kernel.execute(f"open('/proc/{psutil.Process().pid}/environ', 'rb').read()")
    assert not res.ok  # this server's process is not there


def test_sessions_cannot_see_each_others_files(box: Sandbox, tmp_path: Path) -> None:
    with (
        JupyterInterpreter(tmp_path / "alice", sandbox=box) as alice,
        JupyterInterpreter(tmp_path / "bob", sandbox=box) as bob,
    ):
        alice.upload("diary.txt", "alice's secret")
        res = bob.execute(f"open({str(alice.work_dir / 'diary.txt')!r}).read()")
        assert res.ename == "FileNotFoundError"
        res = bob.execute(f"import os\nos.listdir({str(tmp_path)!r})")
        assert res.text.strip() == "['bob']"


def test_no_cgroup_is_left_behind(box: Sandbox) -> None:
    with JupyterInterpreter(sandbox=box) as k:
        k.start()
        group = k._group
        assert group is not None
        paths = [p for p, _ in group.groups.values()]
        assert all(p.is_dir() for p in paths)
    assert not any(p.exists() for p in paths)


def test_the_environment_holds_no_server_secrets(
    box: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATFMT_TEST_API_KEY", "sk-secret")
    with JupyterInterpreter(sandbox=box) as k:
        res = k.execute("import os\nsorted(os.environ)")
        assert "CHATFMT_TEST_API_KEY" not in res.text and "sk-secret" not in res.text
        assert (
            k.execute("import os\nos.getuid(), os.environ['HOME']").text == "(1000, '/tmp/home')\n"
        )


def test_a_python_under_tmp_stays_visible(box: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox's private /tmp is mounted before the binds, so a venv under /tmp (a fresh
    clone there, say) is not hidden by it."""
    from chatfmt.interpreter import sandbox as sb

    monkeypatch.setattr(sb, "_python_roots", lambda python: ("/tmp/some-venv",))
    argv = box._bwrap(Path("/tmp/work"), Path("/tmp/run"), Path("/tmp/run.json"), "python")
    tmpfs = argv.index("/tmp", argv.index("--tmpfs", argv.index("/dev/shm")))
    assert argv.index("/tmp/some-venv") > tmpfs and argv.index("/tmp/work") > tmpfs


def test_groups_left_by_a_killed_server_are_swept() -> None:
    from chatfmt.interpreter.cgroup import KernelCgroups

    probe = KernelCgroups.create(memory_bytes=2**30, tasks=64)
    probe.remove()
    if not probe.groups:
        pytest.skip("this host lets no cgroup be made")
    dead = 2**22 + 7  # above any pid_max: no such process
    stale = [path.parent / f"chatfmt-kernel-{dead}-0" for path, _ in probe.groups.values()]
    for path in stale:
        path.mkdir()
    fresh = KernelCgroups.create(memory_bytes=2**30, tasks=64)
    fresh.remove()
    assert not any(p.exists() for p in stale)


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to act as another user"
)
def test_a_setuid_file_the_code_makes_is_out_of_other_users_reach(
    kernel: JupyterInterpreter,
) -> None:
    """The sandbox's user is the server's on the host, so the code can leave a setuid copy of
    a program in its directory; no other user may reach that directory."""
    code = (
        "import shutil, os, sys\nshutil.copy(sys.executable, 'py')\n"
        "os.chmod('py', 0o6755)\nos.chmod('.', 0o755)"
    )
    assert kernel.execute(code).ok
    planted = kernel.work_dir / "py"
    assert planted.stat().st_mode & 0o4000  # it is there, setuid...
    probe = subprocess.run(
        ["stat", str(planted)], capture_output=True, user=65534, group=65534, timeout=30
    )
    assert probe.returncode != 0 and b"Permission denied" in probe.stderr  # ...and unreachable


def test_output_flooded_between_runs_does_not_fill_the_servers_memory(
    kernel: JupyterInterpreter,
) -> None:
    before = psutil.Process().memory_info().rss
    flood = (
        "import sys, threading, time\n"
        "def flood():\n"
        "    time.sleep(0.5)\n"
        "    for _ in range(20):\n"
        "        sys.stdout.write('x' * 20_000_000); sys.stdout.flush()\n"
        "threading.Thread(target=flood, daemon=True).start()"
    )
    assert kernel.execute(flood).ok
    time.sleep(8)  # the flood arrives while no run collects it
    grown = psutil.Process().memory_info().rss - before
    assert grown < 200 * 1024**2, f"the server grew by {grown // 2**20} MB"


def test_images_are_capped_per_run(kernel: JupyterInterpreter) -> None:
    code = (
        "from IPython.display import display\n"
        "png = b'\\x89PNG\\r\\n\\x1a\\n' + b'x' * 1000\n"
        "for _ in range(30): display({'image/png': png}, raw=True)\n"
        "display({'image/png': b'not a png'}, raw=True)"
    )
    res = kernel.execute(code)
    assert len(res.images) == 16 and "dropped 15 images" in res.text


def test_private_tmp_is_sized_and_nested_namespaces_are_refused(kernel: JupyterInterpreter) -> None:
    res = kernel.execute(
        "import os\ns = os.statvfs('/tmp')\nprint(s.f_blocks * s.f_frsize // 2**20)"
    )
    assert int(res.text) <= 1024  # the memory limit, not half the host's memory
    res = kernel.execute(
        "import os\ns = os.statvfs('/dev/shm')\nprint(s.f_blocks * s.f_frsize // 2**20)"
    )
    assert int(res.text) <= 256  # a quarter of it
    res = kernel.execute(
        "import subprocess\nprint(subprocess.run(['unshare', '-Ur', 'true']).returncode)"
    )
    assert res.text.strip() != "0"


def test_a_planted_launcher_does_not_survive_a_restart(kernel: JupyterInterpreter) -> None:
    plant = "open('ipykernel_launcher.py', 'w').write('IMPLANT = 1\\nraise SystemExit(3)')"
    assert kernel.execute(plant).ok
    died = kernel.execute("import os\nos._exit(1)")
    assert died.ename == "KernelDied" and died.restarted and "restart failed" not in died.error
    assert kernel.execute("print('clean')").text == "clean\n"


def test_the_connection_file_is_read_only_and_the_log_out_of_sight(
    kernel: JupyterInterpreter,
) -> None:
    """The kernel's runtime files: the connection file (its key and ports) cannot be rewritten
    from inside, and its log is not there by name (see test_disk_cap.py for the cap)."""
    res = kernel.execute(
        "import os\nfrom ipykernel.connect import get_connection_file\n"
        "cf = get_connection_file()\n"
        "try:\n    open(cf, 'a').write('x')\nexcept OSError as exc:\n    print('refused', exc)\n"
        "print(sorted(os.listdir(os.path.dirname(cf))))"
    )
    assert "refused" in res.text and "kernel.log" not in res.text, res.text
