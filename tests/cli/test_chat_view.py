"""How ``chatfmt chat`` shows the agent's events: Markdown on a terminal (checked on the screen
a terminal would show, by a small emulator of the control sequences rich writes), plain text
when piped, call and result panels, and the default system prompt."""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from rich.markdown import Markdown

import chatfmt
from chatfmt.agent import ModelEvent, ToolFinished, ToolStarted
from chatfmt.cli.chat import choose_system, run_chat
from chatfmt.cli.chat_view import ChatView, MarkdownStream
from chatfmt.engines.fake import FakeEngine
from chatfmt.events import TextDelta
from chatfmt.messages import ToolCall
from chatfmt.prompts import INTERPRETER_PROMPT, TOOLS_PROMPT

_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def screen(raw: str, height: int) -> list[str]:
    """The lines a terminal ``height`` rows high holds after ``raw``, scrollback included:
    text, line feeds, carriage returns, cursor up (never above the screen's top row, as on a
    real terminal) and erase line; styles are dropped."""
    lines, row, col, at = [""], 0, 0, 0
    for match in [*_CSI.finditer(raw), None]:
        end = match.start() if match else len(raw)
        for ch in raw[at:end]:
            if ch == "\n":
                row, col = row + 1, 0
                if row == len(lines):
                    lines.append("")
            elif ch == "\r":
                col = 0
            else:
                line = lines[row].ljust(col)
                lines[row] = line[:col] + ch + line[col + 1 :]
                col += 1
        if match is None:
            break
        at = match.end()
        arg, op = match.groups()
        if op == "A":
            row = max(row - int(arg or 1), len(lines) - height, 0)
        elif op == "K":
            lines[row] = ""
    shown = [line.rstrip() for line in lines]
    while shown and not shown[-1]:
        shown.pop()
    return shown


def rendered(text: str, width: int) -> list[str]:
    """``text`` as Markdown printed once, at once (what the screen must end up showing)."""
    out = io.StringIO()
    Console(file=out, width=width, force_terminal=True, color_system="standard").print(
        Markdown(text, hyperlinks=False)
    )
    return screen(out.getvalue(), 10_000)


def terminal(out: io.StringIO, height: int = 24, width: int = 80) -> Console:
    return Console(
        file=out, width=width, height=height, force_terminal=True, color_system="standard"
    )


ANSWER = """## Results

The sums are:

- first: **5**
- second: 7

| a | b | sum |
|---|---|-----|
| 2 | 3 | 5 |
| 3 | 4 | 7 |

```python
print(2 + 3)
```

Done."""


def _chat(console: Console, script: list[str], lines: list[str], **kwargs: object) -> None:
    from chatfmt.tokenizers import load_tokenizer

    said = iter(lines)
    run_chat(
        FakeEngine(load_tokenizer("qwen2.5"), script),
        chatfmt.get_dialect("qwen2.5"),
        console=console,
        read_line=lambda _: next(said),
        **kwargs,  # type: ignore[arg-type]
    )


def _contains(haystack: list[str], needle: list[str]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack)))


# ==== Markdown on a terminal, plain text elsewhere ====


def test_the_answer_renders_as_markdown_on_a_terminal() -> None:
    out = io.StringIO()
    _chat(terminal(out), [ANSWER + "<|im_end|>"], ["sum them", "/exit"])
    shown = screen(out.getvalue(), 24)
    text = "\n".join(shown)
    assert "|---|" not in text and "```" not in text and "**" not in text
    assert " • first: 5" in shown and " • second: 7" in shown
    # The table: its columns aligned, a rule under the header, no pipes.
    assert " a  b  sum" in shown and " ─────────" in shown and " 2  3  5" in shown
    assert "|" not in text
    # The whole answer, exactly as rich renders it at once, in one piece, once.
    assert _contains(shown, rendered(ANSWER, 80))
    assert shown.count(" • first: 5") == 1
    assert shown[0].startswith("chatfmt chat") and shown[1] == "assistant›"


def test_the_answer_is_plain_text_as_it_came_when_piped() -> None:
    out = io.StringIO()
    _chat(Console(file=out, width=80, color_system=None), [ANSWER + "<|im_end|>"], ["go", "/exit"])
    assert out.getvalue().endswith(f"assistant› {ANSWER}\n")
    assert "\x1b" not in out.getvalue()


def test_links_show_their_address_and_model_text_cannot_drive_the_terminal() -> None:
    out = io.StringIO()
    reply = "See [the docs](https://example.com/x) \x1b[2J\x1b]8;;file:///etc/passwd\x07 [b]x[/b]"
    _chat(terminal(out), [reply + "<|im_end|>"], ["go", "/exit"])
    raw = out.getvalue()
    assert "\x1b]8;" not in raw and "\x1b[2J" not in raw
    assert "See the docs (https://example.com/x) [2J]8;;file:///etc/passwd [b]x[/b]" in screen(
        raw, 24
    )


@pytest.mark.parametrize("step", [4, 50])
def test_a_long_answer_streams_without_repeating_lines(step: int) -> None:
    """Taller than the screen and redrawn at every piece: the lines that scroll away are never
    drawn twice, and the screen ends as the whole answer printed once."""
    items = "\n".join(f"{i}. item number {i}" for i in range(1, 40))
    answer = f"# Long\n\n{items}\n\n{ANSWER}\n\n```\n" + "\n".join(map(str, range(30))) + "\n```"
    out = io.StringIO()
    stream = MarkdownStream(terminal(out, height=12, width=60), rate=1e9)
    for k in range(0, len(answer), step):
        stream.feed(answer[k : k + step])
    stream.close()
    assert screen(out.getvalue(), 12) == rendered(answer, 60)


def test_blocks_are_split_where_rich_would_see_them() -> None:
    """A loose list's next item arrives as "2" first: the list is not printed before it."""
    answer = "1. a\n\n2. b\n\n3. c\n\npara\n---\n\n> quote\n\n---\n\nend"
    out = io.StringIO()
    stream = MarkdownStream(terminal(out), rate=1e9)
    for ch in answer:
        stream.feed(ch)
    stream.close()
    assert screen(out.getvalue(), 24) == rendered(answer, 80)


def test_redraws_are_throttled_and_the_end_is_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("chatfmt.cli.chat_view.time.monotonic", lambda: clock[0])
    out = io.StringIO()
    stream = MarkdownStream(terminal(out), rate=8)
    draws: list[str] = []
    real = stream.refresh

    def counted() -> None:
        draws.append(stream.source)
        real()

    stream.refresh = counted  # type: ignore[method-assign]
    for word in "one two three four five".split():
        stream.feed(word + " ")
        clock[0] += 0.05  # 20 pieces a second, drawn at most 8 times a second
    assert draws == ["one ", "one two three four "]
    stream.close()  # the block's end shows what came since
    assert screen(out.getvalue(), 24) == ["one two three four five"]


def test_text_that_came_since_the_last_redraw_is_shown_when_the_interval_is_over() -> None:
    out = io.StringIO()
    stream = MarkdownStream(terminal(out), rate=8)

    async def write() -> None:
        stream.feed("Hello")
        stream.feed(", world")  # within the interval: not drawn yet
        await asyncio.sleep(0.3)

    asyncio.run(write())
    assert screen(out.getvalue(), 24) == ["Hello, world"]  # drawn by the timer, still live
    stream.close()
    assert screen(out.getvalue(), 24) == ["Hello, world"]


# ==== Calls and results ====


def _view(out: io.StringIO, is_terminal: bool = True) -> ChatView:
    if is_terminal:
        return ChatView(terminal(out, width=70))
    return ChatView(Console(file=out, width=70, color_system=None))


def test_text_before_a_call_is_finished_before_the_call_panel() -> None:
    out = io.StringIO()
    view = _view(out)
    view.prompt()
    for piece in ["Let me ", "compute:\n\n- the ", "sum"]:
        view.show(ModelEvent(TextDelta(piece)))
    call = ToolCall(name="interpreter", arguments={"code": "print(2 + 3)"})
    view.show(ToolStarted(call))
    view.show(ToolFinished(call, "5", ok=True))
    raw = out.getvalue()
    # The Live region was closed (the cursor shown again) before the panel was printed.
    assert raw.index("\x1b[?25h") < raw.index("call · interpreter")
    shown = screen(raw, 24)
    assert shown[:4] == ["assistant›", "Let me compute:", "", " • the sum"]
    assert shown.count(" • the sum") == 1
    panel = "\n".join(shown[4:])
    assert "call · interpreter" in panel and "print(2 + 3)" in panel
    assert "output" in panel and "│ 5" in panel


def test_a_failed_run_is_a_red_panel_and_a_good_one_green() -> None:
    out = io.StringIO()
    view = _view(out)
    call = ToolCall(name="interpreter", arguments={"code": "1/0"})
    view.show(ToolFinished(call, "ZeroDivisionError: division by zero", ok=False))
    red = out.getvalue()
    assert "\x1b[31m╭─" in red and "\x1b[31m error \x1b[0m" in red
    out = io.StringIO()
    view = _view(out)
    view.show(ToolFinished(call, "0.5", ok=True))
    assert "\x1b[32m╭─" in out.getvalue() and "\x1b[32m output \x1b[0m" in out.getvalue()


def test_a_tool_call_shows_its_name_and_arguments_then_its_result() -> None:
    out = io.StringIO()
    view = _view(out, is_terminal=False)
    call = ToolCall(name="add", arguments={"a": 2, "b": 3})
    view.show(ToolStarted(call))
    view.show(ToolFinished(call, "5", ok=True))
    view.show(ToolFinished(call, "Error: b is missing", ok=False))
    shown = out.getvalue()
    assert "call · add" in shown and '"a": 2,' in shown and '"b": 3' in shown
    assert "result · add" in shown and "error · add" in shown


def test_long_output_keeps_its_ends_and_says_what_was_left_out() -> None:
    out = io.StringIO()
    view = _view(out, is_terminal=False)
    call = ToolCall(name="interpreter", arguments={"code": "..."})
    view.show(ToolFinished(call, "\n".join(f"line {i}" for i in range(100)), ok=True))
    shown = out.getvalue()
    assert "line 0 " in shown and "line 26 " in shown and "line 99 " in shown
    assert "line 50 " not in shown and "… 60 lines left out …" in shown
    out = io.StringIO()
    view = _view(out, is_terminal=False)
    view.show(ToolFinished(call, "x" * 10_000, ok=True))
    assert "… 4000 characters left out …" in out.getvalue()


def test_empty_output_says_so() -> None:
    out = io.StringIO()
    view = _view(out, is_terminal=False)
    view.show(ToolFinished(ToolCall(name="interpreter", arguments={"code": "x = 1"}), "", True))
    assert "(no output)" in out.getvalue()


# ==== The default system prompt ====


def test_the_default_system_prompt_follows_the_modes() -> None:
    assert choose_system(None, tools=False, interpreter=False) is None
    assert choose_system(None, tools=True, interpreter=False) == TOOLS_PROMPT
    assert choose_system(None, tools=False, interpreter=True) == INTERPRETER_PROMPT
    both = choose_system(None, tools=True, interpreter=True)
    assert both == f"{INTERPRETER_PROMPT}\n\n{TOOLS_PROMPT}"
    assert choose_system("", tools=True, interpreter=True) is None  # --system "": none
    assert choose_system("Be terse.", tools=True, interpreter=False) == "Be terse."


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--tools", "TOOLS"], TOOLS_PROMPT),
        (["--tools", "TOOLS", "--system", ""], None),
        (["--tools", "TOOLS", "--system", "Be terse."], "Be terse."),
        ([], None),
    ],
)
def test_chat_command_passes_the_system_prompt(
    argv: list[str], expected: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatfmt.cli.main import main
    from chatfmt.tokenizers import load_tokenizer

    tools = tmp_path / "tools.py"
    tools.write_text(
        "from chatfmt.tools import tool\n\n\n@tool\ndef add(a: int, b: int) -> int:\n"
        '    """Add."""\n    return a + b\n'
    )
    seen: dict[str, object] = {}
    engine = FakeEngine(load_tokenizer("qwen2.5"), ["hi"])
    monkeypatch.setattr("chatfmt.cli.serve.build_engine", lambda *_a, **_k: engine)
    monkeypatch.setattr("chatfmt.cli.chat.run_chat", lambda *_a, **kw: seen.update(kw))
    argv = [str(tools) if a == "TOOLS" else a for a in argv]
    assert main(["chat", "--dialect", "qwen2.5", *argv]) == 0
    assert seen["system"] == expected


def test_the_system_prompt_in_use_is_shown_on_one_line() -> None:
    out = io.StringIO()
    system = f"{INTERPRETER_PROMPT}\n\n{TOOLS_PROMPT}"
    _chat(
        Console(file=out, width=60, color_system=None), ["Hi.<|im_end|>"], ["/exit"], system=system
    )
    line = out.getvalue().splitlines()[1]
    assert line.startswith("system: You are a helpful assistant with a Python")
    assert line.endswith("…") and len(line) == 60
