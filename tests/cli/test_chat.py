"""The terminal chat, driven with scripted input and a recording console."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from test_chat_view import screen

import chatfmt
from chatfmt.cli.chat import run_chat
from chatfmt.engines.fake import FakeEngine
from chatfmt.tools import ToolRegistry, tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_chat_with_a_tool_then_reset(qwen) -> None:  # type: ignore[no-untyped-def]
    script = [
        '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>',
        "2 + 3 = 5.<|im_end|>",
        "Hi again.<|im_end|>",
    ]
    engine = FakeEngine(qwen, script)
    lines = iter(["what is 2+3?", "/reset", "hello", "/exit"])
    out = io.StringIO()
    history = run_chat(
        engine,
        chatfmt.get_dialect("qwen2.5"),
        tools=ToolRegistry([add]),
        console=Console(file=out, width=100, color_system=None),
        read_line=lambda _prompt: next(lines),
    )
    shown = out.getvalue()
    assert "call · add" in shown and "2 + 3 = 5." in shown and "Hi again." in shown
    assert "5" in shown.split("result")[1]
    # After /reset only the second exchange remains.
    assert [m.role for m in history] == ["user", "assistant"]
    assert history[-1].content == "Hi again."


def test_chat_survives_engine_failure(qwen) -> None:  # type: ignore[no-untyped-def]
    engine = FakeEngine(qwen, ["never"], fail_after=0)
    lines = iter(["hi"])
    out = io.StringIO()

    def read(_prompt: str) -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    history = run_chat(
        engine,
        chatfmt.get_dialect("qwen2.5"),
        console=Console(file=out, width=100, color_system=None),
        read_line=read,
    )
    assert "error:" in out.getvalue() and "failed as scripted" in out.getvalue()
    assert history == []


def test_model_text_cannot_inject_markup_or_escapes(qwen) -> None:  # type: ignore[no-untyped-def]
    script = [
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call><|im_end|>',
        "[/b] [link=file:///etc/passwd]x[/link] \x1b[2J done<|im_end|>",
    ]
    engine = FakeEngine(qwen, script)
    lines = iter(["go", "/exit"])
    out = io.StringIO()
    run_chat(
        engine,
        chatfmt.get_dialect("qwen2.5"),
        tools=ToolRegistry([add]),
        console=Console(file=out, width=100, color_system=None),
        read_line=lambda _prompt: next(lines),
    )
    shown = out.getvalue()
    assert "[/b] [link=file:///etc/passwd]x[/link]" in shown
    assert "\x1b" not in shown and "done" in shown


@pytest.mark.slow  # a real kernel
def test_interpreter_figures_are_saved_and_their_path_shown(qwen, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("ipykernel", reason="needs the jupyter extra")
    from chatfmt.interpreter import JupyterInterpreter

    code = "import matplotlib.pyplot as plt\\nplt.plot([0, 1, 2], [0, 1, 4])\\nplt.show()"
    script = [
        '<tool_call>\n{"name": "interpreter", "arguments": {"code": "' + code + '"}}\n'
        "</tool_call><|im_end|>",
        "Here is the plot.<|im_end|>",
    ]
    lines = iter(["plot it", "/exit"])
    out = io.StringIO()
    with JupyterInterpreter(tmp_path / "work") as interpreter:
        run_chat(
            FakeEngine(qwen, script),
            chatfmt.get_dialect("qwen2.5"),
            interpreter=interpreter,
            console=Console(file=out, width=200, color_system=None),
            read_line=lambda _prompt: next(lines),
        )
        shown = out.getvalue()
        figure = Path(shown.split("[figure saved: ", 1)[1].split("]", 1)[0])
        assert figure.read_bytes().startswith(b"\x89PNG")
        # Saved outside the sandbox's working directory (where code could plant a link).
        assert not figure.is_relative_to(interpreter.work_dir)


# ==== Reasoning (gpt-oss's analysis channel, through the real harmony parser) ====

THINK_THEN_ANSWER = (
    "<|channel|>analysis<|message|>The user greets me.\nBe brief.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>"
)


def _harmony_chat(console: Console, script: list[str], lines: list[str]) -> list[chatfmt.Message]:
    from chatfmt.tokenizers import load_tokenizer

    engine = FakeEngine(load_tokenizer("o200k_harmony"), script)
    said = iter(lines)
    return run_chat(
        engine, chatfmt.get_dialect("harmony"), console=console, read_line=lambda _: next(said)
    )


def test_reasoning_is_labelled_before_the_answer_when_not_a_terminal() -> None:
    out = io.StringIO()
    history = _harmony_chat(
        Console(file=out, width=100, color_system=None), [THINK_THEN_ANSWER], ["hi", "/exit"]
    )
    shown = out.getvalue()
    assert "assistant› [thinking]\nThe user greets me.\nBe brief.\n[/thinking]\nHello!\n" in shown
    assert "\x1b" not in shown
    # The reasoning stays in the history the next turn is rendered from (the dialect decides
    # what of it the model reads again).
    assert history[-1].content == "Hello!"
    assert history[-1].reasoning == "The user greets me.\nBe brief."


def test_reasoning_is_dimmed_on_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=True, color_system="standard")
    _harmony_chat(console, [THINK_THEN_ANSWER], ["hi", "/exit"])
    shown = out.getvalue()
    dim = "\x1b[2m"
    assert f"{dim}The\x1b[0m" in shown and f"{dim} brief\x1b[0m" in shown
    assert "[thinking]" not in shown
    # The answer after it is not dimmed, and starts on a line of its own.
    assert screen(shown, 25)[-3:] == ["The user greets me.", "Be brief.", "Hello!"]
    assert f"{dim}Hello" not in shown


def test_reasoning_cut_off_is_closed_and_cannot_inject_escapes() -> None:
    out = io.StringIO()
    script = ["<|channel|>analysis<|message|>[bold]x[/bold] \x1b[2J still thinking"]
    history = _harmony_chat(
        Console(file=out, width=100, color_system=None), script, ["hi", "/exit"]
    )
    shown = out.getvalue()
    assert "[thinking]\n[bold]x[/bold] [2J still thinking\n[/thinking]" in shown
    assert "\x1b" not in shown
    assert history[-1].role == "assistant" and history[-1].content is None
    assert history[-1].reasoning == "[bold]x[/bold] \x1b[2J still thinking"
