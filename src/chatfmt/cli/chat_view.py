"""How ``chatfmt chat`` shows the agent loop's events on a rich console, as the web page does.

On a terminal the answer is Markdown, rendered while it streams (:class:`MarkdownStream`); a
file or a pipe gets the text as it streams, plain, as it came. A reasoning model's thinking is
dimmed on a terminal and set apart by ``[thinking]`` / ``[/thinking]`` lines elsewhere. Each
call is a panel (an interpreter's code as Python, a tool's name and arguments), then its result
(green, or red when it failed), cut to its first and last lines when long; an interpreter's
figures are saved as files and their paths printed. Text from the model and from tools is
shown as plain text: no rich markup and no terminal control sequence gets through.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from .._imports import require
from ..agent import ModelEvent, ToolFinished, ToolStarted, TurnFinished
from ..events import ReasoningDelta, TextDelta
from ..messages import INTERPRETER

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Model and tool text without terminal control sequences (it must not drive the terminal)."""
    return _CONTROL.sub("", text)


# ==== Markdown while it streams ====

#: Blocks whose rendering brings its own blank line before it (rich takes the line before a
#: block from the last element it closed, which for these is one inside them).
_CONTAINERS = frozenset({"bullet_list_open", "ordered_list_open", "table_open", "blockquote_open"})


class _Tail:
    """A renderable cut to the last lines that fit the terminal, so that a Live region is never
    taller than the screen (one that is cannot be redrawn in place: its top lines repeat)."""

    def __init__(self, renderable: Any, gap: bool) -> None:
        self.renderable = renderable
        self.gap = gap

    def __rich_console__(self, console: Any, options: Any) -> Any:
        segment = require("rich.segment", extra="cli").Segment
        lines = console.render_lines(self.renderable, options, pad=False)
        if self.gap:
            lines = [[], *lines]
        room = max(options.size.height - 2, 3)
        if len(lines) > room:
            hidden = len(lines) - room + 1
            note = f"… {hidden} lines above, shown in full when the block ends"
            lines = [[segment(note, console.get_style("dim"))], *lines[-(room - 1) :]]
        for line in lines:
            yield from line
            yield segment.line()


class MarkdownStream:
    """The text block being written, on a terminal, rendered as Markdown while it streams.

    Every block of it that another block has followed (a paragraph, a list, a table, a fenced
    code block) is complete: it is printed once, as rich renders it, and stays in the
    terminal's scrollback. Only the block still being written is drawn, in a transient
    ``rich.live.Live`` region redrawn at most ``rate`` times a second (the text that came
    since the last redraw is shown when the interval is over) and cut to the lines that fit
    the screen. :meth:`close` prints the rest once. So a long answer neither flickers as a
    whole nor repeats lines: a Live region over all of it (``vertical_overflow="visible"``)
    would redraw every line each time and repeat the lines that scrolled off the screen.
    """

    def __init__(self, console: Any, rate: float = 8.0) -> None:
        self.con = console
        self.interval = 1.0 / rate
        self.source = ""  # the text not printed yet; it begins at a block's start
        self.previous: str | None = None  # the opening token type of the last block printed
        self.live: Any = None
        self.shown_at = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.Markdown = require("rich.markdown", extra="cli").Markdown
        # Rich's own parser settings, so that blocks split where rich would see them.
        parser = require("markdown_it", extra="cli").MarkdownIt()
        self.parser = parser.enable("strikethrough").enable("table")

    @property
    def active(self) -> bool:
        return self.live is not None

    def feed(self, text: str) -> None:
        self.source += text
        if self.live is None:
            if not self.source.strip():
                return
            live = require("rich.live", extra="cli").Live
            self.live = live(
                console=self.con, auto_refresh=False, transient=True, vertical_overflow="visible"
            )
            self.live.start()
        wait = self.shown_at + self.interval - time.monotonic()
        if wait <= 0:
            self.refresh()
        elif self.timer is None:
            # Without a running loop the next text, or the block's end, shows it.
            with contextlib.suppress(RuntimeError):
                self.timer = asyncio.get_running_loop().call_later(wait, self._due)

    def _due(self) -> None:
        self.timer = None
        if self.live is not None:
            self.refresh()

    def refresh(self) -> None:
        """Print the blocks that are complete, and draw the one being written."""
        blocks = self._blocks()
        if not blocks or self.live is None:
            return
        # A block is complete once a later one has begun on a line of its own: a line still
        # being written may yet join the block before it ("2" becoming "2. b" of a list).
        last_line = self.source.count("\n")
        ready = [i for i, (start, _, _) in enumerate(blocks) if i and start < last_line]
        cut = ready[-1] if ready else 0
        done = [(kind, text) for _, kind, text in blocks[:cut]]
        start, kind, _ = blocks[cut]
        self.source = "\n".join(self.source.split("\n")[start:])
        previous = done[-1][0] if done else self.previous
        tail = _Tail(self.render(self.source), self._gap(previous, kind))
        self.live.update(tail, refresh=not done)
        for kind_done, text in done:  # each print redraws the region below it
            self._print(kind_done, text)
        self.shown_at = time.monotonic()

    def close(self) -> None:
        """The block ended (a call, the turn's end, reasoning): print what is left of it."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.live is not None:
            live, self.live = self.live, None
            live.stop()  # transient: the region is erased
            for _, kind, text in self._blocks():
                self._print(kind, text)
        self.source = ""
        self.previous = None
        self.shown_at = 0.0

    def _blocks(self) -> list[tuple[int, str, str]]:
        """The top-level blocks of the text not printed yet: (first line, opening token type,
        source)."""
        lines = self.source.split("\n")
        starts = [
            (t.map[0], t.type)
            for t in self.parser.parse(self.source)
            if t.level == 0 and t.nesting >= 0 and t.map
        ]
        ends = [start for start, _ in starts[1:]] + [len(lines)]
        return [
            (start, kind, "\n".join(lines[start:end]))
            for (start, kind), end in zip(starts, ends, strict=True)
        ]

    def _gap(self, previous: str | None, kind: str) -> bool:
        """Whether rich puts a blank line between a ``previous`` block and a ``kind`` block."""
        if previous is None or kind in _CONTAINERS:
            return False
        return bool(getattr(self.Markdown.elements.get(previous), "new_line", True))

    def _print(self, kind: str, text: str) -> None:
        if self._gap(self.previous, kind):
            self.con.print()
        self.con.print(self.render(text))
        self.previous = kind

    def render(self, text: str) -> Any:
        """``text`` as rich Markdown. Links show their address (no terminal hyperlink whose
        text could name another place than it opens)."""
        return self.Markdown(text, code_theme="ansi_dark", hyperlinks=False)


# ==== Tool calls and their results ====

#: Results longer than this show their first and last lines, and how many were left out.
MAX_RESULT_LINES = 40
MAX_RESULT_CHARS = 6000


def _pretty_json(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def clip(text: str, max_lines: int = MAX_RESULT_LINES, max_chars: int = MAX_RESULT_CHARS) -> Any:
    """``text`` as plain rich Text, its middle left out (and said so) when it is long."""
    rich_text = require("rich.text", extra="cli").Text
    text = printable(text.rstrip("\n"))
    lines = text.split("\n")
    if len(lines) > max_lines:
        tail = max_lines // 3
        head = max_lines - tail
        note = f"… {len(lines) - max_lines} lines left out …"
        return rich_text.assemble(
            "\n".join(lines[:head]) + "\n", (note, "dim italic"), "\n" + "\n".join(lines[-tail:])
        )
    if len(text) > max_chars:
        tail = max_chars // 3
        head = max_chars - tail
        note = f"… {len(text) - max_chars} characters left out …"
        return rich_text.assemble(text[:head] + "\n", (note, "dim italic"), "\n" + text[-tail:])
    return rich_text(text)


class ChatView:
    """Prints agent events to a rich console. A terminal cannot show an interpreter's figure,
    so each is saved as a PNG in ``image_dir`` and its path is printed. That directory is this
    process's own (never the sandbox's working directory, where the code could plant a link
    under the next figure's name), and files are created new (``O_EXCL | O_NOFOLLOW``)."""

    def __init__(self, console: Any, image_dir: Path | None = None) -> None:
        self.con = console
        self.image_dir = image_dir
        self.saved = 0
        self.thinking = False  # reasoning is being shown and has not been closed yet
        self.mid_line = False  # the cursor is after text on its line (a terminal's concern)
        self.Text = require("rich.text", extra="cli").Text
        self.Panel = require("rich.panel", extra="cli").Panel
        self.Syntax = require("rich.syntax", extra="cli").Syntax
        self.markdown = MarkdownStream(console) if console.is_terminal else None

    def plain(self, text: str, style: str = "") -> Any:
        return self.Text(printable(text), style=style)

    def prompt(self) -> None:
        self.con.print("[bold green]assistant›[/bold green] ", end="")
        self.mid_line = True

    def start_thinking(self) -> None:
        # A terminal shows the reasoning dimmed; anything else (a file, a pipe) would lose
        # the style, so the reasoning is set apart by labels there.
        self.thinking = True
        if self.con.is_terminal:
            self.con.print(self.Text("thinking", style="dim italic"))
        else:
            self.con.print("[thinking]", markup=False)
        self.mid_line = False

    def end_thinking(self) -> None:
        """Close the reasoning being shown (the answer, a call or the turn's end follows)."""
        if not self.thinking:
            return
        self.thinking = False
        self.con.print()
        self.mid_line = False
        if not self.con.is_terminal:
            self.con.print("[/thinking]", markup=False)

    def end_text(self) -> None:
        """Finish the text block being rendered (before a call, reasoning or the turn's end)."""
        if self.markdown is not None:
            if self.markdown.active:
                self.mid_line = False
            self.markdown.close()

    def stop(self) -> None:
        """The turn stopped (interrupted or failed): close whatever is open."""
        self.end_text()
        self.end_thinking()

    def show(self, item: object) -> None:
        if isinstance(item, ModelEvent) and isinstance(item.event, ReasoningDelta):
            if item.event.text:
                self.end_text()
                if not self.thinking:
                    self.start_thinking()
                style = "dim" if self.con.is_terminal else ""
                self.con.print(self.plain(item.event.text, style=style), end="")
                self.mid_line = True
        elif isinstance(item, ModelEvent) and isinstance(item.event, TextDelta):
            self.text(item.event.text)
        elif isinstance(item, TurnFinished):
            self.end_text()
            self.end_thinking()
        elif isinstance(item, ToolStarted):
            self.end_text()
            self.end_thinking()
            self.con.print()
            self.con.print(self.call_panel(item))
            self.mid_line = False
        elif isinstance(item, ToolFinished):
            self.con.print(self.result_panel(item))
            for image in item.images:
                self.save_image(image)
            self.prompt()

    def text(self, text: str) -> None:
        if text.strip():  # the answer has begun (not just a line break)
            self.end_thinking()
        if self.markdown is None:
            self.con.print(self.plain(text), end="")
            return
        if not self.markdown.active and text.strip() and self.mid_line:
            self.con.print()  # a Live region redraws whole lines: it starts on a line of its own
            self.mid_line = False
        self.markdown.feed(printable(text))

    def call_panel(self, started: ToolStarted) -> Any:
        call = started.call
        if call.name == INTERPRETER:
            code = printable(str(call.arguments_dict().get("code", "")))
            body: Any = self.Syntax(code, "python", theme="ansi_dark", word_wrap=True)
        else:
            arguments = printable(_pretty_json(call.arguments))
            body = self.Syntax(arguments, "json", theme="ansi_dark", word_wrap=True)
        return self.Panel(body, title=self.plain(f"call · {call.name}"), expand=False)

    def result_panel(self, finished: ToolFinished) -> Any:
        style = "green" if finished.ok else "red"
        word = "result" if finished.ok else "error"
        if finished.call.name == INTERPRETER:
            title = self.plain("output" if finished.ok else "error", style=style)
        else:
            title = self.plain(f"{word} · {finished.call.name}", style=style)
        if finished.observation.strip():
            body = clip(finished.observation)
        else:
            body = self.Text("(no output)", style="dim")
        return self.Panel(body, title=title, border_style=style, expand=False)

    def save_image(self, image: Any) -> None:
        data = _png_bytes(image)
        if data is None or not data.startswith(_PNG) or self.image_dir is None:
            return
        self.saved += 1
        path = self.image_dir / f"figure-{self.saved}.png"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            self.con.print(self.plain(f"[figure not saved: {exc}]", style="red"))
            return
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        self.con.print(self.plain(f"[figure saved: {path}]", style="cyan"))


_PNG = b"\x89PNG\r\n\x1a\n"


def _png_bytes(image: Any) -> bytes | None:
    if isinstance(image, bytes | bytearray | memoryview):
        return bytes(image)
    if isinstance(image, str):  # base64, perhaps as a data URL
        with contextlib.suppress(ValueError):
            return base64.b64decode(image.split(",", 1)[-1], validate=True)
    return None
