"""What a code-interpreter run produced: text, images, the error, and how it ended.

:class:`ExecutionResult` is the interpreter's answer; :meth:`ExecutionResult.observation` turns
it into the text the model reads back. ``_Collector`` builds one from kernel messages.
"""

from __future__ import annotations

import base64
import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..tools.truncate import truncate

# CSI sequences (colours, cursor moves) and OSC sequences (titles, hyperlinks).
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Output kept per run before the budget cut; stops a runaway print loop from eating memory.
_CAPTURE_LIMIT = 1_000_000
# Images kept per run (count, bytes): a figure is tens of kB; code flooding PNGs must not fill
# the server's memory (nor the page's).
_MAX_IMAGES = 16
_MAX_IMAGE_BYTES = 16 * 1024 * 1024
_PNG = b"\x89PNG\r\n\x1a\n"


class _Default(enum.Enum):
    MAX_OUTPUT_CHARS = "max_output_chars"


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (IPython colours its tracebacks)."""
    return _ANSI_RE.sub("", text)


@dataclass
class ExecutionResult:
    """What one run of code produced.

    ``text`` is stdout, stderr and ``text/plain`` results (the last expression's value,
    ``display()`` output) in the order they came; ``images`` the decoded ``image/png`` outputs;
    ``error`` the traceback (ANSI escapes stripped, ending in ``ename: evalue``), or ``None``.
    """

    text: str = ""
    images: list[bytes] = field(default_factory=list)
    error: str | None = None
    ename: str | None = None
    evalue: str | None = None
    timed_out: bool = False
    restarted: bool = False
    max_output_chars: int | None = 4000
    #: One short line on a limit the code met (the network blocked, memory, CPU time), for the
    #: model and the user; ``None`` when none was met.
    note: str | None = None

    @property
    def ok(self) -> bool:
        """True when the code ran to the end without an error."""
        return self.error is None

    def with_error(self, error: str, *, ename: str | None = None) -> ExecutionResult:
        """Set ``error`` (and ``ename``/``evalue`` from it); return self."""
        self.error = error
        self.ename = ename or error.split(":", 1)[0]
        self.evalue = error.split(": ", 1)[1] if ": " in error else error
        return self

    def images_base64(self) -> list[str]:
        """The images as base64 strings (for JSON, data URLs, the web UI)."""
        return [base64.b64encode(img).decode("ascii") for img in self.images]

    def observation(
        self, *, max_chars: int | _Default | None = _Default.MAX_OUTPUT_CHARS, fence: bool = False
    ) -> str:
        """The text the model sees: output text, ``[Image]`` per image, then the error.

        Cut to ``max_chars`` (default ``max_output_chars``; ``None``: no cut) keeping both ends,
        since errors come last. ``fence=True`` wraps it in a ````result`` block, the form
        ChatGLM3's PROMPT.md shows for interpreter observations.
        """
        parts = [self.text.rstrip()] if self.text.strip() else []
        parts.extend("[Image]" for _ in self.images)
        if self.error:
            parts.append(self.error.rstrip())
        if self.note:
            parts.append(f"[{self.note}]")
        body = "\n".join(parts)
        budget = self.max_output_chars if isinstance(max_chars, _Default) else max_chars
        if budget is not None:
            body = truncate(body, max_chars=budget, keep="head_tail")
        return f"```result\n{body}\n```" if fence else body


class _Collector:
    """Accumulates the iopub messages of one run into an :class:`ExecutionResult`."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.dropped = 0
        self.images: list[bytes] = []
        self.dropped_images = 0
        self.error: str | None = None
        self.ename: str | None = None
        self.evalue: str | None = None
        self.idle = False

    def add_text(self, text: str, *, own_line: bool = False) -> None:
        text = strip_ansi(text)
        if own_line:
            if self.parts and not self.parts[-1].endswith("\n"):
                text = "\n" + text
            if not text.endswith("\n"):
                text += "\n"
        room = _CAPTURE_LIMIT - self.size
        if room <= 0:
            self.dropped += len(text)
            return
        self.parts.append(text[:room])
        self.size += min(room, len(text))
        self.dropped += max(0, len(text) - room)

    def add_image(self, png: str | bytes) -> None:
        """Keep a PNG (base64 or bytes) within the per-run caps; anything else is dropped."""
        data = b""
        if isinstance(png, bytes):
            data = png
        elif len(png) <= _MAX_IMAGE_BYTES * 4 // 3 + 4:
            try:
                data = base64.b64decode(png)
            except ValueError:
                data = b""
        kept = sum(map(len, self.images))
        if (
            data.startswith(_PNG)
            and len(self.images) < _MAX_IMAGES
            and kept + len(data) <= _MAX_IMAGE_BYTES
        ):
            self.images.append(data)
        else:
            self.dropped_images += 1

    def handle(self, msg: Mapping[str, Any]) -> None:
        kind = msg.get("msg_type") or msg.get("header", {}).get("msg_type")
        content: Mapping[str, Any] = msg.get("content", {})
        if kind == "stream":
            self.add_text(str(content.get("text", "")))
        elif kind in ("execute_result", "display_data", "update_display_data"):
            data: Mapping[str, Any] = content.get("data", {})
            png = data.get("image/png")
            if isinstance(png, str | bytes):
                self.add_image(png)
            elif "text/plain" in data:
                self.add_text(str(data["text/plain"]), own_line=True)
        elif kind == "error":
            self.ename = str(content.get("ename", "Error"))
            self.evalue = str(content.get("evalue", ""))
            tb = strip_ansi("\n".join(str(line) for line in content.get("traceback", [])))
            headline = f"{self.ename}: {self.evalue}" if self.evalue else self.ename
            self.error = tb.strip("\n") if tb.strip() else headline
        elif kind == "clear_output":
            self.parts, self.size, self.images = [], 0, []
        elif kind == "status" and content.get("execution_state") == "idle":
            self.idle = True

    def result(self, max_output_chars: int | None, **flags: Any) -> ExecutionResult:
        text = "".join(self.parts)
        if self.dropped:
            text += f"\n…[dropped {self.dropped} more characters of output]\n"
        if self.dropped_images:
            text += (
                f"\n…[dropped {self.dropped_images} images: not PNG, or past {_MAX_IMAGES} "
                f"images or {_MAX_IMAGE_BYTES // 2**20} MB in one run]\n"
            )
        return ExecutionResult(
            text=text,
            images=self.images,
            error=self.error,
            ename=self.ename,
            evalue=self.evalue,
            max_output_chars=max_output_chars,
            **flags,
        )
