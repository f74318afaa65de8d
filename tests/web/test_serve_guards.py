"""``chatfmt serve``'s guards around the code interpreter, in a process of its own: a public
bind without an API key is refused at start (unless explicitly allowed), and the interpreters'
temporary directories go when the server is stopped by SIGTERM."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server extra (chatfmt[server]) is not installed")

SCRIPT = Path(__file__).with_name("serve_cli_fake.py")
NEEDS_KERNEL = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("jupyter_client", "ipykernel")),
    reason="needs the jupyter extra (the check applies while the interpreter is on)",
)


def serve(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path))
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), "--port", "0", "--no-store", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_serving(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    assert proc.stdout is not None
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if "web chat at" in line:
            return "".join(seen)
    proc.kill()
    err = proc.stderr.read() if proc.stderr else ""
    raise AssertionError(f"serve did not start: {''.join(seen)}{err}")


@NEEDS_KERNEL
def test_a_public_bind_without_a_key_is_refused_at_start(tmp_path: Path) -> None:
    proc = serve(tmp_path, "--host", "0.0.0.0")
    try:
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chatfmt: error: --host 0.0.0.0 ")
    for fix in ("--api-key", "127.0.0.1", "--no-interpreter", "--allow-public-without-key"):
        assert fix in lines[0]


@pytest.mark.parametrize(
    ("host", "keys", "interpreter", "allow", "refused"),
    [
        ("0.0.0.0", None, True, False, True),
        ("::", None, True, False, True),
        ("192.168.1.5", None, True, False, True),
        ("example.org", None, True, False, True),
        ("0.0.0.0", ["k"], True, False, False),
        ("0.0.0.0", None, False, False, False),  # --no-interpreter, --no-web
        ("0.0.0.0", None, True, True, False),
        ("127.0.0.1", None, True, False, False),
        ("127.0.0.2", None, True, False, False),
        ("localhost", None, True, False, False),
        ("::1", None, True, False, False),
        ("[::1]", None, True, False, False),
    ],
)
def test_which_binds_are_refused(
    host: str, keys: list[str] | None, interpreter: bool, allow: bool, refused: bool
) -> None:
    from chatfmt.cli.kernel import check_public_bind, is_loopback
    from chatfmt.errors import InterpreterError

    if refused:
        with pytest.raises(InterpreterError, match="--allow-public-without-key"):
            check_public_bind(host, keys, interpreter=interpreter, allow=allow)
    else:
        check_public_bind(host, keys, interpreter=interpreter, allow=allow)
    assert is_loopback(host) == (host in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"))


@NEEDS_KERNEL
def test_an_allowed_public_bind_starts_with_a_warning(tmp_path: Path) -> None:
    proc = serve(tmp_path, "--host", "0.0.0.0", "--allow-public-without-key")
    try:
        wait_serving(proc)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "WARNING: the code interpreter is served on 0.0.0.0 without an API key" in err


@NEEDS_KERNEL
def test_sigterm_leaves_no_interpreter_directory(tmp_path: Path) -> None:
    """SIGTERM is how a service manager stops the server; uvicorn then re-raises it and no
    atexit hook runs. The spare kernel's directories must go all the same."""
    proc = serve(tmp_path)
    try:
        wait_serving(proc)
        roots = list(tmp_path.glob("chatfmt-*"))
        assert len(roots) == 1
        deadline = time.monotonic() + 60  # the spare kernel's directories are there
        while not list(roots[0].glob("data-*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(roots[0].glob("data-*"))
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGTERM
    deadline = time.monotonic() + 15
    while list(tmp_path.glob("chatfmt-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(tmp_path.glob("chatfmt-*")) == []


@NEEDS_KERNEL
def test_several_keys_without_the_sandbox_are_refused_at_start(tmp_path: Path) -> None:
    """Kernels without the sandbox run as the server's user: one key's code could read the
    others' directories, so several keys need the sandbox or an explicit flag."""
    proc = serve(tmp_path, "--api-key", "key-a", "--api-key", "key-b", "--sandbox", "off")
    try:
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chatfmt: error: 2 API keys share"), err
    for fix in ("--sandbox off", "bubblewrap", "--no-interpreter", "--allow-keys-without-sandbox"):
        assert fix in lines[0]


@pytest.mark.parametrize(
    ("keys", "mode", "problem", "interpreter", "allow", "refused"),
    [
        (["a", "b"], "off", None, True, False, True),
        (["a", "b"], "auto", "bubblewrap is not installed", True, False, True),
        (["a", "b"], "auto", None, True, False, False),  # auto with bubblewrap: confined
        (["a", "b"], "bwrap", "whatever", True, False, False),  # bwrap refuses by itself
        (["a"], "off", None, True, False, False),  # one key: nobody to read
        (None, "off", None, True, False, False),
        (["a", "b"], "off", None, False, False, False),  # --no-interpreter, --no-web
        (["a", "b"], "off", None, True, True, False),  # allowed, with a warning
    ],
)
def test_which_keys_and_sandboxes_are_refused(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    keys: list[str] | None,
    mode: str,
    problem: str | None,
    interpreter: bool,
    allow: bool,
    refused: bool,
) -> None:
    from chatfmt.cli import kernel
    from chatfmt.errors import InterpreterError
    from chatfmt.interpreter import sandbox

    monkeypatch.setattr(kernel.sys, "platform", "linux")
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: problem)
    if refused:
        with pytest.raises(InterpreterError, match="--allow-keys-without-sandbox"):
            kernel.check_keys_sandbox(keys, mode, interpreter=interpreter, allow=allow)
    else:
        kernel.check_keys_sandbox(keys, mode, interpreter=interpreter, allow=allow)
    warned = "WARNING: 2 API keys share the code interpreter without its sandbox"
    assert (warned in capsys.readouterr().err) == allow
