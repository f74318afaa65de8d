"""``chatfmt chat`` in a real terminal: run under tmux against a scripted engine, a question
typed with ``send-keys``, and the screen (scrollback included) read with ``capture-pane``."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a terminal multiplexer and a chat process of its own

STEPS = 30  # more lines than the pane has rows: the answer scrolls while it streams
REPLY = (
    "Here they are:\n\n| a | b | sum |\n|---|---|-----|\n| 2 | 3 | 5 |\n| 3 | 4 | 7 |\n\n"
    "- first bullet\n- second bullet\n\n"
    + "\n".join(f"{i}. step number {i}" for i in range(1, STEPS + 1))
    + "\n\nDone."
)

# `chatfmt chat` as a user runs it (its options, its console on the pane's terminal), on a
# scripted engine that writes the reply a token at a time.
CHAT = """
import sys
from pathlib import Path

import chatfmt.cli.serve as serve
from chatfmt.cli.main import main
from chatfmt.engines.fake import FakeEngine
from chatfmt.tokenizers import load_tokenizer

reply = Path(sys.argv[1]).read_text(encoding="utf-8") + "<|im_end|>"
serve.build_engine = lambda *_a, **_k: FakeEngine(load_tokenizer("qwen2.5"), [reply], delay=0.004)
sys.exit(main(["chat", "--dialect", "qwen2.5"]))
"""


def _wait(read: Callable[[], str], done: Callable[[str], bool], what: str, limit: float) -> str:
    end = time.monotonic() + limit
    while True:
        text = read()
        if done(text):
            return text
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}; the pane shows:\n{text}")
        time.sleep(0.2)


def test_chat_renders_markdown_in_a_real_terminal(tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux): this test drives a terminal")
    script = tmp_path / "chat.py"
    script.write_text(CHAT, encoding="utf-8")
    reply = tmp_path / "reply.md"
    reply.write_text(REPLY, encoding="utf-8")
    errors = tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "COLUMNS", "LINES")}
    env.pop("NO_COLOR", None)
    socket = f"chatfmt-test-{uuid.uuid4().hex[:8]}"

    def tmux(*args: str) -> str:
        run = subprocess.run(
            ["tmux", "-L", socket, *args], env=env, capture_output=True, text=True, timeout=30
        )
        assert run.returncode == 0, run.stderr
        return run.stdout

    def pane() -> str:
        text = tmux("capture-pane", "-p", "-S", "-", "-t", "chat")
        return text + (errors.read_text() if errors.exists() else "")

    command = " ".join(shlex.quote(str(a)) for a in (sys.executable, script, reply))
    # The pane stays after the chat ends, so that what it showed can be read.
    shell = f"{command} 2>{shlex.quote(str(errors))}; sleep 60"
    tmux("-f", "/dev/null", "new-session", "-d", "-s", "chat", "-x", "80", "-y", "20", shell)
    try:
        _wait(pane, lambda t: "you›" in t, "the prompt", 60)
        tmux("send-keys", "-t", "chat", "-l", "sum them up")
        tmux("send-keys", "-t", "chat", "Enter")
        shown = _wait(pane, lambda t: t.count("you›") >= 2, "the answer", 60)
        lines = [line.rstrip() for line in shown.splitlines()]
        # Markdown, rendered: the table's columns under a rule, bullets, a numbered list.
        assert "|" not in shown and "---" not in shown, shown
        assert any(line.split() == ["a", "b", "sum"] for line in lines), shown
        assert any(set(line.strip()) == {"─"} for line in lines), shown
        assert any(line.split() == ["2", "3", "5"] for line in lines), shown
        assert " • first bullet" in lines and " • second bullet" in lines, shown
        # Taller than the pane and redrawn while it streamed, yet no line shows twice.
        for i in range(1, STEPS + 1):
            assert sum(line.endswith(f" step number {i}") for line in lines) == 1, shown
        assert lines.count("Done.") == 1, shown
        tmux("send-keys", "-t", "chat", "-l", "/exit")
        tmux("send-keys", "-t", "chat", "Enter")
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], env=env, capture_output=True)
